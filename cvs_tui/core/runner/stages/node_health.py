"""node_health: follow every node's kernel log and sample its GPUs from suite start to teardown.

The work is :class:`~cvs_tui.core.runner.health_watch.HealthMonitor`'s (imported when the stage runs,
so ``build_plan`` stays light); the suite stops it before teardown closes the connections.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from cvs_tui.core.events import StageState
from cvs_tui.core.runner.stages.base import Stage, StageContext

if TYPE_CHECKING:
    from cvs_tui.core.transport import Transport


@runtime_checkable
class HasHostTransports(Protocol):
    """A launcher holding one connection per node's host (SSH, or side steps on Slurm): what health
    reads over."""

    transports: list[Transport]


class NodeHealthStage(Stage):
    name = "node_health"

    async def run(self, ctx: StageContext) -> str | None:
        from cvs_tui.core.runner.health_watch import HOST_INTERVAL_S, HealthMonitor

        ctx.stage(self.name, StageState.RUNNING)
        la = ctx.launcher
        hosts = [n.host for n in ctx.plan.nodes]
        transports: list[Transport | None] = [None] * len(hosts)
        if isinstance(la, HasHostTransports):
            transports = [*la.transports, *transports][: len(hosts)]
        mon = HealthMonitor(
            hosts=hosts,
            transports=transports,
            access=ctx.plan.health_kernel_log,
            telemetry_s=ctx.plan.health_telemetry_s,
            emit=ctx.emit,
            runs=ctx.runs,
            no_transport=f"the {la.name} launcher gives no connection to the node's host",
            # host timing over SSH (a command per sample); through Slurm each would be an srun step
            host_timing_s=(ctx.plan.health_telemetry_s or HOST_INTERVAL_S) if la.name == "nodes" else None,
        )
        ctx.runs.health_nodes = mon.node_health()
        ctx.runs.health_records = mon.records
        ctx.health = mon
        detail = await mon.start()
        # never a silent pass: an unread kernel log shows as not checked, the suite goes on
        ctx.stage(self.name, StageState.PASSED, detail)
        return None
