"""A node's window, stalls and figures from its step columns in files (``judge.spill``), a chunk at a time.

In a log whose step numbers rise on every step record (every real log: ``StepTable.ascending``), each step
number has one record, so the first record of a step (what the window and the stalls judge) and the last
one (what the figures read) are the same record, and the step order is the log's order. Every rule of
:mod:`~cvs_tui.core.judge.column_window` and :mod:`~cvs_tui.core.judge.column_figures` then becomes a
pass over the files: sums as one Python ``sum`` over the chunks' values (the same float as over a
list), running sums with the carry in front, medians and percentiles as exact order statistics
(:mod:`~cvs_tui.core.judge.order_stats`). What is held is one chunk, the other events, the excluded
steps and the stalls, whatever the log's length. ``tests/test_column_stream.py`` holds every result
equal to the judge over columns in memory, with chunks of a few records.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import chain
from operator import mul
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cvs_tui.core.events import EvalEvent, StepEvent
from cvs_tui.core.judge import spill
from cvs_tui.core.judge.background import background
from cvs_tui.core.judge.clock import LineClock
from cvs_tui.core.judge.columns import PROFILER, SPILL_COLUMNS, TRAIN, StepColumns, StepTable
from cvs_tui.core.judge.loss import (
    CONVERGENCE_KEYS,
    convergence_source,
    eval_section,
    nonfinite_text,
    put_final_loss,
)
from cvs_tui.core.judge.metrics import NodeStats, RunInputs, Sheet
from cvs_tui.core.judge.order_stats import kth_smallest, median
from cvs_tui.core.judge.series import decimated_from, thin_indexes
from cvs_tui.core.judge.spill import ColumnFiles, SpilledClock
from cvs_tui.core.judge.stalls import (
    ANCHOR_NEIGHBOURS,
    LINE_LAG,
    MAD_SCALE,
    MIN_BASELINE_STEPS,
    STALL_MAD_K,
    STALL_MIN_EXCESS_S,
    STALL_RATIO,
    Stall,
    StallReport,
    Timeline,
    attribute,
    place_stall,
)
from cvs_tui.core.judge.window import WARMUP_STEPS, Special, drops

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

Clock = LineClock | SpilledClock | Mapping[int, float] | None

# a node's window figures as the run judge reads them: one file each (judge.spill), window order
WINDOW_COLUMNS = {
    "steps": "i8",
    "sec": "f8",
    "tok": "f8",
    "tok_ok": "?",
    "tw": "f8",
    "tw_ok": "?",
    "fl": "f8",
    "fl_ok": "?",
}


def write_window(folder: Path, columns: dict[str, npt.NDArray[np.generic]] | None = None) -> ColumnFiles:
    """The window figures' files in ``folder`` (appended to by the caller when ``columns`` is None)."""
    files = ColumnFiles(folder, WINDOW_COLUMNS)
    for k, v in (columns or {}).items():
        files.append(k, v)
    return files


Arrays = dict[str, "npt.NDArray[Any]"]


def _times(
    clock: Clock, lines: npt.NDArray[np.int64], ts: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """column_window.times_of for records in log order (their lines ascending)."""
    import numpy as np

    if clock is None:
        return ts
    if isinstance(clock, LineClock | SpilledClock):
        return clock.lookup(lines, ts)
    get = clock.get
    return np.fromiter(
        (get(n, t) for n, t in zip(lines.tolist(), ts.tolist(), strict=True)), np.float64, len(ts)
    )


def _fsum(lists: Iterator[list[float]]) -> float:
    """``sum`` of the values of every list in turn: the float ``sum`` of them in one list gives."""
    total: float = sum(chain.from_iterable(lists))
    return total


class StepIndex:
    """Where a table's step numbers repeat or go back: for each step number ``lo + k`` the record of its
    last train record and of its last record (-1: none), so the rules read a step by its first record
    (the window, the stalls) or its last (the figures, the losses) as they do in a rising log. Held in
    memory: 16 bytes per step number of the log's range, plus a one-byte seen-map per pass."""

    def __init__(self, log: StreamLog) -> None:
        import numpy as np

        lo, hi = None, None
        for _, c in log.chunks("step"):
            if len(c["step"]):
                a, b = int(c["step"].min()), int(c["step"].max())
                lo, hi = a if lo is None else min(lo, a), b if hi is None else max(hi, b)
        self.lo = lo or 0
        n = 0 if hi is None else hi - self.lo + 1
        self.last_train = np.full(n, -1, np.int64)
        self.last_any = np.full(n, -1, np.int64)
        for g, c in log.chunks("step", "kind"):
            at = c["step"] - self.lo
            idx = np.arange(g, g + len(at), dtype=np.int64)
            np.maximum.at(self.last_any, at, idx)
            tr = c["kind"] == TRAIN
            np.maximum.at(self.last_train, at[tr], idx[tr])

    def seen(self) -> npt.NDArray[np.uint8]:
        import numpy as np

        return np.zeros(len(self.last_any), np.uint8)

    def firsts(
        self, seen: npt.NDArray[np.uint8], step: npt.NDArray[np.int64], mask: npt.NDArray[np.bool_]
    ) -> npt.NDArray[np.bool_]:
        """``mask`` less the records whose step number an earlier record of ``mask`` had (``seen``: the
        step numbers met so far in this pass, updated)."""
        import numpy as np

        cand = np.flatnonzero(mask)
        at = step[cand] - self.lo
        _, first = np.unique(at, return_index=True)
        keep = cand[first[seen[at[first]] == 0]]
        seen[step[keep] - self.lo] = 1
        out = np.zeros(len(mask), np.bool_)
        out[keep] = True
        return out


class StreamLog:
    """One node log's step table and its clock, read a chunk of ``spill.CHUNK`` at a time."""

    def __init__(self, s: StepTable, clock: Clock) -> None:
        self.s, self.files, self.clock = s, s.files, clock
        self.n = len(s.files)
        self.index = None if s.ascending else StepIndex(self)

    def firsts(
        self, seen: npt.NDArray[np.uint8] | None, step: npt.NDArray[np.int64], mask: npt.NDArray[np.bool_]
    ) -> npt.NDArray[np.bool_]:
        """The first record of each step number among ``mask`` (every record of a rising log is)."""
        if self.index is None or seen is None:
            return mask
        return self.index.firsts(seen, step, mask)

    def seen(self) -> npt.NDArray[np.uint8] | None:
        return None if self.index is None else self.index.seen()

    def take_any(self, name: str, idx: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        """The values of column ``name`` at the records ``idx``, in any order."""
        import numpy as np

        order = np.argsort(idx, kind="stable")
        out = np.empty(len(idx), self.files.dtypes[name])
        out[order] = self.files.take(name, idx[order])
        return out

    def by_step(self) -> Iterator[tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]]:
        """Every step number ascending with the loss of its last record, a chunk at a time."""
        import numpy as np

        if self.index is None:
            for _, c in self.chunks("step", "loss"):
                yield c["step"], c["loss"]
            return
        ix = self.index
        for a in range(0, len(ix.last_any), spill.CHUNK):
            rec = ix.last_any[a : a + spill.CHUNK]
            have = np.flatnonzero(rec >= 0)
            if len(have):
                yield have + a + ix.lo, self.take_any("loss", rec[have])

    def by_step_count(self) -> int:
        return self.n if self.index is None else int((self.index.last_any >= 0).sum())

    def chunks(self, *names: str) -> Iterator[tuple[int, Arrays]]:
        return self.files.chunks(names, size=spill.CHUNK)

    def events(self, idx: list[int]) -> list[StepEvent]:
        """The records ``idx`` (ascending) as StepColumns.event makes them."""
        import numpy as np

        at = np.asarray(idx, dtype=np.int64)
        cols = StepColumns(**{k: self.files.take(k, at) for k in SPILL_COLUMNS})
        return [cols.event(i) for i in range(len(idx))]

    def scratch(self, name: str, dtypes: Mapping[str, str]) -> ColumnFiles:
        """New column files next to the log's own (emptied first), for values a rule reads many times."""
        if self.files.folder is None:
            return ColumnFiles(None, dtypes)
        folder = self.files.folder.with_name(f"{self.files.folder.name}.{name}")
        if folder.exists():
            for f in folder.iterdir():
                f.unlink()
        return ColumnFiles(folder, dtypes)

    def step_at(self, i: int) -> int:
        return int(self.files.read("step", i, i + 1)[0])


@dataclass(slots=True)
class Survey:
    """One pass over a node's records: what the window drops on its own and counts."""

    special: list[Special] = field(default_factory=list)  # records that are not timed train steps
    profiler: list[int] = field(default_factory=list)
    warm: list[int] = field(default_factory=list)  # steps dropped as warm-up, in log order
    timed: int = 0  # train records with seconds
    train: int = 0
    last_train: int | None = None


def survey(log: StreamLog) -> Survey:
    import numpy as np

    sv = Survey()
    for lo, c in log.chunks("step", "line", "kind", "has_seconds"):
        step, kind = c["step"], c["kind"]
        train = kind == TRAIN
        timed = train & c["has_seconds"]
        sp = np.flatnonzero(~timed)
        sv.special += zip(
            *((sp + lo).tolist(), step[sp].tolist(), kind[sp].tolist(), c["line"][sp].tolist()), strict=True
        )
        sv.profiler += (np.flatnonzero(kind == PROFILER) + lo).tolist()
        ts = step[timed]
        warm = (ts < WARMUP_STEPS) | (np.arange(sv.timed, sv.timed + len(ts)) < WARMUP_STEPS)
        sv.warm += ts[warm].tolist()
        sv.timed += len(ts)
        sv.train += int(train.sum())
        if train.any():
            sv.last_train = int(step[train][-1])
    return sv


@dataclass(slots=True)
class StreamWindow:
    """column_window's result without the window's step list: ``keys`` the steps excluded before the
    seconds check (a window record is a timed train record not among them with positive finite seconds)."""

    excluded: dict[int, str]
    stalls: StallReport | None
    keys: npt.NDArray[np.int64]


def stream_window(log: StreamLog, sv: Survey) -> StreamWindow:
    """column_window of the spilled records."""
    import numpy as np

    excluded: dict[int, str] = {}
    drops(sv.special, log.s.others, log.step_at, excluded)
    stalls: StallReport | None = None
    if sv.timed:
        for s in sv.warm:
            excluded[s] = "warm-up (compilation and first steps)"
        prof = list(zip(sv.profiler, log.events(sv.profiler), strict=True))
        stalls = stream_stalls(log, background(log.s.others, prof, log.clock), WARMUP_STEPS)
        for s, reason in stalls.exclusions().items():
            excluded.setdefault(s, reason)
    keys = np.sort(np.fromiter(excluded, np.int64, len(excluded)))
    seen = log.seen()
    for _, c in log.chunks("step", "kind", "seconds", "has_seconds"):
        first = log.firsts(
            seen, c["step"], (c["kind"] == TRAIN) & c["has_seconds"] & ~np.isin(c["step"], keys)
        )
        v = c["seconds"][first]
        good = np.isfinite(v) & (v > 0)
        for s in c["step"][first][~good].tolist():
            excluded[s] = "non-positive or non-finite seconds"
    every = np.fromiter(excluded, np.int64, len(excluded))
    logged = np.zeros(len(every), np.bool_)
    for _, c in log.chunks("step"):
        logged |= np.isin(every, c["step"])
    named = set(every[logged].tolist())  # a reason only for a step that was logged
    kept = {s: r for s, r in sorted(excluded.items()) if s in named}
    return StreamWindow(kept, stalls, keys)


def window_mask(
    log: StreamLog, seen: npt.NDArray[np.uint8] | None, c: Arrays, keys: npt.NDArray[np.int64]
) -> npt.NDArray[np.bool_]:
    """The window records of a chunk (see StreamWindow): the first timed train record of each step not
    excluded, when its seconds are positive and finite."""
    import numpy as np

    sec = c["seconds"]
    with np.errstate(invalid="ignore"):
        good = np.isfinite(sec) & (sec > 0)
    first = log.firsts(seen, c["step"], (c["kind"] == TRAIN) & c["has_seconds"] & ~np.isin(c["step"], keys))
    return first & good


_JUDGED = ("step", "line", "kind", "seconds", "has_seconds", "timestamp")
_JUDGED_FILES = {"step": "i8", "line": "i8", "sec": "f8", "ts": "f8"}


def _judged(log: StreamLog, warmup: int) -> ColumnFiles:
    """column_stalls' judged records (their step, line, seconds and timestamp), into files of their own:
    the stall rules read them many times."""
    import numpy as np

    out = log.scratch("judged", _JUDGED_FILES)
    timed = 0
    seen = log.seen()
    for _, c in log.chunks(*_JUDGED):
        sec = c["seconds"]
        ok = (c["kind"] == TRAIN) & c["has_seconds"]
        with np.errstate(invalid="ignore"):
            ok &= np.isfinite(sec) & (sec > 0)
        idx = np.flatnonzero(ok)
        later = np.zeros(len(ok), np.bool_)
        later[idx] = (c["step"][idx] >= warmup) & (np.arange(timed, timed + len(idx)) >= warmup)
        timed += len(idx)
        j = np.flatnonzero(log.firsts(seen, c["step"], later))
        for name, col in (("step", "step"), ("line", "line"), ("sec", "seconds"), ("ts", "timestamp")):
            out.append(name, c[col][j])
    return out


def _each(files: ColumnFiles, *names: str) -> Iterator[Arrays]:
    for _, c in files.chunks(names, size=spill.CHUNK):
        yield c


def stream_stalls(log: StreamLog, bg: list[Any], warmup: int) -> StallReport:
    """column_stalls of the spilled records."""
    judged = _judged(log, warmup)
    try:
        return _stalls(log, judged, bg)
    finally:
        judged.close()


def _stalls(log: StreamLog, judged: ColumnFiles, bg: list[Any]) -> StallReport:
    import numpy as np

    def secs() -> Iterator[npt.NDArray[np.float64]]:
        for c in _each(judged, "sec"):
            yield c["sec"]

    n = len(judged)
    wall = _fsum(x.tolist() for x in secs())
    if n < MIN_BASELINE_STEPS:
        return StallReport((), n, None, None, wall, wall / n if n else None)
    m = median(secs, n)
    s = MAD_SCALE * median(lambda: (np.abs(x - m) for x in secs()), n)
    limit = max(m + STALL_MAD_K * s, STALL_RATIO * m, m + STALL_MIN_EXCESS_S)
    stalls: list[Stall] = []
    flagged: set[int] = set()
    for g, c in judged.chunks(("step", "line", "sec"), size=spill.CHUNK):
        for i in np.flatnonzero(c["sec"] > limit).tolist():
            stalls.append(Stall(int(c["step"][i]), float(c["sec"][i]), m, int(c["line"][i])))
            flagged.add(g + i)
    if n > 2:
        wall = _gaps(log.clock, judged, limit, m, flagged, stalls, wall)
    stalls.sort(key=lambda st: st.line)
    stalls = _place(stalls, log, m)
    timeline = Timeline(bg)
    stalls = [attribute(st, timeline, 2.0 * m) for st in stalls]
    stalled = np.fromiter({st.step for st in stalls if st.source == "seconds"}, np.int64)
    count = [0]

    def steady() -> Iterator[list[float]]:
        for c in _each(judged, "step", "sec"):
            keep = c["sec"][~np.isin(c["step"], stalled)]
            count[0] += len(keep)
            yield keep.tolist()

    total = _fsum(steady())
    mean = total / count[0] if count[0] else None
    return StallReport(tuple(stalls), n, m, limit, wall, mean)


def _gaps(
    clock: Clock,
    judged: ColumnFiles,
    limit: float,
    m: float,
    flagged: set[int],
    out: list[Stall],
    wall: float,
) -> float:
    """The log gaps between judged records 1..n-2 (column_stalls), appended to ``out``; returns ``wall``."""
    import numpy as np

    n, prev = len(judged), math.nan
    for g, c in judged.chunks(tuple(_JUDGED_FILES), size=spill.CHUNK):
        times = _times(clock, c["line"], c["ts"])
        full = np.concatenate(([prev], times)) if g else times
        base = g - 1 if g else 0  # the judged index of full[0]
        with np.errstate(invalid="ignore"):
            at = np.flatnonzero(full[1:] - full[:-1] > limit)
        for k in at.tolist():
            i = base + k + 1
            if i < 1 or i > n - 2 or flagged.intersection(range(i - 1, i + LINE_LAG + 1)):
                continue  # the gap is a seconds stall: a step line is written up to LINE_LAG steps late
            t0, t1 = float(full[k]), float(full[k + 1])
            r = i - g
            out.append(Stall(int(c["step"][r]), t1 - t0, m, int(c["line"][r]), "log gap", t0, t1))
            wall += t1 - t0 - float(c["sec"][r])
        prev = float(times[-1])
    return wall


def _timed(log: StreamLog) -> Iterator[tuple[Arrays, npt.NDArray[np.int64]]]:
    """column_window._place's timed records, a chunk at a time."""
    import numpy as np

    for _, c in log.chunks(*_JUDGED):
        ok = (c["kind"] != PROFILER) & c["has_seconds"] & np.isfinite(c["seconds"])
        yield c, np.flatnonzero(ok)


def _place(stalls: list[Stall], log: StreamLog, median_s: float) -> list[Stall]:
    """column_window._place over the spilled records: each seconds stall's wall interval."""
    import numpy as np

    wanted = [i for i, s in enumerate(stalls) if s.source == "seconds"]
    if not wanted:
        return stalls
    k_of: dict[int, int] = {}
    g = 0
    for c, t in _timed(log):
        tl, tstep = c["line"][t], c["step"][t]
        for w in wanted:
            if w in k_of:
                continue
            s = stalls[w]
            lo, hi = int(np.searchsorted(tl, s.line, "left")), int(np.searchsorted(tl, s.line, "right"))
            same = np.flatnonzero(tstep[lo:hi] == s.step)
            if len(same):
                k_of[w] = g + lo + int(same[0])
        g += len(t)
    n = g
    reach = max(LINE_LAG + 1, ANCHOR_NEIGHBOURS)
    need = sorted(
        {j for k in k_of.values() for j in range(max(0, k - reach), min(n, k + ANCHOR_NEIGHBOURS + 2))}
    )
    times: dict[int, float | None] = {}
    cum: dict[int, float] = {}
    sec: dict[int, float] = {}
    want = np.asarray(need, dtype=np.int64)
    g, carry = 0, None
    for c, t in _timed(log):
        if not len(t):
            continue
        tsec = c["seconds"][t]
        x = np.maximum(tsec, 0.0)
        run = np.cumsum(x) if carry is None else np.add.accumulate(np.concatenate(([carry], x)))[1:]
        carry = float(run[-1])
        here = want[(want >= g) & (want < g + len(t))]
        if len(here):
            tt = _times(log.clock, c["line"][t], c["timestamp"][t])
            for j in here.tolist():
                v = float(tt[j - g])
                times[j] = v if v == v else None  # NaN: no time
                cum[j] = float(run[j - g])
                sec[j] = float(tsec[j - g])
        g += len(t)
    limit = max(STALL_RATIO * median_s, median_s + STALL_MIN_EXCESS_S)
    out = list(stalls)
    for w, k in k_of.items():
        out[w] = place_stall(stalls[w], k, n, times.__getitem__, cum.__getitem__, sec.__getitem__, limit)
    return out


@dataclass(slots=True)
class StreamFigures:
    stats: NodeStats
    seconds: float  # the window steps' seconds summed
    count: int  # window steps
    thinned: list[int]  # the window steps as series.thin lists them at the cap
    ascending: bool  # the window steps rise (in the order of their first records)


_FIGURES = (
    "seconds",
    "has_seconds",
    "tokens",
    "has_tokens",
    "tflops",
    "has_tflops",
    "weights",
    "has_weights",
)


def _last_train_records(log: StreamLog, c: Arrays, r: npt.NDArray[np.bool_]) -> Arrays:
    """The figures of the last train record of each window record's step (the record itself in a rising
    log): what the node's window figures read."""
    if log.index is None:
        return {k: c[k][r] for k in _FIGURES}
    rec = log.index.last_train[c["step"][r] - log.index.lo]
    return {k: log.take_any(k, rec) for k in _FIGURES}


def stream_figures(
    log: StreamLog, sv: Survey, w: StreamWindow, rank: int, arrays: Path, cap: int
) -> StreamFigures:
    """The node's own window figures (rates left to the run judge, which needs every node), its window
    figures' files (``arrays``, write_window) and the window's step list bounded at ``cap``."""
    import numpy as np

    out = write_window(arrays)
    count, prev, rising = 0, None, True
    seen = log.seen()
    try:
        for _, c in log.chunks(*SPILL_COLUMNS):
            r = window_mask(log, seen, c, w.keys)
            f = _last_train_records(log, c, r)
            raw, timed = f["seconds"], f["has_seconds"]
            secs = np.where(timed, raw, 0.0) + 0.0  # no seconds: 0.0 (and -0.0 is 0.0)
            with np.errstate(invalid="ignore", over="ignore"):
                tok_v, fl_v = f["tokens"], f["tflops"]
                tok_ok = f["has_tokens"] & timed & np.isfinite(tok_v)
                fl_ok = f["has_tflops"] & timed & np.isfinite(fl_v)
                tok = np.where(tok_ok, tok_v * raw, math.nan)
                fl = np.where(fl_ok, fl_v * raw, math.nan)
            steps = c["step"][r]
            cols = {"steps": steps, "sec": secs, "tok": tok, "tok_ok": tok_ok}
            cols |= {"tw": f["weights"], "tw_ok": f["has_weights"], "fl": fl, "fl_ok": fl_ok}
            for name, v in cols.items():
                out.append(name, v)
            count += len(steps)
            if len(steps):
                rising = (
                    rising and (prev is None or int(steps[0]) > prev) and bool((np.diff(steps) > 0).all())
                )
                prev = int(steps[-1])

        def window(name: str) -> Iterator[npt.NDArray[Any]]:
            for _, c in out.chunks([name], size=spill.CHUNK):
                yield c[name]

        t = _fsum(x.tolist() for x in window("sec"))
        ok = bool(count) and t > 0
        p50 = 1000.0 * _percentile(lambda: window("sec"), count, 50) if ok else None
        idx = np.asarray(thin_indexes(count, cap), dtype=np.int64)
        thinned: list[int] = out.take("steps", idx).tolist()
    finally:
        out.close()
    logged, last = sv.train, sv.last_train
    if log.index is not None:  # train steps by number, not records
        have = np.flatnonzero(log.index.last_train >= 0)
        logged, last = len(have), (int(have[-1]) + log.index.lo if len(have) else None)
    stats = NodeStats(
        rank=rank,
        steps_logged=logged,
        last_step=last,
        window_steps=count,
        step_time_p50_ms=p50,
        step_time_mean_ms=1000.0 * t / count if ok else None,
        tokens_per_sec_per_device=None,
        tflops_per_sec_per_device=None,
    )
    return StreamFigures(stats, t, count, thinned, rising)


def _percentile(chunks: Callable[[], Iterator[npt.NDArray[np.float64]]], n: int, q: float) -> float:
    """metrics.percentile of ``n`` finite values read a chunk at a time."""
    if n == 1:
        return kth_smallest(chunks, [0])[0]
    rank = q / 100.0 * (n - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, n - 1)
    a, b = kth_smallest(chunks, [lo, hi])
    return a + (b - a) * (rank - lo)


CURVE = {"steps": "i8", "loss": "f8"}


def stream_losses(
    own: RunInputs, log: StreamLog, sv: Survey, sheet: Sheet
) -> tuple[ColumnFiles, ColumnFiles]:
    """The loss metrics of the node as the reference node: final loss, eval loss, convergence and the
    sampled loss curve's slope over every step number ascending with the loss of its last record
    (:meth:`StreamLog.by_step`); returns the sampled curve and its finite points, in scratch files."""
    import numpy as np

    put = sheet.put
    sampled = log.scratch("sampled", CURVE)
    finite_pts = log.scratch("finite", CURVE)
    if not sv.train:
        put("training.final_loss", None, "not_produced", "no step line with a loss was logged")
        put("training.loss_decreased", None, "not_produced", "no step line with a loss was logged")
    else:
        first_finite: float | None = None
        last_step, last = 0, math.nan
        for st, ls in log.by_step():
            fin = np.flatnonzero(np.isfinite(ls))
            if first_finite is None and len(fin):
                first_finite = float(ls[fin[0]])
            last_step, last = int(st[-1]), float(ls[-1])
        put_final_loss(last_step, last, first_finite, sheet)
    _convergence(own, log, sv, eval_section(own, sheet), sheet)
    if sv.train:
        lc = own.ctx.loss_curve
        every = lc.sample_every if lc.sample_every > 0 else 1
        miles = np.asarray(lc.milestone_steps, dtype=np.int64)
        lo, n = 0, log.by_step_count()
        for st, ls in log.by_step():
            keep = (st % every == 0) | np.isin(st, miles)
            if lo == 0:
                keep[0] = True  # the first and the last step are always sampled
            if lo + len(st) == n:
                keep[-1] = True
            lo += len(st)
            sampled.append("steps", st[keep])
            sampled.append("loss", ls[keep])
            fin = keep & np.isfinite(ls)
            finite_pts.append("steps", st[fin])
            finite_pts.append("loss", ls[fin])
    _curve_slope(own, sampled, sheet)
    return sampled, finite_pts


def _convergence(
    own: RunInputs, log: StreamLog, sv: Survey, final_evals: list[EvalEvent], sheet: Sheet
) -> None:
    """Steps and time to the convergence target, on the eval loss or the training loss (by step, as
    stream_losses reads it); the time is the seconds of the train steps up to it, each step once, in the
    order the steps first appear."""
    import numpy as np

    target = own.ctx.convergence.target_value
    use_eval = convergence_source(own, final_evals, sheet)
    if use_eval is None:
        return
    src = "eval loss" if use_eval else "training loss"
    hit: int | None = None
    best: float | None = None
    if use_eval:
        pairs = [(e.step, e.loss) for e in final_evals]
        hit = next((s for s, v in pairs if math.isfinite(v) and v <= target), None)
        fin = [v for _, v in pairs if math.isfinite(v)]
        best = min(fin) if fin else None
    elif sv.train:
        for st, ls in log.by_step():
            with np.errstate(invalid="ignore"):
                hits = np.flatnonzero(np.isfinite(ls) & (ls <= target))
            if len(hits):
                hit = int(st[hits[0]])
                break
        if hit is None:
            mins = [min(x) for _, ls in log.by_step() if (x := ls[np.isfinite(ls)].tolist())]
            best = min(mins) if mins else None
    if hit is None:
        text = f"best {best:.4f}" if best is not None else "no finite value"
        for k in CONVERGENCE_KEYS:
            sheet.put(k, None, "not_produced", f"{src} never reached target {target} ({text})")
        return
    sheet.put("training.steps_to_target", float(hit))

    seen = log.seen()

    def secs() -> Iterator[list[float]]:
        for _, c in log.chunks("step", "kind", *_FIGURES):
            r = log.firsts(seen, c["step"], c["kind"] == TRAIN) & (c["step"] <= hit)
            f = _last_train_records(log, c, r)
            yield (np.where(f["has_seconds"], f["seconds"], 0.0) + 0.0).tolist()

    sheet.put("training.time_to_target_seconds", _fsum(secs()))


def _curve_slope(own: RunInputs, sampled: ColumnFiles, sheet: Sheet) -> None:
    """loss.loss_curve_section's metric over the sampled points in ``sampled``."""
    import numpy as np

    n = len(sampled)
    for _, c in sampled.chunks(["steps", "loss"], size=spill.CHUNK):
        bad = np.flatnonzero(~np.isfinite(c["loss"]))
        if len(bad):
            v, s = float(c["loss"][bad[0]]), int(c["steps"][bad[0]])
            sheet.put(
                "training.loss_curve_slope", None, "non_finite", f"{nonfinite_text(v)} loss at step {s}"
            )
            return

    def lists(name: str) -> Iterator[list[Any]]:
        for c in _each(sampled, name):
            yield c[name].tolist()

    slope: float | None = None
    if n >= 2:  # loss.ols_slope's sums: the int ones exact in any grouping, the float ones in one sum
        sx = sum(sum(x) for x in lists("steps"))
        sxx = sum(sum(map(mul, x, x)) for x in lists("steps"))
        sy: float = sum(chain.from_iterable(lists("loss")))
        pairs = zip(lists("steps"), lists("loss"), strict=True)
        sxy: float = sum(chain.from_iterable(map(mul, x, y) for x, y in pairs))
        den = n * sxx - sx * sx
        slope = None if den == 0 else (n * sxy - sx * sy) / den
    if slope is None:
        reason = f"{n} sampled loss point(s); a slope needs 2 or more distinct steps"
        sheet.put("training.loss_curve_slope", None, "not_produced", reason)
    else:
        sheet.put("training.loss_curve_slope", slope)


def bounded_points(files: ColumnFiles, cap: int) -> list[tuple[int, float]]:
    """series.curve_points of the points in ``files``."""
    import numpy as np

    n = len(files)
    if n <= cap:
        idx = np.arange(n, dtype=np.int64)
    else:
        idx = np.asarray(
            decimated_from(
                n, lambda lo, hi: (files.read("loss", lo, hi), np.full(min(hi, n) - lo, -np.inf)), cap
            ),
            dtype=np.int64,
        )
    return list(zip(files.take("steps", idx).tolist(), files.take("loss", idx).tolist(), strict=True))


def stream_series(log: StreamLog, cap: int) -> list[StepEvent]:
    """digest._series of the spilled records."""
    import numpy as np

    if log.n <= cap:
        return log.events(list(range(log.n)))

    def read(lo: int, hi: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        f = log.files
        sec, has = f.read("seconds", lo, hi), f.read("has_seconds", lo, hi)
        with np.errstate(invalid="ignore"):
            return f.read("loss", lo, hi), np.where(has & np.isfinite(sec), sec, -np.inf)

    return log.events(decimated_from(log.n, read, cap))


def finite_losses(log: StreamLog) -> dict[int, float]:
    """Every finite loss by step (digest's ``losses`` when the series are bounded)."""
    import numpy as np

    out: dict[int, float] = {}
    for _, c in log.chunks("step", "loss"):
        fin = np.isfinite(c["loss"])
        out.update(zip(c["step"][fin].tolist(), c["loss"][fin].tolist(), strict=True))
    return out


__all__ = [
    "WINDOW_COLUMNS",
    "StepIndex",
    "StreamLog",
    "bounded_points",
    "finite_losses",
    "stream_figures",
    "stream_losses",
    "stream_series",
    "stream_window",
    "survey",
    "write_window",
]
