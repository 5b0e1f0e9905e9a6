"""Every call from the runner into the judge layer, in one place.

The runner never computes a metric or a verdict: a finished run is judged by the same code `analyze`
uses on saved logs. Keeping the calls here keeps the runner's dependency on the judge to these few
functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cvs_tui.core.events import StallsEvent, VerdictEvent
from cvs_tui.core.judge.checkpoint import RESUME_KINDS, judge_checkpoint_resume
from cvs_tui.core.judge.facts import RunFacts
from cvs_tui.core.judge.finalize import (
    base_results,
    judge_tables,
    stage_records,
    stall_events,
    verdict_events,
)
from cvs_tui.core.judge.live_stalls import GateBroken, LiveStalls
from cvs_tui.core.judge.table import StepCollector, StepTable
from cvs_tui.core.judge.window import WARMUP_STEPS
from cvs_tui.core.plan import Plan, PlannedRun
from cvs_tui.core.results import Results, RunRecord, StageRecord
from cvs_tui.core.state import RunState

__all__ = [
    "RESUME_KINDS",
    "GateBroken",
    "LiveStalls",
    "judge_checkpoint",
    "judge_run",
    "live_stalls",
    "new_results",
    "run_result_events",
    "stages_of",
    "step_collector",
]


def step_collector() -> StepCollector:
    """A rank's step table while its log streams in (``judge.table``): what the judge judges it by."""
    return StepCollector()


def new_results(plan: Plan) -> Results:
    """The results skeleton of a live run on the plan's nodes."""
    return base_results(plan, source="live", hosts=[n.host for n in plan.nodes])


def judge_run(
    run: PlannedRun, tables: Sequence[StepTable], facts: RunFacts
) -> tuple[RunRecord, dict[int, float] | None]:
    """One finished run, judged from each rank's step table (index = rank) and what its watcher saw
    (``facts``); also the losses by step the checkpoint-resume verdicts compare, when its record's series
    were bounded (see judge_tables)."""
    return judge_tables(run, tables, facts, keep_losses=run.kind in RESUME_KINDS)


def live_stalls(run: PlannedRun, ranks: int) -> LiveStalls:
    """The run's enforced stall gates, judged on the step times as they arrive (judge.live_stalls)."""
    return LiveStalls(run.judge.cell, enforce=run.judge.enforce, ranks=ranks, warmup=WARMUP_STEPS)


def judge_checkpoint(
    plan: Plan, records: dict[str, RunRecord], losses: Mapping[str, dict[int, float]] | None = None
) -> None:
    """Adds the checkpoint-resume verdicts to the checkpoint runs' records (in place); ``losses``: by run
    key, for records whose step series were bounded."""
    judge_checkpoint_resume(plan, records, losses)


def run_result_events(rec: RunRecord) -> list[VerdictEvent | StallsEvent]:
    """What the front-ends learn when a run is judged: its verdicts, then each node's stalls."""
    return [*verdict_events(rec), *stall_events(rec)]


def stages_of(state: RunState) -> list[StageRecord]:
    return stage_records(state)


__all__ = [
    "RunFacts",
    "judge_checkpoint",
    "judge_run",
    "new_results",
    "run_result_events",
    "stages_of",
    "step_collector",
]
