"""Audit 2 #9: a gated metric that cannot be produced fails ("gated but not produced: <reason>"), and the
config check knows every metric the suite records."""

from __future__ import annotations

from pathlib import Path

import pytest
from _analysis_samples import FIXTURES, write_config

from cvs_tui.cli.main import main
from cvs_tui.core.config.blocks import ThresholdKind, ThresholdSpec
from cvs_tui.core.config.thresholds import KNOWN_METRIC_NAMES
from cvs_tui.core.judge.definitions import METRIC_DEFINITIONS, MetricValue
from cvs_tui.core.judge.verdicts import FAIL, NA, judge
from cvs_tui.core.results import load_results

KEY = "BS=2,PRECISION=BF16,SL=128"


def test_gated_feature_off_metric_fails_and_ungated_stays_na() -> None:
    m = MetricValue("training.mfu_pct", None, "%", "feature_off", "peak TFLOP/s unknown for gpu_name 'cpu'")
    spec = ThresholdSpec(kind=ThresholdKind.MIN, value=40)
    v = judge(m, spec, enforce=True)
    assert v.status == FAIL and v.gated and "gated but not produced: peak TFLOP/s unknown" in v.message
    assert judge(m, spec, enforce=False).status == NA
    assert judge(m, None, enforce=True).status == NA


def test_known_metrics_are_the_recorded_ones() -> None:
    recorded = {n for n in METRIC_DEFINITIONS if n.startswith("training.")}
    assert set(KNOWN_METRIC_NAMES) == recorded


def test_audit_reproduction_fails_with_three_reasons(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cell = {
        "training.mfu_pct": {"kind": "min", "value": 40},
        "training.eval_loss": {"kind": "max", "value": 3},
        "training.scaling_efficiency_pct": {"kind": "min", "value": 90},
    }
    cfg = write_config(tmp_path, runs=[KEY], thresholds={KEY: cell})
    assert main(["config", "validate", str(cfg)]) == 0
    assert "not a metric the suite records" not in capsys.readouterr().err
    out = tmp_path / "out"
    rc = main(
        ["analyze", str(cfg), "--logs", str(FIXTURES / "single_20steps.log"), "--out", str(out), "--no-ui"]
    )
    assert rc == 1
    run = load_results(out / "results.json").runs[0]
    bad = {v.metric for v in run.verdicts if v.status == FAIL and "gated but not produced" in v.message}
    assert bad == set(cell)
