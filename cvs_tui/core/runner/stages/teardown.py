"""teardown: stop what is still running and remove what the launcher started, on every exit path."""

from __future__ import annotations

from cvs_tui.core.events import StageState
from cvs_tui.core.runner.stages.base import Stage, StageContext


class Teardown(Stage):
    name = "teardown"
    closing = True

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
