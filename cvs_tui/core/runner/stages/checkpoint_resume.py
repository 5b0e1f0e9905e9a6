"""checkpoint_resume: train saving checkpoints, resume from the last one, compare with a reference.

Phase 1 (CKPT-1) trains from nothing, saving every ``checkpoint_period``; phase 2 (CKPT-2) runs with the
same run name and output folder to the full step count, so MaxText restores the latest checkpoint
itself, writing no checkpoint of its own (its period is past its last step); the reference (CKPT-REF,
unless ``checkpoint_resume.reference_run`` is false) trains the full count uninterrupted. The judge
compares them. Afterwards the checkpoint folder is deleted inside the trainer's container on every node,
so as the user that wrote it (files a root container wrote are not the SSH user's to delete); a delete
that fails is reported with the node, the path and the size left behind.
"""

from __future__ import annotations

import contextlib
import posixpath
import shlex
from typing import TYPE_CHECKING

from cvs_tui.core.events import RunOutcome, StageState
from cvs_tui.core.plan import Plan, PlannedRun
from cvs_tui.core.runner.stages.base import Stage, StageContext, skip_if_disabled

if TYPE_CHECKING:
    from cvs_tui.core.runner.launch import Launcher

_PHASES = ("ckpt_phase1", "ckpt_phase2", "ckpt_reference")


class CheckpointResume(Stage):
    name = "checkpoint_resume"

    def sub_stages(self, plan: Plan) -> list[str]:
        return [f"run:{r.key}" for r in plan.runs if r.kind in _PHASES]

    async def run(self, ctx: StageContext) -> str | None:
        if skip_if_disabled(ctx, self.name):
            return None  # settled as skipped: a stage left pending fails the suite
        runs = {k: [r for r in ctx.plan.runs if r.kind == k] for k in _PHASES}
        if not runs["ckpt_phase1"]:
            ctx.stage(self.name, StageState.SKIPPED, "no checkpoint run planned")
            return None
        ctx.stage(self.name, StageState.RUNNING)
        first = runs["ckpt_phase1"][0]
        later = runs["ckpt_phase2"] + runs["ckpt_reference"]
        # phase 1 must start from nothing: MaxText refuses to train to step N over a later checkpoint
        await _remove_checkpoints(ctx, first)
        p1 = await ctx.train(f"run:{first.key}", first)
        if p1.outcome != RunOutcome.COMPLETE.value:
            ctx.stage(self.name, StageState.FAILED, f"phase 1 did not complete: {p1.reason}")
            for r in later:
                ctx.stage(f"run:{r.key}", StageState.SKIPPED, "checkpoint phase 1 did not complete")
            return None
        for r in later:
            await ctx.train(f"run:{r.key}", r)
        ctx.judge_checkpoint()
        ctx.save()
        p2 = ctx.records.get(runs["ckpt_phase2"][0].key) if runs["ckpt_phase2"] else None
        problems: list[str] = []
        if ctx.plan.checkpoint_resume.get("delete_ckpt_dir", True):
            problems = await delete_checkpoints(
                ctx.launcher, len(ctx.plan.nodes), first, ctx.opt.command_timeout_s
            )
        ok = p2 is not None and p2.status == "PASS" and not problems
        msgs = [v.message for v in (p2.verdicts if p2 else []) if v.metric.startswith("checkpoint.")]
        ctx.stage(self.name, StageState.PASSED if ok else StageState.FAILED, "; ".join(msgs + problems))
        return None


def _checkpoints_dir(run: PlannedRun) -> str:
    return posixpath.join(run.base_output_directory, run.run_name, "checkpoints")


async def delete_checkpoints(launcher: Launcher, nodes: int, run: PlannedRun, timeout: float) -> list[str]:
    """Delete the run's checkpoint folder where the trainer runs, on every node in rank order (on a
    shared filesystem rank 0 deletes it and the others find nothing). A problem line per node whose
    folder is still there: the node, the path, the size left and why."""
    path = _checkpoints_dir(run)
    q = shlex.quote(path)
    # rm's own message goes to stderr; what is left is measured after it, so a partial delete says so
    cmd = f"rm -rf -- {q}; if [ -e {q} ]; then du -sh -- {q} 2>/dev/null | cut -f1; exit 3; fi"
    problems: list[str] = []
    for rank in range(nodes):
        try:
            r = await launcher.run_on_node(rank, cmd, timeout, where="trainer")
        except Exception as exc:  # the node or its container is gone: say so, never drop it
            problems.append(f"node {rank}: could not delete checkpoints {path}: {exc}")
            continue
        if r.rc != 0:
            left = r.out.strip().splitlines()[-1] if r.out.strip() else "unknown size"
            why = r.err.strip()[-300:] or f"exit {r.rc}"
            problems.append(f"node {rank}: could not delete checkpoints {path} ({left} left): {why}")
    return problems


async def _remove_checkpoints(ctx: StageContext, run: PlannedRun) -> None:
    """rm -rf the run's checkpoints folder on every host before phase 1 (best effort: a stale checkpoint
    that survives makes phase 1 fail loudly, as MaxText refuses to train over it)."""
    path = shlex.quote(_checkpoints_dir(run))
    for rank in range(len(ctx.plan.nodes)):
        with contextlib.suppress(Exception):
            await ctx.launcher.run_on_node(rank, f"rm -rf -- {path}", ctx.opt.command_timeout_s, where="host")
