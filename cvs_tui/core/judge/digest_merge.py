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
(:func:`window_listing`). A node whose window steps are not ascending (``NodeDigest.window_ascending``:
its log's step numbers went back) is merged from an ascending copy of its window files
(:func:`ascending_copy`), so every run goes through the one merge.
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
from typing import TYPE_CHECKING, Literal

from cvs_tui.core.judge import spill
from cvs_tui.core.judge.figures import WINDOW_COLUMNS
from cvs_tui.core.judge.metrics import (
    NodeStats,
    RunInputs,
    Sheet,
    perf_inconclusive,
    put_perf_figures,
    window_status,
)
from cvs_tui.core.judge.series import thin_indexes
from cvs_tui.core.judge.spill import ColumnFiles

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
    """Each step's tokens per device (metrics.tokens_per_device over arrays): tokens/s/device x seconds,
    else total_weights / devices, else the plan's tokens per step."""
    import numpy as np

    tok = c["tok"].astype(np.float64, copy=False)
    tok_ok = c["tok_ok"].astype(np.bool_, copy=False)
    tw = c["tw"].astype(np.float64, copy=False)
    by_weights = c["tw_ok"].astype(np.bool_, copy=False) & bool(devices)
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
    digests: Sequence[NodeDigest],
    run: RunInputs,
    window: ColumnFiles | None,
    ascending: Sequence[Path] | None = None,
) -> tuple[list[NodeStats], float | None, float | None]:
    """One node's files at a time: each node's stats with its rates (over its window files in their own
    order), and over the common ``window`` (None: inconclusive) the tokens and FLOPs summed as
    metrics._perf sums them (None: some step carried none), read from each node's window files with their
    steps ascending (``ascending``; by default its own)."""
    tokens, flops, tokens_ok, flops_ok = 0.0, 0.0, True, True
    stats: list[NodeStats] = []
    for i, d in enumerate(digests):
        files = ColumnFiles(d.arrays, WINDOW_COLUMNS)
        rising = files
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
            if ascending is not None and ascending[i] != d.arrays:
                rising = ColumnFiles(ascending[i], WINDOW_COLUMNS)
            for c in _common_chunks(rising, window):
                tk_v, tk_ok = _tokens(c, run.global_devices, run.tokens_per_step)
                fl_v, fl_ok = _flops(c, run.tflops_per_step)
                tokens_ok = tokens_ok and bool(tk_ok.all())
                flops_ok = flops_ok and bool(fl_ok.all())
                tokens = seq_sum(tokens, tk_v[tk_ok])
                flops = seq_sum(flops, fl_v[fl_ok])
        finally:
            files.close()
            if rising is not files:
                rising.close()
    if window is None:
        return stats, None, None
    return stats, tokens if tokens_ok else None, flops if flops_ok else None


def put_window_perf(
    merged: Merged, tokens: float | None, flops: float | None, run: RunInputs, sheet: Sheet
) -> tuple[float | None, float | None]:
    """metrics.put_perf_figures over the slowest seconds in ``merged``, read a chunk at a time."""
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


_Listing = tuple[list[int], int | None, list[tuple[int, int]] | None]  # window_steps, count, ranges
# node stats with rates, the window's listing, tokens/s total, TFLOP/s per GPU, window status and reason
_Window = tuple[list[NodeStats], _Listing, float | None, float | None, Literal["ok", "inconclusive"], str]


def window_figures(digests: Sequence[NodeDigest], inputs: RunInputs, cap: int, sheet: Sheet) -> _Window:
    """The run's window, each node's stats with its rates and the perf metrics (put on ``sheet``), the
    window's steps listed up to ``cap`` (window_listing), merged a block at a time; a node whose window
    steps are not ascending (its log's step numbers went back) is merged from an ascending copy of its
    window files (:func:`ascending_copy`)."""
    # next to the digests' files: the same temporary folder, on the disk analyze chose for them
    folder = Path(tempfile.mkdtemp(prefix="run-", dir=digests[0].arrays.parent if digests else None))
    try:
        merged = [
            d.arrays if d.window_ascending else ascending_copy(d.arrays, folder / f"ascending{i}")
            for i, d in enumerate(digests)
        ]
        return merged_window(digests, inputs, folder, cap, sheet, merged)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def ascending_copy(src: Path, folder: Path) -> Path:
    """A copy in ``folder`` of the window files at ``src`` with their steps in ascending order. Holds the
    node's window steps and their order (16 bytes a window step, as ``judge.stream.StepIndex`` holds a
    log whose step numbers go back); the figures are copied a chunk at a time. A window step number is
    unique (a step's first record), so the order is the one a rising log would have written."""
    import numpy as np

    files = ColumnFiles(src, WINDOW_COLUMNS)
    out = ColumnFiles(folder, WINDOW_COLUMNS)
    try:
        order = np.argsort(files.load("steps"), kind="stable")
        for a in range(0, len(order), spill.CHUNK):
            part = order[a : a + spill.CHUNK]
            back = np.argsort(part, kind="stable")  # take() reads ascending record indexes
            at = part[back]
            for name in WINDOW_COLUMNS:
                values = np.empty(len(part), files.dtypes[name])
                values[back] = files.take(name, at)
                out.append(name, values)
    finally:
        files.close()
        out.close()
    return folder


def merged_window(
    digests: Sequence[NodeDigest],
    inputs: RunInputs,
    folder: Path,
    cap: int,
    sheet: Sheet,
    merged: Sequence[Path] | None = None,
) -> _Window:
    """window_figures with the common window in column files in ``folder``; ``merged``: each node's window
    files with their steps ascending (by default its own, ``NodeDigest.arrays``)."""
    ascending = list(merged) if merged is not None else [d.arrays for d in digests]
    nodes = [ColumnFiles(ascending[i], WINDOW_COLUMNS) for i in inputs.with_steps]
    out = ColumnFiles(folder / "common", RUN_COLUMNS)
    try:
        try:
            common = merge_window(nodes, out)
        finally:
            for f in nodes:
                f.close()
        wstatus, wreason = window_status(common.count, inputs.with_steps, len(digests), inputs.windows, sheet)
        ok = wstatus == "ok"
        stats, tokens, flops = node_figures(digests, inputs, out if ok else None, ascending)
        if ok:
            tok_total, tflops_gpu = put_window_perf(common, tokens, flops, inputs, sheet)
        else:
            tok_total, tflops_gpu = perf_inconclusive(wreason, sheet)
        return stats, window_listing(common, cap), tok_total, tflops_gpu, wstatus, wreason
    finally:
        out.close()


__all__ = [
    "BLOCK",
    "RUN_COLUMNS",
    "Merged",
    "ascending_copy",
    "merge_window",
    "merged_window",
    "node_figures",
    "put_window_perf",
    "seq_sum",
    "window_figures",
    "window_listing",
]
