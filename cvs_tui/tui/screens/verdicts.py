"""Per run: the metric table filling in as verdicts arrive, the loss curve, and the suite result."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Footer, Static

from cvs_tui.core.events import StageState
from cvs_tui.core.history.check import RunCheck
from cvs_tui.core.history.trend import Trend, trend_for
from cvs_tui.core.judge.format import format_number
from cvs_tui.core.state import RunState, RunView
from cvs_tui.render.format import OUTCOME_STYLE
from cvs_tui.render.renderables import fill_verdict_table
from cvs_tui.tui.screens.base import RunViewScreen
from cvs_tui.tui.widgets.loss_plot import LossPlot

CHECKPOINT_STAGE = "checkpoint_resume"
HISTORY_METRICS = ("training.tokens_per_sec_per_gpu", "training.step_time_p50_ms", "training.goodput_pct")
HISTORY_STYLE = {"REGRESSED": "bold red", "IMPROVED": "green"}


def history_line(rc: RunCheck) -> Text:
    """One line: the run's headline figures against its group's baseline and band, with the verdict."""
    line = Text()
    for mc in rc.metrics:
        j = mc.judgement
        if mc.metric.name not in HISTORY_METRICS or j is None or j.baseline is None or j.band is None:
            continue
        lo, hi = j.band
        if line:
            line.append("  ·  ", style="dim")
        line.append(f"{mc.metric.label} {format_number(mc.value, 'sig')} ")
        line.append(
            f"vs {format_number(j.baseline.location, 'sig')} "
            f"[{format_number(lo, 'sig')}–{format_number(hi, 'sig')}] ",
            style="dim",
        )
        line.append(mc.verdict, style=HISTORY_STYLE.get(mc.verdict, "dim"))
    runs = max((len(m.history) for m in rc.metrics), default=0)
    return Text.assemble((f"history ({runs} earlier runs): ", "bold"), line) if line else line


# Below this width a Note column would be squeezed to a letter a row: the notes go under the table.
NOTES_BELOW_WIDTH = 110


def verdict_table(rv: RunView, *, ascii_only: bool, width: int = 200) -> Table | Group:
    table = Table(expand=True, box=box.ASCII if ascii_only else box.SIMPLE_HEAD, pad_edge=False)
    if width >= NOTES_BELOW_WIDTH:
        return fill_verdict_table(table, rv, notes=True, status_justify="center")
    fill_verdict_table(table, rv, notes=False, status_justify="center")
    return Group(table, notes_below(rv))


def notes_below(rv: RunView) -> Text:
    """Each distinct note once, after the metrics it belongs to (the same window reason is usually
    given for every metric of a run: said once, it stays readable at 80 columns)."""
    by_note: dict[str, list[str]] = {}
    for v in rv.verdicts.values():
        msg = v.message.strip()
        if msg.startswith(f"{v.metric}: "):
            msg = msg[len(v.metric) + 2 :]
        if msg:
            by_note.setdefault(msg, []).append(v.metric)
    out = Text()
    for msg, metrics in by_note.items():
        if out:
            out.append("\n")
        names = metrics[0] if len(metrics) == 1 else f"{metrics[0]} and {len(metrics) - 1} more"
        out.append(f"- {names}: ", style="bold")
        out.append(msg, style="dim")
    return out


def first_gated(view: RunState) -> int | None:
    """The index of the first run with a PASS or FAIL verdict (SMOKE's rows only record)."""
    for i, key in enumerate(view.run_order):
        rv = view.runs.get(key)
        if rv is not None and any(v.status in ("PASS", "FAIL") for v in rv.verdicts.values()):
            return i
    return None


def banner(view: RunState, *, ascii_only: bool) -> Text:
    end = view.suite_end
    if end is None:
        return Text(" RUNNING: verdicts fill in as runs end ", style="bold reverse cyan")
    word = "PASS" if end.passed else "FAIL"
    mark = ("+" if end.passed else "x") if ascii_only else ("✔" if end.passed else "✘")
    return Text(f" {mark} SUITE {word} ", style=f"bold reverse {'green' if end.passed else 'red'}")


class VerdictsScreen(RunViewScreen):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("q,escape", "back", "Back")]

    DEFAULT_CSS = """
    VerdictsScreen #banner { height: 1; content-align: center middle; text-align: center; }
    VerdictsScreen .run-title { margin-top: 1; }
    VerdictsScreen .run-plot { height: 12; }
    VerdictsScreen .run-history { height: auto; }
    """

    def __init__(self) -> None:
        super().__init__()
        self._runs: list[str] = []
        self._opened = False  # scrolled to the first gated run once
        self._trend: Trend | None = None  # read once, when the suite has ended

    def compose(self) -> ComposeResult:
        yield Static(id="banner")
        yield VerticalScroll(id="runs")
        yield Static(id="footer-info")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#runs").focus()
        self.refresh_view(force=True)

    def update(self, view: RunState) -> None:
        ascii_only = self.app.ascii_only
        self.query_one("#banner", Static).update(banner(view, ascii_only=ascii_only))
        container = self.query_one("#runs", VerticalScroll)
        for key in view.run_order:
            if key not in self._runs:
                self._runs.append(key)
                container.mount(Static(classes="run-title", id=f"title-{len(self._runs)}"))
                container.mount(Static(classes="run-history", id=f"history-{len(self._runs)}"))
                container.mount(Static(classes="run-table", id=f"table-{len(self._runs)}"))
                container.mount(
                    LossPlot(ascii_only=ascii_only, classes="run-plot", id=f"plot-{len(self._runs)}")
                )
        trend = self._history(view)
        for i, key in enumerate(self._runs, start=1):
            rv = view.runs[key]
            title = Text()
            title.append(f"Run {key}  ", style="bold")
            if rv.outcome is None:
                title.append("running", style="cyan")
            else:
                title.append(rv.outcome.value, style=OUTCOME_STYLE[rv.outcome])
                if rv.reason:
                    title.append(f"  {rv.reason}", style="dim")
            root = view.root_cause(key)
            if root is not None and rv.outcome is not None and rv.outcome.value != "complete":
                title.append(f"  root cause: node {root}", style="bold red")
            try:
                self.query_one(f"#title-{i}", Static).update(title)
                check = trend.runs.get(key) if trend is not None else None
                hist = self.query_one(f"#history-{i}", Static)
                hist.display = check is not None  # no history: no line at all
                hist.update(history_line(check) if check is not None else "")
                table = (
                    verdict_table(rv, ascii_only=ascii_only, width=self.size.width)
                    if rv.verdicts
                    else Text("no verdicts yet", style="dim")
                )
                self.query_one(f"#table-{i}", Static).update(table)
                self.query_one(f"#plot-{i}", LossPlot).show(
                    rv.loss_curve, {step for nv in rv.nodes.values() for step in nv.stalls}
                )
            except Exception:  # widgets mounted this tick are queryable on the next one
                continue
        self.query_one("#footer-info", Static).update(self._footer_text(view))
        if not self._opened:
            # open on the first gated run, not on SMOKE whose rows gate nothing
            gi = first_gated(view)
            if gi is not None and gi < len(self._runs):
                self._opened = True
                self.call_after_refresh(self._scroll_to_run, gi + 1)

    def _scroll_to_run(self, i: int) -> None:
        try:
            self.query_one(f"#title-{i}", Static).scroll_visible(top=True, animate=False)
        except Exception:  # not mounted yet: the next update tries again
            self._opened = False

    def _history(self, view: RunState) -> Trend | None:
        """The finished suite against its history (read once, from the results file it wrote)."""
        end = view.suite_end
        if self._trend is None and end is not None and end.results_path and self.app.history:
            self._trend = trend_for(Path(end.results_path).parent)
        return self._trend

    def _footer_text(self, view: RunState) -> Group:
        parts: list[Text] = []
        ck = view.stages.get(CHECKPOINT_STAGE)
        if ck is not None:
            style = {StageState.PASSED: "green", StageState.FAILED: "bold red"}.get(ck.state, "dim")
            parts.append(
                Text.assemble(("checkpoint resume: ", "bold"), (ck.state.value, style), f"  {ck.detail}")
            )
        end = view.suite_end
        if end is not None:
            for label, path in (("results", end.results_path), ("report", end.report_path)):
                if path:
                    parts.append(Text.assemble((f"{label}: ", "bold"), path))
        return Group(*parts)

    def action_back(self) -> None:
        self.app.pop_screen()
