"""The suite: one plan, every node at once, the registered stages in order, from preflight to teardown.

preflight → launch_container → rdma → tokenizer → maxtext_setup → smoke → each run → checkpoint_resume
→ teardown → report (:mod:`.stages`). A failed run does not stop the next; a stage that must stop the
suite (a failed preflight, container launch, set-up or smoke) skips the rest with its reason. The
closing stages (teardown, report) run on every exit path, also on failure, Ctrl-C and SIGTERM.
results.json is saved whenever a stage settles, so nothing is lost when the run is interrupted later.

How trainers start, are followed and are stopped is the launcher's business (:mod:`.launch`); one run
on every rank is :class:`.execute.RunExecution`; when a run failed or hung is :mod:`.watchdog`'s.

Fail-closed by construction: the suite passes only when every planned run was judged complete and
passed and every stage settled as passed or skipped (:attr:`Results.passed` re-derives that from the
records). Anything else is written as a failed ``suite`` stage with its reason before the reports: a
stage left running, a planned run never judged, a run folder that cannot be written, or an exception in
cvs-tui itself (one line; the traceback goes to ``error.log`` in the run folder). The run folder is
locked (``.lock``) while a suite uses it, so a second run on the same folder is refused. ``--resume``
keeps no verdict: a kept run is judged again from its logs under the current config and thresholds.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import time
import traceback
from pathlib import Path
from typing import IO, Any

from cvs_tui.core.bus import EventBus
from cvs_tui.core.errors import UserError
from cvs_tui.core.events import RunEvent, RunOutcome, StageEvent, StageState, SuiteEndEvent
from cvs_tui.core.parse import NodeLogParser
from cvs_tui.core.plan import Plan, PlannedRun
from cvs_tui.core.report import REPORT_FILES
from cvs_tui.core.results import Results, RunRecord, load_results, write_results
from cvs_tui.core.run_folder import LOCK, RunFolder
from cvs_tui.core.runner.execute import RunExecution
from cvs_tui.core.runner.health_watch import HealthMonitor
from cvs_tui.core.runner.launch import Launcher, launcher_for
from cvs_tui.core.runner.stages import registered
from cvs_tui.core.runner.stages.base import Stage
from cvs_tui.core.state import RunState
from cvs_tui.core.watch import judging
from cvs_tui.core.watch.options import RunOptions
from cvs_tui.core.watch.watchdog import Verdict

__all__ = ["RunOptions", "Suite"]

LOCK_FILE = LOCK
ERROR_LOG = "error.log"
VERDICT_STAGE = "suite"  # the stage a structural failure of the suite itself is reported under


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
        self._lock: IO[str] | None = _lock_run_folder(run_dir)  # first: nothing touched in a busy folder
        self.state = RunState()
        self.results: Results = judging.new_results(plan)
        self.records: dict[str, RunRecord] = {}
        self.losses: dict[str, dict[int, float]] = {}  # see RunExecution.losses
        self.launcher: Launcher = launcher_for(plan, self.opt)
        self.runs = RunExecution(
            plan=plan,
            launcher=self.launcher,
            options=self.opt,
            run_dir=run_dir,
            emit=self.emit,
            records=self.records,
            losses=self.losses,
        )
        stages = registered()
        self.steps: list[Stage] = [s for s in stages if not s.closing]
        self.closing: list[Stage] = [s for s in reversed(stages) if s.closing]  # last registered first
        self.health: HealthMonitor | None = None  # started by the node_health stage
        self._kept: dict[str, RunRecord] = {}
        self.interrupted = False
        self.errors: list[str] = []  # what broke the suite itself (run folder, cvs-tui's own code)
        self._announced = False
        try:
            if self.opt.resume is not None:
                self._kept = _completed_runs(self.opt.resume)
        except BaseException:
            self._unlock()
            raise

    # -- events (the StageContext the stages use) ---------------------------------------------------------
    def emit(self, ev: RunEvent) -> None:
        self.state.apply(ev)
        self.bus.publish(ev)
        err = self.bus.write_error
        if err is not None and self.runs.local_error is None:
            self.runs.local_error = f"run folder: {err}"  # the run being watched stops at once
            self._error(self.runs.local_error)

    def stage(self, name: str, st: StageState, detail: str = "") -> None:
        self.emit(StageEvent(stage=name, state=st, detail=detail, at=time.time()))
        if st not in (StageState.RUNNING, StageState.PENDING):
            self.save()

    def save(self) -> None:
        """results.json as it stands (atomic): nothing is lost when the run is interrupted later.

        A failure to write it is not raised: it fails the suite (see :meth:`results_passed`).
        """
        self.results.stages = judging.stages_of(self.state)
        self.results.runs = list(self.records.values())
        if self.health is not None:
            self.results.node_health = self.health.records()
            for rec in self.results.runs:
                rec.health_findings = [
                    f for n in self.results.node_health for f in n.findings if f.run == rec.key
                ]
        try:
            write_results(self.results, RunFolder(self.run_dir).results_path)
        except OSError as exc:
            self._error(f"run folder: cannot write results.json: {_os_error(exc)}")

    async def train(self, stage: str, run: PlannedRun) -> RunRecord:
        kept = self._kept.get(run.key)
        if kept is not None:
            rec = self._rejudge(run, kept)
            if rec is not None:
                self.records[run.key] = rec
                for ev in judging.run_result_events(rec):
                    self.emit(ev)
                src = f"kept from {self.opt.resume}, judged again from its logs"
                ok = rec.status == "PASS"
                self.stage(stage, StageState.PASSED if ok else StageState.FAILED, f"{src}: {_detail(rec)}")
                return rec
        self.stage(stage, StageState.RUNNING, run.key)

        def early(v: Verdict) -> None:
            # the verdict as soon as the watchdog knows it; the judged record follows when the run ends
            self.stage(stage, StageState.FAILED, f"{v.outcome.value} (stopping the other nodes): {v.reason}")

        def failing(reason: str) -> None:
            # a gate the run already fails while it goes on (a stall past its gate); judged at its end
            self.stage(stage, StageState.RUNNING, f"{run.key}: failing (judged at its end): {reason}")

        self.runs.on_failure, self.runs.on_failing = early, failing
        try:
            rec = await self.runs.execute(run)
        finally:
            self.runs.on_failure = self.runs.on_failing = None
        self.records[run.key] = rec
        self.stage(stage, StageState.PASSED if rec.status == "PASS" else StageState.FAILED, _detail(rec))
        return rec

    def _rejudge(self, run: PlannedRun, kept: RunRecord) -> RunRecord | None:
        """A kept run judged again from its logs in the run folder; None (run it again) when they are
        not all there for the plan's nodes."""
        logs = [RunFolder(self.run_dir).logs_dir / run.slug / f"node{n.rank}.log" for n in self.plan.nodes]
        if len(kept.nodes) != len(logs) or not all(p.is_file() for p in logs):
            return None
        collectors = [judging.step_collector() for _ in logs]
        lines: list[int] = []
        try:
            for path, steps in zip(logs, collectors, strict=True):
                parser = NodeLogParser(error_patterns=self.plan.error_patterns)
                with path.open("rb") as fh:
                    while chunk := fh.read(1 << 20):
                        steps.add(parser.feed(chunk))
                steps.add(parser.finish())
                lines.append(parser.lines_seen)
            facts = judging.RunFacts(
                exit_codes=tuple(n.exit_code for n in kept.nodes),
                outcome=RunOutcome(kept.outcome),
                reason=kept.reason,
                root_cause_node=kept.root_cause_node,
                hosts=tuple(n.host for n in self.plan.nodes),
                node_logs=tuple(logs),
                node_lines=tuple(lines),
                started_at=kept.started_at or time.time(),
                ended_at=kept.ended_at or time.time(),
                # what only the live run could see (node health) is taken as recorded, and judged again
                health={
                    m.name: m.value
                    for m in kept.metrics
                    if m.name.startswith("health.") and m.value is not None
                }
                or None,
            )
            rec, losses = judging.judge_run(run, [c.table() for c in collectors], facts)
        finally:
            for c in collectors:
                c.discard()
        if losses is not None:
            self.losses[run.key] = losses
        return rec

    def judge_checkpoint(self) -> None:
        judging.judge_checkpoint(self.plan, self.records, self.losses)

    async def stop_active(self) -> None:
        await self.runs.stop_active()

    # -- the suite ---------------------------------------------------------------------------------------
    async def run(self) -> Results:
        try:
            try:
                self.run_dir.mkdir(parents=True, exist_ok=True)
                _write_text(RunFolder(self.run_dir).plan_path, _json(self.plan.display_dict()))
                self._announce()
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
            except Exception as exc:  # cvs-tui's own failure: recorded as the suite's, never a pass
                self._crashed(exc)
            finally:
                await asyncio.shield(self._finish())
        finally:
            self._unlock()
        return self.results

    def _crashed(self, exc: BaseException) -> None:
        """An exception escaped a stage: the stages it left running fail with it, the rest are skipped."""
        why = _os_error(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
        where = self._write_error_log(exc)
        msg = f"cvs-tui error: {why}" + (f" (details in {where})" if where else "")
        self._error(msg)
        with contextlib.suppress(Exception):
            if not self._announced:
                self._announce()
            for name, sv in list(self.state.stages.items()):
                if sv.state is StageState.RUNNING:
                    self.stage(name, StageState.FAILED, msg)
            self._skip_rest("cvs-tui error")

    def _write_error_log(self, exc: BaseException) -> Path | None:
        path = self.run_dir / ERROR_LOG
        try:
            with path.open("a", encoding="utf-8") as fh:
                fh.write("".join(traceback.format_exception(exc)))
        except OSError:
            return None
        return path

    def _error(self, msg: str) -> None:
        if msg not in self.errors:
            self.errors.append(msg)

    def _unlock(self) -> None:
        if self._lock is not None:
            with contextlib.suppress(OSError):
                self._lock.close()  # closing the descriptor releases the lock
            self._lock = None

    def _announce(self) -> None:
        """Every stage pending, in the order they will run (a stage's sub-stages after it)."""
        self._announced = True
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
        """The closing stages, each on its own (one failing does not stop the next); the suite's own
        verdict goes in before the reports are written."""
        checked = False
        try:
            await self._stop_health()
        except Exception as exc:
            self._crashed(exc)
        for st in self.closing:
            if st.name == "report" and not checked:
                self._settle_verdict()
                checked = True
            try:
                await st.run(self)
            except Exception as exc:
                self._crashed(exc)
        if not checked:
            self._settle_verdict()
        self.emit(
            SuiteEndEvent(
                passed=self.results_passed(),
                results_path=str(RunFolder(self.run_dir).results_path),
                report_path=str(self.run_dir / REPORT_FILES["html"]),
                at=time.time(),
            )
        )

    def _settle_verdict(self) -> None:
        """Records, as a failed ``suite`` stage, anything that keeps the suite from passing that no stage
        or run reports already."""
        problems = list(self.errors)
        closing = {s.name for s in self.closing}
        open_ = [
            f"{name} {sv.state.value}"
            for name, sv in self.state.stages.items()
            if sv.state in (StageState.RUNNING, StageState.PENDING) and name not in closing
        ]
        if open_:
            problems.append(f"stage(s) never finished: {', '.join(open_)}")
        failed = any(sv.state is StageState.FAILED for sv in self.state.stages.values())
        missing = [r.key for r in self.plan.runs if r.key not in self.records]
        if missing and not failed and not self.interrupted:
            problems.append(f"{len(missing)} planned run(s) never judged: {', '.join(missing)}")
        if problems:
            self.stage(VERDICT_STAGE, StageState.FAILED, "; ".join(problems)[:1000])

    async def _stop_health(self) -> None:
        """Stop following kernel logs before teardown closes the connections; a fatal finding outside
        any run fails the node_health stage (and so the suite)."""
        if self.health is None:
            return
        outside = await self.health.stop()
        if outside:
            self.stage("node_health", StageState.FAILED, "; ".join(outside)[:400])
            return
        # the stage itself ran; what its findings did to the runs is said on its row too, so the
        # stages table never reads "passed" alone while fatal findings failed runs
        failed = sorted(
            {
                f.run
                for n in self.health.records()
                for f in n.findings
                if f.severity == "fatal" and f.run in self.records and self.records[f.run].status == "FAIL"
            }
        )
        sv = self.state.stages.get("node_health")
        if failed and sv is not None and sv.state is StageState.PASSED:
            detail = f"{sv.detail}; fatal findings failed {len(failed)} run(s): {', '.join(failed)}"
            self.stage("node_health", StageState.PASSED, detail[:400])
        else:
            self.save()

    def results_passed(self) -> bool:
        planned = {r.key for r in self.plan.runs}
        return (
            self.results.passed
            and not self.interrupted
            and not self.errors
            and planned <= set(self.records)
            and all(self.records[k].status == "PASS" for k in planned)
        )

    def _skip_rest(self, why: str) -> None:
        """Every stage not started yet (closing ones aside) is skipped with ``why``."""
        done = {s.name for s in self.state.stages.values() if s.state != StageState.PENDING}
        closing = {s.name for s in self.closing}
        names = [s.name for s in self.plan.stages] + [n for s in self.steps for n in s.sub_stages(self.plan)]
        for name in dict.fromkeys(names):  # each stage once, in plan order
            if name not in done and name not in closing:
                self.stage(name, StageState.SKIPPED, why)


def _detail(rec: RunRecord) -> str:
    """A run stage's detail: why it did not complete, or the verdicts that failed."""
    if rec.outcome != RunOutcome.COMPLETE.value:
        return rec.reason
    fails = [v.message for v in rec.verdicts if v.status == "FAIL"]
    return "; ".join(fails)[:400]


def _completed_runs(run_dir: Path) -> dict[str, RunRecord]:
    """Runs of an earlier attempt that completed: candidates that --resume judges again from their logs."""
    path = RunFolder(run_dir).results_path
    if not path.exists():
        raise UserError(f"--resume {run_dir}: no results.json there; give a cvs-tui run folder")
    res = load_results(path)
    return {
        r.key: r for r in res.runs if r.outcome == RunOutcome.COMPLETE.value and r.kind in ("smoke", "sweep")
    }


def _lock_run_folder(run_dir: Path) -> IO[str]:
    """An exclusive lock on the run folder for as long as the returned file stays open."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fh = (run_dir / LOCK_FILE).open("a+", encoding="utf-8")
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().strip()[:100]
        fh.close()
        raise UserError(
            f"--out {run_dir}: another cvs-tui run is using this run folder"
            + (f" ({holder})" if holder else "")
            + "; wait for it to end or give another --out"
        ) from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"pid {os.getpid()} on {os.uname().nodename}\n")
    fh.flush()
    return fh


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _os_error(exc: OSError) -> str:
    what = "disk full" if exc.errno in (28, 122) else (exc.strerror or str(exc))
    return f"{what}" + (f" ({exc.filename})" if exc.filename else "")


def _json(d: dict[str, Any]) -> str:
    return json.dumps(d, indent=2, sort_keys=False, default=str) + "\n"
