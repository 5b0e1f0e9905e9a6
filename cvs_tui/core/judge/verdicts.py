"""Metric verdicts against a threshold cell: PASS, FAIL, RECORD or N/A.

Order of decision for one metric:
1. N/A when the feature that produces the metric is off (no eval configured, no scaling baseline, no
   convergence target, unknown GPU peak, no checkpointing) and the metric is not gated. A gated metric
   that cannot be produced is FAIL "gated but not produced: <reason>": a gate never passes unchecked.
2. RECORD when the metric is not gated: no spec, kind ``info``, or enforce_thresholds false.
3. A gated metric without a value (inconclusive window, not produced, NaN/Inf) is FAIL with the reason:
   a gate never fails open.
4. Otherwise the spec's kind decides PASS or FAIL.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from cvs_tui.core.config.blocks import ThresholdKind, ThresholdSpec
from cvs_tui.core.judge.definitions import MetricValue
from cvs_tui.core.judge.format import format_number

PASS: Final = "PASS"
FAIL: Final = "FAIL"
RECORD = "RECORD"
NA = "N/A"
STATUSES = (PASS, FAIL, RECORD, NA)


@dataclass(frozen=True, slots=True)
class Verdict:
    metric: str
    status: str
    expected: str
    actual: float | None
    actual_text: str
    unit: str
    message: str
    gated: bool


def _num(v: float) -> str:
    return format_number(v)


def format_expected(spec: ThresholdSpec | None) -> str:
    if spec is None:
        return "-"
    v = _num(spec.value)
    match spec.kind:
        case ThresholdKind.INFO:
            return f"info ({v})"
        case ThresholdKind.MIN | ThresholdKind.MIN_TOK_S:
            return f">= {v}"
        case ThresholdKind.MAX:
            return f"<= {v}"
        case ThresholdKind.MAX_MS:
            return f"<= {v} ms"
        case ThresholdKind.WITHIN:
            return f"{v} +/-{_num(spec.tolerance_pct or 0.0)}%"
        case ThresholdKind.MIN_RATIO:
            return f">= {v} x {spec.reference}"
    return "-"  # pragma: no cover - the enum is closed


def check(name: str, actual: float, spec: ThresholdSpec, actuals: Mapping[str, float | None]) -> str | None:
    """The violation message, or None when ``actual`` satisfies ``spec``."""
    a, t = actual, spec.value
    match spec.kind:
        case ThresholdKind.MIN:
            return None if a >= t else f"{name}: actual {_num(a)} < min {_num(t)}"
        case ThresholdKind.MIN_TOK_S:
            return None if a >= t else f"{name}: actual {_num(a)} tok/s < min {_num(t)} tok/s"
        case ThresholdKind.MAX:
            return None if a <= t else f"{name}: actual {_num(a)} > max {_num(t)}"
        case ThresholdKind.MAX_MS:
            return None if a <= t else f"{name}: actual {_num(a)} ms > max {_num(t)} ms"
        case ThresholdKind.WITHIN:
            tol = (spec.tolerance_pct or 0.0) / 100.0
            lo, hi = t * (1 - tol), t * (1 + tol)
            if lo <= a <= hi:
                return None
            return f"{name}: actual {_num(a)} outside {_num(t)} +/-{_num(spec.tolerance_pct or 0.0)}%"
        case ThresholdKind.MIN_RATIO:
            ref_name = spec.reference or ""
            ref = actuals.get(ref_name)
            if ref is None or ref == 0 or not math.isfinite(ref):
                return f"{name}: reference {ref_name} is missing or 0, ratio cannot be checked"
            ratio = a / ref
            return None if ratio >= t else f"{name}: ratio {_num(ratio)} to {ref_name} < min {_num(t)}"
        case ThresholdKind.INFO:
            return None
    return f"{name}: unknown threshold kind {spec.kind!r}"  # pragma: no cover


def judge(
    metric: MetricValue,
    spec: ThresholdSpec | None,
    *,
    enforce: bool,
    actuals: Mapping[str, float | None] | None = None,
) -> Verdict:
    """The verdict of one metric (see the module docstring for the order of decisions)."""
    gated = enforce and spec is not None and spec.kind is not ThresholdKind.INFO
    expected = format_expected(spec)

    def v(status: str, message: str) -> Verdict:
        return Verdict(metric.name, status, expected, metric.value, metric.text, metric.unit, message, gated)

    if metric.absent == "feature_off":
        if gated:
            return v(FAIL, f"{metric.name}: gated but not produced: {metric.reason or 'feature off'}")
        return v(NA, metric.reason)
    if not gated:
        msg = metric.reason if metric.absent else ""
        if spec is None:
            why = "no threshold for this metric"
        elif spec.kind is ThresholdKind.INFO:
            why = "kind info"
        else:
            why = "enforce_thresholds is false"
        if metric.value is not None and spec is not None and spec.kind is not ThresholdKind.INFO:
            violation = check(metric.name, metric.value, spec, actuals or {})
            if violation:
                why += f"; would fail: {violation}"
        return v(RECORD, f"{msg}; recorded ({why})" if msg else f"recorded ({why})")
    assert spec is not None
    if metric.value is None or not math.isfinite(metric.value):
        reason = metric.reason or "the run produced no value"
        if metric.absent == "non_finite":
            reason = f"value is {reason}"
        return v(FAIL, f"{metric.name}: {reason}")
    violation = check(metric.name, metric.value, spec, actuals or {})
    return v(FAIL, violation) if violation else v(PASS, "")


def judge_all(
    metrics: Mapping[str, MetricValue],
    cell: Mapping[str, ThresholdSpec] | None,
    *,
    enforce: bool,
    extra_specs: Mapping[str, ThresholdSpec] | None = None,
) -> list[Verdict]:
    """Verdicts for every metric, in the metrics' order. ``extra_specs`` gate metrics outside the threshold
    file (loss_curve, checkpoint I/O) and apply even when enforce_thresholds is false."""
    cell = cell or {}
    extra = extra_specs or {}
    actuals = {k: mv.value for k, mv in metrics.items()}
    out: list[Verdict] = []
    for name, mv in metrics.items():
        if name in extra:
            out.append(judge(mv, extra[name], enforce=True, actuals=actuals))
        else:
            out.append(judge(mv, cell.get(name), enforce=enforce, actuals=actuals))
    # A spec naming a metric this tool does not produce is shown, never silently ignored.
    for name, spec in cell.items():
        if name not in metrics:
            unknown = MetricValue(name, None, "", "not_produced", "metric is not produced by cvs-tui")
            out.append(judge(unknown, spec, enforce=enforce, actuals=actuals))
    return out
