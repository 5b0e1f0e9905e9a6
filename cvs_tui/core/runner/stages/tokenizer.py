"""tokenizer: runs on real data need the model's tokenizer files on every node (no weights)."""

from __future__ import annotations

import posixpath
import shlex

from cvs_tui.core.events import StageState
from cvs_tui.core.runner.stages.base import Stage, StageContext, on_all, skip_if_disabled

# The token is read from its file on the node, never echoed.
_DOWNLOAD = (
    "import os,sys\n"
    "from huggingface_hub import snapshot_download\n"
    "tok=open(sys.argv[3]).read().strip() if os.path.exists(sys.argv[3]) else None\n"
    "snapshot_download(sys.argv[1], local_dir=sys.argv[2], token=tok,"
    " allow_patterns=['tokenizer*','*.model','*.tiktoken','special_tokens_map.json','config.json'])\n"
)


class Tokenizer(Stage):
    name = "tokenizer"

    async def run(self, ctx: StageContext) -> str | None:
        if skip_if_disabled(ctx, self.name):
            return None
        ctx.stage(self.name, StageState.RUNNING)
        plan = ctx.plan
        token_file = plan.paths.get("hf_token_file", "")
        dest = plan.tokenizer_path or posixpath.join(plan.paths.get("models_dir", "/tmp"), "tokenizer")
        cmd = " ".join(
            shlex.quote(x) for x in (plan.python, "-c", _DOWNLOAD, plan.hf_model_id, dest, token_file)
        )
        bad = await on_all(ctx, cmd, ctx.opt.setup_timeout_s)
        if bad:
            ctx.stage(self.name, StageState.FAILED, "; ".join(bad))
            return "set-up failed"
        ctx.stage(self.name, StageState.PASSED, f"{plan.hf_model_id} tokenizer in {dest}")
        return None
