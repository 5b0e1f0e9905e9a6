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

from cvs_tui.core.health.telemetry import (
    EccDelta,
    TelemetryError,
    TelemetrySampler,
    ecc_deltas,
    parse_amd_smi_metric,
    parse_nvidia_smi_csv,
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
    (g,) = parse_nvidia_smi_csv("0, 97, 7234, 15360, 68.50, 72, 1590, 5000, [N/A], 0\n")
    assert (g.util_pct, g.mem_used_mib, g.power_w, g.ecc_correctable, g.ecc_uncorrectable) == (
        97.0,
        7234.0,
        68.5,
        None,
        0,
    )
    with pytest.raises(TelemetryError, match="expected 10 fields"):
        parse_nvidia_smi_csv('Field "clocks.foo" is not a valid field to query.\n')
    with pytest.raises(TelemetryError, match="amd-smi: output is not JSON"):
        parse_amd_smi_metric("ERROR: amdgpu driver not loaded")


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
