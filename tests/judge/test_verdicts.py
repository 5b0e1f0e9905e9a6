"""Verdict rules: every threshold kind, RECORD/N/A semantics, and gated metrics never failing open."""

from __future__ import annotations

import pytest

from cvs_tui.core.config.blocks import ThresholdKind, ThresholdSpec
from cvs_tui.core.judge.definitions import MetricValue
from cvs_tui.core.judge.verdicts import FAIL, NA, PASS, RECORD, format_expected, judge, judge_all


def mv(
    value: float | None, absent: str | None = None, reason: str = "", name: str = "training.x"
) -> MetricValue:
    return MetricValue(name, value, "u", absent, reason)  # type: ignore[arg-type]


def spec(kind: str, value: float, **kw: object) -> ThresholdSpec:
    return ThresholdSpec(kind=ThresholdKind(kind), value=value, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kind", "value", "actual", "status"),
    [
        ("min", 10, 10, PASS),
        ("min", 10, 9.99, FAIL),
        ("min_tok_s", 1000, 1200, PASS),
        ("min_tok_s", 1000, 999, FAIL),
        ("max", 15, 15, PASS),
        ("max", 15, 15.01, FAIL),
        ("max_ms", 3000, 2999, PASS),
        ("max_ms", 3000, 3001, FAIL),
        ("info", 3, 1e9, RECORD),
    ],
)
def test_kinds(kind: str, value: float, actual: float, status: str) -> None:
    v = judge(mv(actual), spec(kind, value), enforce=True)
    assert v.status == status
    if status == FAIL:
        assert "training.x: actual" in v.message


def test_within_and_negative_value() -> None:
    s = spec("within", 100, tolerance_pct=10)
    assert judge(mv(90), s, enforce=True).status == PASS
    assert judge(mv(110), s, enforce=True).status == PASS
    assert judge(mv(111), s, enforce=True).status == FAIL
    assert format_expected(s) == "100 +/-10%"


def test_min_ratio_uses_the_runs_other_metric_and_fails_on_missing_reference() -> None:
    s = spec("min_ratio", 0.5, reference="training.b")
    assert judge(mv(6), s, enforce=True, actuals={"training.b": 10}).status == PASS
    assert judge(mv(4), s, enforce=True, actuals={"training.b": 10}).status == FAIL
    v = judge(mv(4), s, enforce=True, actuals={"training.b": 0})
    assert v.status == FAIL and "missing or 0" in v.message
    assert judge(mv(4), s, enforce=True, actuals={}).status == FAIL


def test_record_when_not_gated_and_would_fail_note() -> None:
    assert judge(mv(1), None, enforce=True).status == RECORD
    v = judge(mv(1), spec("min", 10), enforce=False)
    assert v.status == RECORD and "would fail" in v.message and not v.gated


def test_na_only_when_feature_off() -> None:
    off = mv(None, "feature_off", "eval not configured")
    # gated, it cannot pass unchecked (audit 2 #9); ungated it is N/A
    assert judge(off, spec("max", 5), enforce=True).status == FAIL
    assert judge(off, spec("max", 5), enforce=False).status == NA
    assert judge(off, None, enforce=True).status == NA


@pytest.mark.parametrize("absent", ["inconclusive", "not_produced", "non_finite"])
def test_gated_metric_without_value_fails_with_the_reason(absent: str) -> None:
    v = judge(
        mv(None, absent, "nan at step 9" if absent == "non_finite" else "only 2 clean steps"),
        spec("max", 15),
        enforce=True,
    )
    assert v.status == FAIL
    assert ("nan at step 9" in v.message) or ("only 2 clean steps" in v.message)


def test_ungated_missing_value_is_recorded_with_reason() -> None:
    v = judge(mv(None, "inconclusive", "only 2 clean steps"), spec("min", 1), enforce=False)
    assert v.status == RECORD and "only 2 clean steps" in v.message


def test_expected_strings() -> None:
    assert format_expected(None) == "-"
    assert format_expected(spec("info", 80)) == "info (80)"
    assert format_expected(spec("min", 260.5)) == ">= 260.5000"
    assert format_expected(spec("max_ms", 3000)) == "<= 3000 ms"
    assert format_expected(spec("min_ratio", 0.9, reference="training.y")) == ">= 0.9000 x training.y"


def test_judge_all_extra_specs_and_unknown_cell_metric() -> None:
    metrics = {"training.a": mv(5, name="training.a"), "training.b": mv(2, name="training.b")}
    cell = {"training.a": spec("min", 4), "training.zzz": spec("min", 1)}
    extra = {"training.b": spec("max", 1)}
    out = {v.metric: v for v in judge_all(metrics, cell, enforce=False, extra_specs=extra)}
    assert out["training.a"].status == RECORD  # enforce off
    assert out["training.b"].status == FAIL  # block gates apply regardless
    assert out["training.zzz"].status == RECORD
    out = {v.metric: v for v in judge_all(metrics, cell, enforce=True)}
    assert out["training.a"].status == PASS
    assert out["training.zzz"].status == FAIL and "not produced" in out["training.zzz"].message
