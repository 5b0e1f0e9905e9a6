"""Follow mode: a run cvs-tui did not launch, watched from its growing logs and judged as `analyze` does.

For schedulers cvs-tui cannot drive (Kubernetes/XPK), each node's log is followed by one
:class:`~cvs_tui.core.watch.followers.Follower` (a growing file, or stdin). Every chunk is copied byte
for byte into the run folder (``logs/<slug>/node<rank>.log``, so `attach` and a later `analyze` of the folder
work) and goes through the live run's per-rank ingestion (:func:`~cvs_tui.core.watch.ingest.feed_rank`):
the same raw lines, parsed events and node states a live run publishes. Nothing was launched, so
nothing is stopped: a node past the watchdog's no-progress limit is shown as ``stalled`` ("no progress
for N s") and goes back to ``training`` at its next step. When every stream has ended (EOF) or
:meth:`FollowSession.stop` is called, the copies are judged by
:func:`~cvs_tui.core.sources.offline.analyze_paths` (exactly `analyze` of those logs) and results.json and
the reports are written into the run folder.
"""

from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cvs_tui.core.errors import UserError
from cvs_tui.core.events import (
    NodeState,
    NodeStatusEvent,
    RunEndEvent,
    RunEvent,
    RunOutcome,
    RunStartEvent,
    StageEvent,
    StageState,
    SuiteEndEvent,
)
from cvs_tui.core.judge.finalize import stall_events, verdict_events
from cvs_tui.core.parse import NodeLogParser
from cvs_tui.core.parse.dialects import is_exit_line
from cvs_tui.core.plan import Plan
from cvs_tui.core.report import write_reports
from cvs_tui.core.results import Results, RunRecord, StageRecord
from cvs_tui.core.run_folder import RunFolder
from cvs_tui.core.sources.offline import analyze_paths
from cvs_tui.core.watch.followers import Follower
from cvs_tui.core.watch.ingest import RankLog, feed_rank, finish_rank
from cvs_tui.core.watch.options import RunOptions
from cvs_tui.core.watch.watchdog import NodeWatch, find_hang

TICK_S = 0.25  # how often stalls are looked for
STALL_UPDATE_S = 5.0  # a stalled node's "no progress for N s" is republished this often
STAGE = "follow"
MAX_BACKLOG = 20000  # events a viewer may lag behind before following pauses
BACKLOG_WAIT_S = 0.01


@dataclass
class _Rank:
    log: RankLog
    follower: Follower
    ended: bool = False  # its stream ended by itself (EOF), not because following was stopped
    exit_seen: bool = False  # the log's own exit line (EXIT_CODE=N) arrived: nothing more will come
    stall_shown: float | None = None  # when the current stall was last published


class FollowSession:
    """Follows one planned run's node logs (index = rank) into ``run_dir``; :meth:`run` returns the results.

    ``emit`` receives every event (an :class:`~cvs_tui.core.bus.EventBus`'s ``publish``); ``backlog``
    says how far its slowest reader lags (the bus's ``backlog``), and following pauses past
    ``MAX_BACKLOG`` so memory stays bounded however fast the logs come. ``options`` gives the no-progress
    limits (the watchdog's; here they only mark a node stalled).
    """

    def __init__(
        self,
        plan: Plan,
        run_key: str,
        followers: Sequence[Follower],
        run_dir: Path,
        *,
        emit: Callable[[RunEvent], None],
        options: RunOptions | None = None,
        clock: Callable[[], float] = time.time,
        tick_s: float = TICK_S,
        backlog: Callable[[], int] = lambda: 0,
        idle_exit_s: float | None = None,
    ) -> None:
        if not followers:
            raise UserError("--logs: give one log per node (a file path, or - for standard input)")
        self.plan = plan
        self.run = plan.run(run_key)
        self.followers = list(followers)
        self.folder = RunFolder(run_dir)
        self.emit = emit
        self.opt = options or RunOptions()
        self.clock = clock
        self.tick_s = tick_s
        self.backlog = backlog  # events published and not yet read by the slowest viewer
        self.names = tuple(f.name for f in self.followers)
        self.stopped = False  # stop() was called (the user ended following)
        self.error: str | None = None  # why following could not go on (a copy could not be written)
        self.results: Results | None = None
        self.paths: dict[str, Path] = {}  # what the judging wrote: results, html, junit, md
        # stop after this long with no byte from any log (--idle-exit); None: follow until stopped
        self.idle_exit_s = idle_exit_s
        self.last_byte = 0.0  # clock time of the last byte from any log
        self.ended_by = ""  # why following ended by itself: said in the follow stage's detail

    def stop(self) -> None:
        """End following: each follower hands out what is already there, then the run is judged."""
        self.stopped = True
        for f in self.followers:
            f.stop()

    def copies(self) -> list[Path]:
        return [self.folder.node_log(self.run.slug, rank) for rank in range(len(self.followers))]

    async def follow(self) -> Results:
        """Follow until every stream ended or :meth:`stop`; then judge, write the reports and return them."""
        started = self.clock()
        ranks = self._open(started)
        self.emit(StageEvent(stage=STAGE, state=StageState.RUNNING, detail=", ".join(self.names), at=started))
        self.emit(RunStartEvent(run=self.run.key, total_steps=self.run.steps, nodes=self.names, at=started))
        self.last_byte = started
        for r in ranks:
            path = getattr(r.follower, "path", None)
            if isinstance(path, str) and path != "-" and not Path(path).exists():
                # the log is not there yet: say so rather than "starting" something that may never come
                st, detail = NodeState.WAITING, f"waiting for {r.follower.name} to appear"
            else:
                st, detail = NodeState.STARTING, f"following {r.follower.name}"
            r.log.watch.state = st
            self._node_status(self.run.key, r.log.watch.rank, st, detail)
        pumps = {asyncio.create_task(self._pump(r)) for r in ranks}
        try:
            pending = set(pumps)
            while pending:
                _, pending = await asyncio.wait(pending, timeout=self.tick_s)
                self._check_stalls(ranks)
                if not self.stopped and self._ended_by_itself(ranks):
                    self.stop()
                broken = any(t.done() and not t.cancelled() and t.exception() for t in pumps)
                if (self.error is not None or broken) and not self.stopped:
                    self.stop()  # one node's log cannot be followed: judging the rest would be partial
        finally:
            if any(not t.done() for t in pumps):  # cancelled from outside: stop the followers too
                self.stop()
                await asyncio.gather(*pumps, return_exceptions=True)
        for t in pumps:
            if (exc := t.exception()) is not None and self.error is None:
                self.error = (
                    str(exc)
                    if isinstance(exc, UserError)
                    else f"--logs: following failed: {type(exc).__name__}: {exc}"
                )
        if self.error is not None:
            raise UserError(self.error)
        for r in ranks:
            finish_rank(r.log, self.run.key, self.emit)
        return self._judge(ranks, started)

    # -- following ---------------------------------------------------------------------------------------
    def _open(self, started: float) -> list[_Rank]:
        ranks: list[_Rank] = []
        for rank, (f, path) in enumerate(zip(self.followers, self.copies(), strict=True)):
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(b"")
            except OSError as exc:
                raise UserError(f"--out: cannot write {path} ({exc.strerror or exc})") from None
            watch = NodeWatch(rank=rank, host=f.name, last_progress=started)
            parser = NodeLogParser(error_patterns=self.plan.error_patterns)
            # the judge reads the copy: no parsed step is kept in memory while following (M6)
            log = RankLog(watch=watch, local_log=path, parser=parser, keep_steps=False)
            ranks.append(_Rank(log, f))
        return ranks

    async def _pump(self, r: _Rank) -> None:
        async for chunk in r.follower.chunks():
            try:
                with r.log.local_log.open("ab") as fh:
                    fh.write(chunk)
            except OSError as exc:
                # the copy can no longer be byte-identical: judging it would judge another log
                what = (
                    "disk full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else (exc.strerror or str(exc))
                )
                self.error = f"run folder: {what} (writing {r.log.local_log})"
                return
            self.last_byte = self.clock()
            if r.log.watch.state is NodeState.WAITING:
                r.log.watch.state = NodeState.STARTING
                self._node_status(
                    self.run.key, r.log.watch.rank, NodeState.STARTING, f"following {r.follower.name}"
                )
            lines = feed_rank(
                r.log, self.run.key, chunk, now=self.clock(), emit=self.emit, node_status=self._node_status
            )
            if lines and is_exit_line(lines[-1]):
                r.exit_seen = True
            # back pressure: while the viewers are behind, read no more (the follower waits, not memory)
            while self.backlog() > MAX_BACKLOG and not self.stopped:
                await asyncio.sleep(BACKLOG_WAIT_S)
        r.ended = not self.stopped

    def _ended_by_itself(self, ranks: Sequence[_Rank]) -> bool:
        """Every log wrote its own exit line (EXIT_CODE=N: nothing more will come), or nothing arrived
        for ``idle_exit_s``: following ends as if stopped, and the logs are judged."""
        if ranks and all(r.exit_seen or r.ended for r in ranks) and any(r.exit_seen for r in ranks):
            self.ended_by = "every log wrote its exit line"
            return True
        if self.idle_exit_s is not None and self.clock() - self.last_byte >= self.idle_exit_s:
            self.ended_by = f"no new line for {self.idle_exit_s:g} s (--idle-exit)"
            return True
        return False

    def _check_stalls(self, ranks: Sequence[_Rank]) -> None:
        """Mark a node that passed the watchdog's no-progress limit as stalled (republished every few s)."""
        now = self.clock()
        for r in ranks:
            w = r.log.watch
            if r.ended or self.stopped or w.first_fatal_at is not None:
                continue
            hang = find_hang([w], now, self.opt)
            if hang is None:
                r.stall_shown = None  # a step came (feed_rank set the node training again)
                continue
            if r.stall_shown is not None and now - r.stall_shown < STALL_UPDATE_S:
                continue
            r.stall_shown = now
            w.state = NodeState.STALLED
            detail = hang[1].split(": ", 1)[-1]  # "no progress for N s waiting for ..."
            self._node_status(self.run.key, w.rank, NodeState.STALLED, detail)

    def _node_status(self, run: str, rank: int, st: NodeState, detail: str = "") -> None:
        host = self.names[rank] if rank < len(self.names) else f"node{rank}"
        self.emit(NodeStatusEvent(run=run, node=rank, host=host, state=st, detail=detail, at=self.clock()))

    # -- judging -----------------------------------------------------------------------------------------
    def _judge(self, ranks: Sequence[_Rank], started: float) -> Results:
        """`analyze` of the copies; its verdicts, the run's end and the suite's end as events."""
        for r in ranks:
            r.log.steps.discard()  # the copies are judged from disk, as `analyze` judges them
        results = analyze_paths(self.plan, self.copies(), self.run.key)
        # following itself is a stage of its own, timed from the start: the run's duration is the
        # following's, not the second its judging took
        how = self.ended_by or ("stopped" if self.stopped else "every stream ended")
        results.stages.insert(
            0,
            StageRecord(
                name=STAGE,
                state="passed",
                detail=f"{how}: {', '.join(self.names)}",
                started_at=started,
                ended_at=self.clock(),
            ),
        )
        paths = {"results": self.folder.write_results(results), **write_reports(results, self.folder.path)}
        self.results, self.paths = results, paths
        rec = next(r for r in results.runs if r.key == self.run.key)
        self._final_node_states(ranks, rec)
        for verdict in verdict_events(rec):
            self.emit(verdict)
        for stalls in stall_events(rec):
            self.emit(stalls)
        now = self.clock()
        self.emit(
            RunEndEvent(
                run=rec.key,
                outcome=RunOutcome(rec.outcome),
                reason=rec.reason,
                root_cause_node=rec.root_cause_node,
                at=now,
            )
        )
        state = StageState.PASSED if rec.status == "PASS" else StageState.FAILED
        how = self.ended_by or ("stopped" if self.stopped else "every stream ended")
        self.emit(StageEvent(stage=STAGE, state=state, detail=f"{how}; {rec.status}", at=now))
        self.emit(
            SuiteEndEvent(
                passed=results.passed,
                results_path=str(paths["results"]),
                report_path=str(paths["html"]) if "html" in paths else None,
                at=now,
            )
        )
        return results

    def _final_node_states(self, ranks: Sequence[_Rank], rec: RunRecord) -> None:
        for r in ranks:
            rank = r.log.watch.rank
            node = rec.nodes[rank] if rank < len(rec.nodes) else None
            code = node.exit_code if node is not None else None
            if r.log.watch.first_fatal_at is not None or code not in (0, None) or rec.root_cause_node == rank:
                st, detail = NodeState.FAILED, (f"exit {code}" if code not in (0, None) else rec.reason)
            elif rec.outcome == RunOutcome.COMPLETE.value:
                st, detail = NodeState.DONE, "log complete"
            else:
                st = NodeState.STOPPED
                detail = "stream ended" if r.ended else "following stopped"
            self._node_status(rec.key, rank, st, detail)
