"""The headless front-end: plain Rich lines for CI logs and terminals without the TUI.

A progress line per node and per run at a steady pace, stage changes, node failures and error hits as
they happen, then the verdict tables and the suite result. Same events, same view model as the TUI.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TextIO

from rich.console import Console, ConsoleRenderable, RenderHook
from rich.table import Table
from rich.text import Text

from cvs_tui.core.events import (
    ErrorHit,
    NodeLogEvent,
    NodeState,
    NodeStatusEvent,
    RunEndEvent,
    RunEvent,
    RunStartEvent,
    Severity,
    StageEvent,
    StageState,
    StepEvent,
    SuiteEndEvent,
)
from cvs_tui.core.health.telemetry_notes import telemetry_notes
from cvs_tui.core.state import RunState, RunView
from cvs_tui.core.textsafe import safe_event
from cvs_tui.render.format import (
    NODE_STATE_STYLE,
    OUTCOME_STYLE,
    STAGE_MARK,
    fmt_duration,
    fmt_float,
    fmt_rate,
    fmt_steps,
    steps_done,
)
from cvs_tui.render.renderables import fill_verdict_table, hit_style, hit_summary

PROGRESS_SECONDS = 10.0
HEARTBEAT_SECONDS = 10.0  # a screen still this long says what it waits for (issue 19: never silent >10 s)
HITS_PRINTED_PER_SIGNATURE = 5  # per run, node and signature; a noisy warning must not flood CI logs
_NOTABLE_NODE_STATES = {
    NodeState.FAILED,
    NodeState.HUNG,
    NodeState.UNREACHABLE,
    NodeState.STOPPED,
    NodeState.STALLED,
}


class ConsoleView:
    """Prints what happens; :meth:`handle` is fed every event, :meth:`progress` is called periodically."""

    def __init__(self, console: Console, *, ascii_only: bool = False, clock: Callable[[], float] = time.time):
        self.console = console
        self.ascii_only = ascii_only
        self.clock = clock
        self.view = RunState()
        self._progress_version = -1
        self._hits_printed: dict[tuple[str, int, str], int] = {}
        self._stalled: set[tuple[str, int]] = set()  # printed once per stall; the progress lines go on
        self.last_printed = clock()
        self._started: dict[str, float] = {}  # run or 'stage NAME' -> clock time it started (heartbeat)
        self._last_step: dict[str, float] = {}  # run -> clock time of its latest step
        console.push_render_hook(_PrintStamp(self))

    def heartbeat(self, *, quiet_seconds: float = HEARTBEAT_SECONDS) -> None:
        """When a run or a stage is running and nothing was printed for ``quiet_seconds``: one line saying
        what it waits for (start-up phase or last step, or the stage, and for how long). Under ``-q``
        stdout drops it."""
        now = self.clock()
        if now - self.last_printed < quiet_seconds:
            return
        rv = self.view.current_run
        if rv is None or rv.outcome is not None:
            stage = self.view.current_stage
            if stage is not None:  # set-up before (or between) runs: images, node checks, compiles
                started = self._started.setdefault(f"stage {stage.name}", now)
                line = f"stage {stage.name}: still running, {fmt_duration(now - started)}"
                self.console.print(Text(line + (f" ({stage.detail})" if stage.detail else ""), style="dim"))
            return
        started = self._started.setdefault(rv.key, now)
        line = waiting_for(rv, started, self._last_step.get(rv.key), now)
        self.console.print(Text(f"run {rv.key}: {line}", style="dim"))

    def handle(self, ev: RunEvent) -> None:
        ev = safe_event(ev)  # node text holds escape sequences a terminal would run (audit #5)
        self.view.apply(ev)
        out = self.console
        if isinstance(ev, RunStartEvent):
            self._started[ev.run] = self.clock()
        elif isinstance(ev, StageEvent) and ev.state is StageState.RUNNING:
            self._started[f"stage {ev.stage}"] = self.clock()
        elif isinstance(ev, NodeLogEvent) and isinstance(ev.event, StepEvent):
            self._last_step[ev.run] = self.clock()
        if isinstance(ev, StageEvent):
            uni, asc, style = STAGE_MARK[ev.state]
            line = Text.assemble(
                (f"{asc if self.ascii_only else uni} stage {ev.stage} ", style), ev.state.value
            )
            if ev.detail:
                line.append(f": {ev.detail}", style="dim")
            if ev.state is not StageState.PENDING:
                out.print(line)
        elif isinstance(ev, RunStartEvent):
            out.print(Text(f"run {ev.run}: {len(ev.nodes)} node(s), {ev.total_steps} steps", style="bold"))
        elif isinstance(ev, NodeStatusEvent) and ev.state in _NOTABLE_NODE_STATES:
            if ev.state is NodeState.STALLED:
                if (ev.run, ev.node) in self._stalled:
                    return  # the same stall, a later count: the progress lines show the state
                self._stalled.add((ev.run, ev.node))
            else:
                self._stalled.discard((ev.run, ev.node))
            detail = f": {ev.detail}" if ev.detail else ""
            out.print(
                Text.assemble(
                    f"  {ev.run} node {ev.node} ({ev.host}) ",
                    (ev.state.value, NODE_STATE_STYLE[ev.state]),
                    detail,
                )
            )
        elif isinstance(ev, NodeStatusEvent):
            self._stalled.discard((ev.run, ev.node))
        elif isinstance(ev, NodeLogEvent) and isinstance(ev.event, ErrorHit):
            hit = ev.event
            fatal = hit.severity is Severity.FATAL
            key = (ev.run, ev.node, hit.name)
            printed = self._hits_printed[key] = self._hits_printed.get(key, 0) + 1
            if printed > HITS_PRINTED_PER_SIGNATURE and not fatal:
                if printed == HITS_PRINTED_PER_SIGNATURE + 1:
                    out.print(
                        Text(
                            f"  (further {hit.name!r} hits on {ev.run} node {ev.node} not printed)",
                            style="dim",
                        )
                    )
                return
            style = hit_style(hit)
            out.print(
                Text.assemble(
                    ("  ! " if fatal else "  ? ", style),
                    f"{ev.run} node {ev.node} line {hit.line} ",
                    (f"{hit.severity.value} {hit.name}", style),
                    (f": {hit_summary(hit, 200)}", "dim"),
                )
            )
        elif isinstance(ev, RunEndEvent):
            self._run_progress(self.view.runs[ev.run])  # where each node got to
            line = Text.assemble(f"run {ev.run} ", (ev.outcome.value, OUTCOME_STYLE[ev.outcome]))
            if ev.reason:
                line.append(f": {ev.reason}")
            if ev.root_cause_node is not None:
                line.append(f" (root cause: node {ev.root_cause_node})", style="bold red")
            out.print(line)
            straggler = self.view.runs[ev.run].verdicts.get("straggler")
            if straggler is not None and straggler.message:
                out.print(Text(f"  {straggler.message}", style="yellow"))
        elif isinstance(ev, SuiteEndEvent):
            self.final()

    def progress(self, *, force: bool = False) -> None:
        """One line per node of each unfinished run, and one for the run, if anything moved."""
        view = self.view
        if view.version == self._progress_version and not force:
            return
        self._progress_version = view.version
        for key in view.run_order:
            rv = view.runs[key]
            if rv.outcome is None:
                self._run_progress(rv)

    def _run_progress(self, rv: RunView) -> None:
        out = self.console
        median = rv.median_step()
        total = rv.total_steps or "?"
        for rank in sorted(rv.nodes):
            nv = rv.nodes[rank]
            lag = "" if median is None or nv.step is None else f" lag {nv.step - median:+.0f}"
            errs = f" errors {nv.error_hits}" if nv.error_hits else ""
            out.print(
                Text.assemble(
                    f"  {rv.key} node {rank:>2} ",
                    (f"{nv.state.value:<9}", NODE_STATE_STYLE[nv.state]),
                    f" step {fmt_steps(nv.step, rv.total_steps)}",
                    f" loss {fmt_float(nv.loss)}",
                    f" {fmt_float(nv.step_seconds)} s/step {fmt_rate(nv.tokens_per_s)} tok/s/dev{lag}",
                    (errs, "red" if nv.fatal_hits else "yellow"),
                    (f" ({nv.phase})" if nv.phase else "", "cyan"),
                )
            )
        done = steps_done(rv.min_step)
        pct = f" ({min(100, done * 100 // rv.total_steps)}%)" if rv.total_steps else ""
        eta = self.view.eta_seconds(rv)
        out.print(
            Text(
                f"run {rv.key}: step {done}/{total}{pct}"
                + ("" if eta is None else f", ETA {fmt_duration(eta)}"),
                style="bold",
            )
        )

    def final(self) -> None:
        out = self.console
        view = self.view
        for rank in sorted(view.health):  # the health screen's and the reports' notes, the same lines
            got = view.health[rank].telemetry
            if got is not None:
                for note in telemetry_notes(f"node {rank}", got.tool, got.samples):
                    out.print(Text(f"warning: {note}", style="yellow"))
        for key in view.run_order:
            rv = view.runs[key]
            table = Table(
                title=f"{key}: {rv.outcome.value if rv.outcome else 'unfinished'}", title_justify="left"
            )
            # the signal (PASS / FAIL) in the table; what is only recorded or n/a as one count line
            fill_verdict_table(table, rv, notes=False, only=("PASS", "FAIL"))
            statuses = [v.status for v in rv.verdicts.values()]
            if not rv.verdicts:
                out.print(Text(f"{key}: no verdicts", style="dim"))
                continue
            if table.row_count:
                out.print(table)
            else:
                out.print(Text(f"{table.title}: no gated metric", style="bold"))
            rest = statuses.count("RECORD"), statuses.count("N/A")
            if any(rest):
                line = f"  {rest[0]} recorded · {rest[1]} n/a (all rows: report.html, results.json)"
                out.print(Text(line, style="dim"))
        end = view.suite_end
        if end is not None:
            from cvs_tui.cli.verdict_line import suite_line_from_files

            word = "PASSED" if end.passed else "FAILED"
            verdict = end.results_path and suite_line_from_files(end.results_path, end.report_path)
            if end.results_path:
                out.print(f"results: {end.results_path}")
            # the verdict comes last, with the report link in it (one line, as `pytest` ends)
            out.print(
                Text(verdict or f"suite {word}", style=f"bold {'green' if end.passed else 'red'}"),
                soft_wrap=True,
            )
            if not verdict and end.report_path:
                out.print(f"report: {end.report_path}")


class _PrintStamp(RenderHook):
    """Notes the time of every print on the view's console, so the heartbeat knows the screen is still."""

    def __init__(self, cv: ConsoleView) -> None:
        self.cv = cv

    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        self.cv.last_printed = self.cv.clock()
        return renderables


def waiting_for(rv: RunView, started: float, last_step: float | None, now: float) -> str:
    """What a running run waits for, from its slowest node: its start-up phase or its next step.
    ``started`` and ``last_step`` are clock times of the run's start and of its latest step."""
    nodes = [rv.nodes[r] for r in sorted(rv.nodes)]
    behind = [n for n in nodes if n.step is None]
    if not nodes or behind or last_step is None:
        phase = next((f"node {n.rank} {n.phase}" for n in behind if n.phase), "start-up and compile")
        return f"waiting for the first step ({phase}), {fmt_duration(now - started)}"
    slowest = min(nodes, key=lambda n: n.step or 0)
    last = fmt_steps(slowest.step, rv.total_steps)
    return f"no new step for {fmt_duration(now - last_step)} (last step {last})"


PIPE_WIDTH = 200  # tables' width limit when stdout is not a terminal; text lines are never folded


def headless_console() -> Console:
    """A console for stdout: in a terminal, its width; in a pipe or a CI log, no hard wrap (a line is
    one line, so `grep` finds it whole) and tables up to PIPE_WIDTH columns. NO_COLOR is honoured."""
    console = Console()
    if console.is_terminal:
        return console
    return Console(soft_wrap=True, width=PIPE_WIDTH)


def file_console(fh: TextIO) -> Console:
    """A console writing plain lines to a file (no colour, no hard wrap), as in a CI log."""
    return Console(file=fh, soft_wrap=True, width=PIPE_WIDTH, no_color=True, color_system=None)


async def run_console(
    source: AsyncIterator[RunEvent],
    *,
    console: Console | None = None,
    ascii: bool = False,
    progress_seconds: float = PROGRESS_SECONDS,
    heartbeat_seconds: float = HEARTBEAT_SECONDS,
    clock: Callable[[], float] = time.time,
) -> RunState:
    """Print ``source`` until it ends; returns the folded view (``suite_end`` says passed or failed)."""
    cv = ConsoleView(console or headless_console(), ascii_only=ascii, clock=clock)

    async def ticker() -> None:
        while True:
            await asyncio.sleep(progress_seconds)
            cv.progress()

    async def heartbeat() -> None:
        while True:
            await asyncio.sleep(heartbeat_seconds / 4)  # so a still screen is named within the limit
            cv.heartbeat(quiet_seconds=heartbeat_seconds)

    tick = asyncio.create_task(ticker())
    beat = asyncio.create_task(heartbeat())
    try:
        async for ev in source:
            cv.handle(ev)
    finally:
        tick.cancel()
        beat.cancel()
    if cv.view.suite_end is None:
        cv.progress(force=True)
        cv.console.print(Text("the event stream ended before the suite did", style="yellow"))
    return cv.view


async def run_detached(
    source: AsyncIterator[RunEvent], log: Path, *, what: str, attach: Path, ascii: bool = False
) -> RunState:
    """The rest of a run after its view was detached: one line here saying so, then the progress lines
    into ``log`` (in the run folder) rather than over the terminal the user just got back."""
    print(
        f"detached; {what} goes on (pid {os.getpid()}, Ctrl-C stops it); progress lines go to "
        f"{log.resolve()}; follow it with: cvs-tui attach {attach.resolve()}",
        flush=True,
    )
    with log.open("a", encoding="utf-8") as fh:
        return await run_console(source, console=file_console(fh), ascii=ascii)
