"""The metrics of what the run learned: final loss, eval loss, convergence and the loss curve's slope.

The rules the node judge (``judge.column_stream``) reads a node's losses with, as if it were the run's
reference node (the first node with train steps; SPMD losses are global); each writes its metrics on the
sheet.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from cvs_tui.core.config.blocks import LossCurve, TargetMetric
from cvs_tui.core.events import EvalDialect, EvalEvent

if TYPE_CHECKING:  # the sections' shared types; metrics imports this module
    from cvs_tui.core.judge.metrics import RunInputs, Sheet


def nonfinite_text(x: float) -> str:
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def sample_loss_curve(steps: Sequence[tuple[int, float]], curve: LossCurve) -> list[tuple[int, float]]:
    """Upstream's sampling: every Nth step, milestones, first and last (sorted, deduplicated)."""
    if not steps:
        return []
    every = curve.sample_every if curve.sample_every > 0 else 1
    milestones = set(curve.milestone_steps)
    first, last = steps[0][0], steps[-1][0]
    keep = {s: v for s, v in steps if s % every == 0 or s in milestones or s in (first, last)}
    return sorted(keep.items())


def ols_slope(points: Sequence[tuple[int, float]]) -> float | None:
    n = len(points)
    if n < 2:
        return None
    sx = sum(p[0] for p in points)
    sy = sum(p[1] for p in points)
    sxx = sum(p[0] * p[0] for p in points)
    sxy = sum(p[0] * p[1] for p in points)
    den = n * sxx - sx * sx
    if den == 0:
        return None
    return (n * sxy - sx * sy) / den


def put_final_loss(last_step: int, last: float, first_finite: float | None, sheet: Sheet) -> None:
    """The final loss (the last step's) and whether it is below the first finite one. Shared by the
    judge over events, over columns and over column files."""
    put = sheet.put
    if not math.isfinite(last):
        put("training.final_loss", None, "non_finite", f"{nonfinite_text(last)} at step {last_step}")
        put("training.loss_decreased", 0.0)
    else:
        put("training.final_loss", last)
        put("training.loss_decreased", 1.0 if first_finite is not None and last < first_finite else 0.0)


def eval_section(run: RunInputs, sheet: Sheet) -> list[EvalEvent]:
    """The eval loss; returns the completed evals (running ones only when nothing else was logged)."""
    if run.ref is not None:
        evals = [e for e in run.node_events[run.ref] if isinstance(e, EvalEvent)]
    else:
        evals = [e for evs in run.node_events for e in evs if isinstance(e, EvalEvent)]
    final_evals = [e for e in evals if e.dialect is not EvalDialect.RUNNING] or evals
    if final_evals:
        ev_last = final_evals[-1]
        if math.isfinite(ev_last.loss):
            sheet.put("training.eval_loss", ev_last.loss)
        else:
            sheet.put("training.eval_loss", None, "non_finite", f"{nonfinite_text(ev_last.loss)} eval loss")
    elif run.ctx.eval_configured:
        sheet.put(
            "training.eval_loss", None, "not_produced", "eval is configured but no eval result was logged"
        )
    else:
        sheet.put("training.eval_loss", None, "feature_off", "eval not configured (eval_interval <= 0)")
    return final_evals


CONVERGENCE_KEYS = ("training.steps_to_target", "training.time_to_target_seconds")


def convergence_source(run: RunInputs, final_evals: list[EvalEvent], sheet: Sheet) -> bool | None:
    """Whether convergence is judged on the eval loss (True) or the training loss (False); None when
    it is off (its rows are then put as such). Shared by the judge over events and over columns."""
    conv = run.ctx.convergence
    if conv.target_value <= 0:
        for k in CONVERGENCE_KEYS:
            sheet.put(k, None, "feature_off", "convergence.target_value <= 0")
        return None
    return conv.target_metric is TargetMetric.EVAL_LOSS or (
        conv.target_metric is TargetMetric.AUTO and bool(final_evals)
    )


def loss_curve_section(
    run: RunInputs, losses: list[tuple[int, float]], sheet: Sheet
) -> list[tuple[int, float]]:
    """The sampled loss curve's slope; returns the sampled points."""
    curve_pts = sample_loss_curve(losses, run.ctx.loss_curve)
    bad = [(s, v) for s, v in curve_pts if not math.isfinite(v)]
    if bad:
        reason = f"{nonfinite_text(bad[0][1])} loss at step {bad[0][0]}"
        sheet.put("training.loss_curve_slope", None, "non_finite", reason)
        return curve_pts
    slope = ols_slope(curve_pts)
    if slope is None:
        reason = f"{len(curve_pts)} sampled loss point(s); a slope needs 2 or more distinct steps"
        sheet.put("training.loss_curve_slope", None, "not_produced", reason)
    else:
        sheet.put("training.loss_curve_slope", slope)
    return curve_pts


__all__ = [
    "eval_section",
    "loss_curve_section",
    "nonfinite_text",
    "ols_slope",
    "put_final_loss",
    "sample_loss_curve",
]
