"""The TUI's view model and the headless console, fed run events (no terminal needed)."""

from __future__ import annotations

import math

from rich.console import Console

from cvs_tui.cli.console import ConsoleView, run_console
from cvs_tui.core.events import (
    ErrorHit,
    LogLinesEvent,
    NodeLogEvent,
    NodeState,
    NodeStatusEvent,
    RunEndEvent,
    RunOutcome,
    RunStartEvent,
    Severity,
    StageEvent,
    StageState,
    StepEvent,
    SuiteEndEvent,
    VerdictEvent,
)
from cvs_tui.core.state import LineBuffer, RunState
from cvs_tui.tui.widgets.sparkline import sparkline


def test_line_buffer_keeps_numbers_and_bounds() -> None:
    buf = LineBuffer(3)
    buf.extend(1, ["a", "b"])
    buf.extend(3, ["c", "d"])
    assert (buf.first_line, buf.next_line, list(buf)) == (2, 5, ["b", "c", "d"])
    assert buf.since(1) == (2, ["b", "c", "d"]) and buf.since(4) == (4, ["d"]) and buf.since(5) == (5, [])
    assert buf.get(1) is None and buf.get(3) == "c"
    buf.extend(10, ["j"])  # a gap: numbering stays true
    assert (buf.first_line, list(buf)) == (10, ["j"])


def test_sparkline_drops_non_finite_values() -> None:
    assert sparkline([3.0, math.nan, 2.0, math.inf, 1.0], 10) == "█▅▁"
    assert sparkline([math.nan], 10) == ""
    assert set(sparkline([5, 4, 3, 2, 1], 3, ascii_only=True)) <= set("_.-=+*#")
    assert len(sparkline(list(range(100)), 16)) == 16


def _events() -> list[object]:
    return [
        StageEvent("preflight", StageState.PASSED, at=100.0),
        RunStartEvent("R", 10, ("h0", "h1", "h2"), at=101.0),
        *[
            NodeLogEvent("R", n, StepEvent(s, 5.0 - s * 0.1, s, seconds=2.0, tokens_per_device=300.0))
            for s in range(4)
            for n in (0, 1)
        ],
        NodeLogEvent("R", 2, StepEvent(0, math.nan, 1, seconds=2.0)),
        NodeLogEvent("R", 2, ErrorHit("nan", Severity.FATAL, "loss nan\nmore", 12, "always")),
        NodeLogEvent("R", 1, ErrorHit("warn", Severity.WARNING, "E0000 harmless", 3, "benign")),
        LogLinesEvent("R", 0, 1, ("hello", "world", "")),
        NodeStatusEvent("R", 2, "h2", NodeState.FAILED, "NaN", at=150.0),
        RunEndEvent("R", RunOutcome.FAILED, "NaN loss", None, at=160.0),
        VerdictEvent("R", "training.final_loss", "FAIL", "<= 4", math.nan, ""),
        SuiteEndEvent(False, "out/results.json", "out/report.html", at=161.0),
    ]


def test_suite_view_folds_events() -> None:
    view = RunState()
    for ev in _events():
        view.apply(ev)  # type: ignore[arg-type]
    rv = view.runs["R"]
    assert rv.nodes[0].step == 3 and rv.nodes[2].step == 0
    assert list(rv.nodes[2].losses) == []  # NaN never reaches the sparkline history
    assert math.isnan(rv.nodes[2].loss or 0.0)
    assert rv.median_step() == 3 and rv.nodes[0].tokens_per_s == 300.0
    assert [r.hit.name for r in view.errors_sorted()] == ["nan", "warn"]
    assert view.root_cause("R") == 2  # first fatal hit when the run end names none
    assert rv.nodes[0].last_line == "world" and rv.merged_seq == 3
    assert view.finished and view.first_at == 100.0
    assert rv.loss_curve == {0: 5.0, 1: 4.9, 2: 4.8, 3: 4.7}


def test_a_step_without_a_loss_moves_progress_and_keeps_the_last_loss() -> None:
    """A step line cut before its loss (AMD maxtext-slurm's README form): the step and its time count, the
    loss shown and the sparkline keep what was logged (no NaN is made up)."""
    view = RunState()
    view.apply(NodeLogEvent("R", 0, StepEvent(step=0, loss=5.0, line=1, seconds=2.0)))
    view.apply(NodeLogEvent("R", 0, StepEvent(step=1, loss=None, line=2, seconds=1.5)))
    nv = view.runs["R"].nodes[0]
    assert nv.step == 1 and nv.step_seconds == 1.5 and nv.loss == 5.0
    assert list(nv.losses) == [5.0] and view.runs["R"].loss_curve == {0: 5.0}
    view.apply(NodeLogEvent("R", 1, StepEvent(step=0, loss=None, line=1, seconds=2.0)))
    assert view.runs["R"].nodes[1].loss is None and list(view.runs["R"].nodes[1].losses) == []


async def test_console_prints_progress_errors_and_verdicts() -> None:
    console = Console(record=True, width=140, color_system=None)

    async def source():
        for ev in _events():
            yield ev

    view = await run_console(source(), console=console)
    out = console.export_text()
    assert view.suite_end is not None and not view.suite_end.passed
    assert "R node 2 line 12 fatal nan: loss nan" in out
    assert "R node 2 (h2) failed: NaN" in out
    assert "run R failed: NaN loss" in out
    assert "training.final_loss" in out and "FAIL" in out and "suite FAILED" in out
    assert "report: out/report.html" in out
    # steps 0..3 logged: 4 steps completed (the one counter of issue 19 item 3)
    assert "R node  0 training  step 4/10 loss 4.700 2.000 s/step 300 tok/s/dev" in out


def test_console_progress_only_when_something_moved() -> None:
    console = Console(record=True, width=140, color_system=None)
    cv = ConsoleView(console)
    cv.handle(RunStartEvent("R", 10, ("h0",)))
    cv.progress()
    first = console.export_text(clear=True)
    cv.progress()
    assert "run R: step 0/10" in first and console.export_text() == ""


def test_console_caps_repeated_warnings_but_never_fatal_hits() -> None:
    console = Console(record=True, width=140, color_system=None)
    cv = ConsoleView(console)
    for i in range(20):
        cv.handle(NodeLogEvent("R", 0, ErrorHit("stuck", Severity.WARNING, "slow thread", i + 1, "benign")))
        cv.handle(NodeLogEvent("R", 0, ErrorHit("oom", Severity.FATAL, "out of memory", i + 100, "always")))
    out = console.export_text()
    assert out.count("warning stuck") == 5 and "further 'stuck' hits" in out
    assert out.count("fatal oom") == 20
    assert len(cv.view.errors) == 40
