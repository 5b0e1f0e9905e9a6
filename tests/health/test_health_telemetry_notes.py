"""Telemetry notes from a node's latest sample: throttle reasons, a PCIe link below its maximum, and
the fields not readable, grouped. Inputs are recorded ``nvidia-smi -q`` output (tests/fixtures/smi/),
a test double for GPU hardware this machine lacks."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cvs_tui.core.health.nvidia_smi import parse_nvidia_smi_q
from cvs_tui.core.health.telemetry_notes import grouped_fields, telemetry_notes

SMI = Path(__file__).parents[1] / "fixtures" / "smi"
WHY = "(nvidia-smi answered N/A or Not Supported, or its driver does not know them)"


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
