"""The loss rows of a comparison: do the two sides' loss curves agree step by step (within the
print-precision tolerance of ``stats.loss_atol`` and the judge's loss-agreement rule), and the final-loss
row."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from cvs_tui.core.compare import stats as cs
from cvs_tui.core.compare.model import (
    IMPROVED,
    INCONCLUSIVE,
    LOSS_ATOL,
    LOSS_RTOL,
    NO_CHANGE,
    NOT_COMPARABLE,
    REGRESSED,
    LossCheck,
    MetricDelta,
)
from cvs_tui.core.compare.samples import RunSamples
from cvs_tui.core.judge.checkpoint import loss_agreement
from cvs_tui.core.judge.records import finite


def _side_losses(runs: Sequence[RunSamples]) -> dict[int, float]:
    """Per-step loss of a side: its one run's, or the per-step median over its repetitions."""
    steps = set.intersection(*(set(r.losses) for r in runs)) if runs else set()
    return {s: statistics.median([r.losses[s] for r in runs]) for s in sorted(steps)}


def loss_check(
    base: Sequence[RunSamples], cand: Sequence[RunSamples], *, comparable: bool, reason: str = ""
) -> tuple[LossCheck, MetricDelta]:
    """Per-step loss alignment and the final-loss row."""
    lb, lc = _side_losses(base), _side_losses(cand)
    shared = sorted(set(lb) & set(lc))
    atol, note = cs.loss_atol(
        [v for v in lb.values() if math.isfinite(v)], [v for v in lc.values() if math.isfinite(v)], LOSS_ATOL
    )
    first = next((s for s in shared if not loss_agreement(lb[s], lc[s], atol, LOSS_RTOL)), None)
    diffs = [abs(lc[s] - lb[s]) for s in shared if math.isfinite(lb[s]) and math.isfinite(lc[s])]
    check = LossCheck(
        shared_steps=len(shared),
        atol=atol,
        rtol=LOSS_RTOL,
        tolerance_note=note,
        first_diverging_step=first,
        base_at_divergence=finite(lb[first]) if first is not None else None,
        candidate_at_divergence=finite(lc[first]) if first is not None else None,
        max_abs_diff=max(diffs) if diffs else None,
        verdict=NO_CHANGE,
        reason="",
    )
    last = shared[-1] if shared else None
    vb, vc = (lb[last], lc[last]) if last is not None else (math.nan, math.nan)
    row = MetricDelta(
        "final_loss",
        "final loss",
        "loss",
        "lower",
        finite(vb),
        finite(vc),
        None,
        None,
        None,
        None,
        f"|b − a| ≤ {atol:g} + {LOSS_RTOL:g}·|a| at the last shared step ({last})",
        NO_CHANGE,
    )
    if row.base is not None and row.candidate is not None:
        row.delta = row.candidate - row.base
        row.delta_pct = cs.pct_of(row.delta, row.base)
        tol = atol + LOSS_RTOL * abs(row.base)
        row.band_lo_pct, row.band_hi_pct = cs.pct_of(-tol, abs(row.base)), cs.pct_of(tol, abs(row.base))
    if not comparable or reason:
        why = reason or "the environment fingerprints differ"
        check.verdict, check.reason = NOT_COMPARABLE, why
        row.verdict, row.reason = NOT_COMPARABLE, why
        return check, row
    if not shared:
        check.verdict = row.verdict = INCONCLUSIVE
        check.reason = row.reason = "no step logged a loss on both sides"
        return check, row
    if first is None:
        check.reason = f"all {len(shared)} shared steps within tolerance ({note})"
        row.reason = "within tolerance"
        return check, row
    worse = not (lc[first] < lb[first])  # NaN on the candidate side is worse
    check.verdict = REGRESSED if worse else IMPROVED
    check.reason = (
        f"first diverging step {first}: base {lb[first]:.4g}, candidate {lc[first]:.4g} ({note}); "
        f"{sum(1 for s in shared if not loss_agreement(lb[s], lc[s], atol, LOSS_RTOL))} of "
        f"{len(shared)} shared steps outside tolerance"
    )
    if loss_agreement(vb, vc, atol, LOSS_RTOL):
        row.reason = f"within tolerance at the end, but the curves diverged at step {first}"
    else:
        row.verdict = REGRESSED if not (vc < vb) else IMPROVED
        row.reason = f"curves diverge from step {first}"
    return check, row


__all__ = ["loss_check"]
