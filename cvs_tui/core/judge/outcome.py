"""A run's outcome from its nodes' events and exit codes: complete or failed (with the first fatal error
and its node), or the hung/interrupted outcome a live run already decided.

When the scheduler ended a node's run (``core.parse.endings``: a time limit, an OOM kill, a node
failure, a preemption, a requeue, a task's exit code or signal, a cancel), the reason names it, with the
last step the run reached: "Slurm: time limit reached at step 120", never only "stopped early"."""

from __future__ import annotations

import re
from collections.abc import Sequence

from cvs_tui.core.events import (
    ErrorHit,
    ExitCodeEvent,
    LogEvent,
    NonFiniteAbortEvent,
    RunOutcome,
    Severity,
    StepEvent,
)
from cvs_tui.core.judge.definitions import MetricValue
from cvs_tui.core.judge.facts import RunFacts
from cvs_tui.core.parse.endings import NODE_FAILURE, OOM_KILL, PREEMPTION, REQUEUE, TIME_LIMIT, Ending
from cvs_tui.core.parse.tracebacks import TRACEBACK

# an error that is usually the fallout of another node's failure, not its cause
_SECONDARY_ERROR = re.compile(r"coordinat|heartbeat|barrier|preempt|peer|remote", re.I)


def _fatal_hits(events: Sequence[LogEvent]) -> list[ErrorHit | NonFiniteAbortEvent]:
    return [
        e
        for e in events
        if (isinstance(e, ErrorHit) and e.severity is Severity.FATAL) or isinstance(e, NonFiniteAbortEvent)
    ]


_GLOG_HEADER = re.compile(
    r"^(?:[IWEF]\d{4} [\d:.]+\s+\d+\s+[\w.-]+:\d+\]|\d{4}-\d\d-\d\d [\d:.]+: [IWEF] [^\s\]]+:\d+\])\s*"
)
_REASON_CHARS = 160
# Where the cause of a long error line is spelled out, most telling first: an absl status, a collective
# that failed, the error a wrapper passes on, an HSA status, an XLA status code. The reason shows the
# line's start and then that part.
_CAUSES = tuple(
    re.compile(p)
    for p in (
        r"absl::Status: ",
        r"[NR]CCL operation \w+\(",
        r"Original error: ",
        r"HSA_STATUS_\w+",
        r"\b(?:DEADLINE_EXCEEDED|RESOURCE_EXHAUSTED|UNAVAILABLE|FAILED_PRECONDITION|UNIMPLEMENTED|ABORTED): ",
    )
)
# a traceback within this many lines after a node's first fatal line is the error it died of (the line
# before is orbax or XLA logging what it is about to raise)
TRACEBACK_REACH = 40


def _hit_text(h: ErrorHit | NonFiniteAbortEvent) -> str:
    if isinstance(h, NonFiniteAbortEvent):
        return f"training aborted on {h.value} loss"
    text = _GLOG_HEADER.sub("", h.text.strip())
    if len(text) <= _REASON_CHARS:
        return f"{h.name}: {text}"
    exc, sep, frame = text.rpartition(" (last frame: ")
    if h.name == TRACEBACK and sep:
        # the exception line, shortened, and where it was raised
        return f"{h.name}: {exc[: _REASON_CHARS - 40]}… (last frame: {frame}"
    for cause in _CAUSES:
        m = cause.search(text, _REASON_CHARS // 2)
        if m is not None:
            c = m.start()
            return f"{h.name}: {text[:60]}… {text[c : c + 100]}{'…' if len(text) > c + 100 else ''}"
    return f"{h.name}: {text[:_REASON_CHARS]}…"


def _root_hit(events: Sequence[LogEvent]) -> list[ErrorHit | NonFiniteAbortEvent]:
    """The hit a node failed of: its first fatal hit, or the traceback that follows it closely."""
    hits = _fatal_hits(events)
    if not hits:
        return []
    first = hits[0]
    tb = next(
        (
            h
            for h in hits[1:]
            if isinstance(h, ErrorHit) and h.name == TRACEBACK and h.line - first.line <= TRACEBACK_REACH
        ),
        None,
    )
    return [tb or first]


# the scheduler killed the run from outside: what the trainer printed while dying is fallout
_EXTERNAL = frozenset({TIME_LIMIT, PREEMPTION, NODE_FAILURE, REQUEUE, OOM_KILL})


def _scheduler_ending(
    endings: Sequence[Ending | None] | None, node_events: Sequence[Sequence[LogEvent]]
) -> tuple[int, str] | None:
    """The node whose log holds the scheduler's ending, and the reason naming it (with the last step)."""
    found = [(i, e) for i, e in enumerate(endings or ()) if e is not None]
    if not found:
        return None
    i, e = min(found, key=lambda x: (x[1].cause not in _EXTERNAL, x[0]))
    steps = [ev.step for evs in node_events for ev in evs if isinstance(ev, StepEvent)]
    return i, e.describe(max(steps) if steps else None)


def _first_fatal(node_events: Sequence[Sequence[LogEvent]]) -> tuple[int, str] | None:
    """The node of the first fatal error that is not another's fallout, and the reason naming it."""
    fatal = [(i, h) for i, evs in enumerate(node_events) for h in _root_hit(evs)]
    if not fatal:
        return None
    primary = [(i, h) for i, h in fatal if not _SECONDARY_ERROR.search(_hit_text(h))] or fatal
    node, hit = primary[0]
    others = sorted({i for i, _ in fatal} - {node})
    also = f"; also on node(s) {others}" if others else ""
    return node, f"node {node} line {hit.line}: {_hit_text(hit)}{also}"


def _exit_codes(
    given: Sequence[int | None] | None, node_events: Sequence[Sequence[LogEvent]]
) -> list[int | None]:
    """Each node's exit code: the given one, else the last its log printed."""
    codes = list(given or [])
    for i, evs in enumerate(node_events):
        logged = [e.code for e in evs if isinstance(e, ExitCodeEvent)]
        if i >= len(codes):
            codes.append(logged[-1] if logged else None)
        elif codes[i] is None and logged:
            codes[i] = logged[-1]
    return codes


def _by_steps(
    node_events: Sequence[Sequence[LogEvent]],
    total_steps: int,
    sched: tuple[int, str] | None,
    reason: str,
    root_cause_node: int | None,
) -> tuple[RunOutcome, str, int | None]:
    """The outcome of a run with no error, bad exit code or failure given: complete when every node that
    logged steps reached the last one, else failed at the first that fell short."""
    last = [max((e.step for e in evs if isinstance(e, StepEvent)), default=None) for evs in node_events]
    logged = [x for x in last if x is not None]
    if not logged:
        if sched is not None:
            return RunOutcome.FAILED, f"{sched[1]} before any training step was logged", sched[0]
        return RunOutcome.FAILED, "no training step was logged by any node", root_cause_node
    short = [(i, x) for i, x in enumerate(last) if x is None or x < total_steps - 1]
    if short and len(logged) == len(last):
        i, x = short[0]
        if sched is not None:
            return RunOutcome.FAILED, f"{sched[1]}; node {i} log ends at step {x} of {total_steps}", sched[0]
        return (
            RunOutcome.FAILED,
            f"node {i} log ends at step {x} of {total_steps} (steps 0..{total_steps - 1}): "
            "the run stopped early, hung or the log is truncated",
            i,
        )
    # nodes without step lines are fine when another node logged them all (some logs carry rank 0 only),
    # but every node that did log steps must reach the last one (audit #8: not only the first short entry)
    cut = next(((i, x) for i, x in short if x is not None), None)
    if cut is not None:
        i, x = cut
        if sched is not None:
            return RunOutcome.FAILED, f"{sched[1]}; node {i} log ends at step {x} of {total_steps}", sched[0]
        return RunOutcome.FAILED, f"node {i} log ends at step {x} of {total_steps}", i
    return RunOutcome.COMPLETE, reason, root_cause_node


def decide_outcome(
    node_events: Sequence[Sequence[LogEvent]],
    total_steps: int,
    facts: RunFacts | None = None,
    *,
    final_loss: MetricValue | None = None,
    empty_nodes: Sequence[int] = (),
) -> tuple[RunOutcome, str, int | None]:
    """Outcome, reason and root-cause node. From ``facts`` (what the run's watcher knew): each node's exit
    code, a given outcome (a non-complete one, hung or interrupted, is kept) with its reason and root
    cause, and ``endings``: per node, how the scheduler ended its run (None: it did not, or no
    scheduler). ``empty_nodes``: ranks whose log holds no line at all; nothing shows they ran, so the run
    fails."""
    given = facts or RunFacts()
    exit_codes, outcome, reason = given.exit_codes, given.outcome, given.reason
    root_cause_node, endings = given.root_cause_node, given.endings
    sched = _scheduler_ending(endings, node_events)
    external = sched is not None and any(e is not None and e.cause in _EXTERNAL for e in endings or ())
    first_fatal = _first_fatal(node_events)
    if outcome is not None and outcome not in (RunOutcome.COMPLETE, RunOutcome.FAILED):
        # hung or interrupted: keep that outcome, and name the first fatal error if the logs hold one
        why = reason or outcome.value
        if sched is not None and external:
            why = f"{why}; {sched[1]}"
        if first_fatal is not None:
            return outcome, f"{why}; first fatal error: {first_fatal[1]}", first_fatal[0]
        return outcome, why, root_cause_node
    codes = _exit_codes(exit_codes, node_events)
    if first_fatal is not None:
        if sched is not None and external:  # a time limit or OOM kill, then the trainer's dying words
            return RunOutcome.FAILED, f"{sched[1]}; then {first_fatal[1]}", sched[0]
        return RunOutcome.FAILED, first_fatal[1], first_fatal[0]
    if final_loss is not None and final_loss.absent == "non_finite":
        return RunOutcome.FAILED, f"final loss is {final_loss.reason}", root_cause_node
    bad = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
    if bad:
        # a live run knows which node failed first; the others were stopped as its victims
        node, code = next(((i, c) for i, c in bad if i == root_cause_node), bad[0])
        if sched is not None:
            # a time limit or an OOM kill is the cause wherever it was read; otherwise the node that
            # exited badly is (every task's stderr may carry srun's lines about it)
            root = sched[0] if external else node
            return RunOutcome.FAILED, f"{sched[1]} (node {node} exited with code {code})", root
        return RunOutcome.FAILED, f"node {node} exited with code {code}", node
    if outcome is RunOutcome.FAILED:
        if sched is not None:
            return outcome, f"{reason}; {sched[1]}" if reason else sched[1], root_cause_node
        return outcome, reason or "the run failed", root_cause_node
    if empty_nodes:
        # an empty log (or a followed file that never appeared) is no evidence that the rank ran (M1)
        i = empty_nodes[0]
        more = f" (also node(s) {list(empty_nodes[1:])})" if len(empty_nodes) > 1 else ""
        return RunOutcome.FAILED, f"node {i} log is empty: nothing shows that this rank ran{more}", i
    return _by_steps(node_events, total_steps, sched, reason, root_cause_node)


__all__ = ["decide_outcome"]
