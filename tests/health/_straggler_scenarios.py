"""Injected straggler scenarios for the cause finder: a test double replaying recorded real GPU tool
output, because this machine has no GPU.

AMD nodes: the real ``amd-smi metric --json`` recording in ``fixtures/smi`` (a Radeon RX 6600), copied
per sample with the injected change written into the copy (``power.throttle_status``, the graphics
clock, the PCIe link, the ECC totals) and read back by the real parser (:func:`parse_amd_smi_metric`).
NVIDIA nodes: the real ``nvidia-smi -q`` recording of an H100 SXM (``fixtures/smi/nvidia-smi-q-h100.txt``,
driver 560.35.03), copied per sample with the change written into its own sections (a thermal or power
clock event reason set Active, on every node "SW Power Cap" coming and going as on GPUs training at
their power limit, the SM clock, "GPU Link Info" gen 5 -> 3 or 16x -> 8x, the volatile ECC
counters or remapped rows), read by the real ``-q`` reader (:func:`nvidia_q_rows`) as the cells the
``--query-gpu`` query prints, and those cells by the real CSV parser (:func:`parse_nvidia_smi_csv`); a
third of the NVIDIA scenarios use the pre-535 section name "Clocks Throttle Reasons" and field names
``clocks_throttle_reasons.*``. Both go through the real point builder (:func:`telemetry_point`). Host
timing is ``/proc/stat`` and cgroup ``cpu.stat`` text in the kernel's own format, read by the real probe
parser; kernel findings are real recorded lines (``fixtures/health/kernel_lines.tsv``) matched by the
real signatures.

A scenario: ``nodes`` nodes train in lock-step at 0.25 s per step with 3 % lognormal jitter; one node is
degraded by 5-30 % over a window of steps by one cause, and the job (synchronous: every node's step
line carries the slowest node's time) slows with it. A clean scenario has no degradation.
"""

from __future__ import annotations

import copy
import json
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path

from cvs_tui.core.events import GpuSample, GpuTelemetryEvent
from cvs_tui.core.health.host import host_point, parse_probe
from cvs_tui.core.health.nvidia_smi import (
    NEW_REASONS,
    NVIDIA_FIELDS,
    OLD_REASONS,
    nvidia_q_rows,
    parse_nvidia_smi_csv,
)
from cvs_tui.core.health.signatures import match_message
from cvs_tui.core.health.straggler import Cause, NodeEvidence
from cvs_tui.core.health.telemetry import parse_amd_smi_metric
from cvs_tui.core.results import HostPoint, TelemetryPoint
from cvs_tui.core.runner.health_watch import telemetry_point

FIXTURES = Path(__file__).parents[1] / "fixtures"
RECORDED = json.loads((FIXTURES / "smi" / "amd-smi-metric.json").read_text())
STEP_S = 0.25
SAMPLE_S = 5.0  # telemetry and host timing interval
BASE_CLOCK = 2100.0  # MHz under load (the recording is of an idle card at 800 MHz)
NV_RECORDED = (FIXTURES / "smi" / "nvidia-smi-q-h100.txt").read_text()
NV_CLOCK = 1980.0  # MHz under load: the recorded H100's maximum SM clock (it was idle at 345 MHz)
# the nvidia-smi fields read before the clock event reasons, link and memory-repair fields were added
NV_FIELDS_BEFORE: tuple[str, ...] = NVIDIA_FIELDS[:10]
# thermal and power clock event reasons as -q names them (the sub-reasons under HW Slowdown)
NV_THROTTLES: tuple[tuple[str, ...], ...] = (
    ("SW Power Cap",),
    ("HW Slowdown", "HW Thermal Slowdown"),
    ("HW Slowdown", "HW Power Brake Slowdown"),
    ("SW Thermal Slowdown",),
)

_LINES = {
    sig: line
    for sig, sev, line, *_ in (
        ln.split("\t") for ln in (FIXTURES / "health" / "kernel_lines.tsv").read_text().splitlines()[1:]
    )
    if sev == "warning"
}


def kernel_line(signature: str) -> str:
    """A real recorded warning-level kernel line of ``signature``, checked against the signatures."""
    line = _LINES[signature]
    hit = match_message(line)
    assert hit is not None and hit.signature == signature, (signature, hit)
    return line


@dataclass
class Scenario:
    nodes: list[NodeEvidence]
    job: list[tuple[float, float]]
    slow_node: int | None
    cause: Cause | None
    slowdown: float


def _amd_smi(rng: random.Random, *, clock: float, throttled: bool, width: int, speed: float, ce: int) -> str:
    """A copy of the recorded amd-smi output with the injected values (one GPU)."""
    data = copy.deepcopy(RECORDED)
    g = data[0]
    g["clock"]["gfx_0"]["clk"]["value"] = round(clock * rng.uniform(0.99, 1.01))
    g["power"]["throttle_status"] = "THROTTLED" if throttled else "UNTHROTTLED"
    g["pcie"]["width"] = width
    g["pcie"]["speed"]["value"] = speed
    g["ecc"]["total_correctable_count"] = ce
    return json.dumps(data)


def _set(text: str, section: str, key: str, value: str) -> str:
    """``key : value`` under ``section`` of a ``-q`` recording, the column layout kept."""
    head, sep, rest = text.partition(f"\n    {section}\n")
    assert sep, section
    body_end = re.search(r"\n    \S", rest)
    body, tail = (rest[: body_end.start()], rest[body_end.start() :]) if body_end else (rest, "")
    body, n = re.subn(
        rf"^(\s+{re.escape(key)}\s+: ).*$", lambda m: m.group(1) + value, body, count=1, flags=re.M
    )
    assert n == 1, (section, key)
    return head + sep + body + tail


def _nvidia_smi(
    rng: random.Random,
    *,
    clock: float,
    reasons: tuple[str, ...],
    gen: int,
    width: int,
    ce: int,
    remapped: int,
    old_names: bool,
) -> str:
    """A copy of the recorded ``nvidia-smi -q`` output with the injected values (one H100, under load)."""
    t = NV_RECORDED
    sm = f"{round(clock * rng.uniform(0.99, 1.01))} MHz"
    t = _set(_set(t, "Clocks", "SM", sm), "Clocks", "Graphics", sm)
    t = _set(t, "Utilization", "Gpu", "100 %")
    t = _set(t, "Clocks Event Reasons", "Idle", "Not Active")  # it is training, not idle
    for reason in set(reasons):
        t = _set(t, "Clocks Event Reasons", reason, "Active")
    t = _set(t, "PCI", "Current", str(gen))  # PCIe Generation's Current comes first under PCI
    t = _set(t, "PCI", "Device Current", str(gen))
    t = re.sub(r"(Link Width\n\s+Max\s+: 16x\n\s+Current\s+: )16x", rf"\g<1>{width}x", t)
    t = _set(t, "ECC Errors", "DRAM Correctable", str(ce))  # the first one: Volatile
    t = _set(t, "Remapped Rows", "Correctable Error", str(remapped))
    if old_names:  # drivers before 535 name the section so
        t = t.replace("\n    Clocks Event Reasons\n", "\n    Clocks Throttle Reasons\n")
    return t


def nvidia_samples(text: str, fields: tuple[str, ...], old_names: bool) -> list[GpuSample]:
    """The ``-q`` copy read as the ``--query-gpu`` line nvidia-smi prints for ``fields``, then parsed."""
    if old_names:
        fields = tuple(f.replace(NEW_REASONS, OLD_REASONS) for f in fields)
    (row,) = nvidia_q_rows(text)
    return parse_nvidia_smi_csv(", ".join(row[f] for f in fields) + "\n", fields)


def _proc(steal: int, total: int, psi: float, wait_ns: int, throttled_ns: int) -> str:
    user = total - steal - 1000
    return (
        f"cpu  {user} 0 500 400 100 0 0 {steal} 0 0\n"
        f"psi some avg10={psi:.2f} avg60=1.00 avg300=1.00 total=1\n"
        f"sched 100000 {wait_ns} 10\n"
        f"cg nr_periods 10\ncg nr_throttled 1\ncg throttled_time {throttled_ns}\n"
    )


def scenario(
    rng: random.Random,
    cause: Cause | None,
    vendor: str = "amd",
    nv_fields: tuple[str, ...] = NVIDIA_FIELDS,
    ecc_via_rows: bool | None = None,
) -> Scenario:
    """One scenario on ``vendor`` ("amd" or "nvidia") nodes; ``nv_fields``: what nvidia-smi is asked;
    ``ecc_via_rows``: an NVIDIA ECC fault as remapped rows (True) or ECC counts (False), else either."""
    n_nodes = rng.choice([2, 4, 8])
    steps = 400
    slow_node = rng.randrange(n_nodes) if cause is not None else None
    slowdown = rng.uniform(0.05, 0.30) if cause is not None else 0.0
    w0 = rng.randrange(60, 200)
    w1 = w0 + rng.randrange(60, 150)
    t0 = 1_700_000_000.0
    job: list[tuple[float, float]] = []
    at = t0
    wall: list[float] = []
    for s in range(steps):
        secs = STEP_S * math.exp(rng.gauss(0, 0.03))
        if cause is not None and w0 <= s < w1:
            secs *= 1 + slowdown
        at += secs
        job.append((at, secs))
        wall.append(at)
    win_start, win_end = wall[w0] - job[w0][1], wall[w1 - 1]

    def inside(t: float) -> bool:
        return cause is not None and win_start <= t <= win_end

    nodes: list[NodeEvidence] = []
    n_samples = int((at - t0) / SAMPLE_S)
    old_names = vendor == "nvidia" and rng.random() < 1 / 3
    throttle = rng.choice(NV_THROTTLES) if vendor == "nvidia" else ()
    # a training GPU often runs at its power limit: "SW Power Cap" comes and goes on every node
    capped = rng.uniform(0.0, 0.5) if vendor == "nvidia" else 0.0
    link = rng.choice([(3, 16), (5, 8), (3, 8)]) if vendor == "nvidia" else (5, 16)
    via_rows = vendor == "nvidia" and rng.random() < 0.5  # the ECC sign as remapped rows
    if vendor == "nvidia" and ecc_via_rows is not None:
        via_rows = ecc_via_rows
    psi_shared = [rng.uniform(2, 12) for _ in range(n_samples + 1)]  # one kernel: the same on every node
    for k in range(n_nodes):
        bad = k == slow_node
        tele: list[TelemetryPoint] = []
        host: list[HostPoint] = []
        findings: list[tuple[float, str]] = []
        ce = rng.randrange(0, 3)
        remapped = 0
        steal = total = wait = throttled = 0
        prev = None
        drop = slowdown * rng.uniform(1.0, 1.6)
        for i in range(n_samples + 1):
            t = t0 + i * SAMPLE_S + rng.uniform(0, 0.5)
            hit = bad and inside(t)
            clock = BASE_CLOCK
            if hit and cause in (Cause.THROTTLE, Cause.CLOCK):
                clock *= 1 - drop
            if hit and cause is Cause.ECC:
                if via_rows:
                    remapped += rng.randrange(1, 3)
                else:
                    ce += rng.randrange(5, 60)
            if vendor == "nvidia":
                gen, width = link if hit and cause is Cause.LINK else (5, 16)
                text = _nvidia_smi(
                    rng,
                    clock=clock * NV_CLOCK / BASE_CLOCK,
                    reasons=(throttle if hit and cause is Cause.THROTTLE else ())
                    + (("SW Power Cap",) if rng.random() < capped else ()),
                    gen=gen,
                    width=width,
                    ce=ce,
                    remapped=remapped,
                    old_names=old_names,
                )
                got = nvidia_samples(text, nv_fields, old_names)
            else:
                text = _amd_smi(
                    rng,
                    clock=clock,
                    throttled=hit and cause is Cause.THROTTLE,
                    width=8 if hit and cause is Cause.LINK else 16,
                    speed=16.0,
                    ce=ce,
                )
                got = parse_amd_smi_metric(text)
            tele.append(telemetry_point(GpuTelemetryEvent(k, f"n{k}", vendor, tuple(got), t)))
            total += 500
            steal += rng.randrange(0, 6)
            wait += int(SAMPLE_S * 1e9 * rng.uniform(0.0, 0.03))
            if hit and cause is Cause.HOST_CPU:
                throttled += int(SAMPLE_S * 1e9 * rng.uniform(0.15, 0.6))
            cur = parse_probe(_proc(steal, total, psi_shared[i], wait, throttled), t)
            if prev is not None:
                host.append(host_point(prev, cur))
            prev = cur
        if (
            bad
            and cause in (Cause.NIC, Cause.ECC, Cause.LINK)
            and rng.random() < (1.0 if cause is Cause.NIC else 0.3)
        ):
            ecc_line = "nvidia_xid" if vendor == "nvidia" else "amdgpu_ras"
            sig = {Cause.NIC: "rdma_port_state", Cause.ECC: ecc_line, Cause.LINK: "pcie_aer"}[cause]
            kernel_line(sig)
            for _ in range(rng.randrange(1, 4)):
                findings.append((rng.uniform(win_start, win_end), sig))
        nodes.append(
            NodeEvidence(
                node=k,
                host=f"n{k}",
                telemetry=tele,
                host_timing=host,
                findings=findings,
                step_seconds=[s for _, s in job],  # synchronous: every node logs the job's step time
            )
        )
    return Scenario(nodes, job, slow_node, cause, slowdown)


def corpus(
    seed: int, per_cause: int, vendor: str = "amd", nv_fields: tuple[str, ...] = NVIDIA_FIELDS
) -> list[Scenario]:
    rng = random.Random(seed)
    return [scenario(rng, c, vendor, nv_fields) for c in Cause for _ in range(per_cause)]


def clean(
    seed: int, count: int, vendor: str = "amd", nv_fields: tuple[str, ...] = NVIDIA_FIELDS
) -> list[Scenario]:
    rng = random.Random(seed)
    return [scenario(rng, None, vendor, nv_fields) for _ in range(count)]
