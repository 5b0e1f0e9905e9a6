"""One node's own figures from its step columns (``judge.columns``), for its digest: its train steps by
number, its window's step-time figures and the arrays the cross-node metrics read, and the loss metrics
as if it were the reference node. The same numbers as metrics._node_stats and the sections of
:mod:`cvs_tui.core.judge.loss` compute from the events (sums in the same order, on the same floats),
with numpy where those loop over every step."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cvs_tui.core.events import EvalEvent
from cvs_tui.core.judge.columns import TRAIN, StepColumns, exact_sum
from cvs_tui.core.judge.loss import (
    CONVERGENCE_KEYS,
    convergence_source,
    eval_section,
    loss_curve_section,
    put_final_loss,
)
from cvs_tui.core.judge.metrics import NodeStats, RunInputs, Sheet, percentile
from cvs_tui.core.judge.spill import ColumnFiles

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


@dataclass(slots=True)
class TrainSteps:
    """The node's train steps by number (metrics.per_step_events): ``steps`` ascending, ``last`` the
    record of the last train record of each, ``first`` the position of each number's first train record
    among the train records (the order of per_step_events' dict)."""

    steps: npt.NDArray[np.int64]
    last: npt.NDArray[np.int64]
    first: npt.NDArray[np.int64]

    def seconds(self, cols: StepColumns, which: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """``ps[s].seconds or 0.0`` of the records ``which``."""
        import numpy as np

        return np.where(cols.has_seconds[which], cols.seconds[which], 0.0) + 0.0  # -0.0 or 0.0 is 0.0


def _last_of_each(step: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(the step numbers ascending, the position of the last of each in ``step``)."""
    import numpy as np

    uniq, r = np.unique(step[::-1], return_index=True)
    return uniq, len(step) - 1 - r


def train_steps(cols: StepColumns) -> TrainSteps:
    import numpy as np

    tr = np.flatnonzero(cols.kind == TRAIN)
    uniq, last = _last_of_each(cols.step[tr])
    _, first = np.unique(cols.step[tr], return_index=True)
    return TrainSteps(uniq, tr[last], first)


def _percentile(xs: npt.NDArray[np.float64], q: float) -> float:
    """metrics.percentile, sorting with numpy (NaN sorts differently: then the list way)."""
    import numpy as np

    if np.isnan(xs).any():
        return percentile(xs.tolist(), q)
    s = np.sort(xs)
    if len(s) == 1:
        return float(s[0])
    rank = q / 100.0 * (len(s) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(s) - 1)
    a, b = float(s[lo]), float(s[hi])
    return a + (b - a) * (rank - lo)


# a node's window figures as finalize_digests reads them: one file each (judge.spill), window order
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


def node_stats(
    rank: int, cols: StepColumns, ps: TrainSteps, window: npt.NDArray[np.int64], arrays: Path
) -> tuple[NodeStats, float]:
    """The node's own window figures (as metrics._node_stats, rates left to finalize_digests) and the
    sum of its window steps' seconds; writes the window steps' figures to the folder ``arrays``
    (write_window)."""
    import numpy as np

    rec = ps.last[np.searchsorted(ps.steps, window)] if len(window) else np.zeros(0, np.int64)
    secs = ps.seconds(cols, rec)
    t = exact_sum(secs)
    ok = bool(len(window)) and t > 0
    stats = NodeStats(
        rank=rank,
        steps_logged=len(ps.steps),
        last_step=int(ps.steps[-1]) if len(ps.steps) else None,
        window_steps=len(window),
        step_time_p50_ms=1000.0 * _percentile(secs, 50) if ok else None,
        step_time_mean_ms=1000.0 * t / len(window) if ok else None,
        tokens_per_sec_per_device=None,
        tflops_per_sec_per_device=None,
    )
    # metrics.tokens_per_device and tflops_per_device without what needs every node
    raw, timed = cols.seconds[rec], cols.has_seconds[rec]
    with np.errstate(invalid="ignore", over="ignore"):
        tok_v, fl_v = cols.tokens[rec], cols.tflops[rec]
        tok_ok = cols.has_tokens[rec] & timed & np.isfinite(tok_v)
        fl_ok = cols.has_tflops[rec] & timed & np.isfinite(fl_v)
        tok = np.where(tok_ok, tok_v * raw, math.nan)
        fl = np.where(fl_ok, fl_v * raw, math.nan)
    write_window(
        arrays,
        {
            "steps": window.astype(np.int64),
            "sec": secs,
            "tok": tok,
            "tok_ok": tok_ok,
            "tw": cols.weights[rec],
            "tw_ok": cols.has_weights[rec],
            "fl": fl,
            "fl_ok": fl_ok,
        },
    ).close()
    return stats, t


def all_losses(cols: StepColumns, ps: TrainSteps) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """loss.loss_section's series of the node as the reference node: every step record's step number
    (ascending) and the loss of its last record; empty when the node logged no train step."""
    import numpy as np

    if not len(ps.steps):
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    uniq, last = _last_of_each(cols.step)
    return uniq, cols.loss[last]


def loss_metrics(own: RunInputs, cols: StepColumns, ps: TrainSteps, sheet: Sheet) -> list[tuple[int, float]]:
    """loss_section, eval_section, convergence_section and loss_curve_section of the node as the reference
    node (``own``: its RunInputs, its events without step lines); returns the sampled loss curve."""
    import numpy as np

    steps, losses = all_losses(cols, ps)
    put = sheet.put
    if not len(steps):
        put("training.final_loss", None, "not_produced", "no step line with a loss was logged")
        put("training.loss_decreased", None, "not_produced", "no step line with a loss was logged")
    else:
        fin = np.flatnonzero(np.isfinite(losses))
        first_finite = float(losses[fin[0]]) if len(fin) else None
        put_final_loss(int(steps[-1]), float(losses[-1]), first_finite, sheet)
    _convergence(own, cols, ps, steps, losses, eval_section(own, sheet), sheet)
    lc = own.ctx.loss_curve
    points: list[tuple[int, float]] = []
    if len(steps):
        keep = (steps % (lc.sample_every if lc.sample_every > 0 else 1) == 0) | np.isin(
            steps, np.asarray(lc.milestone_steps, dtype=np.int64)
        )
        keep[0] = keep[-1] = True
        points = list(zip(steps[keep].tolist(), losses[keep].tolist(), strict=True))
    # the sampling keeps what it sampled once, so the section's own sampling gives the same points
    return loss_curve_section(own, points, sheet)


def _convergence(
    own: RunInputs,
    cols: StepColumns,
    ps: TrainSteps,
    steps: npt.NDArray[np.int64],
    losses: npt.NDArray[np.float64],
    final_evals: list[EvalEvent],
    sheet: Sheet,
) -> None:
    """loss.convergence_section over the columns."""
    import numpy as np

    conv = own.ctx.convergence
    use_eval = convergence_source(own, final_evals, sheet)
    if use_eval is None:
        return
    if use_eval:
        steps = np.asarray([e.step for e in final_evals], dtype=np.int64)
        losses = np.asarray([e.loss for e in final_evals], dtype=np.float64)
    finite = np.isfinite(losses)
    with np.errstate(invalid="ignore"):
        hits = np.flatnonzero(finite & (losses <= conv.target_value))
    src = "eval loss" if use_eval else "training loss"
    if not len(hits):
        best = f"best {min(losses[finite].tolist()):.4f}" if finite.any() else "no finite value"
        for k in CONVERGENCE_KEYS:
            sheet.put(k, None, "not_produced", f"{src} never reached target {conv.target_value} ({best})")
        return
    hit = int(steps[hits[0]])
    sheet.put("training.steps_to_target", float(hit))
    order = np.argsort(ps.first, kind="stable")  # per_step_events' dict order
    secs = ps.seconds(cols, ps.last[order])
    sheet.put("training.time_to_target_seconds", exact_sum(secs[ps.steps[order] <= hit]))


__all__ = [
    "WINDOW_COLUMNS",
    "TrainSteps",
    "all_losses",
    "loss_metrics",
    "node_stats",
    "train_steps",
    "write_window",
]
