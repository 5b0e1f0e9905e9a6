"""srun's labelled stdout (``srun -l``) split back into one byte stream per rank.

Where the nodes share no filesystem with cvs-tui, each task of the job step copies its rank's log to
its stdout and srun merges them, one labelled line at a time (``0: ...``; with 10 tasks or more the
task number is padded with spaces: `` 0: ...``). What srun does to the bytes on the way, and how it is
undone here (Slurm 22.05, checked on a real cluster):

* every line gets the label ``N: `` in front: exactly that is stripped;
* slurmstepd forwards at most :data:`SRUN_MAX_MSG` bytes at a time: a longer line arrives in pieces
  of that size without their newline, and srun ends each piece with a newline of its own. A line
  whose content is exactly that long is therefore a piece: its newline is dropped (a real line of
  that length arrives as that piece plus an empty line, and comes out right);
* a last line without a newline (the task ended mid-line) gets one from srun. It cannot be told from
  a real one; the launcher ends every log it finishes with ``EXIT_CODE=N\\n``, so only a launcher that
  was itself killed leaves one, and the comparison with the node's own log at the end says so.

Empty lines come through as ``N: \\n`` and are kept. Lines without a label (srun's own words) or with a
task number out of range are kept in :attr:`LabelDemux.stray` (bounded) for the problem report.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections import deque
from collections.abc import AsyncIterator

SRUN_MAX_MSG = 1024  # SLURM_IO_MAX_MSG_LEN: the most bytes slurmstepd forwards in one message
_LABEL = re.compile(rb"^ *(\d+): ")
_EXIT_LINE = re.compile(rb"^EXIT_CODE=-?\d+$")
STRAY_KEPT = 20
_HINT_MAX = 32


class RankStream:
    """One rank's bytes as they arrive: taken by a follower, counted and hashed for the end check."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.pending = bytearray()  # arrived, not taken yet
        self.size = 0  # every byte that arrived
        self.sha = hashlib.sha256()
        self.exit_line = False  # the last complete line is an EXIT_CODE= line: the .exit file is near
        self.eof = False
        self.stopped = False
        self.task_failed: int | None = None  # the task's own exit status when it could not start
        self._line = bytearray()  # the current line's start (for the EXIT_CODE hint only), bounded
        self._wake = asyncio.Event()

    def add(self, data: bytes) -> None:
        if not data:
            return
        self.pending += data
        self.size += len(data)
        self.sha.update(data)
        start = 0
        while (nl := data.find(b"\n", start)) >= 0:
            line = bytes(self._line) + data[start:nl] if start == 0 else data[start:nl]
            self.exit_line = len(line) <= _HINT_MAX and _EXIT_LINE.match(line) is not None
            self._line.clear()
            start = nl + 1
        if len(self._line) <= _HINT_MAX:  # only a short line can be the launcher's EXIT_CODE line
            self._line += data[start : start + _HINT_MAX + 1]
        self._wake.set()

    def end(self) -> None:
        self.eof = True
        self._wake.set()

    def stop(self) -> None:
        self.stopped = True
        self._wake.set()

    def take(self) -> bytes:
        out = bytes(self.pending)
        self.pending.clear()
        return out

    async def chunks(self) -> AsyncIterator[bytes]:
        """The rank's bytes as they arrive, until the stream ends or :meth:`stop` (what already arrived
        is handed out first)."""
        while True:
            if self.pending:
                yield self.take()
                continue
            if self.eof or self.stopped:
                return
            self._wake.clear()
            await self._wake.wait()


class LabelDemux:
    """Feeds srun's labelled stdout, in chunks of any size, into one :class:`RankStream` per rank."""

    def __init__(self, ranks: int, max_msg: int = SRUN_MAX_MSG, failure_tag: bytes | None = None) -> None:
        self.ranks = [RankStream(r) for r in range(ranks)]
        self.failure_tag = failure_tag  # a line ``<tag><rc>``: the task could not start its launcher
        self.max_msg = max_msg
        self.stray: deque[bytes] = deque(maxlen=STRAY_KEPT)
        self.stray_count = 0
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data
        end = self._buf.rfind(b"\n")
        if end < 0:
            return
        lines = bytes(self._buf[:end]).split(b"\n")
        del self._buf[: end + 1]
        for line in lines:
            self._line(line, newline=True)

    def close(self) -> None:
        """srun's stdout ended: a last line cut short (srun killed mid-write) goes out as it is."""
        if self._buf:
            self._line(bytes(self._buf), newline=False)
            self._buf.clear()
        for r in self.ranks:
            r.end()

    def _line(self, line: bytes, *, newline: bool) -> None:
        m = _LABEL.match(line)
        rank = int(m.group(1)) if m else -1
        if m is None or rank >= len(self.ranks):
            self.stray_count += 1
            self.stray.append(line[:300])
            return
        content = line[m.end() :]
        tag = self.failure_tag
        if tag and content.startswith(tag) and content[len(tag) :].isdigit():
            self.ranks[rank].task_failed = int(content[len(tag) :])
        if newline and len(content) != self.max_msg:
            content += b"\n"
        self.ranks[rank].add(content)
