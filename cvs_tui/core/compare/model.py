"""Compare's data model: the verdict words, the thresholds, and the plain report the terminal, HTML and
JSON views render (nothing here imports a UI library)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Verdict = Literal["IMPROVED", "REGRESSED", "NO CHANGE", "INCONCLUSIVE", "NOT COMPARABLE"]
IMPROVED: Verdict = "IMPROVED"
REGRESSED: Verdict = "REGRESSED"
NO_CHANGE: Verdict = "NO CHANGE"
INCONCLUSIVE: Verdict = "INCONCLUSIVE"
NOT_COMPARABLE: Verdict = "NOT COMPARABLE"

DEFAULT_THRESHOLD_PCT = 2.0
# Fewest clean steady-state steps per run for a performance claim (analysis accepts fewer for a smoke
# run's metrics; a comparison needs enough steps for its band to mean something).
COMPARE_MIN_STEPS = 20
# Fewest runs per side for a run-to-run claim when repetitions are given.
MIN_REPETITIONS = 3
# A window step longer than this many times the window median, with no logged event to explain it, is an
# isolated stall (a GC pause, a slow filesystem) and is left out...
STALL_FACTOR = 5.0
# ...as long as such steps are rare; more of them are a pattern, i.e. part of the performance.
STALL_MAX_FRACTION = 0.05
LOSS_RTOL = 0.01
LOSS_ATOL = 1e-6


@dataclass(slots=True)
class FingerprintRow:
    field: str
    category: str  # toolchain | hardware | workload | schedule | info
    base: str
    candidate: str
    differs: bool
    unknown: bool  # recorded on one side only, or on neither
    message: str = ""  # what differs, in words (empty when nothing does)


@dataclass(slots=True)
class MetricDelta:
    metric: str  # stable id
    label: str
    unit: str
    better: Literal["lower", "higher"]
    base: float | None
    candidate: float | None
    delta: float | None
    delta_pct: float | None
    band_lo_pct: float | None  # noise band of the Δ, in % of the base value
    band_hi_pct: float | None
    method: str
    verdict: Verdict
    reason: str = ""
    base_runs: list[float] = field(default_factory=list)  # per-run values (repetitions)
    candidate_runs: list[float] = field(default_factory=list)
    base_cv_pct: float | None = None  # run-to-run spread
    candidate_cv_pct: float | None = None
    contradicted_by: str = ""  # a robust row points the other way: never the headline change
    # --within-run: how far the figure drifts inside each side's own run (stats.drift_pct)
    base_drift_pct: float | None = None
    candidate_drift_pct: float | None = None


@dataclass(slots=True)
class LossCheck:
    shared_steps: int
    atol: float
    rtol: float
    tolerance_note: str
    first_diverging_step: int | None
    base_at_divergence: float | None
    candidate_at_divergence: float | None
    max_abs_diff: float | None
    verdict: Verdict
    reason: str


@dataclass(slots=True)
class ExcludedSteps:
    side: Literal["base", "candidate"]
    run: str
    clean_steps: int
    excluded: list[tuple[int, str]]


@dataclass(slots=True)
class RunComparison:
    key: str
    verdict: Verdict
    comparable: bool
    banner: list[str]
    fingerprint: list[FingerprintRow]
    metrics: list[MetricDelta]
    loss: LossCheck
    excluded: list[ExcludedSteps]
    notes: list[str]
    base_runs: int
    candidate_runs: int
    # "the same speed (...)" when the median step time and every rate are within the practical threshold:
    # said even where the environments differ, as a fact about the two runs, not a verdict
    speed: str = ""


@dataclass(slots=True)
class CompareReport:
    base: list[str]
    candidate: list[str]
    threshold_pct: float
    seed: int
    resamples: int
    min_steps: int
    within_run: bool
    runs: list[RunComparison]
    only_base: list[str]
    only_candidate: list[str]
    same_run: bool = False  # both sides hold the same results (a run compared with itself)

    @property
    def regressed(self) -> bool:
        return any(m.verdict == REGRESSED for r in self.runs for m in r.metrics)

    @property
    def verdict(self) -> Verdict:
        return worst([r.verdict for r in self.runs]) if self.runs else INCONCLUSIVE

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["schema"] = "cvs-tui-compare/1"
        d["verdict"] = self.verdict
        d["regressed"] = self.regressed
        return _finite(d)


def _finite(x: Any) -> Any:
    """JSON has no NaN: non-finite floats become null."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    return x


_ORDER: dict[str, int] = {REGRESSED: 0, INCONCLUSIVE: 1, IMPROVED: 2, NO_CHANGE: 3, NOT_COMPARABLE: 4}


def biggest_change(rc: RunComparison) -> MetricDelta | None:
    """The judged metric whose Δ% is largest in size (None when no metric has a Δ%); a row a robust row
    contradicts is never it."""
    rows = [
        m
        for m in rc.metrics
        if m.delta_pct is not None and math.isfinite(m.delta_pct) and not m.contradicted_by
    ]
    return max(rows, key=lambda m: abs(m.delta_pct or 0.0), default=None)


def headline_reason(rc: RunComparison) -> str:
    """Why the run got its verdict, in one phrase: the rows that decided it, or the first doubt."""
    if not rc.comparable:
        why = rc.banner[0] if rc.banner else "the environment fingerprints differ"
        return f"{why}; {rc.speed}" if rc.speed else why
    if rc.verdict in (REGRESSED, IMPROVED):
        names = [m.label for m in rc.metrics if m.verdict == rc.verdict]
        return f"{', '.join(names)} {rc.verdict.lower()}"
    if rc.verdict == INCONCLUSIVE:
        first = next((m for m in rc.metrics if m.verdict == INCONCLUSIVE and m.reason), None)
        return first.reason if first else rc.loss.reason
    return "every difference inside the noise band or below the practical threshold"


def worst(vs: Sequence[Verdict]) -> Verdict:
    """The run's headline: a regression first, then doubt, then a gain; NOT COMPARABLE rows alone count
    only when nothing else was judged."""
    return min(vs, key=lambda v: _ORDER[v]) if vs else INCONCLUSIVE


__all__ = [
    "COMPARE_MIN_STEPS",
    "DEFAULT_THRESHOLD_PCT",
    "CompareReport",
    "ExcludedSteps",
    "FingerprintRow",
    "LossCheck",
    "MetricDelta",
    "RunComparison",
    "Verdict",
    "biggest_change",
    "headline_reason",
    "worst",
]
