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
        elif not _started_anything(ctx):
            # no claim of a check that was not made (nodes that were never reached were not checked)
            ctx.stage(self.name, StageState.PASSED, "nothing was started on the nodes: nothing to stop")
        else:  # the launcher checked every node it started anything on
            ctx.stage(self.name, StageState.PASSED, "checked: nothing left running on any node")
        return None


def _started_anything(ctx: StageContext) -> bool:
    """A stage past preflight and node health ran (it may have started containers or trainers), or a
    run was judged; otherwise the suite stopped before anything was started on a node."""
    quiet = {"preflight", "node_health", "report", "teardown"}
    ran = any(s.name not in quiet and s.state not in ("pending", "skipped") for s in ctx.results.stages)
    return ran or bool(ctx.records)
