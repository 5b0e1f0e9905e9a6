"""The watchdog: when a run has ended, failed or hung, decided from per-rank watch state alone.

:func:`decide` is pure: it reads the :class:`NodeWatch` of every rank, the time ``now`` (the caller's
clock, injected) and the failure already chosen, and says what the run's outcome is so far and whether
to stop it. The rules:

- every rank exited or lost: the run is over (a lost node fails it, unless a failure was chosen);
- the first failure is the earliest of: a fatal signature or NaN abort (at the time it was seen), a
  non-zero exit or a lost node (at that node's last progress); that node is the root cause;
- after a failure the others get ``fail_grace_s`` to exit on their own, then are stopped as victims;
  the grace ends once every rank still running has written its own error (``SETTLE_S`` ago, for the
  rest of its traceback): there is nothing more to wait for;
- with no failure, a rank that has made no progress for longer than its limit has hung: the compile
  allowance before its first step, then ``hang_factor`` × the p95 step time, at least ``hang_min_s``.
  While a section is announced (a checkpoint save or restore, an eval, a profiler capture, a
  compilation: :mod:`.sections`) on that rank or on any other of the run (synchronous training holds
  every rank to it), the limit widens to ``section_factor`` × the longest section of that kind seen
  so far in the run, at least ``section_min_s`` (never below the training limit), counted from the
  section's announcement; when it ends, the training budget counts again from its end, for every
  rank. A hang names the node, what it was doing and the last line it wrote.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from cvs_tui.core.events import NodeState, RunOutcome, StepEvent, StepKind
from cvs_tui.core.textsafe import mask_secrets, sanitize_text
from cvs_tui.core.watch.options import RunOptions
from cvs_tui.core.watch.sections import Section

WARMUP_STEPS = 3  # the first train steps' times (compile, caches) are not step times
P95_WINDOW = 200  # the p95 is taken over this many latest step times
SETTLE_S = 1.0  # after a rank's own fatal line, the time its remaining error lines get before it is stopped
LAST_LINE_SHOWN = 200  # characters of a hung rank's last line kept in its reason


@dataclass
class NodeWatch:
    """What the watchdog knows about one rank of the run being watched."""

    rank: int
    host: str
    last_progress: float  # when it last logged a step (the run's start before that)
    exit_code: int | None = None
    first_fatal_at: float | None = None
    fatal_line: int | None = None
    fatal_reason: str | None = None  # a fatal from outside the log (a kernel-log health finding)
    lost: str | None = None  # why its node became unreachable
    link_down: tuple[float, str] | None = None  # since when and why its launcher cannot reach it now
    steps_seen: int = 0
    # the latest step times, all the hang rule reads (a long run must not keep every one)
    step_seconds: deque[float] = field(default_factory=lambda: deque(maxlen=P95_WINDOW))
    state: NodeState = NodeState.STARTING
    stopping: bool = False  # cvs-tui is stopping it (a victim of another node, a hang, Ctrl-C)
    last_line: str = ""  # the last complete line it wrote (for a hang's reason)
    last_line_no: int = 0
    section: Section | None = None  # what its log says it is doing besides training steps
    section_since: float = 0.0
    section_ended: float = 0.0  # when its last section ended (the training budget counts from there)
    longest: dict[Section, float] = field(default_factory=dict)  # longest section of each kind so far

    def on_lines(self, lines: Sequence[str], last_no: int) -> None:
        """The lines of one chunk (``last_no``: the number of the last one)."""
        if lines:
            self.last_line, self.last_line_no = lines[-1], last_no

    def on_section(self, kind: Section, opens: bool, now: float) -> None:
        """A section announced (``opens``) or reported finished by the log."""
        if opens:
            if self.section is not kind:
                self.end_section(now)
                self.section, self.section_since = kind, now
        elif self.section is kind:
            self.end_section(now)

    def end_section(self, now: float) -> None:
        """The section ends (its closing line, or a step line), its length kept for the next budget."""
        if self.section is not None:
            took = now - self.section_since
            self.longest[self.section] = max(self.longest.get(self.section, 0.0), took)
            self.section, self.section_ended = None, now

    def on_step(self, ev: StepEvent, now: float) -> None:
        self.last_progress = now
        if ev.kind is StepKind.TRAIN:
            self.steps_seen += 1
            if ev.seconds is not None and math.isfinite(ev.seconds) and self.steps_seen > WARMUP_STEPS:
                self.step_seconds.append(ev.seconds)

    def on_fatal(self, line: int, now: float) -> None:
        self.first_fatal_at, self.fatal_line = now, line

    def on_external_fatal(self, reason: str, now: float) -> None:
        """A fatal seen beside the log (the node's kernel log): the same path as a fatal log line."""
        self.first_fatal_at, self.fatal_reason = now, reason

    def on_link(self, down: str | None, now: float) -> None:
        """What the launcher says of the rank's node now: ``down`` is why it cannot be reached, or None."""
        if down is None:
            self.link_down = None
        else:
            self.link_down = (self.link_down[0] if self.link_down else now, down)

    @property
    def done(self) -> bool:
        """Exited, or its node is gone: nothing more will come from it."""
        return self.exit_code is not None or bool(self.lost)


@dataclass(frozen=True)
class Verdict:
    """The run's outcome as the watchdog decided it; ``at`` is when (the fail grace counts from it)."""

    outcome: RunOutcome
    reason: str
    root: int | None
    at: float


class Decision(NamedTuple):
    verdict: Verdict | None  # None: nothing wrong so far (complete if it ends now)
    stop: bool  # end the watch: stop whoever still runs


def decide(watches: Sequence[NodeWatch], now: float, opt: RunOptions, failure: Verdict | None) -> Decision:
    """One look at the run: ``failure`` is the verdict of an earlier look (None if there was none)."""
    if all(w.done for w in watches):
        lost = [w for w in watches if w.lost]
        if lost and failure is None:
            w = lost[0]
            failure = Verdict(RunOutcome.FAILED, f"node {w.rank} ({w.host}) lost: {w.lost}", w.rank, now)
        return Decision(failure, True)
    if failure is None and (culprit := first_failure(watches)) is not None:
        failure = Verdict(RunOutcome.FAILED, culprit[1], culprit[0], now)
    if failure is not None:
        # nothing more to wait for once every rank still running has written its own error (a moment
        # ago: the rest of a traceback follows its first fatal line)
        settled = all(
            w.first_fatal_at is not None and now - w.first_fatal_at >= SETTLE_S for w in watches if not w.done
        )
        return Decision(failure, settled or now - failure.at > opt.fail_grace_s)
    hung = find_hang(watches, now, opt)
    if hung is not None:
        return Decision(Verdict(RunOutcome.HUNG, hung[1], hung[0], now), True)
    return Decision(None, False)


def first_failure(watches: Sequence[NodeWatch]) -> tuple[int, str] | None:
    """(rank, reason) of the earliest failure; None while no rank failed."""
    cands: list[tuple[float, int, str]] = []
    for w in watches:
        if w.first_fatal_at is not None:
            why = w.fatal_reason or f"node {w.rank}: fatal error at line {w.fatal_line}"
            cands.append((w.first_fatal_at, w.rank, why))
        elif w.exit_code not in (None, 0):
            cands.append((w.last_progress, w.rank, f"node {w.rank} exited with code {w.exit_code}"))
        elif w.lost:
            cands.append((w.last_progress, w.rank, f"node {w.rank} ({w.host}) lost: {w.lost}"))
    if not cands:
        return None
    _, rank, reason = min(cands)
    return rank, reason


def lost_reason(w: NodeWatch, now: float, opt: RunOptions) -> str | None:
    """Why ``w``'s node is lost, once its launcher could not reach it for ``lost_after_s``; None before
    (a dropped connection that comes back within it is a blip: the stream resumes at its offset)."""
    if w.done or w.link_down is None or now - w.link_down[0] < opt.lost_after_s:
        return None
    since, why = w.link_down
    return f"{why}; not reachable for {now - since:.0f} s"


def find_hang(watches: Sequence[NodeWatch], now: float, opt: RunOptions) -> tuple[int, str] | None:
    """(rank, reason) of the running rank past its no-progress limit that went silent first (the others
    of a synchronous run stop a step after it, waiting for it); None if none is past its limit."""
    hung: list[tuple[float, int, str]] = []
    for w, (at, what) in _deadlines(watches, opt):
        if now < at:
            continue
        silent = now - max(w.last_progress, _ended(watches))
        hung.append((w.last_progress, w.rank, _hang_reason(w, silent, what(now))))
    if not hung:
        return None
    _, rank, reason = min(hung)
    return rank, reason


def next_deadline(watches: Sequence[NodeWatch], opt: RunOptions) -> float | None:
    """When the first running rank will be past its no-progress limit if no line comes before (the
    caller wakes then, so a hang is called at its budget, not at the next look); None: no rank runs."""
    return min((at for _, (at, _what) in _deadlines(watches, opt)), default=None)


def _ended(watches: Sequence[NodeWatch]) -> float:
    # a section that ended on any rank restarts every rank's training budget (they waited for it)
    return max((w.section_ended for w in watches), default=0.0)


def _deadlines(
    watches: Sequence[NodeWatch], opt: RunOptions
) -> list[tuple[NodeWatch, tuple[float, Callable[[float], str]]]]:
    """Each running rank with the time its silence becomes a hang and what it was waiting for then:
    one rule for :func:`find_hang` (is it past?) and :func:`next_deadline` (when will it be?)."""
    open_sections = [w for w in watches if w.section is not None and not w.done]
    ended = _ended(watches)
    out: list[tuple[NodeWatch, tuple[float, Callable[[float], str]]]] = []
    for w in watches:
        if w.done or w.link_down is not None:
            continue  # a node that cannot be reached is not hung: it is lost once that lasts
        base = max(w.last_progress, ended)
        if w.steps_seen == 0:
            limit, what = opt.compile_allowance_s, "the first step (compile allowance)"
        else:
            limit = train_limit(w, opt)
            what = f"the next step ({opt.hang_factor:g} x p95 step time, at least {opt.hang_min_s:g} s)"
        cover = _covering(w, open_sections)
        if cover is None:
            told = what + ("" if w.steps_seen == 0 else " while training")

            def training(_now: float, told: str = told) -> str:
                return told

            out.append((w, (base + limit, training)))
            continue
        kind, since = cover
        budget = max(limit, section_budget(kind, watches, opt))

        def in_section(now: float, kind: Section = kind, since: float = since, budget: float = budget) -> str:
            return (
                f"the end of the {kind} announced {now - since:.0f} s ago ({opt.section_factor:g} x the "
                f"longest {kind} so far, at least {opt.section_min_s:g} s: {budget:.0f} s)"
            )

        out.append((w, (max(base + limit, since + budget), in_section)))
    return out


def train_limit(w: NodeWatch, opt: RunOptions) -> float:
    """The no-progress limit between train steps: k × p95 step time, at least ``hang_min_s``."""
    return max(opt.hang_min_s, opt.hang_factor * p95(w.step_seconds))  # the deque keeps the last P95_WINDOW


def section_budget(kind: Section, watches: Sequence[NodeWatch], opt: RunOptions) -> float:
    """How long a section of ``kind`` may last: k × the run's longest so far, at least ``section_min_s``."""
    longest = max((w.longest.get(kind, 0.0) for w in watches), default=0.0)
    return max(opt.section_min_s, opt.section_factor * longest)


def _covering(w: NodeWatch, open_sections: Sequence[NodeWatch]) -> tuple[Section, float] | None:
    """The section that explains ``w``'s silence: its own, else the latest announced by another rank
    since ``w``'s last step (the ranks of a synchronous run wait for each other's saves)."""
    if w.section is not None:
        return w.section, w.section_since
    others = [o for o in open_sections if o.section_since >= w.last_progress and o.section is not None]
    if not others:
        return None
    o = max(others, key=lambda o: o.section_since)
    assert o.section is not None
    return o.section, o.section_since


def _hang_reason(w: NodeWatch, silent: float, what: str) -> str:
    last = "no line yet"
    if w.last_line_no:
        text = sanitize_text(mask_secrets(w.last_line.strip()))
        if len(text) > LAST_LINE_SHOWN:
            text = text[:LAST_LINE_SHOWN] + "..."
        last = f"last line {w.last_line_no}: {text}"
    return f"node {w.rank} ({w.host}): no progress for {silent:.0f} s waiting for {what}; {last}"


def p95(values: Sequence[float]) -> float:
    """The 95th percentile by rank (no interpolation); 0 for no values."""
    secs = sorted(values)
    return secs[min(len(secs) - 1, int(0.95 * len(secs)))] if secs else 0.0
