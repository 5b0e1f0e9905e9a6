"""Rising remapped rows or retired pages are a live warning naming node and GPU (the recorded
``nvidia-smi -q`` output of an H100, replayed with raised counters: a test double for GPU hardware
this machine lacks)."""

from __future__ import annotations

from pathlib import Path

from cvs_tui.core.events import GpuTelemetryEvent, Severity
from cvs_tui.core.health.nvidia_smi import nvidia_q_rows, nvidia_row_sample
from cvs_tui.core.runner.health_watch import NodeMonitor, ecc_rises, memory_repair_rises

H100 = Path(__file__).parents[1] / "fixtures" / "smi" / "nvidia-smi-q-h100.txt"


def _sample(at: float, **cells: str) -> GpuTelemetryEvent:
    row = {**nvidia_q_rows(H100.read_text())[0], **cells}
    return GpuTelemetryEvent(2, "n2", "nvidia-smi", (nvidia_row_sample(row),), at)


def test_a_remapped_row_rise_is_a_warning_naming_node_and_gpu() -> None:
    n = NodeMonitor(2, "n2", "plain")
    n.last = _sample(10.0).samples
    assert memory_repair_rises(n, _sample(15.0)) == []
    found = memory_repair_rises(n, _sample(15.0, **{"remapped_rows.uncorrectable": "2"}))
    assert [(f.signature, f.severity, f.detail, f.node, f.host) for f in found] == [
        ("remapped_rows_rise", Severity.WARNING, "GPU 7 +2", 2, "n2")
    ]
    assert found[0].line == "nvidia-smi: node 2 GPU 7 remapped rows 0 -> 2 (repaired at the next GPU reset)"


def test_retired_pages_the_gpu_cannot_report_raise_nothing_and_a_rise_is_found() -> None:
    n = NodeMonitor(2, "n2", "plain")
    n.last = _sample(10.0).samples  # this H100 answers retired pages [N/A]
    assert memory_repair_rises(n, _sample(15.0)) == []
    pages = {"retired_pages.single_bit_ecc.count": "1", "retired_pages.double_bit.count": "0"}
    n.last = _sample(20.0, **pages).samples
    more = {**pages, "retired_pages.double_bit.count": "1", "ecc.errors.uncorrected.volatile.total": "1"}
    got = _sample(25.0, **more)
    found = memory_repair_rises(n, got)
    assert [(f.signature, f.severity, f.detail) for f in found] == [
        ("retired_pages_rise", Severity.WARNING, "GPU 7 +1")
    ]
    # the uncorrectable error behind a double-bit retirement is the fatal finding, as before
    assert [(f.signature, f.severity) for f in ecc_rises(n, got)] == [
        ("ecc_uncorrectable_rise", Severity.FATAL)
    ]
