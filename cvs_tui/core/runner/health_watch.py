"""Node health during the suite: one kernel-log follower and one telemetry sampler per node.

Started by the ``node_health`` stage (after preflight connected the nodes), stopped by the suite
before teardown closes the connections. Each finding is attributed to the run and step active on its
node (:meth:`RunExecution.on_health_finding`); a fatal one inside a run fails that run through the
watchdog's usual fatal path. A fatal one outside any run fails the ``node_health`` stage when the
monitor stops, so it fails the suite too. A node whose kernel log cannot be read is ``not checked``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Literal, Protocol

from cvs_tui.core.events import (
    GpuSample,
    GpuTelemetryEvent,
    HealthState,
    NodeHealthEvent,
    RunEvent,
    Severity,
)
from cvs_tui.core.health import (
    Attribution,
    HealthFinding,
    KernelLogFollower,
    NodeHealth,
    TelemetryError,
    TelemetrySampler,
)
from cvs_tui.core.health.host import HostSampler
from cvs_tui.core.results import (
    GpuSampleRecord,
    HealthFindingRecord,
    HostPoint,
    NodeHealthRecord,
    TelemetryPoint,
)
from cvs_tui.core.transport import Transport, TransportError

log = logging.getLogger(__name__)
MAX_POINTS = 720  # telemetry points kept per node for the report (an hour at 5 s)


class AttributesFindings(Protocol):
    def on_health_finding(self, finding: HealthFinding) -> Attribution: ...


HOST_INTERVAL_S = 5.0  # host timing every this many seconds when GPU telemetry is off (CPU runs)


def finding_record(f: HealthFinding, a: Attribution) -> HealthFindingRecord:
    return HealthFindingRecord(
        node=f.node,
        host=f.host,
        signature=f.signature,
        severity=f.severity.value,
        line=f.line,
        kernel_time=f.kernel_time,
        wall_time=f.wall_time,
        detail=f.detail,
        run=a.run,
        step=a.step,
    )


def _mean(values: Sequence[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return sum(xs) / len(xs) if xs else None


def _telemetry_finding(
    n: NodeMonitor, got: GpuTelemetryEvent, signature: str, sev: Severity, line: str, detail: str
) -> HealthFinding:
    return HealthFinding(
        node=n.rank,
        signature=signature,
        severity=sev,
        line=line,
        kernel_time=0.0,
        wall_time=got.at,
        host=n.host,
        detail=detail,
    )


def _rise(
    n: NodeMonitor, got: GpuTelemetryEvent, s: GpuSample, signature: str, sev: Severity, line: str, by: int
) -> HealthFinding:
    return _telemetry_finding(n, got, signature, sev, line, f"GPU {s.gpu} +{by}")


def _counter_rises(
    n: NodeMonitor, got: GpuTelemetryEvent, counters: Sequence[tuple[str, Callable[[GpuSample], int | None]]]
) -> Iterator[tuple[GpuSample, str, int, int]]:
    """Each GPU counter that rose since the node's previous sample: (sample, name, before, now)."""
    before = {s.gpu: s for s in n.last}
    for s in got.samples:
        b = before.get(s.gpu)
        if b is None:
            continue
        for kind, count in counters:
            was, now = count(b), count(s)
            if was is not None and now is not None and now > was:
                yield s, kind, was, now


_ECC: tuple[tuple[str, Callable[[GpuSample], int | None]], ...] = (
    ("uncorrectable", lambda s: s.ecc_uncorrectable),
    ("correctable", lambda s: s.ecc_correctable),
)
_REPAIRS: tuple[tuple[str, Callable[[GpuSample], int | None]], ...] = (
    ("retired_pages", lambda s: s.retired_pages),
    ("remapped_rows", lambda s: s.remapped_rows),
)


def ecc_rises(n: NodeMonitor, got: GpuTelemetryEvent) -> list[HealthFinding]:
    """ECC totals that rose since the node's previous sample, as findings: an uncorrectable rise is
    fatal (the rule of the ``health.ecc.uncorrectable_delta`` gate, seen within one sample), a
    correctable rise a warning."""
    return [
        _rise(
            n,
            got,
            s,
            f"ecc_{kind}_rise",
            Severity.FATAL if kind == "uncorrectable" else Severity.WARNING,
            f"{got.tool}: GPU {s.gpu} {kind} ECC errors {was} -> {now}",
            now - was,
        )
        for s, kind, was, now in _counter_rises(n, got, _ECC)
    ]


def memory_repair_rises(n: NodeMonitor, got: GpuTelemetryEvent) -> list[HealthFinding]:
    """Retired pages or remapped rows that rose since the node's previous sample, as warnings naming the
    node and GPU. A warning, not a failure: NVIDIA's docs (NVML nvmlDeviceGetRemappedRows, "A pending
    remapping won't affect future work on the GPU since error-containment and dynamic page blacklisting
    will take care of that"; docs.nvidia.com/deploy/dynamic-page-retirement: Xid 63 "new retired page,
    reload the driver to activate") say the GPU keeps working and is repaired at its next reset. The
    uncorrectable error behind a double-bit retirement or an uncorrectable remap raises the volatile
    uncorrectable ECC count too, and that rise is fatal (:func:`ecc_rises`); a remap or retirement that
    failed (Xid 64) is logged by the driver and judged from the kernel log."""
    return [
        _rise(
            n,
            got,
            s,
            f"{kind}_rise",
            Severity.WARNING,
            f"{got.tool}: node {n.rank} GPU {s.gpu} {kind.replace('_', ' ')} {was} -> {now} "
            "(repaired at the next GPU reset)",
            now - was,
        )
        for s, kind, was, now in _counter_rises(n, got, _REPAIRS)
    ]


def memory_repair_flags(n: NodeMonitor, got: GpuTelemetryEvent) -> list[HealthFinding]:
    """GPUs whose memory repair flags are up, from the node's first sample on, once per GPU until the flag
    drops. NVIDIA's GPU memory error management docs (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt,
    "Error Recovery and Response Flags") define the row-remapping failure flag by the RMA policy
    thresholds: the GPU's memory can no longer be repaired, so it is fatal, even when it failed before
    this suite started (no kernel line of it is read then). A pending remap or page retirement is applied
    at the next GPU reset while work goes on ("unaffected applications can continue running"): a warning
    that says to reset the GPU."""
    before = {s.gpu: s for s in n.last}
    out: list[HealthFinding] = []
    for s in got.samples:
        b = before.get(s.gpu)
        where = f"{got.tool}: node {n.rank} GPU {s.gpu}"
        if s.remap_failed and not (b is not None and b.remap_failed):
            out.append(
                _telemetry_finding(
                    n,
                    got,
                    "row_remap_failure",
                    Severity.FATAL,
                    f"{where}: a row remapping has failed (NVIDIA's RMA flag: its memory cannot be repaired)",
                    f"GPU {s.gpu}",
                )
            )
        if s.repair_pending and not (b is not None and b.repair_pending):
            out.append(
                _telemetry_finding(
                    n,
                    got,
                    "memory_repair_pending",
                    Severity.WARNING,
                    f"{where}: a memory repair (row remap or page retirement) is pending until the GPU "
                    "is reset (nvidia-smi -r, or a reboot)",
                    f"GPU {s.gpu}",
                )
            )
    return out


def _any(values: Sequence[bool | None]) -> bool | None:
    xs = [v for v in values if v is not None]
    return any(xs) if xs else None


def _least(values: Sequence[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return min(xs) if xs else None


def _total(values: Sequence[int | None]) -> int | None:
    xs = [v for v in values if v is not None]
    return sum(xs) if xs else None


def telemetry_point(ev: GpuTelemetryEvent) -> TelemetryPoint:
    """One sample of a node as the report and the straggler's cause keep it (over its GPUs)."""
    got = ev.samples
    return TelemetryPoint(
        at=ev.at,
        util_pct=_mean([x.util_pct for x in got]),
        power_w=_mean([x.power_w for x in got]),
        temp_c=_mean([x.temp_c for x in got]),
        gfx_clock_mhz=_mean([x.gfx_clock_mhz for x in got]),
        throttled=_any([x.throttled for x in got]),
        pcie_width=min((x.pcie_width for x in got if x.pcie_width is not None), default=None),
        pcie_speed_gts=_least([x.pcie_speed_gts for x in got]),
        ecc_correctable=_total([x.ecc_correctable for x in got]),
        ecc_uncorrectable=_total([x.ecc_uncorrectable for x in got]),
        throttle_reasons=_reasons([x.throttle_reasons for x in got]),
        gfx_clock_max_mhz=_mean([x.gfx_clock_max_mhz for x in got]),
        pcie_width_max=min((x.pcie_width_max for x in got if x.pcie_width_max is not None), default=None),
        pcie_speed_max_gts=_least([x.pcie_speed_max_gts for x in got]),
        retired_pages=_total([x.retired_pages for x in got]),
        remapped_rows=_total([x.remapped_rows for x in got]),
        unreadable=sorted({f for x in got for f in x.unreadable}),
    )


def _reasons(values: Sequence[tuple[str, ...] | None]) -> list[str] | None:
    """The throttle reasons any GPU gave (in first-seen order); None when no GPU could say."""
    read = [v for v in values if v is not None]
    return list(dict.fromkeys(r for v in read for r in v)) if read else None


def _sample_record(s: GpuSample) -> GpuSampleRecord:
    return GpuSampleRecord(**{k: getattr(s, k) for k in GpuSampleRecord.model_fields})


class NodeMonitor:
    """One node: its follower (None when the kernel log is off) and sampler (None: telemetry off)."""

    def __init__(self, rank: int, host: str, access: Literal["plain", "sudo", "off"]) -> None:
        self.rank = rank
        self.host = host
        self.access = access
        self.health = NodeHealth(node=rank, host=host)
        self.follower: KernelLogFollower | None = None
        self.sampler: TelemetrySampler | None = None
        self.findings: list[HealthFindingRecord] = []
        self.tool: str | None = None
        self.telemetry_error = ""
        self.first: tuple[GpuSample, ...] = ()
        self.last: tuple[GpuSample, ...] = ()
        self.points: list[TelemetryPoint] = []
        self.host_sampler: HostSampler | None = None
        self.host_points: list[HostPoint] = []

    def record(self) -> NodeHealthRecord:
        return NodeHealthRecord(
            rank=self.rank,
            host=self.host,
            state=self.health.state.value,
            reason=self.health.reason,
            kernel_log=self.access,
            findings=list(self.findings),
            telemetry_tool=self.tool,
            telemetry_error=self.telemetry_error,
            telemetry_last=[_sample_record(s) for s in self.last],
            telemetry_first=[_sample_record(s) for s in self.first],
            telemetry=list(self.points),
            host_timing=list(self.host_points),
        )


class HealthMonitor:
    """Every node's health for the whole suite (see the module doc)."""

    def __init__(
        self,
        *,
        hosts: Sequence[str],
        transports: Sequence[Transport | None],
        access: Literal["plain", "sudo", "off"],
        telemetry_s: float | None,
        emit: Callable[[RunEvent], None],
        runs: AttributesFindings,
        no_transport: str = "",
        host_timing_s: float | None = None,
    ) -> None:
        self.emit = emit
        self.host_timing_s = host_timing_s  # None: no host timing (each probe would cost a Slurm step)
        self.runs = runs
        self.telemetry_s = telemetry_s
        self.transports = list(transports)
        self.no_transport = no_transport
        self.nodes = [NodeMonitor(rank, host, access) for rank, host in enumerate(hosts)]
        self.outside_fatal: list[HealthFindingRecord] = []
        self._tasks: list[asyncio.Task[None]] = []

    def node_health(self) -> list[NodeHealth]:
        return [n.health for n in self.nodes]

    def records(self) -> list[NodeHealthRecord]:
        return [n.record() for n in self.nodes]

    def _publish(self, n: NodeMonitor) -> None:
        self.emit(
            NodeHealthEvent(
                node=n.rank, host=n.host, state=n.health.state, reason=n.health.reason, at=time.time()
            )
        )

    async def start(self) -> str:
        """Probe every node's kernel log and start following/sampling; a one-line summary."""
        await asyncio.gather(*(self._start_node(n) for n in self.nodes))
        states = [n.health.state for n in self.nodes]
        ok = states.count(HealthState.OK)
        return (
            f"kernel log read on {ok}/{len(states)} node(s)"
            + (f", {len(states) - ok} not checked" if ok < len(states) else "")
            + (f"; GPU telemetry every {self.telemetry_s:g} s" if self.telemetry_s else "; telemetry off")
        )

    async def _start_node(self, n: NodeMonitor) -> None:
        t = self.transports[n.rank] if n.rank < len(self.transports) else None
        if n.access == "off":
            n.health.mark_not_checked("health.kernel_log: off")
        elif t is None:
            n.health.mark_not_checked(self.no_transport or "no connection to the node's host")
        else:
            f = KernelLogFollower(t, node=n.rank, host=n.host, access=n.access)
            f.health = n.health  # one NodeHealth per node: the follower updates what we publish
            if await f.start():
                n.follower = f
                self._tasks.append(asyncio.create_task(self._follow(n, f)))
        self._publish(n)
        if t is not None and self.telemetry_s:
            n.sampler = TelemetrySampler(t, node=n.rank, host=n.host, interval=self.telemetry_s)
            self._tasks.append(asyncio.create_task(self._sample(n, n.sampler)))
        if t is not None and n.access != "off" and self.host_timing_s:
            n.host_sampler = HostSampler(
                t, interval=self.host_timing_s, pid_file=partial(self._pid_file, n.rank)
            )
            self._tasks.append(asyncio.create_task(self._sample_host(n, n.host_sampler)))

    def _found(self, n: NodeMonitor, finding: HealthFinding) -> None:
        """A finding from the telemetry (an ECC rise): the same path as a kernel-log finding."""
        n.health.add(finding)
        self._record(n, finding)

    def _record(self, n: NodeMonitor, finding: HealthFinding) -> None:
        """A finding attributed to the run it fell in, kept, published; fatal outside a run: noted."""
        a = self.runs.on_health_finding(finding)
        rec = finding_record(finding, a)
        n.findings.append(rec)
        if finding.severity is Severity.FATAL and a.run is None:
            self.outside_fatal.append(rec)
        self.emit(finding.to_event(a))
        self._publish(n)

    async def _follow(self, n: NodeMonitor, f: KernelLogFollower) -> None:
        try:
            async for finding in f.findings():
                self._record(n, finding)
        except Exception as exc:  # the follower gave up (connection gone for good): not checked
            log.info("%s: kernel log follower ended: %s", n.host, exc)
            if not n.health.findings:
                n.health.mark_not_checked(f"kernel log lost: {exc}")
            self._publish(n)

    async def _sample(self, n: NodeMonitor, s: TelemetrySampler) -> None:
        try:
            await self._samples(n, s)
        except TransportError as exc:  # the node cannot be reached any more (a lost node): said, not raised
            log.info("%s: telemetry ended: %s", n.host, exc)
            n.telemetry_error = f"telemetry lost: {exc}"

    async def _samples(self, n: NodeMonitor, s: TelemetrySampler) -> None:
        async for got in s.samples():
            if isinstance(got, TelemetryError):
                n.telemetry_error = str(got)
                continue
            rises = [*ecc_rises(n, got), *memory_repair_rises(n, got)] if n.last else []
            rises = [*memory_repair_flags(n, got), *rises]
            n.tool, n.telemetry_error, n.last = got.tool, "", got.samples
            if not n.first:
                n.first = got.samples
            for finding in rises:
                self._found(n, finding)
            if len(n.points) < MAX_POINTS:
                n.points.append(telemetry_point(got))
            self.emit(got)

    def _pid_file(self, rank: int) -> str | None:
        """The running trainer's pid file on node ``rank``, when the runs know it."""
        known = getattr(self.runs, "trainer_pid_file", None)
        return known(rank) if callable(known) else None

    async def _sample_host(self, n: NodeMonitor, s: HostSampler) -> None:
        async for point in s.points():
            if len(n.host_points) < MAX_POINTS:
                n.host_points.append(point)

    async def stop(self) -> list[str]:
        """Stop followers and samplers; the fatal findings that fell outside any run (problem lines)."""
        for n in self.nodes:
            if n.host_sampler is not None:
                n.host_sampler.stop()
            if n.follower is not None:
                n.follower.stop()
            if n.sampler is not None:
                n.sampler.stop()
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=10)
            for task in pending:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._tasks = []
        return [
            f"node {r.node} ({r.host}): {r.signature} outside any run: {r.line[:200]}"
            for r in self.outside_fatal
        ]
