"""Columns kept in files while a long node log is judged, read back a chunk at a time.

``analyze`` of a long log keeps each step record's fields (``judge.table``), the log's line clock and a
node's window figures in plain binary files, one per column (native byte order, no header), in its
temporary folder. Every pass over them reads one chunk of :data:`CHUNK` records at a time with
``os.pread``, so what a process holds stays the same whatever the log's length; the kernel's page cache
serves the re-reads. Writes go through a buffered file per column; reads flush it first.
"""

from __future__ import annotations

import os
import sys
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

CHUNK = 1 << 16  # records per read: 64 Ki records of the widest column are 512 KiB


class SpillError(Exception):
    """The column files cannot be made, written or read (a full or unwritable disk): the message names
    the folder. Not an OSError, so a reader of the log does not take it for its own."""


class ColumnFiles:
    """Named columns of one length, each a file ``folder / name`` of ``dtypes[name]`` values, or held in
    memory until they pass ``keep`` values."""

    def __init__(self, folder: Path | None, dtypes: Mapping[str, str], keep: int = 0) -> None:
        """``keep``: values per column held in memory before the columns move to files (0: files from the
        start; ``folder`` None: never)."""
        import numpy as np

        self.folder = folder
        self.dtypes = {k: np.dtype(v) for k, v in dtypes.items()}
        self._out: dict[str, IO[bytes]] = {}
        self._fds: dict[str, int] = {}
        self._keep = sys.maxsize if folder is None else keep
        self._mem: dict[str, bytearray] | None = {k: bytearray() for k in self.dtypes}
        self._n = dict.fromkeys(self.dtypes, 0)
        if self._keep == 0:
            self._to_files()

    @property
    def in_memory(self) -> bool:
        return self._mem is not None

    def _to_files(self) -> None:
        """Open the files (appending to what an earlier writer of the folder left) and move the values
        held so far into them."""
        assert self.folder is not None and self._mem is not None
        folder, held = self.folder, self._mem
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self._out = {k: (folder / k).open("ab") for k in self.dtypes}
        except OSError as exc:
            raise SpillError(f"{folder}: cannot make the column files ({exc.strerror or exc})") from None
        self._mem = None
        self._n = {k: (folder / k).stat().st_size // dt.itemsize for k, dt in self.dtypes.items()}
        for k, buf in held.items():
            if buf:
                self._write(k, buf)

    def append(self, name: str, data: bytes | memoryview | npt.NDArray[Any]) -> None:
        import numpy as np

        if isinstance(data, np.ndarray):
            data = np.ascontiguousarray(data, dtype=self.dtypes[name]).data
        buf = data if isinstance(data, bytes) else data.cast("B")
        if len(buf) % self.dtypes[name].itemsize:
            raise ValueError(f"column {name}: {len(buf)} bytes is not a whole number of values")
        if self._mem is None:
            self._write(name, buf)
            return
        self._mem[name] += buf
        self._n[name] += len(buf) // self.dtypes[name].itemsize
        if self._n[name] > self._keep:
            self._to_files()

    def _write(self, name: str, buf: bytes | bytearray | memoryview) -> None:
        try:
            self._out[name].write(buf)
        except OSError as exc:
            raise self._fail("write", exc) from None
        self._n[name] += len(buf) // self.dtypes[name].itemsize

    def _path(self, name: str) -> Path:
        assert self.folder is not None  # files exist only where there is a folder
        return self.folder / name

    def _fail(self, what: str, exc: OSError) -> SpillError:
        return SpillError(f"{self.folder}: cannot {what} the column files ({exc.strerror or exc})")

    def __len__(self) -> int:
        counts = set(self._n.values())
        if len(counts) > 1:
            raise ValueError(f"columns of different lengths in {self.folder}: {self._n}")
        return counts.pop() if counts else 0

    def _fd(self, name: str) -> int:
        try:
            out = self._out.get(name)
            if out is not None and not out.closed:
                out.flush()
            fd = self._fds.get(name)
            if fd is None:
                fd = self._fds[name] = os.open(self._path(name), os.O_RDONLY)
        except OSError as exc:
            raise self._fail("write or read", exc) from None
        return fd

    def read(self, name: str, start: int, stop: int) -> npt.NDArray[Any]:
        """Values ``start`` to ``stop`` (clipped to the column) of ``name``."""
        import numpy as np

        dt = self.dtypes[name]
        start, stop = max(start, 0), min(stop, self._n[name])
        if stop <= start:
            return np.zeros(0, dt)
        if self._mem is not None:
            return np.frombuffer(self._mem[name][start * dt.itemsize : stop * dt.itemsize], dtype=dt)
        want = (stop - start) * dt.itemsize
        fd, at = self._fd(name), start * dt.itemsize
        buf = bytearray(want)
        view, got = memoryview(buf), 0
        while got < want:
            try:
                n = os.preadv(fd, [view[got:]], at + got)
            except OSError as exc:
                raise self._fail("read", exc) from None
            if n <= 0:
                raise SpillError(f"{self._path(name)}: cut short at byte {at + got}")
            got += n
        return np.frombuffer(buf, dtype=dt)

    def load(self, name: str) -> npt.NDArray[Any]:
        """The whole column (only where a log's records must be held: see the columns module)."""
        return self.read(name, 0, self._n[name])

    def chunks(
        self, names: Sequence[str], start: int = 0, stop: int | None = None, size: int = CHUNK
    ) -> Iterator[tuple[int, dict[str, npt.NDArray[Any]]]]:
        """(first record, {name: values}) for consecutive chunks of at most ``size`` records."""
        end = len(self) if stop is None else min(stop, len(self))
        for lo in range(start, end, size):
            hi = min(lo + size, end)
            yield lo, {k: self.read(k, lo, hi) for k in names}

    def take(self, name: str, idx: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        """The values at the ascending record indexes ``idx``, reading each chunk that holds some."""
        import numpy as np

        out = np.zeros(len(idx), self.dtypes[name])
        i = 0
        while i < len(idx):
            lo = int(idx[i])
            j = int(np.searchsorted(idx, lo + CHUNK, "left"))
            part = self.read(name, lo, int(idx[j - 1]) + 1)
            out[i:j] = part[idx[i:j] - lo]
            i = j
        return out

    def close(self) -> None:
        if self._mem is not None:
            self._mem = {k: bytearray() for k in self.dtypes}
            self._n = dict.fromkeys(self.dtypes, 0)
        for out in self._out.values():
            try:
                out.close()
            except OSError:
                pass  # a failed flush was reported by the write or read that met it
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


class SpilledClock(Mapping[int, float]):
    """A line clock (``judge.clock.LineClock``) whose two arrays are columns ``at`` and ``t`` of
    ``files``: ``get`` is a binary search over the file, :meth:`lookup` reads the span it needs."""

    def __init__(self, files: ColumnFiles) -> None:
        self.files = files
        self._n = len(files)

    def _line(self, i: int) -> int:
        return int(self.files.read("at", i, i + 1)[0])

    def _index(self, line: int) -> int:
        return bisect_left(range(self._n), line, key=self._line)

    def __getitem__(self, line: int) -> float:
        i = self._index(line)
        if i < self._n and self._line(i) == line:
            return float(self.files.read("t", i, i + 1)[0])
        raise KeyError(line)

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[int]:
        for _, c in self.files.chunks(["at"]):
            yield from c["at"].tolist()

    def lookup(
        self, lines: npt.NDArray[np.int64], default: npt.NDArray[np.float64]
    ) -> npt.NDArray[np.float64]:
        """The time of each of ``lines`` (ascending), ``default`` where the clock has none."""
        import numpy as np

        if not len(lines) or not self._n:
            return default.copy()
        lo, hi = self._index(int(lines[0])), self._index(int(lines[-1]) + 1)
        at = self.files.read("at", lo, hi)
        t = self.files.read("t", lo, hi)
        if not len(at):
            return default.copy()
        i = np.minimum(np.searchsorted(at, lines), len(at) - 1)
        return np.where(at[i] == lines, t[i], default)


__all__ = ["CHUNK", "ColumnFiles", "SpillError", "SpilledClock"]
