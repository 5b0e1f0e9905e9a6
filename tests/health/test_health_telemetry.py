"""GPU telemetry: parsers on real recorded outputs, and the sampler running the stand-ins (which replace
GPU hardware; tests/fixtures/smi/README.md) through a real Transport, locally and over SSH."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from _runner_infra import infra, needs_infra, scratch_dir, ssh

from cvs_tui.core.health.nvidia_smi import (
    NVIDIA_FIELDS,
    nvidia_q_rows,
    parse_nvidia_smi_csv,
    parse_nvidia_smi_q,
)
from cvs_tui.core.health.smi_values import TelemetryError
from cvs_tui.core.health.telemetry import (
    EccDelta,
    TelemetrySampler,
    ecc_deltas,
    parse_amd_smi_metric,
    parse_rocm_smi_json,
    sampling_interval,
)
from cvs_tui.core.runner.nodes.local import LocalTransport

SMI = Path(__file__).parents[1] / "fixtures" / "smi"


def test_amd_smi_recorded_rx6600() -> None:
    (g,) = parse_amd_smi_metric((SMI / "amd-smi-metric.json").read_text())
    assert (g.gpu, g.util_pct, g.mem_used_mib, g.mem_total_mib, g.power_w) == (0, 1.0, 202.0, 8176.0, 6.0)
    assert (g.temp_c, g.gfx_clock_mhz, g.mem_clock_mhz) == (37.0, 800.0, 541.0)
    assert (g.ecc_correctable, g.ecc_uncorrectable) == (0, 0)
    # the gpu_data wrapper of newer amd-smi reads the same
    wrapped = '{"gpu_data": ' + (SMI / "amd-smi-metric.json").read_text() + "}"
    assert parse_amd_smi_metric(wrapped) == [g]


def test_rocm_smi_recorded_mi250() -> None:
    (g,) = parse_rocm_smi_json((SMI / "rocm-smi-a.json").read_text())
    assert (g.gpu, g.util_pct, g.power_w, g.temp_c, g.gfx_clock_mhz, g.mem_clock_mhz) == (
        0,
        0.0,
        89.0,
        35.0,
        800.0,
        1600.0,
    )
    assert g.mem_used_mib is None and g.ecc_correctable is None  # not in this output: None, never 0


def test_nvidia_csv_and_bad_output() -> None:
    (g,) = parse_nvidia_smi_csv("0, 97, 7234, 15360, 68.50, 72, 1590, 5000, [N/A], 0\n", NVIDIA_FIELDS[:10])
    assert (g.util_pct, g.mem_used_mib, g.power_w, g.ecc_correctable, g.ecc_uncorrectable) == (
        97.0,
        7234.0,
        68.5,
        None,
        0,
    )
    assert g.unreadable == ("ecc.errors.corrected.volatile.total",)  # said, never a silent 0
    with pytest.raises(TelemetryError, match=f"expected {len(NVIDIA_FIELDS)} fields"):
        parse_nvidia_smi_csv('Field "clocks.foo" is not a valid field to query.\n')
    with pytest.raises(TelemetryError, match="amd-smi: output is not JSON"):
        parse_amd_smi_metric("ERROR: amdgpu driver not loaded")


def test_nvidia_q_recordings_give_reasons_link_and_memory_repair() -> None:
    """Recorded ``nvidia-smi -q`` of real GPUs (tests/fixtures/smi/README.md): the clock event reasons,
    the PCIe link against its maximum, the SM clock's maximum, retired pages and remapped rows."""
    (a10,) = parse_nvidia_smi_q((SMI / "nvidia-smi-q.txt").read_text())
    assert (a10.throttled, a10.throttle_reasons, a10.gfx_clock_mhz, a10.gfx_clock_max_mhz) == (
        False,
        (),
        210.0,
        1695.0,
    )
    # idle: the link trains down to gen 1 (2.5 GT/s) of its gen 4 (16 GT/s), all 16 lanes
    assert (a10.pcie_speed_gts, a10.pcie_speed_max_gts, a10.pcie_width, a10.pcie_width_max) == (
        2.5,
        16.0,
        16,
        16,
    )
    # Ampere remaps rows instead of retiring pages: "N/A" is said as not readable, never 0
    assert (a10.remapped_rows, a10.retired_pages) == (0, None)
    assert "retired_pages.single_bit_ecc.count" in a10.unreadable
    (slow,) = parse_nvidia_smi_q((SMI / "nvidia-smi-q-a10-hw-slowdown.txt").read_text())
    assert (slow.throttled, slow.throttle_reasons) == (True, ("HW slowdown", "HW power brake slowdown"))
    (h100,) = parse_nvidia_smi_q((SMI / "nvidia-smi-q-h100.txt").read_text())
    assert (h100.gpu, h100.pcie_speed_gts, h100.pcie_speed_max_gts, h100.gfx_clock_max_mhz) == (
        7,
        32.0,
        32.0,
        1980.0,
    )
    (rtx,) = parse_nvidia_smi_q((SMI / "nvidia-smi-q-rtx2080.txt").read_text())
    assert (rtx.pcie_width, rtx.pcie_width_max, rtx.throttle_reasons) == (8, 16, ("SW power cap",))
    assert (rtx.ecc_correctable, rtx.remapped_rows) == (None, None)  # "Remapped Rows : N/A"
    assert {"ecc.errors.corrected.volatile.total", "remapped_rows.correctable"} <= set(rtx.unreadable)
    # the repair flags: "Pending : No", "Remapping Failure Occurred : No" on Ampere and Hopper; Turing
    # has no row remapper and no pending page retirement to report
    assert (a10.repair_pending, a10.remap_failed, h100.repair_pending, h100.remap_failed) == (
        False,
        False,
        False,
        False,
    )
    assert (rtx.repair_pending, rtx.remap_failed) == (None, None)
    assert {"retired_pages.pending", "remapped_rows.pending", "remapped_rows.failure"} <= set(rtx.unreadable)
    # the section's name before driver 535, as `nvidia-smi -q | grep -A8 'Clocks Throttle'` printed it
    excerpt = "GPU 00000000:00:00.0\n" + (SMI / "nvidia-smi-q-throttle-reasons.txt").read_text()
    (row,) = nvidia_q_rows(excerpt)
    assert row["clocks_throttle_reasons.hw_thermal_slowdown"] == "Not Active"
    assert row["index"] == "[N/A]"
    with pytest.raises(TelemetryError, match="no GPU index"):
        parse_nvidia_smi_q(excerpt)
    with pytest.raises(TelemetryError, match="no GPU section"):
        parse_nvidia_smi_q("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")


def test_nvidia_csv_reads_both_reason_names_the_bitmask_and_says_what_it_could_not_read() -> None:
    fields = (
        "index",
        "clocks.sm",
        "clocks_throttle_reasons.sw_power_cap",
        "clocks_throttle_reasons.sw_thermal_slowdown",
        "pcie.link.gen.current",
        "pcie.link.width.current",
        "remapped_rows.correctable",
    )
    (old,) = parse_nvidia_smi_csv("0, 1410, Not Active, Active, 3, 8, [Not Supported]\n", fields)
    assert (old.throttled, old.throttle_reasons, old.pcie_speed_gts, old.pcie_width) == (
        True,
        ("SW thermal slowdown",),
        8.0,
        8,
    )
    assert old.remapped_rows is None and old.unreadable == ("remapped_rows.correctable",)
    # ``active`` is the NVML bitmask: 0x1 idle is no slowdown, 0x40 HW thermal slowdown is
    mask = ("index", "clocks_event_reasons.active")
    assert parse_nvidia_smi_csv("0, 0x0000000000000001\n", mask)[0].throttled is False
    (hot,) = parse_nvidia_smi_csv("0, 0x0000000000000041\n", mask)
    assert hot.throttle_reasons == ("HW thermal slowdown",)
    (none,) = parse_nvidia_smi_csv("0, [N/A], [N/A], [N/A], [N/A], [N/A], [N/A]\n", fields)
    assert (none.throttled, none.throttle_reasons, none.pcie_width, none.gfx_clock_mhz) == (None,) * 4
    assert set(none.unreadable) == set(fields[1:])


def test_interval_and_ecc_delta() -> None:
    assert sampling_interval("cpu", 2.0) is None
    assert sampling_interval("gpu") == 5.0 and sampling_interval("gpu", 1.5) == 1.5
    with pytest.raises(ValueError, match=r"health\.telemetry_interval"):
        sampling_interval("gpu", 0)
    (g,) = parse_amd_smi_metric((SMI / "amd-smi-metric.json").read_text())
    later = dataclasses.replace(g, ecc_correctable=3, ecc_uncorrectable=1)
    assert ecc_deltas([g], [later]) == [EccDelta(0, 3, 1)]


def _standins(dest: Path, only: str, ecc_step: str | None = None) -> Path:
    """A private copy of the stand-ins with just one tool on PATH (the others would shadow it)."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in SMI.iterdir():
        if f.is_file() and (f.name == only or not os.access(f, os.X_OK)):
            shutil.copy2(f, dest / f.name)
    if ecc_step is not None:
        (dest / "ecc_step").write_text(ecc_step)
    return dest


@pytest.mark.parametrize("tool", ["amd-smi", "rocm-smi", "nvidia-smi"])
async def test_local_sampler_runs_each_standin(tmp_path: Path, tool: str) -> None:
    d = _standins(tmp_path / tool, tool)
    s = TelemetrySampler(LocalTransport(), node=0, extra_path=(str(d),), interval=0.01)
    ev = await s.sample()
    assert ev.tool == tool and len(ev.samples) == 1 and ev.samples[0].gpu == 0
    assert ev.samples[0].util_pct is not None and ev.samples[0].temp_c is not None


async def test_nvidia_sampler_asks_an_older_driver_again(tmp_path: Path) -> None:
    """A driver that does not know ``clocks_event_reasons.*`` (before 535) or ``remapped_rows.*``
    refuses the whole query: the sampler asks under the old names, then without the unknown field, and
    each sample says which fields it could not read."""
    d = _standins(tmp_path / "old", "nvidia-smi")
    (d / "unknown_fields").write_text("clocks_event_reasons.\nremapped_rows.\n")
    s = TelemetrySampler(LocalTransport(), node=0, extra_path=(str(d),), tool="nvidia-smi")
    (g,) = (await s.sample()).samples
    assert (g.throttled, g.throttle_reasons, g.pcie_width, g.pcie_speed_max_gts) == (False, (), 16, 16.0)
    assert g.remapped_rows is None
    assert {"remapped_rows.correctable", "remapped_rows.uncorrectable"} <= set(g.unreadable)
    assert all(not f.startswith("clocks_event_reasons.") for f in s.nvidia_fields)
    assert (g.repair_pending, g.remap_failed) == (None, None)  # and this A10 says N/A to retired pages
    assert "remapped_rows.failure" in g.refused
    (again,) = (await s.sample()).samples  # remembered: one query from now on
    assert again == g
    (d / "unknown_fields").write_text("index\n")
    s = TelemetrySampler(LocalTransport(), node=0, extra_path=(str(d),), tool="nvidia-smi")
    with pytest.raises(TelemetryError, match=r'nvidia-smi exited 2: Field "index"'):
        await s.sample()


async def test_sampler_interval_and_missing_tool(tmp_path: Path) -> None:
    d = _standins(tmp_path / "n", "nvidia-smi")
    s = TelemetrySampler(LocalTransport(), node=0, extra_path=(str(d),), interval=0.05)
    got = []
    async for ev in s.samples():
        got.append(ev)
        if len(got) == 3:
            s.stop()
    assert [type(e).__name__ for e in got] == ["GpuTelemetryEvent"] * 3
    assert got[2].at - got[0].at >= 0.09  # paced by the interval
    none = TelemetrySampler(LocalTransport(), node=0, extra_path=(str(tmp_path / "empty"),))
    if shutil.which("amd-smi") or shutil.which("rocm-smi") or shutil.which("nvidia-smi"):
        pytest.skip("this machine has a real GPU tool on PATH")
    with pytest.raises(TelemetryError, match="no GPU telemetry tool"):
        await none.sample()


@pytest.mark.slow
@pytest.mark.infra
@needs_infra[2]
async def test_ssh_sampler_ecc_rises_between_run_start_and_end() -> None:
    i = infra()
    remote = Path(scratch_dir("smi"))
    _standins(remote, "amd-smi", ecc_step="2 1")
    subprocess.run(["chown", "-R", i.user, str(remote)], check=True)  # the stand-in counts its calls there
    t = ssh()
    try:
        s = TelemetrySampler(t, node=1, extra_path=(str(remote),))
        assert await s.detect() == "amd-smi"
        start = await s.sample()
        await s.sample()
        end = await s.sample()
        assert start.host == t.name and end.samples[0].mem_total_mib == 8176.0
        (d,) = ecc_deltas(start.samples, end.samples)
        assert (d.correctable, d.uncorrectable, d.rose) == (4, 2, True)
    finally:
        await t.close()
        shutil.rmtree(remote, ignore_errors=True)
