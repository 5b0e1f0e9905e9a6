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
from collections.abc import Callable, Sequence
from typing import Literal, Protocol

from cvs_tui.core.events import (
    GpuSample,
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
from cvs_tui.core.results import (
    GpuSampleRecord,
    HealthFindingRecord,
    NodeHealthRecord,
    TelemetryPoint,
)
from cvs_tui.core.transport import Transport

log = logging.getLogger(__name__)
MAX_POINTS = 720  # telemetry points kept per node for the report (an hour at 5 s)


class AttributesFindings(Protocol):
    def on_health_finding(self, finding: HealthFinding) -> Attribution: ...


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
    ) -> None:
        self.emit = emit
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

    async def _follow(self, n: NodeMonitor, f: KernelLogFollower) -> None:
        try:
            async for finding in f.findings():
                a = self.runs.on_health_finding(finding)
                rec = finding_record(finding, a)
                n.findings.append(rec)
                if finding.severity is Severity.FATAL and a.run is None:
                    self.outside_fatal.append(rec)
                self.emit(finding.to_event(a))
                self._publish(n)
        except Exception as exc:  # the follower gave up (connection gone for good): not checked
            log.info("%s: kernel log follower ended: %s", n.host, exc)
            if not n.health.findings:
                n.health.mark_not_checked(f"kernel log lost: {exc}")
            self._publish(n)

    async def _sample(self, n: NodeMonitor, s: TelemetrySampler) -> None:
        async for got in s.samples():
            if isinstance(got, TelemetryError):
                n.telemetry_error = str(got)
                continue
            n.tool, n.telemetry_error, n.last = got.tool, "", got.samples
            if not n.first:
                n.first = got.samples
            if len(n.points) < MAX_POINTS:
                n.points.append(
                    TelemetryPoint(
                        at=got.at,
                        util_pct=_mean([x.util_pct for x in got.samples]),
                        power_w=_mean([x.power_w for x in got.samples]),
                        temp_c=_mean([x.temp_c for x in got.samples]),
                    )
                )
            self.emit(got)

    async def stop(self) -> list[str]:
        """Stop followers and samplers; the fatal findings that fell outside any run (problem lines)."""
        for n in self.nodes:
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
