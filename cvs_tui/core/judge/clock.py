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
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

_ABSL = rb"[IWEF](\d{4} \d\d:\d\d:\d\d)(\.\d{1,9})? {1,20}\d{1,20} [^\s:\]]{1,200}:\d{1,10}\] "
_TFXLA = rb"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(\.\d{1,9})?: [IWEF] "
_PYLOG = rb"(?:INFO|WARNING|ERROR|CRITICAL|DEBUG):(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(,\d{3})?:"
HEADER_TIME = re.compile(rb"(?:" + _ABSL + rb"|" + _TFXLA + rb"|" + _PYLOG + rb")")
_FIRST = frozenset(b"IWEFCD0123456789")  # what a timed header can start with
_NO_YEAR = 2000  # a leap year, so that 0229 reads
_HALF_YEAR = 183 * 86400.0


def _base(year: int, month: int, day: int, hh: int, mm: int, ss: int) -> float | None:
    """Epoch seconds of a whole second read as UTC, None for an impossible date."""
    try:
        return datetime(year, month, day, hh, mm, ss, tzinfo=UTC).timestamp()
    except ValueError:  # 0229 in a common year, month 13, ...
        return None


def _frac(raw: bytes | None) -> float:
    return float(b"0." + raw[1:]) if raw else 0.0  # b".ffffff" or python logging's b",mmm"


def line_clock(data: bytes) -> dict[int, float]:
    """{1-based line: seconds} for every line that starts with a timed record header (see the module
    docstring for the scale). O(size of the log)."""
    return clock_of_lines(data.split(b"\n"))


def file_clock(path: Path) -> dict[int, float]:
    """:func:`line_clock` of a log file, read a block at a time (a long log is never held whole)."""
    at, times = file_clock_arrays(path)
    return dict(zip(at, times, strict=True))


def clock_of_lines(lines: Iterable[bytes]) -> dict[int, float]:
    """:func:`line_clock` of the log's lines, in order (a trailing newline on each is allowed)."""
    match = HEADER_TIME.match
    first = _FIRST
    at, times = _clock(
        [
            (
                m.groups() if text and text[0] in first and (m := match(text)) is not None else None
                for text in lines
            )
        ]
    )
    return dict(zip(at, times, strict=True))


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


def file_line_clock(path: Path) -> LineClock:
    """:func:`file_clock` as a :class:`LineClock` (what ``analyze`` holds of a long log's clock)."""
    return LineClock(*file_clock_arrays(path))


# every line, with its header's groups when it starts with one: findall of a block gives one tuple a line
# (absent groups are b""), with no Python step per line (a header never spans a line break)
_LINE = re.compile(rb"(?:" + _ABSL + rb"|" + _TFXLA + rb"|" + _PYLOG + rb")?[^\n]*\n")


def file_clock_arrays(path: Path, block: int = 8 << 20) -> tuple[array[int], array[float]]:
    """The timed lines of a log file (ascending) and their times; see :func:`line_clock`."""

    def blocks() -> Iterator[list[tuple[bytes, ...]]]:
        carry = b""
        with path.open("rb") as fh:
            while data := fh.read(block):
                data = carry + data
                cut = data.rfind(b"\n") + 1
                carry = data[cut:]
                if cut:
                    yield _LINE.findall(data, 0, cut)
        if carry:
            yield _LINE.findall(carry + b"\n")

    return _clock(blocks())


def _clock(blocks: Iterable[Iterable[tuple[bytes | None, ...] | None]]) -> tuple[array[int], array[float]]:
    """The timed lines (ascending) and their times, from each line's header groups in order, in blocks of
    lines (None or empty groups: the line starts with no timed header)."""
    at: array[int] = array("q")
    times: array[float] = array("d")
    put_line, put_time = at.append, times.append
    year: int | None = None  # from the latest full-date header
    absl_year = _NO_YEAR
    last_absl: float | None = None
    # whole seconds repeat for many lines: one datetime per distinct (year, text of the second)
    seconds: dict[tuple[int, bytes], float | None] = {}
    for line, g in enumerate(chain.from_iterable(blocks), start=1):
        if g is None:
            continue
        key = g[0]
        if key:  # absl: b"MMDD HH:MM:SS"
            if key[:2] == b"00":
                continue  # zero-date form: another scale
            if year is not None:
                absl_year = year
            base = seconds.get((absl_year, key), -1.0)
            if base == -1.0:
                base = seconds[(absl_year, key)] = _absl_base(absl_year, key)
            if base is not None and last_absl is not None and base < last_absl - _HALF_YEAR:
                absl_year += 1  # the log crossed New Year
                base = seconds[(absl_year, key)] = _absl_base(absl_year, key)
            if base is None:
                continue
            last_absl = base
            raw = g[1]
        else:
            key, raw = (g[2], g[3]) if g[2] else (g[4], g[5])
            if not key:
                continue
            year = int(key[:4])
            base = seconds.get((0, key), -1.0)
            if base == -1.0:
                base = seconds[(0, key)] = _base(
                    year, int(key[5:7]), int(key[8:10]), int(key[11:13]), int(key[14:16]), int(key[17:19])
                )
            if base is None:
                continue
        put_line(line)
        # b".ffffff" reads as b"0.ffffff" does; python logging's b",mmm" does not
        put_time(base + ((float(raw) if raw[0] == 46 else float(b"0." + raw[1:])) if raw else 0.0))
    return at, times


def _absl_base(year: int, key: bytes) -> float | None:
    return _base(year, int(key[0:2]), int(key[2:4]), int(key[5:7]), int(key[8:10]), int(key[11:13]))


def absl_clock_time(text: str, year: int = _NO_YEAR) -> float:
    """The clock value of an absl-style ``MMDD HH:MM:SS.ffffff`` time (as a log without full-date
    headers reads it): for comparing an outside record of a moment, such as when a process was paused,
    with ``line_clock``."""
    m = re.fullmatch(r"(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(\.\d{1,9})?", text.strip())
    if m is None:
        raise ValueError(f"not an MMDD HH:MM:SS.ffffff time: {text!r}")
    t = _base(year, *(int(m.group(i)) for i in range(1, 6)))
    if t is None:
        raise ValueError(f"not a calendar date: {text!r}")
    return t + _frac(m.group(6).encode() if m.group(6) else None)
