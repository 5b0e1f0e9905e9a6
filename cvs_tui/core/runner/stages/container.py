"""launch_container: start the run's container on every node, for launchers that run in containers."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from cvs_tui.core.events import StageState
from cvs_tui.core.runner.stages.base import Stage, StageContext, skip_if_disabled


@runtime_checkable
class LaunchesContainers(Protocol):
    """A launcher that starts a container per node before the runs (the nodes launcher with docker)."""

    async def launch_containers(self) -> tuple[bool, str]:
        """(every container started, a detail line)."""
        ...


class LaunchContainer(Stage):
    name = "launch_container"

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
