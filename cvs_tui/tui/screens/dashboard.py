"""The run dashboard: header, suite progress, one row per node and the selected node's log below."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.widgets import Footer, Input

from cvs_tui.core.events import StageState
from cvs_tui.core.state import RunState
from cvs_tui.tui.screens.base import RunViewScreen
from cvs_tui.tui.widgets.fixed_text import FixedText
from cvs_tui.tui.widgets.log_pane import LogPane, LogSource
from cvs_tui.tui.widgets.node_table import NodeTable
from cvs_tui.tui.widgets.run_header import RunHeader
from cvs_tui.tui.widgets.stage_list import RUN_STAGE_PREFIX, StageList

STAGE_PANEL_SHARE = 0.45  # the stage panel is as wide as its longest line, up to this share of the screen
MIN_TABLE_WIDTH = 46  # room kept for node, status, health, steps, lag and errors


def cut_words(text: str, width: int) -> str:
    """``text`` in ``width`` cells, cut at a word boundary with an ellipsis (never mid-word)."""
    if len(text) <= width:
        return text
    cut = text[: max(0, width - 1)]
    space = cut.rfind(" ")
    if space > width // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:(") + "…"


def detail_text(view: RunState, run: str | None, selected: str | None) -> Text:
    """The line under the panels: the clicked stage's reason, else why the viewed run failed, else the
    failed or skipped stages with their reasons."""
    text = Text(no_wrap=True, overflow="ellipsis")
    sv = view.stages.get(selected) if selected is not None else None
    if sv is not None:
        text.append(f"{sv.name} {sv.state.value}", style="bold")
        text.append(f": {sv.detail or 'no detail'}")
        return text
    rv = view.runs.get(run) if run is not None else None
    if rv is not None and rv.outcome is not None and rv.reason:
        text.append(f"{rv.key} {rv.outcome.value}", style="bold")
        text.append(f": {rv.reason}")
        return text
    for state in (StageState.FAILED, StageState.SKIPPED):
        hit = [
            s
            for s in view.stages.values()
            if s.state is state and s.detail and not s.name.startswith(RUN_STAGE_PREFIX)
        ]
        if hit:
            text.append(f"{state.value}: ", style="bold red" if state is StageState.FAILED else "dim bold")
            text.append(" · ".join(f"{s.name} ({s.detail})" for s in hit), style="dim")
            return text
    return text


class DashboardScreen(RunViewScreen):
    # The node table holds the focus here, outside the log pane, so the pane's own keys are bound on the
    # screen as well (same Binding objects, same order in the footer) and handed to the pane below.
    BINDINGS: ClassVar[list[BindingType]] = [
        # quit and the app's screens first, so the footer still shows them at 80 columns
        Binding("q", "app.request_quit", "Quit"),
        Binding("question_mark,f1", "app.help", "Help"),
        Binding("e", "app.errors", "Errors"),
        Binding("v", "app.verdicts", "Verdicts"),
        Binding("H", "app.health", "Health"),
        LogPane.FOLLOW,
        LogPane.RESUME,
        Binding("a", "toggle_merged", "All nodes"),
        LogPane.FILTER,
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("l,enter", "open_node_log", "Node log"),
        Binding("left_square_bracket", "prev_run", "Prev run", show=False),
        Binding("right_square_bracket", "next_run", "Next run", show=False),
        # out of the footer so that Help, Errors and Verdicts still fit at 80 columns (listed in help)
        Binding("ctrl+s,x", "export", "Export", show=False),
        Binding("n", "find_node", "Find node", show=False),
        LogPane.WRAP,
    ]

    def __init__(self) -> None:
        super().__init__(id="dashboard")
        self.merged = False
        self.viewed_run: str | None = None  # None follows the current run
        self.selected_stage: str | None = None  # clicked in the stage list: its reason on the detail line

    def compose(self) -> ComposeResult:
        yield RunHeader(id="header")
        with Horizontal(id="top"):
            yield StageList(id="stages")
            yield NodeTable(id="nodes")
        yield Input(placeholder="find node: rank, host or status; Enter keeps, Esc clears", id="node-find")
        yield FixedText(id="detail")
        yield LogPane(id="pane")
        yield Footer()

    @property
    def log_pane(self) -> LogPane:
        return self.query_one(LogPane)

    def run_key(self) -> str | None:
        if self.viewed_run is not None:
            return self.viewed_run
        rv = self.view.current_run
        return rv.key if rv is not None else None

    def on_mount(self) -> None:
        self.query_one(NodeTable).focus()
        self.refresh_view(force=True)

    def refresh_view(self, *, force: bool = False) -> None:
        """The header every tick (its clock moves each second), the rest when the view model moved."""
        app = self.app
        self.query_one(RunHeader).show(self.view, app.info, app.run_title, app.clock(), self.run_key())
        super().refresh_view(force=force)

    def update(self, view: RunState) -> None:
        key = self.run_key()
        ascii_only = self.app.ascii_only
        stages = self.query_one(StageList)
        stages.show(view, key, ascii_only=ascii_only, selected=self.selected_stage)
        width = self.size.width
        panel = max(16, min(stages.content_width, int(width * STAGE_PANEL_SHARE), width - MIN_TABLE_WIDTH))
        if stages.styles.width is None or stages.styles.width.value != panel:
            stages.styles.width = panel
        table = self.query_one(NodeTable)
        rv = view.runs.get(key) if key is not None else None
        table.show(view, rv, ascii_only=ascii_only)
        detail = detail_text(view, key, self.selected_stage)
        self.query_one("#detail", FixedText).show_text(Text(cut_words(detail.plain, max(10, width - 2))))
        if rv is not None:
            # The top panels take what their rows need, up to 45% of the screen; the log gets the rest.
            listed = sum(not s.startswith(RUN_STAGE_PREFIX) for s in view.stages)
            rows = max(table.row_count + 1, listed + len(view.run_order) + 2, 6)
            top = self.query_one("#top")
            height = min(rows, max(6, int(self.size.height * 0.45)))
            if top.styles.height is None or top.styles.height.value != height:
                top.styles.height = height
        pane = self.log_pane
        pane.show_source(self._source(), view)
        pane.pump(view)

    def _source(self) -> LogSource | None:
        key = self.run_key()
        if key is None:
            return None
        if self.merged:
            return LogSource(key, None)
        rank = self.query_one(NodeTable).selected_rank()
        if rank is None:
            rv = self.view.runs.get(key)
            if rv is None or not rv.nodes:
                return None
            rank = min(rv.nodes)
        return LogSource(key, rank)

    @on(NodeTable.Highlighted)
    def _row_highlighted(self, _event: NodeTable.Highlighted) -> None:
        if not self.merged:
            self.query_one(LogPane).show_source(self._source(), self.view)

    @on(NodeTable.Reordered)
    def _reordered(self, _event: NodeTable.Reordered) -> None:
        self.refresh_view(force=True)

    @on(StageList.StageClicked)
    def _stage_clicked(self, event: StageList.StageClicked) -> None:
        self.selected_stage = None if event.stage == self.selected_stage else event.stage
        self.refresh_view(force=True)

    def action_find_node(self) -> None:
        box = self.query_one("#node-find", Input)
        box.add_class("-shown")
        box.focus()

    @on(Input.Changed, "#node-find")
    def _find_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.query_one(NodeTable).set_filter(event.value)

    @on(Input.Submitted, "#node-find")
    def _find_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        box = self.query_one("#node-find", Input)
        if not box.value:
            box.remove_class("-shown")
        self.query_one(NodeTable).focus()

    def _close_find(self) -> bool:
        box = self.query_one("#node-find", Input)
        if not box.has_class("-shown"):
            return False
        box.value = ""
        box.remove_class("-shown")
        self.query_one(NodeTable).set_filter("")
        self.query_one(NodeTable).focus()
        return True

    @on(LogPane.FilterChanged)
    def _filter_changed(self, _event: LogPane.FilterChanged) -> None:
        self.query_one(LogPane).rebuild(self.view)

    def action_toggle_merged(self) -> None:
        self.merged = not self.merged
        self.query_one(LogPane).show_source(self._source(), self.view)
        self.notify("All nodes, merged" if self.merged else "Selected node only", timeout=2)

    def action_clear_filter(self) -> None:
        if self._close_find():
            return
        if not self.query_one(LogPane).close_filter():
            self.query_one(NodeTable).focus()

    def action_open_node_log(self) -> None:
        src = self._source()
        if src is not None:
            self.app.open_node_log(src.run, src.node)

    def _switch_run(self, delta: int) -> None:
        order = self.view.run_order
        if not order:
            return
        key = self.run_key()
        idx = order.index(key) if key in order else len(order) - 1
        new = order[max(0, min(len(order) - 1, idx + delta))]
        self.viewed_run = new
        self.refresh_view(force=True)
        self.notify(f"Run {new}", timeout=2)

    def action_prev_run(self) -> None:
        self._switch_run(-1)

    def action_next_run(self) -> None:
        self._switch_run(+1)

    # -- the log pane's keys, reached from the node table ---------------------------------------------
    def action_toggle_follow(self) -> None:
        self.log_pane.action_toggle_follow()

    def action_resume_follow(self) -> None:
        self.log_pane.action_resume_follow()

    def action_filter(self) -> None:
        self.log_pane.action_filter()

    def action_export(self) -> None:
        self.log_pane.action_export()

    def action_toggle_wrap(self) -> None:
        self.log_pane.action_toggle_wrap()
