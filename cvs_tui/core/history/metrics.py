"""The figures a run is checked on, and which way is better. Headline and gated metrics, read from the
run's results (the results model), never re-computed here."""

from __future__ import annotations

import math
from dataclasses import dataclass

from cvs_tui.core.history.noise import Better
from cvs_tui.core.results import RunRecord


@dataclass(frozen=True, slots=True)
class HistoryMetric:
    name: str  # the results model's metric name
    label: str
    unit: str
    better: Better
    min_change: float = 0.0  # an absolute change below this is never a verdict (a 0 s stall baseline)


CHECKED: tuple[HistoryMetric, ...] = (
    HistoryMetric("training.tokens_per_sec_per_gpu", "throughput", "tok/s/GPU", "higher"),
    HistoryMetric("training.step_time_p50_ms", "step time p50", "ms", "lower"),
    HistoryMetric("training.step_time_p95_ms", "step time p95", "ms", "lower"),
    HistoryMetric("training.goodput_pct", "goodput", "%", "higher", min_change=1.0),
    HistoryMetric("training.stall_seconds", "stall time", "s", "lower", min_change=5.0),
    HistoryMetric("training.final_loss", "final loss", "", "lower"),
    HistoryMetric("training.scaling_efficiency_pct", "scaling efficiency", "%", "higher", min_change=1.0),
)
BY_NAME = {m.name: m for m in CHECKED}
# Figures that are throughput times a constant of the run (TFLOPs per token, a peak): judged once, as
# throughput; each extra test of the same number would only add its own false alerts.
SAME_AS_THROUGHPUT = frozenset(
    {
        "training.tflops_per_sec_per_gpu",
        "training.mfu_pct",
        "training.tokens_per_sec_total",
        "training.step_time_seconds",
        "training.step_time_mean_ms",
    }
)


def values_of(run: RunRecord) -> dict[str, float]:
    """Every finite number the run's metrics hold (all are stored: a metric gated later has a past)."""
    out: dict[str, float] = {}
    for m in run.metrics:
        if m.value is not None and not isinstance(m.value, bool) and math.isfinite(m.value):
            out[m.name] = float(m.value)
    return out


def checked_metrics(run: RunRecord) -> list[HistoryMetric]:
    """The headline metrics, then each other gated metric whose threshold says which way is better
    (except those that are throughput in other units)."""
    out = list(CHECKED)
    for v in run.verdicts:
        if not v.gated or v.metric in BY_NAME or v.metric in SAME_AS_THROUGHPUT or v.unit == "bool":
            continue  # a yes/no gate has no level to drift from
        expected = v.expected.strip()
        better: Better | None = (
            "higher" if expected.startswith(">=") else "lower" if expected.startswith("<=") else None
        )
        if better is not None:
            out.append(HistoryMetric(v.metric, v.metric.removeprefix("training."), v.unit, better))
    return out


__all__ = ["BY_NAME", "CHECKED", "SAME_AS_THROUGHPUT", "HistoryMetric", "checked_metrics", "values_of"]
