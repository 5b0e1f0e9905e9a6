"""smoke: a short run at a small fixed shape before the real ones; a failure stops the suite."""

from __future__ import annotations

from cvs_tui.core.events import StageState
from cvs_tui.core.runner.stages.base import Stage, StageContext, skip_if_disabled


class Smoke(Stage):
    name = "smoke"

    async def run(self, ctx: StageContext) -> str | None:
        if skip_if_disabled(ctx, self.name):
            return None  # settled as skipped: a stage left pending fails the suite
        runs = [r for r in ctx.plan.runs if r.kind == "smoke"]
        if not runs:
            ctx.stage(self.name, StageState.SKIPPED, "no smoke run planned")
            return None
        rec = await ctx.train(self.name, runs[0])
        if rec.status != "PASS":
            return f"smoke failed: {rec.reason or 'see its verdicts'}"
        return None
