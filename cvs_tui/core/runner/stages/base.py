"""What a stage is: a step of the suite that runs itself.

A stage's rows in the plan are planned by the plan layer (:mod:`cvs_tui.core.plan.stages`, same names,
same order); its :meth:`Stage.run` does the work through a :class:`StageContext` (the suite) and returns
why the suite must stop there, or None to go on. Closing stages (report, teardown) run on every exit
path, after the others, last registered first.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol

from cvs_tui.core.events import StageState

if TYPE_CHECKING:
    from cvs_tui.core.events import RunEvent
    from cvs_tui.core.plan import Plan, PlannedRun
    from cvs_tui.core.results import Results, RunRecord
    from cvs_tui.core.runner.execute import RunExecution
    from cvs_tui.core.runner.health_watch import HealthMonitor
    from cvs_tui.core.runner.launch import Launcher
    from cvs_tui.core.watch.options import RunOptions


class StageContext(Protocol):
    """What a running stage may use: the suite gives itself."""

    plan: Plan
    run_dir: Path
    opt: RunOptions
    launcher: Launcher
    records: dict[str, RunRecord]  # run key -> its judged record, as runs finish
    results: Results  # what results.json and the reports are written from
    runs: RunExecution  # the run being watched (node health attributes findings through it)
    health: HealthMonitor | None  # node health, once the node_health stage started it

    def emit(self, ev: RunEvent) -> None:
        """Publish an event (bus, events.jsonl, the run state)."""
        ...

    def stage(self, name: str, st: StageState, detail: str = "") -> None:
        """Publish a stage's state (and save results.json when it settled)."""
        ...

    def save(self) -> None:
        """Write results.json as it stands."""
        ...

    async def train(self, stage: str, run: PlannedRun) -> RunRecord:
        """Run one planned run under a stage name (or keep it from --resume); its judged record."""
        ...

    def judge_checkpoint(self) -> None:
        """Add the checkpoint-resume verdicts to the checkpoint runs' records."""
        ...

    async def stop_active(self) -> None:
        """Stop the trainers of a run that is still being started or watched."""
        ...


class Stage(ABC):
    """One step of the suite. Subclasses set ``name`` (as in the plan's ORDER) and implement :meth:`run`."""

    name: ClassVar[str]
    closing: ClassVar[bool] = False  # runs on every exit path, after the others

    @abstractmethod
    async def run(self, ctx: StageContext) -> str | None:
        """Do the work; why the suite stops here (the rest is skipped with it), or None to go on."""

    def sub_stages(self, plan: Plan) -> list[str]:
        """Names it reports under that the plan does not list (shown pending, skipped with the rest)."""
        return []


def skip_if_disabled(ctx: StageContext, name: str) -> bool:
    """Marks a stage the plan disabled as skipped, with the plan's reason; True when it was."""
    st = ctx.plan.stage(name)
    if not st.enabled:
        ctx.stage(name, StageState.SKIPPED, st.reason)
        return True
    return False


async def on_all(
    ctx: StageContext, cmd: str, timeout: float, *, where: Literal["host", "trainer"] = "trainer"
) -> list[str]:
    """Run ``cmd`` on every node (where the trainer runs, or on the host); a problem line per failure."""

    async def one(rank: int) -> str | None:
        try:
            r = await ctx.launcher.run_on_node(rank, cmd, timeout, where=where)
        except Exception as exc:
            return f"node {rank}: {exc}"
        if r.rc != 0:
            return f"node {rank}: exit {r.rc}: {(r.err or r.out).strip()[-300:]}"
        return None

    import asyncio  # here, not at the top: `plan` imports this module and opens no event loop

    res = await asyncio.gather(*(one(rank) for rank in range(len(ctx.plan.nodes))))
    return [r for r in res if r]
