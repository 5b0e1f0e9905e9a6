"""A wall clock for a node log: the time its record headers print, by line.

MaxText logs through absl, whose header (``I1130 06:52:51.215730 1397... file.py:265] ``) carries month,
day and time but no year, so the parser leaves ``StepEvent.timestamp`` (and the other events'
``timestamp``) None for those records. Stall attribution only needs times that are consistent within
one log, so this reads every header that starts a line, in all three timed forms, onto one scale:

* TF/XLA C++ (``2026-04-18 18:24:14.732938: E ...] ``) and python ``logging``
  (``INFO:2026-04-19 06:51:49,547:...``): their full date, read as UTC like the parser does;
* absl/glog: month, day and time in the year of the latest full-date header above it (2000, a leap
  year, when there is none), moved to the next year when the date runs backwards by more than half a
  year (a log that crosses New Year).

absl's zero-date form (``E0000 00:00:<epoch> ...``, printed before absl is set up) is left out: it is
on another scale and only ever precedes training. Headers in the middle of a line (a flattened log)
are not read, since a line can then hold many times. Every event carries the 1-based line its record
starts on, so ``clock.get(event.line)`` is the event's time.

The per-line work runs in the byte scanner (``clock_lines`` of the C module, or of its twin ``_pyscan``,
which holds the regex and the year rules); :class:`ClockBuilder` takes a log a chunk at a time, so
``analyze`` reads the clock from the chunks it parses.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from cvs_tui.core.parse.records import RECORD_CAP

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from cvs_tui.core.judge.spill import ColumnFiles, SpilledClock

_NO_YEAR = 2000  # a leap year, so that 0229 reads


def _frac(raw: bytes | None) -> float:
    return float(b"0." + raw[1:]) if raw else 0.0  # b".ffffff" or python logging's b",mmm"


class LineClock(Mapping[int, float]):
    """A line clock held as two arrays (16 bytes a timed line, where a dict takes about 100): the lines,
    ascending, and their times. ``get`` is a binary search; :meth:`lookup` reads many lines at once."""

    def __init__(self, lines: array[int], times: array[float]) -> None:
        self.lines, self.times = lines, times

    def __getitem__(self, line: int) -> float:
        i = bisect_left(self.lines, line)
        if i < len(self.lines) and self.lines[i] == line:
            return self.times[i]
        raise KeyError(line)

    def __len__(self) -> int:
        return len(self.lines)

    def __iter__(self) -> Iterator[int]:
        return iter(self.lines)

    def lookup(
        self, lines: npt.NDArray[np.int64], default: npt.NDArray[np.float64]
    ) -> npt.NDArray[np.float64]:
        """The time of each of ``lines``, ``default`` where the clock has none (as ``get`` does)."""
        import numpy as np

        at = np.frombuffer(self.lines, dtype=np.int64) if len(self.lines) else np.zeros(0, np.int64)
        t = np.frombuffer(self.times, dtype=np.float64) if len(self.times) else np.zeros(0, np.float64)
        if not len(at):
            return default.copy()
        i = np.minimum(np.searchsorted(at, lines), len(at) - 1)
        return np.where(at[i] == lines, t[i], default)


def line_clock(data: bytes, *, native: bool | None = None) -> LineClock:
    """The line clock of a log's whole text: {1-based line: seconds} for every line that starts with a
    timed record header (see the module docstring for the scale), read as :class:`ClockBuilder` reads a
    log fed a chunk at a time. O(size of the log)."""
    clock = ClockBuilder(native)
    clock.feed(data)
    return clock.finish()


def file_line_clock(path: Path) -> LineClock:
    """The line clock of a log file, read a block at a time (a long log is never held whole)."""
    return LineClock(*file_clock_arrays(path))


class ClockBuilder:
    """The line clock of a log fed a chunk at a time (any chunking; ``analyze`` feeds it the chunks it
    parses, so the log is read once). The lines run through the byte scanner (``accel``: the C module's
    ``clock_lines`` or its twin in ``_pyscan``); ``native`` as for ``NodeLogParser``."""

    def __init__(self, native: bool | None = None, spill: Path | None = None) -> None:
        from cvs_tui.core.judge.spill import ColumnFiles
        from cvs_tui.core.parse import accel
        from cvs_tui.core.parse._pyscan import CLOCK_START, ClockState

        # ``spill``: a folder for the two arrays (judge.spill), so a long log's clock is not held
        self._files = ColumnFiles(spill, {"at": "i8", "t": "f8"}) if spill is not None else None
        self._scan = accel.select(native).clock_lines
        self._carry = b""
        self._lines = 0
        self._state: ClockState = CLOCK_START
        self.at: array[int] = array("q")
        self.times: array[float] = array("d")

    def _run(self, data: bytes, end: int) -> None:
        at, times, n, self._state = self._scan(data, end, self._lines, self._state)
        self._lines += n
        if self._files is not None:
            self._files.append("at", at)
            self._files.append("t", times)
            return
        self.at.frombytes(at)
        self.times.frombytes(times)

    def feed(self, data: bytes) -> None:
        """Take the next bytes. Of an unfinished line only its first ``RECORD_CAP`` bytes are kept (its
        time is in its header): a copy with no line break at all (gigabytes of NULs on stdin) is read
        in linear time and bounded memory, as the parser reads it."""
        if self._carry:
            if len(self._carry) >= RECORD_CAP and b"\n" not in data:
                return
            data = self._carry + data
        cut = data.rfind(b"\n") + 1
        self._carry = data[cut : cut + RECORD_CAP]
        if cut:
            self._run(data, cut)

    def finish(self) -> LineClock:
        self._end()
        return LineClock(self.at, self.times)

    def _end(self) -> None:
        if self._carry:
            self._run(self._carry, len(self._carry))
            self._carry = b""

    @property
    def files(self) -> ColumnFiles:
        """The clock's files (``spill``)."""
        if self._files is None:
            raise ValueError("this clock is held in memory")
        return self._files

    def spilled(self) -> SpilledClock:
        """The clock when its arrays went to files (``spill``)."""
        from cvs_tui.core.judge.spill import SpilledClock

        if self._files is None:
            raise ValueError("this clock is held in memory: use finish()")
        self._end()
        return SpilledClock(self._files)


def spilled_file_clock(path: Path, folder: Path) -> SpilledClock | None:
    """The line clock of the log at ``path`` in column files in ``folder``, read a block at a time; None
    when the log cannot be read (stalls are then placed by the events' own timestamps, or by step
    number). Close its ``files`` when done."""
    clock = ClockBuilder(spill=folder)
    try:
        with path.open("rb") as fh:
            while data := fh.read(8 << 20):
                clock.feed(data)
    except OSError:
        clock.files.close()
        return None
    return clock.spilled()


def file_clock_arrays(
    path: Path, block: int = 8 << 20, *, native: bool | None = None
) -> tuple[array[int], array[float]]:
    """The timed lines of a log file (ascending) and their times; see :func:`line_clock`."""
    clock = ClockBuilder(native)
    with path.open("rb") as fh:
        while data := fh.read(block):
            clock.feed(data)
    done = clock.finish()
    return done.lines, done.times


def absl_clock_time(text: str, year: int = _NO_YEAR) -> float:
    """The clock value of an absl-style ``MMDD HH:MM:SS.ffffff`` time (as a log without full-date
    headers reads it): for comparing an outside record of a moment, such as when a process was paused,
    with ``line_clock``."""
    m = re.fullmatch(r"(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(\.\d{1,9})?", text.strip())
    if m is None:
        raise ValueError(f"not an MMDD HH:MM:SS.ffffff time: {text!r}")
    from cvs_tui.core.parse._pyscan import utc_seconds

    t = utc_seconds(year, *(int(m.group(i)) for i in range(1, 6)))
    if t is None:
        raise ValueError(f"not a calendar date: {text!r}")
    return t + _frac(m.group(6).encode() if m.group(6) else None)
