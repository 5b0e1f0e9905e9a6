"""preflight: the plan's own problems, free space for the run folder, then the launcher's node checks."""

from __future__ import annotations

import shutil

from cvs_tui.core.events import StageState
from cvs_tui.core.runner.stages.base import Stage, StageContext


class Preflight(Stage):
    name = "preflight"

    async def run(self, ctx: StageContext) -> str | None:
        ctx.stage(self.name, StageState.RUNNING)
        problems = list(ctx.plan.preflight_errors)
        free = shutil.disk_usage(ctx.run_dir).free
        if free < ctx.opt.min_free_bytes:
            problems.append(
                f"run folder {ctx.run_dir}: only {free >> 20} MiB free, need {ctx.opt.min_free_bytes >> 20}"
            )
        problems += await ctx.launcher.prepare(lambda msg: ctx.stage(self.name, StageState.RUNNING, msg))
        if problems:
            ctx.stage(self.name, StageState.FAILED, "; ".join(problems))
            return "preflight failed"
        ctx.stage(self.name, StageState.PASSED, f"{len(ctx.plan.nodes)} node(s) ready")
        return None
