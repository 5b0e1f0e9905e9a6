"""The run dashboard: header, suite progress, one row per node and the selected node's log below."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.widgets import Footer

from cvs_tui.core.state import RunState
from cvs_tui.tui.screens.base import RunViewScreen
from cvs_tui.tui.widgets.log_pane import LogPane, LogSource
from cvs_tui.tui.widgets.node_table import NodeTable
from cvs_tui.tui.widgets.run_header import RunHeader
from cvs_tui.tui.widgets.stage_list import StageList


class DashboardScreen(RunViewScreen):
    # The node table holds the focus here, outside the log pane, so the pane's own keys are bound on the
    # screen as well (same Binding objects, same order in the footer) and handed to the pane below.
    BINDINGS: ClassVar[list[BindingType]] = [
        LogPane.FOLLOW,
        LogPane.RESUME,
        Binding("a", "toggle_merged", "All nodes"),
        LogPane.FILTER,
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("l,enter", "open_node_log", "Node log"),
        Binding("left_square_bracket", "prev_run", "Prev run", show=False),
        Binding("right_square_bracket", "next_run", "Next run", show=False),
        LogPane.EXPORT,
    ]

    def __init__(self) -> None:
        super().__init__(id="dashboard")
        self.merged = False
        self.viewed_run: str | None = None  # None follows the current run

    def compose(self) -> ComposeResult:
        yield RunHeader(id="header")
        with Horizontal(id="top"):
            yield StageList(id="stages")
            yield NodeTable(id="nodes")
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
        self.query_one(RunHeader).show(self.view, app.info, app.run_title, app.clock())
        super().refresh_view(force=force)

    def update(self, view: RunState) -> None:
        key = self.run_key()
        ascii_only = self.app.ascii_only
        self.query_one(StageList).show(view, key, ascii_only=ascii_only)
        table = self.query_one(NodeTable)
        rv = view.runs.get(key) if key is not None else None
        table.show(view, rv, ascii_only=ascii_only)
        if rv is not None:
            # The node table takes what its rows need, up to 45% of the screen; the log gets the rest.
            rows = max(len(rv.nodes) + 2, len(view.stages) + len(view.run_order) + 2, 8)
            top = self.query_one("#top")
            height = min(rows, max(8, int(self.size.height * 0.45)))
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

    @on(LogPane.FilterChanged)
    def _filter_changed(self, _event: LogPane.FilterChanged) -> None:
        self.query_one(LogPane).rebuild(self.view)

    def action_toggle_merged(self) -> None:
        self.merged = not self.merged
        self.query_one(LogPane).show_source(self._source(), self.view)
        self.notify("All nodes, merged" if self.merged else "Selected node only", timeout=2)

    def action_clear_filter(self) -> None:
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
