"""smoke: a short run at a small fixed shape before the real ones; a failure stops the suite."""

from __future__ import annotations

from cvs_tui.core.events import StageState
from cvs_tui.core.plan import PlannedStage
from cvs_tui.core.runner.stages.base import PlanInput, Stage, StageContext, skip_if_disabled


class Smoke(Stage):
    name = "smoke"

    def plan(self, inp: PlanInput) -> list[PlannedStage]:
        smoke = inp.loaded.config.smoke
        if not smoke.enabled:
            return [PlannedStage(name=self.name, enabled=False, reason="smoke.enabled is false")]
        why = (
            f"{smoke.steps} steps, batch {smoke.per_device_batch_size}, "
            f"seqlen {smoke.max_target_length}, BF16; a failure stops the suite"
        )
        return [PlannedStage(name=self.name, enabled=True, reason=why)]

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
