"""The parser's byte scanning in pure Python: the twin of the C module ``_native`` (same names, same answers).

``accel.scanner`` is one of the two modules; the parser (and, for ``analyze``, ``judge.clock`` and
``judge.table``: ``clock_lines``, ``step_columns``) calls only the functions below, so it has no branch
on which one runs. This module is the reference the C code is tested against (``tests/
test_parse_native.py`` compares them on real and fuzzed logs) and what runs where ``_native`` is not
built or ``CVS_TUI_PURE_PARSER=1`` turns it off. ``_native.pyi`` states the shared signatures.
"""

from __future__ import annotations

import math
import re
from array import array
from bisect import bisect_right
from collections.abc import Callable, Collection, Iterable
from datetime import UTC, datetime

from cvs_tui.core.events import LogEvent, StepEvent, StepKind
from cvs_tui.core.parse import dialects as d

_WS = frozenset(b" \t\x0b\x0c")
_GLOG_LEVELS = frozenset(b"IWEF")
_INF = float("inf")
_NINF = float("-inf")
_NAN = float("nan")

# what configure() hands over (the C module fills its StepEvents the same way)
_step_cls: type[StepEvent] = StepEvent
_kind_train: StepKind = StepKind.TRAIN
_kind_rampup: StepKind = StepKind.RAMPUP
_src_fn: Callable[[bytes], str] | None = None
_header_fn: Callable[[bytes], tuple[str | None, str | None, float | None]] | None = None


def configure(
    step_cls: type[StepEvent],
    train_kind: StepKind,
    rampup_kind: StepKind,
    src_fn: Callable[[bytes], str],
    header_info_fn: Callable[[bytes], tuple[str | None, str | None, float | None]],
) -> None:
    """What ``scan_steps`` builds with: the step class, its two kinds and the header readers."""
    global _step_cls, _kind_train, _kind_rampup, _src_fn, _header_fn
    _step_cls, _kind_train, _kind_rampup = step_cls, train_kind, rampup_kind
    _src_fn, _header_fn = src_fn, header_info_fn


# ---------------------------------------------------------------------------------------------------------
# Record headers and line numbers
# ---------------------------------------------------------------------------------------------------------
def find_headers(norm: bytes, pos: int) -> list[int]:
    """Record starts (> 0, ascending) of the headers found from ``pos`` on (a timed header is anchored on
    its hour's colon, so its start may lie up to HEADER_MAX bytes before ``pos``)."""
    found = [m.start(m.lastindex or 0) for m in d.TIMED_HEADER.finditer(norm, pos)]
    extra: list[int] = []
    for lit, regex in d.LITERAL_HEADERS:
        if norm.find(lit, pos) == -1:
            continue
        for m in regex.finditer(norm, pos):
            p = m.start()
            if norm[p - 1] in _WS:
                extra.append(p)
    for lit in d.BARE_STEP_HEADERS:
        # in a headered log every one is a message after `] `: two counts at C speed say so
        n = norm.count(lit, pos)
        if n and n != norm.count(b"] " + lit, max(0, pos - 2)):
            start = max(pos, 1)
            extra.extend(
                p for p in _find_all(norm, lit, start) if norm[p - 1] in _WS and _bare_step_starts(norm, p)
            )
    if extra:
        found = sorted(set(found).union(extra))
    if found and found[0] == 0:
        found = found[1:]
    return found


def _find_all(text: bytes, lit: bytes, pos: int) -> list[int]:
    out: list[int] = []
    p = text.find(lit, pos)
    while p != -1:
        out.append(p)
        p = text.find(lit, p + 1)
    return out


def _bare_step_starts(norm: bytes, p: int) -> bool:
    """A header-less step line starts a record unless what precedes it (at most BARE_STEP_LOOKBACK blanks
    skipped) ends a log header (``]``, python logging's ``:``) or the rampup tag (``,`` / ``]``)."""
    q = p - 1
    stop = p - 1 - d.BARE_STEP_LOOKBACK
    while q >= 0 and norm[q] in _WS:
        q -= 1
        if q == stop:
            return True
    return q < 0 or norm[q] not in d.BARE_STEP_NOT_AFTER


def record_lines(orig: bytes, starts: list[int], line0: int) -> list[int]:
    """``line0`` plus the newlines of ``orig`` before each position (ascending)."""
    out: list[int] = []
    line = line0
    prev = 0
    for s in starts:
        s = min(max(s, prev), len(orig))
        line += orig.count(b"\n", prev, s)
        out.append(line)
        prev = s
    return out


# ---------------------------------------------------------------------------------------------------------
# Steps and F-level headers
# ---------------------------------------------------------------------------------------------------------
def scan_steps(
    buf: bytes, starts: list[int], lines: list[int], end: int, early: int, skip: Collection[int]
) -> tuple[list[StepEvent], list[int], list[int], list[int]]:
    """Steps of ``buf[early:end]`` inside one record each, not in ``skip``: (events, the record of each,
    positions of steps with a non-finite loss, positions of steps with a non-finite TFLOP/s or Tokens/s).

    A match that ends at ``end`` is not a step: its last value may go on past what is here (a stream cut
    inside ``loss: 7.188`` reads ``loss: 7.``), and a complete record always ends in whitespace."""
    steps: list[StepEvent] = []
    recs: list[int] = []
    nonfinite: list[int] = []
    bad_rate: list[int] = []
    src_cache: dict[bytes, str] = {}
    rampup = buf.find(b"[Rampup", 0, end) != -1  # spares most steps the two suffix checks
    for m in d.STEP.finditer(buf, early, end):
        p = m.start()
        i = bisect_right(starts, p) - 1
        if (skip and i in skip) or m.end() > starts[i + 1] or m.end() == end:
            continue
        ev = make_step(buf, m, starts[i], lines[i], rampup, src_cache)
        if ev is None:
            continue
        steps.append(ev)
        recs.append(i)
        if not_finite(ev.loss):
            nonfinite.append(p)
        tf, tok = ev.tflops_per_device, ev.tokens_per_device
        if (tf is not None and (tf != tf or tf in (_INF, _NINF))) or (
            tok is not None and (tok != tok or tok in (_INF, _NINF))
        ):
            bad_rate.append(p)
    return steps, recs, nonfinite, bad_rate


def not_finite(x: float | None) -> bool:
    return x is not None and (x != x or x in (_INF, _NINF))


def make_step(
    buf: bytes, m: re.Match[bytes], s: int, line: int, rampup: bool, src_cache: dict[bytes, str]
) -> StepEvent | None:
    """The StepEvent of one step-regex match in the record starting at ``s`` (None if a value is bad)."""
    p = m.start()
    st, sec, pairs = m.groups()
    fields = d.step_fields(pairs)
    if fields is None:
        return None
    src_fn = _src_fn or d.source_of
    # absl header: the source is the last word before the first "] ", right before the step
    if buf[s] in _GLOG_LEVELS and buf.find(b"] ", s, p) == p - 2 and buf[s + 1 : s + 5].isdigit():
        raw = buf[buf.rfind(b" ", s, p - 2) + 1 : p - 2]
        source = src_cache.get(raw)
        if source is None:
            source = src_cache[raw] = src_fn(raw)
        stamp = None  # absl prints no year
    else:
        _lvl, source, stamp = (_header_fn or d.header_info)(buf[s:p])
    kind = _kind_train
    if rampup and (buf.endswith(d.RAMPUP_TAG[0], s, p) or buf.endswith(d.RAMPUP_TAG[1], s, p)):
        kind = _kind_rampup
    loss, tf, tok, tw, sl, extras = fields
    try:
        seconds = float(sec)
    except ValueError:  # a value that is not a number: not a step line after all
        return None
    return _step_cls(int(st), loss, line, kind, seconds, tf, tok, tw, sl, extras, stamp, source)


def fatal_records(buf: bytes, starts: list[int], end: int, skip: Collection[int]) -> set[int]:
    """Records (not in ``skip``) whose absl or TF/XLA header has level F (glog FATAL: the process aborts)."""
    out: set[int] = set()
    for regex in (d.F_GLOG, d.F_TF):
        for m in regex.finditer(buf, 0, end):
            h = m.start(1)
            i = bisect_right(starts, h) - 1
            if starts[i] == h and i not in skip:
                out.add(i)
    return out


# ---------------------------------------------------------------------------------------------------------
# Literals
# ---------------------------------------------------------------------------------------------------------
class LiteralScanner:
    """Which records hold which literals (ASCII case folded), by one ``bytes.find`` loop per literal on a
    lower-cased copy. (pyahocorasick's automaton does this one pass about twice as fast, some 15 % of the
    pure-Python parser: not worth a compiled dependency for the fallback of a C module.)"""

    def __init__(self, literals: Collection[bytes]) -> None:
        if any(not isinstance(lit, bytes) for lit in literals):
            raise TypeError("literals must be bytes")
        self.literals: list[bytes] = list(dict.fromkeys(lit for lit in literals if lit))

    def find(self, text: bytes, starts: list[int], end: int) -> dict[int, set[int]]:
        """literal index -> record indexes, for records of ``text[:end]`` (record i = starts[i]..starts[i+1]).

        A literal that straddles two records is attributed to the one it starts in."""
        text = text[:end].lower()
        out: dict[int, set[int]] = {}
        for k, lit in enumerate(self.literals):
            pos = text.find(lit)
            while pos != -1:
                i = bisect_right(starts, pos) - 1
                out.setdefault(k, set()).add(i)
                pos = text.find(lit, starts[i + 1]) if i + 1 < len(starts) else -1
        return out


# ---------------------------------------------------------------------------------------------------------
# The line clock (judge/clock.py has the scale it reads; this is its per-line work)
# ---------------------------------------------------------------------------------------------------------
_ABSL = rb"[IWEF](\d{4} \d\d:\d\d:\d\d)(\.\d{1,9})? {1,20}\d{1,20} [^\s:\]]{1,200}:\d{1,10}\] "
_TFXLA = rb"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(\.\d{1,9})?: [IWEF] "
_PYLOG = rb"(?:INFO|WARNING|ERROR|CRITICAL|DEBUG):(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(,\d{3})?:"
HEADER_TIME = re.compile(rb"(?:" + _ABSL + rb"|" + _TFXLA + rb"|" + _PYLOG + rb")")
# every line, with its header's groups when it starts with one: findall of a block gives one tuple a line
# (absent groups are b""), with no Python step per line (a header never spans a line break)
_CLOCK_LINE = re.compile(rb"(?:" + _ABSL + rb"|" + _TFXLA + rb"|" + _PYLOG + rb")?[^\n]*\n")
_NO_YEAR = 2000  # a leap year, so that 0229 reads
_HALF_YEAR = 183 * 86400.0
# (year of the latest full-date header, -1: none; the year absl headers are read in; the last absl time,
# NaN: none): what carries from one block of lines to the next
ClockState = tuple[int, int, float]
CLOCK_START: ClockState = (-1, _NO_YEAR, math.nan)


def utc_seconds(year: int, month: int, day: int, hh: int, mm: int, ss: int) -> float | None:
    """Epoch seconds of a whole second read as UTC, None for an impossible date."""
    try:
        return datetime(year, month, day, hh, mm, ss, tzinfo=UTC).timestamp()
    except ValueError:  # 0229 in a common year, month 13, ...
        return None


def _absl_base(year: int, key: bytes) -> float | None:
    return utc_seconds(year, int(key[0:2]), int(key[2:4]), int(key[5:7]), int(key[8:10]), int(key[11:13]))


def clock_groups(
    groups: Iterable[tuple[bytes | None, ...] | None],
    line0: int,
    state: ClockState,
    at: array[int],
    times: array[float],
) -> tuple[int, ClockState]:
    """Appends to ``at`` and ``times`` the timed lines (numbered from ``line0`` + 1) and their times, from
    each line's header groups in order (None or empty groups: no timed header); returns the lines read
    and the state after them. The scale is judge.clock's."""
    put_line, put_time = at.append, times.append
    year: int | None = None if state[0] < 0 else state[0]  # from the latest full-date header
    absl_year = state[1]
    last_absl: float | None = None if math.isnan(state[2]) else state[2]
    # whole seconds repeat for many lines: one datetime per distinct (year, text of the second)
    seconds: dict[tuple[int, bytes], float | None] = {}
    line = line0
    for line, g in enumerate(groups, start=line0 + 1):
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
                base = seconds[(0, key)] = utc_seconds(
                    year, int(key[5:7]), int(key[8:10]), int(key[11:13]), int(key[14:16]), int(key[17:19])
                )
            if base is None:
                continue
        put_line(line)
        # b".ffffff" reads as b"0.ffffff" does; python logging's b",mmm" does not
        put_time(base + ((float(raw) if raw[0] == 46 else float(b"0." + raw[1:])) if raw else 0.0))
    last = math.nan if last_absl is None else last_absl
    return line - line0, (-1 if year is None else year, absl_year, last)


def clock_lines(data: bytes, end: int, line0: int, state: ClockState) -> tuple[bytes, bytes, int, ClockState]:
    """The line clock of the lines of ``data[:end]`` (a last line may lack its newline), numbered from
    ``line0`` + 1, read from ``state``: (timed lines as int64 bytes, their times as float64 bytes, lines
    read, the state after them)."""
    text = bytes(data[:end])
    if text and text[-1] != 10:
        text += b"\n"
    at: array[int] = array("q")
    times: array[float] = array("d")
    n, state = clock_groups(_CLOCK_LINE.findall(text), line0, state, at, times)
    return at.tobytes(), times.tobytes(), n, state


# ---------------------------------------------------------------------------------------------------------
# Step columns (judge/columns.py reads them)
# ---------------------------------------------------------------------------------------------------------
_OPTIONAL_FIELDS = ("seconds", "tflops_per_device", "tokens_per_device", "total_weights", "timestamp")


def step_columns(
    events: list[LogEvent], kinds: tuple[StepKind, ...]
) -> tuple[tuple[bytes, ...], list[int], int]:
    """The fields the judge reads of each step event (``type(e) is`` the configured step class) of
    ``events``, as the bytes of typed arrays: step, line (int64), loss (float64, NaN for None), kind (int8:
    the index in ``kinds``), then seconds, TFLOP/s, tokens and total weights (float64, NaN for None) each
    with a has-value byte column, then timestamp (float64, NaN for None), then the loss's has-value byte
    column. Also the indexes of the other events, and the
    first step (in step order) with a non-empty source, -1 if none."""
    steps = [e for e in events if type(e) is _step_cls]
    others = [i for i, e in enumerate(events) if type(e) is not _step_cls]
    code = {k: i for i, k in enumerate(kinds)}
    cols: list[bytes] = [
        array("q", [e.step for e in steps]).tobytes(),
        array("q", [e.line for e in steps]).tobytes(),
        array("d", [_NAN if e.loss is None else e.loss for e in steps]).tobytes(),
        bytes([code[e.kind] for e in steps]),
    ]
    for name in _OPTIONAL_FIELDS:
        raw = [getattr(e, name) for e in steps]
        cols.append(array("d", [_NAN if v is None else v for v in raw]).tobytes())
        if name != "timestamp":
            cols.append(bytes(v is not None for v in raw))
    cols.append(bytes(e.loss is not None for e in steps))
    sourced = next((i for i, e in enumerate(steps) if e.source), -1)
    return tuple(cols), others, sourced
