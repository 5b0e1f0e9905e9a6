"""The headless front-end: plain Rich lines for CI logs and terminals without the TUI.

A progress line per node and per run at a steady pace, stage changes, node failures and error hits as
they happen, then the verdict tables and the suite result. Same events, same view model as the TUI.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

from rich.console import Console
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
    SuiteEndEvent,
)
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

    def handle(self, ev: RunEvent) -> None:
        ev = safe_event(ev)  # node text holds escape sequences a terminal would run (audit #5)
        self.view.apply(ev)
        out = self.console
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
        for key in view.run_order:
            rv = view.runs[key]
            table = Table(
                title=f"{key}: {rv.outcome.value if rv.outcome else 'unfinished'}", title_justify="left"
            )
            # the signal (PASS / FAIL) in the table; what is only recorded or n/a as one count line
            fill_verdict_table(table, rv, notes=False, only=("PASS", "FAIL"), significant=True)
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
            if not line and end.report_path:
                out.print(f"report: {end.report_path}")


PIPE_WIDTH = 200  # tables' width limit when stdout is not a terminal; text lines are never folded


def headless_console() -> Console:
    """A console for stdout: in a terminal, its width; in a pipe or a CI log, no hard wrap (a line is
    one line, so `grep` finds it whole) and tables up to PIPE_WIDTH columns. NO_COLOR is honoured."""
    console = Console()
    if console.is_terminal:
        return console
    return Console(soft_wrap=True, width=PIPE_WIDTH)


async def run_console(
    source: AsyncIterator[RunEvent],
    *,
    console: Console | None = None,
    ascii: bool = False,
    progress_seconds: float = PROGRESS_SECONDS,
    clock: Callable[[], float] = time.time,
) -> RunState:
    """Print ``source`` until it ends; returns the folded view (``suite_end`` says passed or failed)."""
    cv = ConsoleView(console or headless_console(), ascii_only=ascii, clock=clock)

    async def ticker() -> None:
        while True:
            await asyncio.sleep(progress_seconds)
            cv.progress()

    tick = asyncio.create_task(ticker())
    try:
        async for ev in source:
            cv.handle(ev)
    finally:
        tick.cancel()
    if cv.view.suite_end is None:
        cv.progress(force=True)
        cv.console.print(Text("the event stream ended before the suite did", style="yellow"))
    return cv.view
