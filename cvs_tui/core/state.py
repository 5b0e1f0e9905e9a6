"""The run state: one reducer folding the run event stream into views for the TUI and headless console.

``RunState.apply(ev)`` is the only way the state changes. Front-ends read it; they never parse logs.
Memory stays bounded per node: the raw line tail is a fixed-size deque; step series grow with the step
count (thousands, not millions) and error hits are capped.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from cvs_tui.core.events import (
    CheckpointEvent,
    ErrorHit,
    EvalEvent,
    LogEvent,
    LogLinesEvent,
    NodeLogEvent,
    NodeState,
    NodeStatusEvent,
    NonFiniteAbortEvent,
    RunEndEvent,
    RunOutcome,
    RunStartEvent,
    Severity,
    StageEvent,
    StageState,
    StepEvent,
    StepKind,
    SuiteEndEvent,
    VerdictEvent,
)

TAIL_LINES = 2000  # raw lines kept per node for log panes
MAX_ERRORS = 500  # error hits kept per node


@dataclass(slots=True)
class StageView:
    name: str
    state: StageState = StageState.PENDING
    detail: str = ""
    started_at: float | None = None
    ended_at: float | None = None


@dataclass(slots=True)
class NodeView:
    rank: int
    host: str = ""
    state: NodeState = NodeState.WAITING
    detail: str = ""
    latest_step: int | None = None
    losses: list[tuple[int, float]] = field(default_factory=list)
    step_times: list[tuple[int, float]] = field(default_factory=list)
    evals: list[tuple[int, float]] = field(default_factory=list)
    errors: list[ErrorHit] = field(default_factory=list)
    fatal_count: int = 0
    warning_count: int = 0
    nonfinite: str | None = None  # "nan"/"inf" once the loss went non-finite
    last_line: str = ""
    lines_seen: int = 0
    tail: deque[tuple[int, str]] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    events: list[LogEvent] = field(default_factory=list)  # everything parsed, for finalize_run
    updated_at: float = 0.0

    @property
    def last_loss(self) -> float | None:
        return self.losses[-1][1] if self.losses else None


@dataclass(slots=True)
class RunView:
    key: str
    total_steps: int = 0
    hosts: tuple[str, ...] = ()
    nodes: dict[int, NodeView] = field(default_factory=dict)
    outcome: RunOutcome | None = None
    reason: str = ""
    root_cause_node: int | None = None
    verdicts: dict[str, VerdictEvent] = field(default_factory=dict)
    started_at: float | None = None
    ended_at: float | None = None

    def node(self, rank: int) -> NodeView:
        nv = self.nodes.get(rank)
        if nv is None:
            host = self.hosts[rank] if rank < len(self.hosts) else ""
            nv = self.nodes[rank] = NodeView(rank=rank, host=host)
        return nv

    @property
    def latest_step(self) -> int | None:
        steps = [n.latest_step for n in self.nodes.values() if n.latest_step is not None]
        return min(steps) if steps else None  # the slowest node is the run's progress

    @property
    def progress(self) -> float:
        s = self.latest_step
        if s is None or self.total_steps <= 0:
            return 0.0
        return min(1.0, (s + 1) / self.total_steps)

    @property
    def running(self) -> bool:
        return self.started_at is not None and self.outcome is None

    def node_events(self) -> list[list[LogEvent]]:
        """Each node's parsed events in rank order (missing ranks give empty lists)."""
        n = max([*self.nodes.keys(), len(self.hosts) - 1], default=-1) + 1
        return [self.nodes[i].events if i in self.nodes else [] for i in range(n)]


@dataclass(slots=True)
class RunState:
    stages: dict[str, StageView] = field(default_factory=dict)
    runs: dict[str, RunView] = field(default_factory=dict)
    run_order: list[str] = field(default_factory=list)
    current_run: str | None = None
    suite_passed: bool | None = None
    results_path: str | None = None
    report_path: str | None = None
    events_applied: int = 0

    def run(self, key: str) -> RunView:
        rv = self.runs.get(key)
        if rv is None:
            rv = self.runs[key] = RunView(key=key)
            self.run_order.append(key)
        return rv

    def apply_all(self, events: Iterable[object]) -> None:
        for ev in events:
            self.apply(ev)

    def apply(self, ev: object) -> None:
        """Fold one run event into the state. Unknown objects are ignored (forward compatibility)."""
        self.events_applied += 1
        match ev:
            case NodeLogEvent(run=run, node=node, event=log_ev):
                self._apply_log(self.run(run).node(node), log_ev)
            case LogLinesEvent(run=run, node=node, first_line=first, lines=lines):
                nv = self.run(run).node(node)
                for i, text in enumerate(lines):
                    nv.tail.append((first + i, text))
                if lines:
                    nv.last_line = lines[-1]
                    nv.lines_seen = max(nv.lines_seen, first + len(lines) - 1)
            case StageEvent(stage=name, state=state, detail=detail, at=at):
                sv = self.stages.setdefault(name, StageView(name=name))
                sv.state, sv.detail = state, detail
                if state is StageState.RUNNING:
                    sv.started_at = at
                elif state in (StageState.PASSED, StageState.FAILED, StageState.SKIPPED):
                    sv.ended_at = at
            case NodeStatusEvent(run=run, node=node, host=host, state=state, detail=detail, at=at):
                nv = self.run(run).node(node)
                nv.host = host or nv.host
                nv.state, nv.detail, nv.updated_at = state, detail, at
            case RunStartEvent(run=run, total_steps=total, nodes=hosts, at=at):
                rv = self.run(run)
                rv.total_steps, rv.hosts, rv.started_at = total, tuple(hosts), at
                for i, h in enumerate(hosts):
                    rv.node(i).host = h
                self.current_run = run
            case RunEndEvent(run=run, outcome=outcome, reason=reason, root_cause_node=root, at=at):
                rv = self.run(run)
                rv.outcome, rv.reason, rv.root_cause_node, rv.ended_at = outcome, reason, root, at
                if self.current_run == run:
                    self.current_run = None
            case VerdictEvent(run=run, metric=metric):
                self.run(run).verdicts[metric] = ev  # type: ignore[assignment]
            case SuiteEndEvent(passed=passed, results_path=rp, report_path=hp):
                self.suite_passed, self.results_path, self.report_path = passed, rp, hp
            case _:
                self.events_applied -= 1

    @staticmethod
    def _apply_log(nv: NodeView, ev: LogEvent) -> None:
        nv.events.append(ev)
        match ev:
            case StepEvent():
                nv.latest_step = ev.step if nv.latest_step is None else max(nv.latest_step, ev.step)
                nv.losses.append((ev.step, ev.loss))
                if ev.kind is StepKind.TRAIN and ev.seconds is not None:
                    nv.step_times.append((ev.step, ev.seconds))
                if not math.isfinite(ev.loss) and nv.nonfinite is None:
                    nv.nonfinite = "nan" if math.isnan(ev.loss) else "inf"
                if nv.state in (NodeState.WAITING, NodeState.CONNECTING, NodeState.STARTING):
                    nv.state = NodeState.TRAINING
            case EvalEvent():
                nv.evals.append((ev.step, ev.loss))
            case ErrorHit():
                if ev.severity is Severity.FATAL:
                    nv.fatal_count += 1
                else:
                    nv.warning_count += 1
                if len(nv.errors) < MAX_ERRORS:
                    nv.errors.append(ev)
            case NonFiniteAbortEvent():
                nv.nonfinite = nv.nonfinite or ev.value
                nv.fatal_count += 1
            case CheckpointEvent():
                pass


__all__ = ["NodeView", "RunState", "RunView", "StageView"]
