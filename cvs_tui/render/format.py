"""Small text formatters shared by the TUI and the headless console."""

from __future__ import annotations

from cvs_tui.core.events import NodeState, RunOutcome, StageState
from cvs_tui.core.judge.format import format_number


def fmt_duration(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def fmt_float(value: float | None, digits: int = 3) -> str:
    return format_number(value, "fixed", digits=digits, missing="-")


def fmt_rate(value: float | None) -> str:
    return format_number(value, "rate", missing="-")


NODE_STATE_STYLE: dict[NodeState, str] = {
    NodeState.WAITING: "dim",
    NodeState.CONNECTING: "cyan",
    NodeState.STARTING: "cyan",
    NodeState.TRAINING: "green",
    NodeState.STALLED: "bold yellow",
    NodeState.DONE: "bold green",
    NodeState.FAILED: "bold red",
    NodeState.HUNG: "bold magenta",
    NodeState.UNREACHABLE: "bold red",
    NodeState.STOPPED: "yellow",
}

STAGE_MARK: dict[StageState, tuple[str, str, str]] = {
    # state -> (unicode mark, ascii mark, style)
    StageState.PENDING: ("·", ".", "dim"),
    StageState.RUNNING: ("▶", ">", "bold cyan"),
    StageState.PASSED: ("✔", "+", "green"),
    StageState.FAILED: ("✘", "x", "bold red"),
    StageState.SKIPPED: ("–", "-", "dim"),
}

OUTCOME_STYLE: dict[RunOutcome, str] = {
    RunOutcome.COMPLETE: "green",
    RunOutcome.FAILED: "bold red",
    RunOutcome.HUNG: "bold magenta",
    RunOutcome.INTERRUPTED: "yellow",
    RunOutcome.SKIPPED: "dim",
}

OUTCOME_MARK: dict[RunOutcome, tuple[str, str]] = {
    # outcome -> (unicode mark, ascii mark): shown first on a run's line, before its key
    RunOutcome.COMPLETE: ("✔", "+"),
    RunOutcome.FAILED: ("✘", "x"),
    RunOutcome.HUNG: ("⧗", "H"),
    RunOutcome.INTERRUPTED: ("■", "#"),
    RunOutcome.SKIPPED: ("–", "-"),
}

VERDICT_STYLE: dict[str, str] = {"PASS": "bold green", "FAIL": "bold red", "RECORD": "cyan", "N/A": "dim"}


def steps_done(step: int | None) -> int:
    """Steps completed when the newest logged step index is ``step`` (0-based): index + 1, 0 before any."""
    return 0 if step is None else step + 1


def fmt_steps(step: int | None, total: int | None) -> str:
    """The one step counter every front-end shows: ``completed/total`` (``-/30`` before the first step)."""
    done = "-" if step is None else str(steps_done(step))
    return f"{done}/{total or '?'}"
