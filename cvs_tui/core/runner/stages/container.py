"""launch_container: start the run's container on every node, for launchers that run in containers."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from cvs_tui.core.events import StageState
from cvs_tui.core.plan import PlannedStage
from cvs_tui.core.runner.stages.base import PlanInput, Stage, StageContext, skip_if_disabled


@runtime_checkable
class LaunchesContainers(Protocol):
    """A launcher that starts a container per node before the runs (the nodes launcher with docker)."""

    async def launch_containers(self) -> tuple[bool, str]:
        """(every container started, a detail line)."""
        ...


class LaunchContainer(Stage):
    name = "launch_container"

    def plan(self, inp: PlanInput) -> list[PlannedStage]:
        c = inp.loaded.config.container
        if c.runtime.name == "host":
            return [PlannedStage(name=self.name, enabled=False, reason="runtime host: no container")]
        if c.lifetime == "no_launch":
            why = f"lifetime no_launch: uses the running container {inp.container_name}"
            return [PlannedStage(name=self.name, enabled=False, reason=why)]
        why = (
            f"{c.runtime.name} container {inp.container_name} from {c.image} "
            f"on {len(inp.cluster.nodes)} node(s)"
        )
        return [PlannedStage(name=self.name, enabled=True, reason=why)]

    async def run(self, ctx: StageContext) -> str | None:
        if skip_if_disabled(ctx, self.name):
            return None
        ctx.stage(self.name, StageState.RUNNING)
        la = ctx.launcher
        if isinstance(la, LaunchesContainers):
            ok, detail = await la.launch_containers()
        else:
            ok, detail = False, f"the {la.name} launcher does not launch containers"
        if not ok:
            ctx.stage(self.name, StageState.FAILED, detail)
            return "the container did not start on every node"
        ctx.stage(self.name, StageState.PASSED, detail)
        return None
