"""The headless console never sits still for more than 10 s without saying why (issue 19), and a node
without a step shows its start-up phase read from real MaxText lines (F8)."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TextIO, cast

from rich.console import Console

from cvs_tui.cli.console import ConsoleView
from cvs_tui.cli.main import _VerdictOnly
from cvs_tui.core.events import LogLinesEvent, NodeLogEvent, RunEvent, RunStartEvent, StepEvent
from cvs_tui.core.node_phase import COMPILING, DEVICES, FIRST_STEP, IMPORTING, RESTORING
from cvs_tui.core.state import RunState
from cvs_tui.tui.widgets.node_cells import last_line_cell

FIXTURES = Path(__file__).parents[1] / "fixtures" / "maxtext"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _startup_lines(name: str) -> list[str]:
    lines = []
    for line in (FIXTURES / name).read_text().splitlines():
        if "completed step" in line:
            break
        lines.append(line)
    return lines


def test_heartbeat_names_the_wait_at_most_every_10_s() -> None:
    clock = FakeClock()
    console = Console(record=True, width=200, color_system=None)
    cv = ConsoleView(console, clock=clock)
    cv.handle(RunStartEvent("BS=2", 30, ("h0",)))
    console.export_text(clear=True)
    clock.now += 9
    cv.heartbeat()
    assert console.export_text(clear=True) == ""  # still under 10 s since the last line
    clock.now += 2
    cv.heartbeat()
    cv.heartbeat()  # at most one line per 10 s: the heartbeat's own line counts as printed
    assert console.export_text(clear=True).splitlines() == [
        "run BS=2: waiting for the first step (start-up and compile), 11s"
    ]
    lines = _startup_lines("single_20steps.log")
    cv.handle(LogLinesEvent("BS=2", 0, 1, tuple(lines)))
    clock.now += 10
    cv.heartbeat()
    out = console.export_text(clear=True)
    assert out == f"run BS=2: waiting for the first step (node 0 {FIRST_STEP}), 21s\n"
    cv.handle(NodeLogEvent("BS=2", 0, StepEvent(step=11, loss=7.2, line=40)))
    clock.now += 20
    cv.heartbeat()
    assert console.export_text(clear=True) == "run BS=2: no new step for 20s (last step 12/30)\n"


def test_heartbeat_is_dropped_under_quiet() -> None:
    clock = FakeClock()
    sink = io.StringIO()
    console = Console(file=cast(TextIO, _VerdictOnly(sink)), width=200, color_system=None)
    cv = ConsoleView(console, clock=clock)
    cv.handle(RunStartEvent("R", 30, ("h0",)))
    clock.now += 30
    cv.heartbeat()
    console.print("suite PASSED")
    console.file.flush()
    assert sink.getvalue() == "suite PASSED\n"


def test_startup_phases_from_a_real_restore_log() -> None:
    view = RunState()
    view.apply(RunStartEvent("CKPT-1", 12, ("h0",)))
    seen: list[str] = []
    for n, line in enumerate(_startup_lines("ckpt_phase2.log"), start=1):
        view.apply(LogLinesEvent("CKPT-1", 0, n, (line,)))
        phase = view.runs["CKPT-1"].nodes[0].phase
        if not seen or seen[-1] != phase:
            seen.append(phase)
    assert seen == [IMPORTING, DEVICES, RESTORING, COMPILING, FIRST_STEP]
    nv = view.runs["CKPT-1"].nodes[0]
    assert last_line_cell(nv.phase, nv.last_line).plain.startswith(f"{FIRST_STEP} · ")
    view.apply(NodeLogEvent("CKPT-1", 0, StepEvent(step=6, loss=7.3, line=52)))
    assert nv.phase == "" and last_line_cell(nv.phase, nv.last_line).plain == nv.last_line.split("] ", 1)[1]


def test_no_restore_phase_without_a_checkpoint_and_phase_in_console() -> None:
    console = Console(record=True, width=200, color_system=None)
    cv = ConsoleView(console)
    cv.handle(RunStartEvent("R", 20, ("h0",)))
    lines = _startup_lines("single_20steps.log")
    compiling_at = next(i for i, x in enumerate(lines) if "No existing checkpoints found" in x)
    cv.handle(LogLinesEvent("R", 0, 1, tuple(lines[: compiling_at + 1])))
    assert cv.view.runs["R"].nodes[0].phase == COMPILING
    cv.progress()
    assert f"step -/20 loss - - s/step - tok/s/dev ({COMPILING})" in console.export_text()


async def test_run_console_beats_while_the_stream_is_still() -> None:
    """The wiring: run_console's own task prints the heartbeat (a short interval stands in for 10 s)."""
    import asyncio

    from cvs_tui.cli.console import run_console
    from cvs_tui.core.events import SuiteEndEvent

    console = Console(record=True, width=200, color_system=None)

    async def source() -> AsyncIterator[RunEvent]:
        yield RunStartEvent("R", 5, ("h0",))
        await asyncio.sleep(0.5)
        yield SuiteEndEvent(True, "", "")

    await run_console(source(), console=console, heartbeat_seconds=0.2)
    beats = [x for x in console.export_text().splitlines() if x.startswith("run R: waiting")]
    assert 1 <= len(beats) <= 3, beats
    assert beats[0] == "run R: waiting for the first step (start-up and compile), 0s"


def test_heartbeat_names_a_still_set_up_stage() -> None:
    from cvs_tui.core.events import StageEvent, StageState

    clock = FakeClock()
    console = Console(record=True, width=200, color_system=None)
    cv = ConsoleView(console, clock=clock)
    cv.handle(StageEvent("prepare nodes", StageState.RUNNING, "pulling the image", at=clock.now))
    console.export_text(clear=True)
    clock.now += 12
    cv.heartbeat()
    assert console.export_text(clear=True) == "stage prepare nodes: still running, 12s (pulling the image)\n"
    cv.handle(StageEvent("prepare nodes", StageState.PASSED, at=clock.now))
    assert "stage prepare nodes passed" in console.export_text(clear=True)
    clock.now += 30
    cv.heartbeat()
    assert console.export_text(clear=True) == ""  # nothing running: nothing to wait for
