"""run:<key>: each selected sweep, one after the other; a failed one does not stop the next."""

from __future__ import annotations

from cvs_tui.core.plan import PlannedStage
from cvs_tui.core.runner.stages.base import PlanInput, Stage, StageContext


class Sweeps(Stage):
    name = "run"  # its rows are run:<sweep key>

    def plan(self, inp: PlanInput) -> list[PlannedStage]:
        return [
            PlannedStage(name=f"run:{spec.key}", enabled=True, reason=f"{spec.steps} steps")
            for spec in inp.loaded.runs
        ]

    async def run(self, ctx: StageContext) -> str | None:
        for r in ctx.plan.runs:
            if r.kind == "sweep":
                await ctx.train(f"run:{r.key}", r)
        return None
