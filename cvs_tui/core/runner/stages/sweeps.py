"""run:<key>: each selected sweep, one after the other; a failed one does not stop the next."""

from __future__ import annotations

from cvs_tui.core.runner.stages.base import Stage, StageContext


class Sweeps(Stage):
    name = "run"  # its rows are run:<sweep key>

    async def run(self, ctx: StageContext) -> str | None:
        for r in ctx.plan.runs:
            if r.kind == "sweep":
                await ctx.train(f"run:{r.key}", r)
        return None
