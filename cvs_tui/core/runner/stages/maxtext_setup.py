"""maxtext_setup: check out the configured MaxText branch and run the install command on every node."""

from __future__ import annotations

import shlex

from cvs_tui.core.events import StageState
from cvs_tui.core.runner.stages.base import Stage, StageContext, on_all, skip_if_disabled


class MaxTextSetup(Stage):
    name = "maxtext_setup"

    async def run(self, ctx: StageContext) -> str | None:
        if skip_if_disabled(ctx, self.name):
            return None
        ctx.stage(self.name, StageState.RUNNING)
        plan = ctx.plan
        parts = [f"cd {shlex.quote(plan.maxtext_root)}"]
        branch = plan.maxtext_branch
        if branch:
            b = shlex.quote(branch)
            parts.append(
                f"git reset --hard -q && (git fetch --all --tags -q || true) && git checkout -q {b} && "
                f'test "$(git rev-parse --abbrev-ref HEAD)" = {b}'
            )
        if plan.maxtext_install_cmd:
            # verbatim by design: the install command is a shell command the operator wrote
            parts.append(plan.maxtext_install_cmd)
        bad = await on_all(ctx, " && ".join(parts), ctx.opt.setup_timeout_s)
        if bad:
            ctx.stage(self.name, StageState.FAILED, "; ".join(bad))
            return "set-up failed"
        ctx.stage(self.name, StageState.PASSED, f"branch {branch or '(image)'} ready on every node")
        return None
