"""teardown: stop what is still running and remove what the launcher started, on every exit path."""

from __future__ import annotations

from cvs_tui.core.events import StageState
from cvs_tui.core.plan import PlannedStage
from cvs_tui.core.runner.stages.base import PlanInput, Stage, StageContext


class Teardown(Stage):
    name = "teardown"
    closing = True

    def plan(self, inp: PlanInput) -> list[PlannedStage]:
        c = inp.loaded.config.container
        if c.runtime.name == "host":
            return [PlannedStage(name=self.name, enabled=False, reason="runtime host: no container")]
        if c.lifetime != "per_run":
            why = f"lifetime {c.lifetime}: the container stays"
            return [PlannedStage(name=self.name, enabled=False, reason=why)]
        return [PlannedStage(name=self.name, enabled=True, reason=f"remove {inp.container_name}")]

    async def run(self, ctx: StageContext) -> str | None:
        # runs whatever the plan says: trainers may be running and connections are open either way
        ctx.stage(self.name, StageState.RUNNING)
        await ctx.stop_active()
        problems = await ctx.launcher.teardown()
        if problems:
            ctx.stage(self.name, StageState.FAILED, "; ".join(problems))
        else:  # the launcher checked every node it started anything on
            ctx.stage(self.name, StageState.PASSED, "checked: nothing left running on any node")
        return None
