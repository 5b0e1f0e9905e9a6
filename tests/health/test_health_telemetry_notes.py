"""Telemetry notes from a node's latest sample: throttle reasons, a PCIe link below its maximum, and
the fields not readable, grouped. Inputs are recorded ``nvidia-smi -q`` output (tests/fixtures/smi/),
a test double for GPU hardware this machine lacks."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cvs_tui.core.health.nvidia_smi import parse_nvidia_smi_q
from cvs_tui.core.health.telemetry_notes import grouped_fields, telemetry_notes

SMI = Path(__file__).parents[1] / "fixtures" / "smi"
WHY = "(GPU says N/A or Not Supported to nvidia-smi)"


def test_rtx2080_notes_throttle_narrow_link_and_unreadable_families() -> None:
    samples = parse_nvidia_smi_q((SMI / "nvidia-smi-q-rtx2080.txt").read_text())
    assert telemetry_notes("node 2", "nvidia-smi", samples) == [
        "node 2 GPU 1: clocks throttled (SW power cap)",
        "node 2 GPU 1: PCIe link 2.5 GT/s x8, below its maximum 8 GT/s x16",
        f"not readable on node 2: ecc.*, retired_pages.*, remapped_rows.* {WHY}",
    ]


def test_an_idle_gpu_at_a_lower_link_speed_is_no_note_a_busy_one_is() -> None:
    (s,) = parse_nvidia_smi_q((SMI / "nvidia-smi-q-rtx2080.txt").read_text())
    full_width = dataclasses.replace(s, pcie_width=16, throttle_reasons=(), unreadable=())
    assert telemetry_notes("node 0", "nvidia-smi", [full_width]) == []
    busy = dataclasses.replace(full_width, util_pct=97.0)
    assert telemetry_notes("node 0", "nvidia-smi", [busy]) == [
        "node 0 GPU 1: PCIe link 2.5 GT/s x16, below its maximum 8 GT/s x16"
    ]


def test_fields_missing_on_some_gpus_name_them_and_a_partial_family_stays_whole() -> None:
    (s,) = parse_nvidia_smi_q((SMI / "nvidia-smi-q-h100.txt").read_text())
    a = dataclasses.replace(s, gpu=0, unreadable=("pcie.link.gen.max",))
    b = dataclasses.replace(s, gpu=1, unreadable=())
    assert telemetry_notes("node 3", "nvidia-smi", [a, b]) == [
        f"not readable on node 3 GPU 0: pcie.link.gen.max {WHY}"
    ]
    assert grouped_fields(["clocks_throttle_reasons.hw_slowdown", "remapped_rows.correctable"]) == [
        "clocks_throttle_reasons.hw_slowdown",
        "remapped_rows.correctable",
    ]


async def test_fields_an_older_driver_refuses_are_told_apart_from_the_gpus_answer(tmp_path: Path) -> None:
    """The nvidia-smi stand-in (tests/fixtures/smi/nvidia-smi, replaying recorded output) playing a
    driver that does not know ``remapped_rows.*``: the sampler asks without them, and the note says the
    driver, not the GPU, is why."""
    import shutil

    from cvs_tui.core.health.telemetry import TelemetrySampler
    from cvs_tui.core.runner.nodes.local import LocalTransport

    d = tmp_path / "bin"
    d.mkdir()
    for f in SMI.iterdir():
        if f.is_file() and f.name not in ("amd-smi", "rocm-smi"):
            shutil.copy2(f, d / f.name)
    (d / "unknown_fields").write_text("remapped_rows.\n")
    s = TelemetrySampler(LocalTransport(), node=4, extra_path=(str(d),), tool="nvidia-smi")
    samples = (await s.sample()).samples
    assert samples[0].refused == (
        "remapped_rows.correctable",
        "remapped_rows.uncorrectable",
        "remapped_rows.pending",
        "remapped_rows.failure",
    )
    assert [n for n in telemetry_notes("node 4", "nvidia-smi", samples) if "not readable" in n] == [
        f"not readable on node 4: retired_pages.* {WHY}",  # the recorded H100 answers these [N/A]
        "not readable on node 4: remapped_rows.* (nvidia-smi of this driver does not know them)",
    ]
