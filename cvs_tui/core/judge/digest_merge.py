"""The cross-node window figures of :func:`~cvs_tui.core.judge.run.judge_run`, read a chunk at a
time, so that the process combining the nodes holds the same whatever the number of steps.

Each node's window figures are column files (``figures.write_window``, :mod:`.spill`) with its
window steps in ascending order. :func:`merge_window` walks every node's steps a block at a time and keeps
the steps clean on every node (the run's common window) with the slowest node's seconds of each, in
column files of their own. :func:`node_figures` then reads one node at a time: its own rates and the
tokens and FLOPs over the common window, added in the order metrics._perf adds them (node by node, step
by step), and :func:`put_window_perf` takes the step-time metrics from the slowest seconds (one ``sum``,
exact order statistics). Every figure is the float the judge over every event gives. The run's record
lists the common window's steps up to the series cap, else every k-th step with the count and the ranges
(:func:`window_listing`). A node whose window steps are not ascending (``NodeDigest.window_ascending``)
has its figures loaded whole instead (:func:`whole_window`), with the same result.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

from cvs_tui.core.judge import spill
from cvs_tui.core.judge.figures import WINDOW_COLUMNS
from cvs_tui.core.judge.metrics import (
    NodeStats,
    RunInputs,
    Sheet,
    perf_inconclusive,
    put_perf,
    put_perf_figures,
    window_status,
)
from cvs_tui.core.judge.series import thin, thin_indexes
from cvs_tui.core.judge.spill import ColumnFiles
from cvs_tui.core.results import step_ranges

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from cvs_tui.core.judge.node import NodeDigest

BLOCK = 1 << 16  # window steps read per node per merge round
RUN_COLUMNS = {"steps": "i8", "sec": "f8"}  # the common window: its steps and the slowest node's seconds
_TOK = ("tok", "tok_ok", "tw", "tw_ok")
_FL = ("fl", "fl_ok")

Arrays = dict[str, "npt.NDArray[np.generic]"]


@dataclass(slots=True)
class Merged:
    """The run's common window: ``files`` holds it (RUN_COLUMNS), ``ranges`` its steps as inclusive
    ranges of consecutive steps."""

    files: ColumnFiles
    count: int
    ranges: list[tuple[int, int]]


def seq_sum(start: float, xs: npt.NDArray[np.float64]) -> float:
    """``start`` plus each of ``xs`` in order, as a Python loop of ``+=`` adds them (add.accumulate is
    sequential, unlike sum)."""
    import numpy as np

    if not len(xs):
        return start
    return float(np.add.accumulate(np.concatenate(([start], xs)))[-1])


def _extend_ranges(ranges: list[tuple[int, int]], steps: npt.NDArray[np.int64]) -> None:
    import numpy as np

    cut = np.flatnonzero(np.diff(steps) != 1) + 1
    starts = steps[np.concatenate(([0], cut))].tolist()
    ends = steps[np.concatenate((cut - 1, [len(steps) - 1]))].tolist()
    pairs = list(zip(starts, ends, strict=True))
    if ranges and pairs[0][0] == ranges[-1][1] + 1:
        ranges[-1] = (ranges[-1][0], pairs.pop(0)[1])
    ranges.extend(pairs)


def merge_window(nodes: Sequence[ColumnFiles], out: ColumnFiles) -> Merged:
    """The steps in every one of ``nodes`` (the nodes that logged steps, in rank order; steps ascending),
    ascending, each with the slowest node's seconds (max() over the nodes in rank order: a later node wins
    only when strictly greater), appended to ``out``. A round takes from each node the steps up to the
    least of the last steps its block holds, so at least one block is used up every round."""
    import numpy as np

    def steps(f: ColumnFiles, at: int) -> npt.NDArray[np.int64]:
        return f.read("steps", at, at + BLOCK).astype(np.int64, copy=False)

    def secs(j: int, cut: int, idx: npt.NDArray[np.intp]) -> npt.NDArray[np.float64]:
        return nodes[j].read("sec", pos[j], pos[j] + cut).astype(np.float64, copy=False)[idx]

    pos = [0] * len(nodes)
    bufs = [steps(f, 0) for f in nodes]
    count, ranges = 0, list[tuple[int, int]]()
    while bufs and all(len(b) for b in bufs):
        bound = min(b[-1] for b in bufs)
        cuts = [int(np.searchsorted(b, bound, "right")) for b in bufs]
        common = bufs[0][: cuts[0]]
        idx = [np.arange(cuts[0])]
        for j in range(1, len(nodes)):
            common, ia, ib = np.intersect1d(
                common, bufs[j][: cuts[j]], assume_unique=True, return_indices=True
            )
            idx = [x[ia] for x in idx] + [ib]
        if len(common):
            slowest = secs(0, cuts[0], idx[0])
            for j in range(1, len(nodes)):
                sec = secs(j, cuts[j], idx[j])
                slowest = np.where(sec > slowest, sec, slowest)
            out.append("steps", common)
            out.append("sec", slowest)
            count += len(common)
            _extend_ranges(ranges, common)
        for j, f in enumerate(nodes):
            pos[j] += cuts[j]
            bufs[j] = bufs[j][cuts[j] :]
            if not len(bufs[j]):
                bufs[j] = steps(f, pos[j])
    return Merged(out, count, ranges)


def _tokens(
    c: Arrays, devices: int | None, planned: float | None
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """Each step's tokens per device (metrics.tokens_per_device over arrays)."""
    import numpy as np

    return _tokens_of(
        c["tok"].astype(np.float64, copy=False),
        c["tok_ok"].astype(np.bool_, copy=False),
        c["tw"].astype(np.float64, copy=False),
        c["tw_ok"].astype(np.bool_, copy=False),
        devices,
        planned,
    )


def _tokens_of(
    tok: npt.NDArray[np.float64],
    tok_ok: npt.NDArray[np.bool_],
    tw: npt.NDArray[np.float64],
    tw_ok: npt.NDArray[np.bool_],
    devices: int | None,
    planned: float | None,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """Tokens/s/device x seconds, else total_weights / devices, else the plan's tokens per step."""
    import numpy as np

    by_weights = tw_ok & bool(devices)
    ok = tok_ok | by_weights | (planned is not None)
    rest = np.where(by_weights, tw / (devices or 1), math.nan if planned is None else planned)
    return np.where(tok_ok, tok, rest), ok


def _flops(c: Arrays, tflops_step: float | None) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """Each step's TFLOPs per device (logged, else the run's TFLOPs per step)."""
    import numpy as np

    given = c["fl_ok"].astype(np.bool_, copy=False)
    ok = given | (tflops_step is not None)
    fl = c["fl"].astype(np.float64, copy=False)
    return np.where(given, fl, math.nan if tflops_step is None else tflops_step), ok


def _own_sum(files: ColumnFiles, tokens: bool, run: RunInputs) -> float | None:
    """The node's tokens (else FLOPs) over its own window, one ``sum`` over the chunks' values; None
    when a step carried none."""
    every = True

    def values() -> Iterator[list[float]]:
        nonlocal every
        for _, c in files.chunks(_TOK if tokens else _FL, size=spill.CHUNK):
            if tokens:
                v, ok = _tokens(c, run.global_devices, run.tokens_per_step)
            else:
                v, ok = _flops(c, run.tflops_per_step)
            every = every and bool(ok.all())
            yield v[ok].tolist()

    total: float = sum(chain.from_iterable(values()))
    return total if every else None


def _common_chunks(files: ColumnFiles, window: ColumnFiles) -> Iterator[Arrays]:
    """The node's figures at the common window's steps (all of them are the node's), a chunk at a time."""
    import numpy as np

    rest, at = np.zeros(0, np.int64), 0
    for _, c in files.chunks(["steps", *_TOK, *_FL], size=spill.CHUNK):
        steps = c["steps"]
        take = []
        while True:
            if not len(rest):
                rest = window.read("steps", at, at + spill.CHUNK).astype(np.int64, copy=False)
                at += len(rest)
                if not len(rest):
                    break
            k = int(np.searchsorted(rest, steps[-1], "right"))
            take.append(rest[:k])
            rest = rest[k:]
            if len(rest):
                break
        want = np.concatenate(take) if take else np.zeros(0, np.int64)
        pos = np.searchsorted(steps, want)
        yield {k: v[pos] for k, v in c.items()}


def node_figures(
    digests: Sequence[NodeDigest], run: RunInputs, window: ColumnFiles | None
) -> tuple[list[NodeStats], float | None, float | None]:
    """One node's files at a time: each node's stats with its rates, and over the common ``window`` (None:
    inconclusive) the tokens and FLOPs summed as metrics._perf sums them (None: some step carried none)."""
    tokens, flops, tokens_ok, flops_ok = 0.0, 0.0, True, True
    stats: list[NodeStats] = []
    for i, d in enumerate(digests):
        files = ColumnFiles(d.arrays, WINDOW_COLUMNS)
        try:
            tk_rate = fl_rate = None
            if d.stats.step_time_mean_ms is not None:
                tk, fl = _own_sum(files, True, run), _own_sum(files, False, run)
                tk_rate = None if tk is None else tk / d.window_seconds
                fl_rate = None if fl is None else fl / d.window_seconds
            stats.append(
                dataclasses.replace(
                    d.stats, tokens_per_sec_per_device=tk_rate, tflops_per_sec_per_device=fl_rate
                )
            )
            if window is None or i not in run.with_steps:
                continue
            for c in _common_chunks(files, window):
                tk_v, tk_ok = _tokens(c, run.global_devices, run.tokens_per_step)
                fl_v, fl_ok = _flops(c, run.tflops_per_step)
                tokens_ok = tokens_ok and bool(tk_ok.all())
                flops_ok = flops_ok and bool(fl_ok.all())
                tokens = seq_sum(tokens, tk_v[tk_ok])
                flops = seq_sum(flops, fl_v[fl_ok])
        finally:
            files.close()
    if window is None:
        return stats, None, None
    return stats, tokens if tokens_ok else None, flops if flops_ok else None


def put_window_perf(
    merged: Merged, tokens: float | None, flops: float | None, run: RunInputs, sheet: Sheet
) -> tuple[float | None, float | None]:
    """metrics.put_perf over the slowest seconds in ``merged``, read a chunk at a time."""
    import numpy as np

    def secs() -> Iterator[npt.NDArray[np.float64]]:
        for _, c in merged.files.chunks(["sec"], size=spill.CHUNK):
            yield c["sec"].astype(np.float64, copy=False)

    total: float = sum(chain.from_iterable(s.tolist() for s in secs()))
    return put_perf_figures(merged.count, total, secs, tokens, flops, run, sheet)


def window_listing(merged: Merged, cap: int) -> tuple[list[int], int | None, list[tuple[int, int]] | None]:
    """What the run's record lists of the common window: every step up to ``cap``; above it every k-th
    step and the last (series.thin) with the count and the ranges."""
    import numpy as np

    if merged.count <= cap:
        return merged.files.load("steps").tolist(), None, None
    idx = np.array(thin_indexes(merged.count, cap), dtype=np.int64)
    return merged.files.take("steps", idx).tolist(), merged.count, merged.ranges


class _Figures(NamedTuple):
    """A node's window steps (its own window order) and their figures, as figures.write_window
    wrote them."""

    steps: npt.NDArray[np.int64]
    sec: npt.NDArray[np.float64]
    tok: npt.NDArray[np.float64]
    tok_ok: npt.NDArray[np.bool_]
    tw: npt.NDArray[np.float64]
    tw_ok: npt.NDArray[np.bool_]
    fl: npt.NDArray[np.float64]
    fl_ok: npt.NDArray[np.bool_]


def _load(path: Path) -> _Figures:
    import numpy as np

    files = ColumnFiles(path, WINDOW_COLUMNS)
    try:
        loaded = {k: files.load(k) for k in WINDOW_COLUMNS}
    finally:
        files.close()
    return _Figures(
        loaded["steps"].astype(np.int64, copy=False),
        loaded["sec"].astype(np.float64, copy=False),
        loaded["tok"].astype(np.float64, copy=False),
        loaded["tok_ok"].astype(np.bool_, copy=False),
        loaded["tw"].astype(np.float64, copy=False),
        loaded["tw_ok"].astype(np.bool_, copy=False),
        loaded["fl"].astype(np.float64, copy=False),
        loaded["fl_ok"].astype(np.bool_, copy=False),
    )


def _common_steps(digests: Sequence[NodeDigest], with_steps: list[int]) -> npt.NDArray[np.int64] | None:
    """Pass 1: the steps clean on every node that logged steps, sorted (None: no such node)."""
    import numpy as np

    common: npt.NDArray[np.int64] | None = None
    for i in with_steps:
        steps = _load(digests[i].arrays).steps
        common = np.unique(steps) if common is None else np.intersect1d(common, steps, assume_unique=True)
    return common


def _window_figures(
    digests: Sequence[NodeDigest], run: RunInputs, window: npt.NDArray[np.int64] | None
) -> tuple[list[NodeStats], list[float] | None, float | None, float | None]:
    """Pass 2, one node's arrays at a time: each node's stats with its rates, and over ``window`` (None:
    inconclusive) the slowest node's seconds per step and the tokens and FLOPs summed in the order
    metrics._perf sums them (None: some step carried none)."""
    import numpy as np

    devices, tflops_step = run.global_devices, run.tflops_per_step
    slowest: npt.NDArray[np.float64] | None = None
    tokens, flops, tokens_ok, flops_ok = 0.0, 0.0, True, True
    stats: list[NodeStats] = []
    for i, d in enumerate(digests):
        a = _load(d.arrays)
        tok, tok_ok = _tokens_of(a.tok, a.tok_ok, a.tw, a.tw_ok, devices, run.tokens_per_step)
        fl_ok = a.fl_ok | (tflops_step is not None)
        fl = np.where(a.fl_ok, a.fl, math.nan if tflops_step is None else tflops_step)
        ok = d.stats.step_time_mean_ms is not None
        tk_rate = sum(tok[tok_ok].tolist()) / d.window_seconds if ok and tok_ok.all() else None
        fl_rate = sum(fl[fl_ok].tolist()) / d.window_seconds if ok and fl_ok.all() else None
        stats.append(
            dataclasses.replace(d.stats, tokens_per_sec_per_device=tk_rate, tflops_per_sec_per_device=fl_rate)
        )
        if window is None or i not in run.with_steps:
            continue
        order = np.argsort(a.steps, kind="stable")
        pos = order[np.searchsorted(a.steps, window, sorter=order)]
        sec = a.sec[pos]
        # max() over the nodes in rank order: a later node wins only when strictly greater
        slowest = sec if slowest is None else np.where(sec > slowest, sec, slowest)
        tokens_ok = tokens_ok and bool(tok_ok[pos].all())
        flops_ok = flops_ok and bool(fl_ok[pos].all())
        tokens = seq_sum(tokens, tok[pos][tok_ok[pos]])
        flops = seq_sum(flops, fl[pos][fl_ok[pos]])
    if slowest is None:
        return stats, None, None, None
    return stats, slowest.tolist(), tokens if tokens_ok else None, flops if flops_ok else None


_Listing = tuple[list[int], int | None, list[tuple[int, int]] | None]  # window_steps, count, ranges
# node stats with rates, the window's listing, tokens/s total, TFLOP/s per GPU, window status and reason
_Window = tuple[list[NodeStats], _Listing, float | None, float | None, Literal["ok", "inconclusive"], str]


def window_figures(digests: Sequence[NodeDigest], inputs: RunInputs, cap: int, sheet: Sheet) -> _Window:
    """The run's window, each node's stats with its rates and the perf metrics (put on ``sheet``), the
    window's steps listed up to ``cap`` (window_listing): merged a block at a time when every node's
    window steps are ascending, else from every node's window steps loaded whole."""
    if not all(digests[i].window_ascending for i in inputs.with_steps):
        return whole_window(digests, inputs, cap, sheet)
    # next to the digests' files: the same temporary folder, on the disk analyze chose for them
    folder = Path(tempfile.mkdtemp(prefix="run-", dir=digests[0].arrays.parent if digests else None))
    try:
        return merged_window(digests, inputs, folder, cap, sheet)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def merged_window(
    digests: Sequence[NodeDigest], inputs: RunInputs, folder: Path, cap: int, sheet: Sheet
) -> _Window:
    """window_figures with every node's window steps ascending, the common window in column files in
    ``folder``."""
    nodes = [ColumnFiles(digests[i].arrays, WINDOW_COLUMNS) for i in inputs.with_steps]
    out = ColumnFiles(folder, RUN_COLUMNS)
    try:
        try:
            merged = merge_window(nodes, out)
        finally:
            for f in nodes:
                f.close()
        wstatus, wreason = window_status(merged.count, inputs.with_steps, len(digests), inputs.windows, sheet)
        ok = wstatus == "ok"
        stats, tokens, flops = node_figures(digests, inputs, out if ok else None)
        if ok:
            tok_total, tflops_gpu = put_window_perf(merged, tokens, flops, inputs, sheet)
        else:
            tok_total, tflops_gpu = perf_inconclusive(wreason, sheet)
        return stats, window_listing(merged, cap), tok_total, tflops_gpu, wstatus, wreason
    finally:
        out.close()


def whole_window(digests: Sequence[NodeDigest], inputs: RunInputs, cap: int, sheet: Sheet) -> _Window:
    """The same with some node's window steps out of order: every node's window steps loaded whole."""
    common = _common_steps(digests, inputs.with_steps)
    window = [] if common is None else common.tolist()
    wstatus, wreason = window_status(len(window), inputs.with_steps, len(digests), inputs.windows, sheet)
    stats, slowest, tokens, flops = _window_figures(digests, inputs, common if wstatus == "ok" else None)
    if slowest is not None:
        tok_total, tflops_gpu = put_perf(slowest, tokens, flops, inputs, sheet)
    else:
        tok_total, tflops_gpu = perf_inconclusive(wreason, sheet)
    listing: _Listing = (window, None, None)
    if len(window) > cap:
        listing = (thin(window, cap), len(window), step_ranges(window))
    return stats, listing, tok_total, tflops_gpu, wstatus, wreason


__all__ = [
    "BLOCK",
    "RUN_COLUMNS",
    "Merged",
    "merge_window",
    "merged_window",
    "node_figures",
    "put_window_perf",
    "seq_sum",
    "whole_window",
    "window_figures",
    "window_listing",
]
