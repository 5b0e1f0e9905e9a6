"""The guards that keep one pair of runs on a shared machine from reading noise as a verdict: a change
within either run's own drift, and a tail that moved alone, are INCONCLUSIVE with a ``noise band:`` reason
(docs/compare.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from cvs_tui.core.compare import stats as cs
from cvs_tui.core.compare.model import IMPROVED, INCONCLUSIVE, MIN_REPETITIONS, REGRESSED, MetricDelta
from cvs_tui.core.compare.samples import StepSample
from cvs_tui.core.judge.format import format_pct


def within_drift(
    row: MetricDelta,
    stat: Callable[[Sequence[StepSample]], float],
    label: str,
    base: Sequence[StepSample],
    cand: Sequence[StepSample],
) -> None:
    """A within-run claim stands only when the two runs differ by more than either run differs from
    itself: the step-to-step band cannot see load that comes and goes on a shared machine, but the
    figure's drift between quarters of one run does. Within that drift the row is INCONCLUSIVE."""
    row.base_drift_pct = cs.drift_pct(base, stat)
    row.candidate_drift_pct = cs.drift_pct(cand, stat)
    if row.base is None or row.candidate is None or row.base <= 0 or row.candidate <= 0:
        return
    apart = (max(row.candidate / row.base, row.base / row.candidate) - 1.0) * 100.0
    drifts = [d for d in (row.base_drift_pct, row.candidate_drift_pct) if d is not None]
    if drifts and apart > max(drifts):
        return
    own = (
        f"up to {_whole_pct(row.base_drift_pct)} (base) and {_whole_pct(row.candidate_drift_pct)} "
        "(candidate) between quarters of one run"
        if drifts
        else "the windows are too short to measure it"
    )
    row.verdict = INCONCLUSIVE
    row.reason = (
        f"noise band: {label} {format_pct(row.delta_pct)} is within the runs' own drift ({own}); "
        f"a loaded machine? repeat each side {MIN_REPETITIONS}+ times"
    )


def _whole_pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f} %"


TAIL_ROW = "step_time_p95_ms"


def tail_alone(rows: Sequence[MetricDelta], robust_row: str) -> None:
    """With one run per side judged within the runs, the p95 step time is the run's two or three slowest
    steps: on a shared machine those are where outside load lands, and nothing within one run tells it
    from the code. A p95 change the median step time does not make in the same direction decides
    nothing there (INCONCLUSIVE); with repetitions the run-to-run band judges the tail on its own."""
    p95 = next((m for m in rows if m.metric == TAIL_ROW), None)
    p50 = next((m for m in rows if m.metric == robust_row), None)
    if p95 is None or p50 is None or p95.verdict not in (IMPROVED, REGRESSED) or p50.verdict == p95.verdict:
        return
    p95.verdict = INCONCLUSIVE
    p95.reason = (
        f"noise band: the tail moved ({format_pct(p95.delta_pct)}) while {p50.label} did not "
        f"({p50.verdict.lower()}, {format_pct(p50.delta_pct)}); one run per side, the p95 is its slowest few "
        f"steps, where outside load lands; repeat each side {MIN_REPETITIONS}+ times"
    )
