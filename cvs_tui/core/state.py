"""The run state: every source's run events folded into what the runner records and the screens show.

One reducer for everyone: the runner applies each event it publishes (stage records for results.json
come from here), and the Textual app and the headless console fold the same stream. It keeps what a view
needs, bounded: per-node line buffers (full logs stay on disk), the latest step and a short loss history
per node, error hits in arrival order, stage and run states, verdict rows and the suite result. Nothing
here parses logs or computes metrics.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field

from cvs_tui.core.bounded import MAX_LINE_CHARS, LineBuffer, thin_curve
from cvs_tui.core.events import (
    ErrorHit,
    GpuTelemetryEvent,
    HealthFindingEvent,
    HealthState,
    LogLinesEvent,
    NodeHealthEvent,
    NodeLogEvent,
    NodeState,
    NodeStatusEvent,
    NonFiniteAbortEvent,
    RunEndEvent,
    RunEvent,
    RunOutcome,
    RunStartEvent,
    Severity,
    StageEvent,
    StageState,
    StallsEvent,
    StepEvent,
    StepKind,
    SuiteEndEvent,
    VerdictEvent,
)
from cvs_tui.core.node_phase import next_phase

NODE_BUFFER_LINES = 2000  # lines kept per node for the log pane; older ones are read back from the node log
MERGED_BUFFER_LINES = 20000  # lines kept for the merged all-nodes view
LOSS_HISTORY = 256  # finite loss values kept per node for the sparkline
STEP_TIME_HISTORY = 64  # recent step times per node (median shown, ETA)
# a node in one of these states is training once it logs a step
_BEFORE_TRAINING = frozenset({NodeState.WAITING, NodeState.CONNECTING, NodeState.STARTING, NodeState.STALLED})
LOSS_CURVE_POINTS = 2000  # a run's loss curve is thinned to half of this when it holds more (bounded.py)
MAX_ERROR_ROWS = 5000  # error hits listed; later ones are counted (fatal hits are always kept)
MAX_HEALTH_FINDINGS = 2000  # kernel-log findings listed; later warnings are counted (fatal ones kept)


@dataclass
class NodeView:
    rank: int
    host: str = ""
    state: NodeState = NodeState.WAITING
    detail: str = ""
    step: int | None = None
    loss: float | None = None  # latest, may be non-finite
    losses: deque[float] = field(default_factory=lambda: deque(maxlen=LOSS_HISTORY))  # finite only
    step_times: deque[float] = field(default_factory=lambda: deque(maxlen=STEP_TIME_HISTORY))
    tokens_per_s: float | None = None  # per device, as logged for the latest step
    step_seconds: float | None = None
    error_hits: int = 0
    fatal_hits: int = 0
    last_line: str = ""
    phase: str = ""  # start-up phase from log markers (core.node_phase) until the first step
    # the judged run's stalls on this node (StallsEvent): step -> seconds, and the causes
    stalls: dict[int, float] = field(default_factory=dict)
    stall_causes: tuple[str, ...] = ()
    lines: LineBuffer = field(default_factory=lambda: LineBuffer(NODE_BUFFER_LINES))


@dataclass
class NodeHealthView:
    """One node's health for the whole suite: ``not checked`` until its kernel log is being read."""

    rank: int
    host: str = ""
    state: HealthState = HealthState.NOT_CHECKED
    reason: str = "kernel log not read yet"
    fatal: int = 0
    warnings: int = 0
    telemetry: GpuTelemetryEvent | None = None  # the latest sample of its GPUs

    def escalate(self, f: HealthFindingEvent) -> None:
        if f.severity is Severity.FATAL:
            self.fatal += 1
            self.state = HealthState.FAIL
        else:
            self.warnings += 1
            if self.state is HealthState.OK:
                self.state = HealthState.WARN


@dataclass(frozen=True, slots=True)
class ErrorRow:
    run: str
    node: int
    hit: ErrorHit
    seq: int  # arrival order across the whole stream


@dataclass
class RunView:
    key: str
    total_steps: int = 0
    hosts: tuple[str, ...] = ()
    started_at: float | None = None
    ended_at: float | None = None
    outcome: RunOutcome | None = None
    reason: str = ""
    root_cause_node: int | None = None
    nodes: dict[int, NodeView] = field(default_factory=dict)
    verdicts: dict[str, VerdictEvent] = field(default_factory=dict)  # metric -> latest verdict
    loss_curve: dict[int, float] = field(default_factory=dict)  # step -> loss of the lowest rank (finite)
    merged: deque[tuple[int, str]] = field(default_factory=lambda: deque(maxlen=MERGED_BUFFER_LINES))
    merged_seq: int = 0  # number of merged lines ever appended

    def node(self, rank: int) -> NodeView:
        nv = self.nodes.get(rank)
        if nv is None:
            host = self.hosts[rank] if rank < len(self.hosts) else ""
            nv = self.nodes[rank] = NodeView(rank=rank, host=host)
        return nv

    @property
    def max_step(self) -> int | None:
        steps = [n.step for n in self.nodes.values() if n.step is not None]
        return max(steps) if steps else None

    @property
    def min_step(self) -> int | None:
        """The slowest node's step: the run is as far along as its last node."""
        steps = [n.step for n in self.nodes.values() if n.step is not None]
        return min(steps) if steps else None

    def median_step(self) -> float | None:
        steps = [n.step for n in self.nodes.values() if n.step is not None]
        return statistics.median(steps) if steps else None

    def median_step_seconds(self) -> float | None:
        times = [t for n in self.nodes.values() for t in list(n.step_times)[-16:]]
        return statistics.median(times) if times else None

    def merged_since(self, seq: int) -> tuple[int, list[tuple[int, str]]]:
        """Merged lines appended after sequence number ``seq``; returns the new sequence number."""
        held_from = self.merged_seq - len(self.merged)
        start = max(seq, held_from)
        n_new = self.merged_seq - start
        if n_new <= 0:
            return self.merged_seq, []
        if n_new >= len(self.merged):
            return self.merged_seq, list(self.merged)
        return self.merged_seq, [self.merged[i] for i in range(len(self.merged) - n_new, len(self.merged))]


@dataclass
class StageView:
    name: str
    state: StageState
    detail: str = ""
    at: float = 0.0  # time of the latest change
    started_at: float | None = None
    ended_at: float | None = None


class RunState:
    """Everything the screens read, updated by :meth:`apply` for each event."""

    def __init__(self) -> None:
        self.stages: dict[str, StageView] = {}
        self.runs: dict[str, RunView] = {}
        self.run_order: list[str] = []
        self.errors: list[ErrorRow] = []
        self.errors_dropped = 0  # warnings beyond MAX_ERROR_ROWS, counted but not listed
        self.health: dict[int, NodeHealthView] = {}  # rank -> health over the whole suite
        self.health_findings: list[HealthFindingEvent] = []
        self.health_findings_dropped = 0
        self.suite_end: SuiteEndEvent | None = None
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.events_seen = 0
        self.version = 0  # bumped on every change; screens redraw when it moved
        self._error_seq = 0
        self._lowest: dict[str, tuple[int, int]] = {}  # run -> (nodes seen, lowest rank among them)

    # -- queries -------------------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self.suite_end is not None

    @property
    def current_stage(self) -> StageView | None:
        running = [s for s in self.stages.values() if s.state is StageState.RUNNING]
        if running:
            return running[-1]
        return None

    @property
    def current_run(self) -> RunView | None:
        for key in reversed(self.run_order):
            rv = self.runs[key]
            if rv.outcome is None:
                return rv
        return self.runs[self.run_order[-1]] if self.run_order else None

    def run(self, key: str) -> RunView:
        rv = self.runs.get(key)
        if rv is None:
            rv = self.runs[key] = RunView(key=key)
            self.run_order.append(key)
        return rv

    def errors_sorted(self) -> list[ErrorRow]:
        """Fatal hits first, then in arrival order."""
        return sorted(self.errors, key=lambda r: (r.hit.severity is not Severity.FATAL, r.seq))

    def root_cause(self, run: str) -> int | None:
        rv = self.runs.get(run)
        if rv is None:
            return None
        if rv.root_cause_node is not None:
            return rv.root_cause_node
        fatal = [r for r in self.errors if r.run == run and r.hit.severity is Severity.FATAL]
        return fatal[0].node if fatal else None

    def eta_seconds(self, rv: RunView) -> float | None:
        """Remaining time of a run from its slowest node's step and the median recent step time."""
        if rv.outcome is not None or not rv.total_steps or not rv.nodes:
            return None
        steps = [n.step for n in rv.nodes.values() if n.step is not None]
        per_step = rv.median_step_seconds()
        if not steps or per_step is None:
            return None
        return max(0, rv.total_steps - 1 - min(steps)) * per_step

    # -- folding -------------------------------------------------------------------------------------
    def apply(self, ev: RunEvent) -> None:
        self.events_seen += 1
        self.version += 1
        if type(ev) is NodeLogEvent:  # nearly every event (a parsed log line), and it has no `at`
            self._apply_log_event(ev)
            return
        at = getattr(ev, "at", 0.0)
        if at:
            self.first_at = at if self.first_at is None else min(self.first_at, at)
            self.last_at = at if self.last_at is None else max(self.last_at, at)
        if isinstance(ev, LogLinesEvent):
            self._apply_lines(ev)
        elif isinstance(ev, NodeLogEvent):
            self._apply_log_event(ev)
        elif isinstance(ev, NodeStatusEvent):
            nv = self.run(ev.run).node(ev.node)
            nv.state, nv.detail = ev.state, ev.detail
            if ev.host:
                nv.host = ev.host
        elif isinstance(ev, StageEvent):
            sv = self.stages.get(ev.stage)
            if sv is None:
                sv = self.stages[ev.stage] = StageView(ev.stage, ev.state, ev.detail, ev.at)
            else:
                sv.state, sv.detail, sv.at = ev.state, ev.detail, ev.at
            if ev.state is StageState.RUNNING:
                sv.started_at = ev.at
            elif ev.state in (StageState.PASSED, StageState.FAILED, StageState.SKIPPED):
                sv.ended_at = ev.at
        elif isinstance(ev, RunStartEvent):
            rv = self.run(ev.run)
            rv.total_steps, rv.hosts, rv.started_at = ev.total_steps, ev.nodes, ev.at or None
            for rank, host in enumerate(ev.nodes):
                rv.node(rank).host = host
        elif isinstance(ev, RunEndEvent):
            rv = self.run(ev.run)
            rv.outcome, rv.reason, rv.ended_at = ev.outcome, ev.reason, ev.at or None
            rv.root_cause_node = ev.root_cause_node
        elif isinstance(ev, VerdictEvent):
            self.run(ev.run).verdicts[ev.metric] = ev
        elif isinstance(ev, StallsEvent):
            nv = self.run(ev.run).node(ev.node)
            nv.stalls = dict(zip(ev.steps, ev.seconds, strict=False))
            nv.stall_causes = ev.causes
        elif isinstance(ev, SuiteEndEvent):
            self.suite_end = ev
        elif isinstance(ev, NodeHealthEvent | HealthFindingEvent | GpuTelemetryEvent):
            self._apply_health(ev)

    def node_health(self, rank: int) -> NodeHealthView:
        hv = self.health.get(rank)
        if hv is None:
            hv = self.health[rank] = NodeHealthView(rank)
        return hv

    def _apply_health(self, ev: NodeHealthEvent | HealthFindingEvent | GpuTelemetryEvent) -> None:
        hv = self.node_health(ev.node)
        if ev.host:
            hv.host = ev.host
        if isinstance(ev, NodeHealthEvent):
            # a fatal finding stays FAIL even if access is lost later (never back to ok/not checked)
            hv.state = HealthState.FAIL if hv.fatal else ev.state
            hv.reason = ev.reason
        elif isinstance(ev, HealthFindingEvent):
            hv.escalate(ev)
            if len(self.health_findings) < MAX_HEALTH_FINDINGS or ev.severity is Severity.FATAL:
                self.health_findings.append(ev)
            else:
                self.health_findings_dropped += 1
        else:
            hv.telemetry = ev

    def _apply_lines(self, ev: LogLinesEvent) -> None:
        rv = self.run(ev.run)
        nv = rv.node(ev.node)
        nv.lines.extend(ev.first_line, ev.lines)
        for text in ev.lines:
            rv.merged.append((ev.node, text if len(text) <= MAX_LINE_CHARS else text[:MAX_LINE_CHARS]))
        rv.merged_seq += len(ev.lines)
        if nv.step is None:  # only the start-up lines are scanned; a phase never outlives the first step
            for text in ev.lines:
                nv.phase = next_phase(nv.phase, text)
        for text in reversed(ev.lines):
            if text.strip():
                nv.last_line = text[:MAX_LINE_CHARS]
                break

    def _lowest_rank(self, rv: RunView) -> int:
        """``min(rv.nodes)``, recomputed only when a node was added (once per step per node, it was
        the reducer's biggest cost at hundreds of nodes)."""
        known = self._lowest.get(rv.key)
        if known is None or known[0] != len(rv.nodes):
            known = self._lowest[rv.key] = (len(rv.nodes), min(rv.nodes))
        return known[1]

    def apply_progress(self, ev: NodeLogEvent) -> None:
        """A parsed step's progress alone (step, step time, tokens/s, the training state), not its loss:
        for a reader that shows no loss (the metrics export, ``core/export/live.py``)."""
        self.events_seen += 1
        self.version += 1
        rv = self.runs.get(ev.run) or self.run(ev.run)
        nv = rv.nodes.get(ev.node) or rv.node(ev.node)
        if isinstance(ev.event, StepEvent):
            self._step_progress(nv, ev.event)

    def _apply_step(self, rv: RunView, nv: NodeView, node: int, le: StepEvent) -> None:
        loss = le.loss
        if loss is not None:  # a line without a loss keeps the last one shown
            nv.loss = loss
        if loss is not None and loss - loss == 0.0:  # finite (math.isfinite without the call)
            nv.losses.append(loss)
            if node == self._lowest_rank(rv):
                rv.loss_curve[le.step] = loss
                if len(rv.loss_curve) > LOSS_CURVE_POINTS:
                    rv.loss_curve = thin_curve(rv.loss_curve, LOSS_CURVE_POINTS)
        self._step_progress(nv, le)

    @staticmethod
    def _step_progress(nv: NodeView, le: StepEvent) -> None:
        nv.step = le.step
        nv.phase = ""
        seconds = le.seconds
        if seconds is not None and le.kind is StepKind.TRAIN:
            nv.step_seconds = seconds
            if seconds > 0 and seconds - seconds == 0.0:
                nv.step_times.append(seconds)
        if le.tokens_per_device is not None:
            nv.tokens_per_s = le.tokens_per_device  # MaxText's Tokens/s/device of this step
        if nv.state in _BEFORE_TRAINING:
            nv.state = NodeState.TRAINING

    def _apply_log_event(self, ev: NodeLogEvent) -> None:
        rv = self.runs.get(ev.run)
        if rv is None:
            rv = self.run(ev.run)
        nv = rv.nodes.get(ev.node)
        if nv is None:
            nv = rv.node(ev.node)
        le = ev.event
        if type(le) is StepEvent or isinstance(le, StepEvent):  # the first test is the cheap one
            self._apply_step(rv, nv, ev.node, le)
        elif isinstance(le, ErrorHit):
            nv.error_hits += 1
            if le.severity is Severity.FATAL:
                nv.fatal_hits += 1
            self._error_seq += 1
            if len(self.errors) < MAX_ERROR_ROWS or le.severity is Severity.FATAL:
                self.errors.append(ErrorRow(ev.run, ev.node, le, self._error_seq))
            else:
                self.errors_dropped += 1
        elif isinstance(le, NonFiniteAbortEvent):
            nv.loss = math.nan if le.value == "nan" else math.inf
