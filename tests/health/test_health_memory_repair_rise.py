"""Rising remapped rows or retired pages are a live warning naming node and GPU; a failed row remap is
fatal and a pending repair a warning, from the first sample (the recorded ``nvidia-smi -q`` output of an
H100, replayed with raised counters or flags: a test double for GPU hardware this machine lacks)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cvs_tui.core.events import GpuTelemetryEvent, Severity
from cvs_tui.core.health.nvidia_smi import nvidia_q_rows, nvidia_row_sample, parse_nvidia_smi_q
from cvs_tui.core.health.telemetry import TelemetrySampler
from cvs_tui.core.runner.health_watch import NodeMonitor, ecc_rises, memory_repair_flags, memory_repair_rises
from cvs_tui.core.runner.nodes.local import LocalTransport

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


def _flags(failure: str = "No", pending: str = "No") -> str:
    """The H100 recording with its Remapped Rows flags set, as the driver prints them."""
    text = H100.read_text()
    text = text.replace(
        "Remapping Failure Occurred        : No", f"Remapping Failure Occurred        : {failure}"
    )
    return text.replace(
        "        Pending                           : No",
        f"        Pending                           : {pending}",
    )


def _event(text: str, at: float) -> GpuTelemetryEvent:
    return GpuTelemetryEvent(2, "n2", "nvidia-smi", tuple(parse_nvidia_smi_q(text)), at)


def test_a_failed_row_remap_is_fatal_from_the_first_sample_and_said_once() -> None:
    """A GPU whose remapping failed before the suite started (no kernel line of it is read now) fails
    its node at the first sample; the flag staying up says nothing new."""
    n = NodeMonitor(2, "n2", "plain")
    first = _event(_flags(failure="Yes"), 10.0)
    found = memory_repair_flags(n, first)
    assert [(f.signature, f.severity, f.detail, f.node) for f in found] == [
        ("row_remap_failure", Severity.FATAL, "GPU 7", 2)
    ]
    assert found[0].line == (
        "nvidia-smi: node 2 GPU 7: a row remapping has failed "
        "(NVIDIA's RMA flag: its memory cannot be repaired)"
    )
    n.last = first.samples
    assert memory_repair_flags(n, _event(_flags(failure="Yes"), 15.0)) == []


@pytest.mark.parametrize("old_driver", [False, True])
def test_a_pending_repair_is_a_warning_when_it_comes_up(old_driver: bool) -> None:
    """Ampere and later: ``Remapped Rows / Pending``; before (pages retired, not rows remapped): ``Retired
    Pages / Pending`` as drivers of 2017-2019 printed it."""
    n = NodeMonitor(2, "n2", "plain")
    clean = _event(_flags(), 10.0)
    assert memory_repair_flags(n, clean) == []
    n.last = clean.samples
    if old_driver:
        text = H100.read_text().replace(
            "        Pending Page Blacklist            : N/A",
            "        Pending                           : Yes",
        )
    else:
        text = _flags(pending="Yes")
    found = memory_repair_flags(n, _event(text, 15.0))
    assert [(f.signature, f.severity, f.detail) for f in found] == [
        ("memory_repair_pending", Severity.WARNING, "GPU 7")
    ]
    assert "pending until the GPU is reset" in found[0].line


async def test_the_nvidia_smi_stand_in_answers_the_flags_through_query_gpu(tmp_path: Path) -> None:
    """The sampler asks ``--query-gpu=...,remapped_rows.failure`` of the stand-in, which answers from its
    recording (here with the failure flag written in), as nvidia-smi itself does."""
    tools = tmp_path / "smi"
    shutil.copytree(H100.parent, tools)
    (tools / "nvidia-smi-q.txt").write_text(_flags(failure="Yes"))
    s = TelemetrySampler(LocalTransport(), node=0, extra_path=(str(tools),), tool="nvidia-smi")
    (g,) = (await s.sample()).samples
    assert (g.gpu, g.remap_failed, g.repair_pending) == (7, True, False)
