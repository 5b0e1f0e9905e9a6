"""A rising ECC total is a finding at the next telemetry sample (the recorded amd-smi output, replayed
with raised counters: a test double for GPU hardware this machine lacks)."""

from __future__ import annotations

import json
from pathlib import Path

from cvs_tui.core.events import GpuTelemetryEvent, Severity
from cvs_tui.core.health.telemetry import parse_amd_smi_metric
from cvs_tui.core.runner.health_watch import NodeMonitor, ecc_rises

RECORDED = json.loads((Path(__file__).parents[1] / "fixtures" / "smi" / "amd-smi-metric.json").read_text())


def _sample(ce: int, ue: int, at: float) -> GpuTelemetryEvent:
    data = json.loads(json.dumps(RECORDED))
    data[0]["ecc"]["total_correctable_count"] = ce
    data[0]["ecc"]["total_uncorrectable_count"] = ue
    return GpuTelemetryEvent(1, "n1", "amd-smi", tuple(parse_amd_smi_metric(json.dumps(data))), at)


def test_an_uncorrectable_rise_is_fatal_and_a_correctable_one_a_warning() -> None:
    n = NodeMonitor(1, "n1", "plain")
    n.last = _sample(0, 0, 10.0).samples
    assert ecc_rises(n, _sample(0, 0, 15.0)) == []
    found = ecc_rises(n, _sample(7, 1, 15.0))
    assert [(f.signature, f.severity, f.detail, f.wall_time) for f in found] == [
        ("ecc_uncorrectable_rise", Severity.FATAL, "GPU 0 +1", 15.0),
        ("ecc_correctable_rise", Severity.WARNING, "GPU 0 +7", 15.0),
    ]
    assert found[0].line == "amd-smi: GPU 0 uncorrectable ECC errors 0 -> 1" and found[0].host == "n1"
