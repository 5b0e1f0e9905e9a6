"""One planned run on every rank: start it, follow each rank's log, watch it, stop it, judge it.

Each rank's log is followed by one stream from the launcher (resuming at its byte offset after a
disconnect), copied byte for byte into the run folder and fed to that rank's parser as it arrives;
every event goes onto the bus (front-ends, events.jsonl) and into the run state. A run ends as complete
(every rank exited 0), failed (a fatal signature or NaN on any rank, a non-zero exit, a node lost: the
first rank to fail is the root cause) or hung, as :func:`.watchdog.decide` says. The judge (the same
code `analyze` uses) makes the run's record.

Fail-closed details: a rank's exit status comes only from the launcher's ``<log>.exit`` file (polled;
an ``EXIT_CODE=`` line in the log only makes the poll come sooner, since a trainer can print one);
a reader that dies or a write to the run folder that fails (a full disk) ends the run as failed at
once; every rank is stopped at the end of every run, also one that exited (its leftovers). Turning a
rank's bytes into events (and the memory bounds on that) is :mod:`.ingest`'s, shared with follow mode.

Long because starting, following, watching, stopping and judging a run share one RunExecution's state
(the ranks' streams, exit codes, reachability and the watch loop's wake-ups).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from cvs_tui.core.events import (
    NodeState,
    NodeStatusEvent,
    RunEndEvent,
    RunEvent,
    RunOutcome,
    RunStartEvent,
    Severity,
)
from cvs_tui.core.health.model import (
    Attribution,
    HealthFinding,
    NodeHealth,
    RunWindow,
    attribute,
    health_metrics,
)
from cvs_tui.core.health.model import failure_reason as health_failure_reason
from cvs_tui.core.health.straggler import find_straggler, run_evidence, straggler_record, straggler_verdict
from cvs_tui.core.parse import NodeLogParser
from cvs_tui.core.parse.endings import read_ending
from cvs_tui.core.plan import Plan, PlannedRun
from cvs_tui.core.results import NodeHealthRecord, RunRecord
from cvs_tui.core.run_folder import RunFolder
from cvs_tui.core.runner.launch import Job, Launcher, LaunchFailed, NodeLost
from cvs_tui.core.runner.nodes.script import pid_file
from cvs_tui.core.watch import judging
from cvs_tui.core.watch.ingest import (
    WARNINGS_KEPT,
    RankLog,
    append_bytes,
    feed_rank,
    finish_rank,
    split_lines,
)
from cvs_tui.core.watch.options import RunOptions
from cvs_tui.core.watch.watchdog import NodeWatch, Verdict, decide, lost_reason, next_deadline

_EXIT_HINT = re.compile(r"(?<!\S)EXIT_CODE=-?\d+\s*$")  # a hint to read <log>.exit now, never the status
TICK_S = 0.25  # how often the watchdog looks (and at each rank's hang deadline, and when a rank fails)
DEADLINE_SLACK_S = 0.001  # the shortest wait: a deadline the clock has just reached is looked at next
EXIT_POLL_S = 1.0  # how often each running rank's <log>.exit is read
STOP_WAIT_S = 20.0  # how long stopped ranks get to log their exit
# a rank's state that may decide the run: the watchdog looks at once rather than at its next tick
_LOOK_NOW = frozenset({NodeState.FAILED, NodeState.DONE, NodeState.UNREACHABLE})
__all__ = ["WARNINGS_KEPT", "RankLog", "RunExecution"]


class RunExecution:
    """Runs planned runs one at a time; ``active``: the ranks that may still be running (for teardown).

    ``records`` receives a run's record also when the run is interrupted (judged as far as it got).
    """

    def __init__(
        self,
        *,
        plan: Plan,
        launcher: Launcher,
        options: RunOptions,
        run_dir: Path,
        emit: Callable[[RunEvent], None],
        records: dict[str, RunRecord],
        clock: Callable[[], float] = time.time,
        losses: dict[str, dict[int, float]] | None = None,
    ) -> None:
        self.plan = plan
        self.launcher = launcher
        self.opt = options
        self.run_dir = run_dir
        self.emit = emit
        self.records = records
        # by run key, the losses the checkpoint-resume verdicts compare, where a record's series is bounded
        self.losses: dict[str, dict[int, float]] = {} if losses is None else losses
        self.clock = clock
        self.job: Job | None = None
        self.active: list[int] = []
        self.local_error: str | None = None  # a write to the run folder failed: the run must stop
        self._exit_now = asyncio.Event()  # an EXIT_CODE line was seen: read the .exit files now
        self._look_now = asyncio.Event()  # a rank failed, exited or was lost: the watchdog looks now
        # node health (set by the node_health stage): attribution windows, findings per run
        self.health_nodes: list[NodeHealth] | None = None
        self.windows: list[RunWindow] = []
        self._current: tuple[str, float, list[RankLog], dict[int, list[tuple[int, float]]]] | None = None
        self.health_findings: dict[str, list[HealthFinding]] = {}
        # told the watchdog's verdict as soon as it is known (the suite publishes it as the run stage's)
        self.on_failure: Callable[[Verdict], None] | None = None
        # told when the run is known to fail a gate while it goes on (a stall past its gate)
        self.on_failing: Callable[[str], None] | None = None
        self._stalls: judging.LiveStalls | None = None  # the current run's stall gates, live
        # every node's telemetry, host timing and findings so far (set by the node_health stage)
        self.health_records: Callable[[], list[NodeHealthRecord]] | None = None

    async def stop_active(self) -> None:
        if self.job is not None and self.active:
            await self.job.cancel(self.active)
        self.active = []

    async def execute(self, pr: PlannedRun) -> RunRecord:
        started = self.clock()
        local_dir = RunFolder(self.run_dir).logs_dir / pr.slug
        ranks: list[RankLog] = []
        for n in self.plan.nodes:
            local = local_dir / f"node{n.rank}.log"
            ranks.append(
                RankLog(
                    watch=NodeWatch(rank=n.rank, host=n.host, last_progress=started),
                    local_log=local,
                    parser=NodeLogParser(error_patterns=self.plan.error_patterns),
                )
            )
        self.emit(
            RunStartEvent(
                run=pr.key, total_steps=pr.steps, nodes=tuple(n.host for n in self.plan.nodes), at=started
            )
        )
        self._stalls = judging.live_stalls(pr, len(ranks))
        # the run's window opens now: a kernel line while the ranks start belongs to it (before step 1)
        self._current = (pr.key, started, ranks, {r.watch.rank: [] for r in ranks})
        try:
            local_dir.mkdir(parents=True, exist_ok=True)
            for r in ranks:
                r.local_log.write_bytes(b"")
        except OSError as exc:
            self._local_failed(exc, local_dir)
            why = self.local_error or str(exc)
            return self._finalize(pr, ranks, Verdict(RunOutcome.FAILED, why, None, started), started)
        try:
            self.job = await self.launcher.start(pr)
        except LaunchFailed as exc:
            self.job = exc.job
            self.active = [r.watch.rank for r in ranks if r.watch.rank not in exc.errors]
            for rank in self.active:
                self._node_status(pr.key, rank, NodeState.STARTING)
            first = min(exc.errors)
            reason = f"node {first} ({ranks[first].watch.host}): launch failed: {exc.errors[first]}"
            for rank, err in sorted(exc.errors.items()):
                self._node_status(pr.key, rank, NodeState.FAILED, f"launch failed: {err}")
            await self.stop_active()
            return self._finalize(pr, ranks, Verdict(RunOutcome.FAILED, reason, first, started), started)
        self.active = [r.watch.rank for r in ranks]  # teardown stops them, even if this is interrupted
        for r in ranks:
            self._node_status(pr.key, r.watch.rank, NodeState.STARTING)
        try:
            verdict = await self._watch(pr, self.job, ranks)
        except asyncio.CancelledError:
            # judge what ran so far, then let the interruption go on to teardown
            stopped = Verdict(RunOutcome.INTERRUPTED, "interrupted", None, started)
            self.records[pr.key] = self._finalize(pr, ranks, stopped, started)
            self.active = []
            raise
        self.active = []
        return self._finalize(pr, ranks, verdict, started)

    # -- watching ----------------------------------------------------------------------------------------
    async def _watch(self, pr: PlannedRun, job: Job, ranks: list[RankLog]) -> Verdict:
        readers = [asyncio.create_task(self._follow(pr, job, r)) for r in ranks]
        poller = asyncio.create_task(self._poll_exits(pr, job, ranks))
        watches = [r.watch for r in ranks]
        verdict: Verdict | None = None
        try:
            while True:
                await self._until_next_look(watches, hunting=verdict is None)
                broken = self._broken(readers, poller)
                if broken is not None and (verdict is None or verdict.outcome is not RunOutcome.FAILED):
                    verdict = Verdict(RunOutcome.FAILED, broken, None, self.clock())
                    break
                self._links(pr, job, watches)
                self._silences(watches)
                was = verdict
                verdict, stop = decide(watches, self.clock(), self.opt, verdict)
                if verdict is not None and was is None:
                    if verdict.outcome is RunOutcome.HUNG and verdict.root is not None:
                        self._node_status(pr.key, verdict.root, NodeState.HUNG, verdict.reason)
                    if self.on_failure is not None:
                        self.on_failure(verdict)  # the cause is known: say so before the others are stopped
                if stop:
                    break
        finally:
            await self._stop_still_running(pr, job, watches)
            poller.cancel()
            for r in ranks:
                job.stop_following(r.watch.rank)
            await asyncio.gather(*readers, poller, return_exceptions=True)
            for r in ranks:
                await self._drain(pr, job, r)
                with contextlib.suppress(NodeLost, OSError):
                    r.ending = read_ending(await job.scheduler_lines(r.watch.rank))
        return verdict or Verdict(RunOutcome.COMPLETE, "", None, self.clock())

    def _links(self, pr: PlannedRun, job: Job, watches: Sequence[NodeWatch]) -> None:
        """Whether each running rank's node can be reached; one down for ``lost_after_s`` is lost."""
        now = self.clock()
        for w in watches:
            if w.done:
                continue
            w.on_link(job.link_down(w.rank), now)
            if (why := lost_reason(w, now, self.opt)) is not None:
                w.lost = why
                self._node_status(pr.key, w.rank, NodeState.UNREACHABLE, f"lost: {why}")

    def _silences(self, watches: Sequence[NodeWatch]) -> None:
        """A running rank silent past its stall limit has a stall in progress (judge.live_stalls)."""
        if self._stalls is None or not self._stalls.gates or self._stalls.broken is not None:
            return
        now = self.clock()
        for w in watches:
            if not w.done and w.steps_seen:
                self._gate_broken(self._stalls.on_silence(w.rank, now - w.last_progress))

    async def _until_next_look(self, watches: Sequence[NodeWatch], *, hunting: bool) -> None:
        """Sleep ``TICK_S``, less when a rank's hang budget runs out sooner (``hunting``: no failure yet;
        the hang is called at its budget, not at the next look after it), or until a rank failed, exited
        or was lost."""
        wait = TICK_S
        due = next_deadline(watches, self.opt) if hunting else None
        if due is not None:
            wait = min(wait, max(due - self.clock(), DEADLINE_SLACK_S))
        self._look_now.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._look_now.wait(), wait)

    def _broken(self, readers: Sequence[asyncio.Task[None]], poller: asyncio.Task[None]) -> str | None:
        """Why the run cannot be followed any more (the run folder cannot be written, a reader died)."""
        if self.local_error is not None:
            return self.local_error
        for rank, t in enumerate([*readers, poller]):
            if t.done() and not t.cancelled() and (exc := t.exception()) is not None:
                who = f"following node {rank}" if rank < len(readers) else "reading the exit statuses"
                return f"cvs-tui error {who}: {type(exc).__name__}: {exc}"
        return None

    async def _poll_exits(self, pr: PlannedRun, job: Job, ranks: list[RankLog]) -> None:
        """Reads each running rank's recorded exit status (the launcher's ``.exit`` file) until all exited."""

        async def one(w: NodeWatch) -> None:
            try:
                code = await job.exit_status(w.rank)
            except Exception:
                return
            if code is not None and w.exit_code is None:
                self._exited(pr, w, code)

        while True:
            self._exit_now.clear()
            await asyncio.gather(*(one(r.watch) for r in ranks if not r.watch.done))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit_now.wait(), EXIT_POLL_S)

    async def _stop_still_running(self, pr: PlannedRun, job: Job, watches: Sequence[NodeWatch]) -> None:
        """Stop every rank: the running ones as victims, the exited ones for whatever they left behind."""
        still = [w for w in watches if not w.done]
        for w in still:
            w.stopping = True  # their exit status is ours (TERM), not a failure of theirs
        await job.cancel([w.rank for w in watches if not w.lost])
        for w in still:
            if w.state is not NodeState.STOPPED:
                w.state = NodeState.STOPPED
                self._node_status(pr.key, w.rank, NodeState.STOPPED, "stopped by cvs-tui")
        end = self.clock() + STOP_WAIT_S
        while self.clock() < end and any(not w.done for w in still):
            self._exit_now.set()
            await asyncio.sleep(0.2)

    async def _follow(self, pr: PlannedRun, job: Job, r: RankLog) -> None:
        w = r.watch
        try:
            async for chunk in job.follow(w.rank):
                self._ingest(pr, r, chunk)
                if w.exit_code is not None or self.local_error is not None:
                    return
        except NodeLost as exc:
            w.lost = str(exc)
            self._node_status(pr.key, w.rank, NodeState.UNREACHABLE, str(exc))

    async def _drain(self, pr: PlannedRun, job: Job, r: RankLog) -> None:
        """After the reader stopped: whatever the node wrote since (its last lines, EXIT_CODE)."""
        if r.watch.lost or self.local_error is not None:
            return
        with contextlib.suppress(NodeLost):
            rest = await job.read_rest(r.watch.rank)
            if rest:
                self._ingest(pr, r, rest)

    # -- ingesting ---------------------------------------------------------------------------------------
    def _local_failed(self, exc: OSError, path: Path) -> None:
        if self.local_error is None:
            what = "disk full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else (exc.strerror or str(exc))
            self.local_error = f"run folder: {what} (writing {path})"

    def _ingest(self, pr: PlannedRun, r: RankLog, chunk: bytes) -> None:
        w = r.watch
        if self.local_error is not None:
            return  # the copy can no longer be kept byte for byte: the run is being stopped
        try:
            append_bytes(r.local_log, chunk)
        except OSError as exc:
            self._local_failed(exc, r.local_log)
            return
        lines = feed_rank(
            r,
            pr.key,
            chunk,
            now=self.clock(),
            emit=self.emit,
            node_status=self._node_status,
            on_train_step=self._on_train_step,
        )
        if w.exit_code is None and lines and _EXIT_HINT.search(lines[-1]):
            self._exit_now.set()  # the launcher's last line, or a trainer's imitation: read .exit

    def _on_train_step(self, rank: int, step: int, seconds: float | None, now: float) -> None:
        if self._current is not None:
            self._current[3].setdefault(rank, []).append((step, now))
        if self._stalls is not None:
            self._gate_broken(self._stalls.on_step(rank, step, seconds))

    def _gate_broken(self, broken: judging.GateBroken | None) -> None:
        """A stall gate the run broke, told at once: the node is marked stalled and the run failing, in
        the words of the verdict the judge will give when the run ends (the run goes on to its end)."""
        if broken is None or self._current is None:
            return
        detail = f"stall past its gate at step {broken.step}: {broken.message}"
        self._node_status(self._current[0], broken.node, NodeState.STALLED, detail)
        if self.on_failing is not None:
            self.on_failing(f"node {broken.node}: {detail}")

    @staticmethod
    def _split(r: RankLog, chunk: bytes) -> list[str]:
        """See :func:`.ingest.split_lines`."""
        return split_lines(r, chunk)

    def _exited(self, pr: PlannedRun, w: NodeWatch, code: int) -> None:
        w.exit_code = code
        if code == 0 and w.first_fatal_at is None:
            w.state = NodeState.DONE
            self._node_status(pr.key, w.rank, NodeState.DONE, "exit 0")
        elif w.stopping and w.first_fatal_at is None:
            w.state = NodeState.STOPPED
            self._node_status(pr.key, w.rank, NodeState.STOPPED, f"stopped by cvs-tui (exit {code})")
        elif w.state is not NodeState.FAILED:
            w.state = NodeState.FAILED
            self._node_status(pr.key, w.rank, NodeState.FAILED, f"exit {code}")

    # -- node health ------------------------------------------------------------------------------------
    def on_health_finding(self, finding: HealthFinding) -> Attribution:
        """The run/step ``finding`` falls in; a fatal one inside the current run fails it (that node)."""
        windows = list(self.windows)
        cur = self._current
        if cur is not None:
            windows.append(RunWindow(cur[0], cur[1], None, {k: tuple(v) for k, v in cur[3].items()}))
        a = attribute(finding, windows)
        if a.run is not None:
            self.health_findings.setdefault(a.run, []).append(finding)
        if cur is None or a.run != cur[0] or finding.severity is not Severity.FATAL:
            return a
        w = next((r.watch for r in cur[2] if r.watch.rank == finding.node), None)
        if w is not None and w.first_fatal_at is None:
            reason = health_failure_reason(finding)
            w.on_external_fatal(reason, self.clock())
            w.state = NodeState.FAILED
            self._node_status(cur[0], w.rank, NodeState.FAILED, reason)
        return a

    def trainer_pid_file(self, rank: int) -> str | None:
        """The running trainer's ``<log>.pid`` on its node (host timing reads its process), if known.

        Only for trainers run on the host: inside a container the pid belongs to another namespace."""
        paths = getattr(self.job, "log_paths", None)
        if self._current is None or self.plan.container_runtime != "host" or not isinstance(paths, list):
            return None
        return pid_file(paths[rank]) if rank < len(paths) else None

    def _end_window(self, key: str) -> None:
        cur = self._current
        if cur is not None and cur[0] == key:
            self.windows.append(
                RunWindow(key, cur[1], self.clock(), {k: tuple(v) for k, v in cur[3].items()})
            )
            self._current = None

    def _health_metrics(self, key: str) -> dict[str, float] | None:
        if self.health_nodes is None:
            return None
        return health_metrics(self.health_findings.get(key, ()), self.health_nodes)

    # -- judging -----------------------------------------------------------------------------------------
    def _finalize(self, pr: PlannedRun, ranks: list[RankLog], verdict: Verdict, started: float) -> RunRecord:
        self._end_window(pr.key)
        for r in ranks:
            finish_rank(r, pr.key, self.emit)
        try:
            facts = judging.RunFacts(
                exit_codes=tuple(r.watch.exit_code for r in ranks),
                outcome=verdict.outcome,
                reason=verdict.reason,
                root_cause_node=verdict.root,
                hosts=tuple(r.watch.host for r in ranks),
                node_logs=tuple(r.local_log for r in ranks),
                node_lines=tuple(r.parser.lines_seen for r in ranks),
                started_at=started,
                ended_at=self.clock(),
                health=self._health_metrics(pr.key),
                endings=tuple(r.ending for r in ranks),
            )
            rec, losses = judging.judge_run(pr, [r.steps.table() for r in ranks], facts)
        finally:
            for r in ranks:
                r.steps.discard()
        if losses is not None:
            self.losses[pr.key] = losses
        for r in ranks:
            if r.dropped_warnings and r.watch.rank < len(rec.nodes):
                rec.nodes[r.watch.rank].warnings += r.dropped_warnings
                rec.notes.append(
                    f"node {r.watch.rank}: {r.dropped_warnings} more warning hits counted, not kept "
                    f"(the first {WARNINGS_KEPT} are)"
                )
        root = verdict.root
        rw = ranks[root].watch if root is not None and root < len(ranks) else None
        lost = rw is not None and bool(rw.lost) and rw.exit_code is None
        if (
            rw is not None
            and verdict.outcome is RunOutcome.FAILED
            and (rw.fatal_reason == verdict.reason or lost)
        ):
            # a kernel-log finding or a lost node failed the run: the judge sees only the logs (the
            # victims' TERM exit codes), so the watchdog's root cause and reason stand
            rec.outcome, rec.status = RunOutcome.FAILED.value, "FAIL"
            rec.reason, rec.root_cause_node = verdict.reason, root
        self._name_straggler(rec)
        for verdict_ev in judging.run_result_events(rec):
            self.emit(verdict_ev)
        self.emit(
            RunEndEvent(
                run=pr.key,
                outcome=RunOutcome(rec.outcome),
                reason=rec.reason,
                root_cause_node=rec.root_cause_node,
                at=self.clock(),
            )
        )
        return rec

    def _name_straggler(self, rec: RunRecord) -> None:
        """The node that held this run back and why (health/straggler.py), as a record and a RECORD
        verdict; nothing when node health is not watched or no node stands out."""
        window = self.windows[-1] if self.windows and self.windows[-1].run == rec.key else None
        if self.health_records is None or window is None:
            return
        nodes, job = run_evidence(rec, self.health_records(), window)
        cause = find_straggler(nodes, job)
        if cause is not None:
            rec.straggler_cause = straggler_record(cause)
            rec.verdicts.append(straggler_verdict(cause))

    def _node_status(self, run: str, rank: int, st: NodeState, detail: str = "") -> None:
        if st in _LOOK_NOW:
            self._look_now.set()
        host = self.plan.nodes[rank].host if rank < len(self.plan.nodes) else f"node{rank}"
        self.emit(NodeStatusEvent(run=run, node=rank, host=host, state=st, detail=detail, at=self.clock()))
