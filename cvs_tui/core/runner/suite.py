"""The suite: one plan, every node at once, the registered stages in order, from preflight to teardown.

preflight → launch_container → rdma → tokenizer → maxtext_setup → smoke → each run → checkpoint_resume
→ teardown → report (:mod:`.stages`). A failed run does not stop the next; a stage that must stop the
suite (a failed preflight, container launch, set-up or smoke) skips the rest with its reason. The
closing stages (teardown, report) run on every exit path, also on failure, Ctrl-C and SIGTERM.
results.json is saved whenever a stage settles, so nothing is lost when the run is interrupted later.

How trainers start, are followed and are stopped is the launcher's business (:mod:`.launch`); one run
on every rank is :class:`.execute.RunExecution`; when a run failed or hung is :mod:`.watchdog`'s.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from cvs_tui.core.bus import EventBus
from cvs_tui.core.errors import UserError
from cvs_tui.core.events import RunEvent, RunOutcome, StageEvent, StageState, SuiteEndEvent
from cvs_tui.core.plan import Plan, PlannedRun
from cvs_tui.core.report import REPORT_FILES
from cvs_tui.core.results import Results, RunRecord, load_results, write_results
from cvs_tui.core.runner import judging
from cvs_tui.core.runner.execute import RunExecution
from cvs_tui.core.runner.health_watch import HealthMonitor
from cvs_tui.core.runner.launch import Launcher, launcher_for
from cvs_tui.core.runner.options import RunOptions
from cvs_tui.core.runner.stages import registered
from cvs_tui.core.runner.stages.base import Stage
from cvs_tui.core.state import RunState

__all__ = ["RunOptions", "Suite"]


class Suite:
    """Executes a plan. ``run()`` returns the results (also written to ``run_dir``)."""

    def __init__(
        self,
        plan: Plan,
        run_dir: Path,
        bus: EventBus,
        options: RunOptions | None = None,
    ) -> None:
        self.plan = plan
        self.run_dir = run_dir
        self.bus = bus
        self.opt = options or RunOptions()
        self.state = RunState()
        self.results: Results = judging.new_results(plan)
        self.records: dict[str, RunRecord] = {}
        self.launcher: Launcher = launcher_for(plan, self.opt)
        self.runs = RunExecution(
            plan=plan,
            launcher=self.launcher,
            options=self.opt,
            run_dir=run_dir,
            emit=self.emit,
            records=self.records,
        )
        stages = registered()
        self.steps: list[Stage] = [s for s in stages if not s.closing]
        self.closing: list[Stage] = [s for s in reversed(stages) if s.closing]  # last registered first
        self.health: HealthMonitor | None = None  # started by the node_health stage
        self._kept: dict[str, RunRecord] = {}
        self.interrupted = False
        if self.opt.resume is not None:
            self._kept = _completed_runs(self.opt.resume)

    # -- events (the StageContext the stages use) ---------------------------------------------------------
    def emit(self, ev: RunEvent) -> None:
        self.state.apply(ev)
        self.bus.publish(ev)

    def stage(self, name: str, st: StageState, detail: str = "") -> None:
        self.emit(StageEvent(stage=name, state=st, detail=detail, at=time.time()))
        if st not in (StageState.RUNNING, StageState.PENDING):
            self.save()

    def save(self) -> None:
        """results.json as it stands (atomic): nothing is lost when the run is interrupted later."""
        self.results.stages = judging.stages_of(self.state)
        self.results.runs = list(self.records.values())
        if self.health is not None:
            self.results.node_health = self.health.records()
            for rec in self.results.runs:
                rec.health_findings = [
                    f for n in self.results.node_health for f in n.findings if f.run == rec.key
                ]
        write_results(self.results, self.run_dir / "results.json")

    async def train(self, stage: str, run: PlannedRun) -> RunRecord:
        kept = self._kept.get(run.key)
        if kept is not None:
            self.records[run.key] = kept
            self.stage(stage, StageState.PASSED, f"kept from {self.opt.resume} (already complete)")
            return kept
        self.stage(stage, StageState.RUNNING, run.key)
        rec = await self.runs.execute(run)
        self.records[run.key] = rec
        detail = rec.reason if rec.outcome != RunOutcome.COMPLETE.value else _failed_metrics(rec)
        self.stage(stage, StageState.PASSED if rec.status == "PASS" else StageState.FAILED, detail)
        return rec

    def judge_checkpoint(self) -> None:
        judging.judge_checkpoint(self.plan, self.records)

    async def stop_active(self) -> None:
        await self.runs.stop_active()

    # -- the suite ---------------------------------------------------------------------------------------
    async def run(self) -> Results:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "plan.json").write_text(_json(self.plan.display_dict()), encoding="utf-8")
        self._announce()
        try:
            for st in self.steps:
                why = await st.run(self)
                if why is not None:
                    self._skip_rest(why)
                    break
        except asyncio.CancelledError:
            self.interrupted = True
            self.stage("interrupted", StageState.FAILED, "stopped by the user (Ctrl-C / SIGTERM)")
            self._skip_rest("interrupted")
            raise
        finally:
            await asyncio.shield(self._finish())
        return self.results

    def _announce(self) -> None:
        """Every stage pending, in the order they will run (a stage's sub-stages after it)."""
        by_name = {s.name: s for s in self.steps}
        closing = [s.name for s in self.closing]
        order = [s for s in self.plan.stages if s.name not in closing] + [
            s for name in closing for s in self.plan.stages if s.name == name
        ]
        for s in order:
            self.emit(StageEvent(stage=s.name, state=StageState.PENDING, detail=s.reason, at=time.time()))
            if s.enabled and s.name in by_name:
                for sub in by_name[s.name].sub_stages(self.plan):
                    self.emit(StageEvent(stage=sub, state=StageState.PENDING, at=time.time()))

    async def _finish(self) -> None:
        await self._stop_health()
        for st in self.closing:
            await st.run(self)
        self.emit(
            SuiteEndEvent(
                passed=self.results_passed(),
                results_path=str(self.run_dir / "results.json"),
                report_path=str(self.run_dir / REPORT_FILES["html"]),
                at=time.time(),
            )
        )

    async def _stop_health(self) -> None:
        """Stop following kernel logs before teardown closes the connections; a fatal finding outside
        any run fails the node_health stage (and so the suite)."""
        if self.health is None:
            return
        outside = await self.health.stop()
        if outside:
            self.stage("node_health", StageState.FAILED, "; ".join(outside)[:400])
        else:
            self.save()

    def results_passed(self) -> bool:
        return self.results.passed and not self.interrupted

    def _skip_rest(self, why: str) -> None:
        """Every stage not started yet (closing ones aside) is skipped with ``why``."""
        done = {s.name for s in self.state.stages.values() if s.state != StageState.PENDING}
        closing = {s.name for s in self.closing}
        names = [s.name for s in self.plan.stages] + [n for s in self.steps for n in s.sub_stages(self.plan)]
        for name in dict.fromkeys(names):  # each stage once, in plan order
            if name not in done and name not in closing:
                self.stage(name, StageState.SKIPPED, why)


def _failed_metrics(rec: RunRecord) -> str:
    fails = [v.message for v in rec.verdicts if v.status == "FAIL"]
    return "; ".join(fails)[:400]


def _completed_runs(run_dir: Path) -> dict[str, RunRecord]:
    """Runs of an earlier attempt that completed (kept by --resume)."""
    path = run_dir / "results.json"
    if not path.exists():
        raise UserError(f"--resume {run_dir}: no results.json there; give a cvs-tui run folder")
    res = load_results(path)
    return {
        r.key: r for r in res.runs if r.outcome == RunOutcome.COMPLETE.value and r.kind in ("smoke", "sweep")
    }


def _json(d: dict[str, Any]) -> str:
    return json.dumps(d, indent=2, sort_keys=False, default=str) + "\n"
