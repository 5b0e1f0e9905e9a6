"""The run dashboard: header, suite progress, one row per node and the selected node's log below."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer

from cvs_tui.core.state import RunState
from cvs_tui.tui.widgets.log_pane import LogPane, LogSource
from cvs_tui.tui.widgets.node_table import NodeTable
from cvs_tui.tui.widgets.run_header import RunHeader
from cvs_tui.tui.widgets.stage_list import StageList


class DashboardScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f", "toggle_follow", "Follow"),
        Binding("G", "resume_follow", "Resume follow", show=False),
        Binding("a", "toggle_merged", "All nodes"),
        Binding("slash", "filter", "Filter"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("l,enter", "open_node_log", "Node log"),
        Binding("left_square_bracket", "prev_run", "Prev run", show=False),
        Binding("right_square_bracket", "next_run", "Next run", show=False),
        Binding("ctrl+s,x", "export", "Export"),
    ]

    def __init__(self) -> None:
        super().__init__(id="dashboard")
        self.merged = False
        self.viewed_run: str | None = None  # None follows the current run
        self._last_version = -1

    def compose(self) -> ComposeResult:
        yield RunHeader(id="header")
        with Horizontal(id="top"):
            yield StageList(id="stages")
            yield NodeTable(id="nodes")
        yield LogPane(id="pane")
        yield Footer()

    @property
    def view(self) -> RunState:
        return self.app.view  # type: ignore[attr-defined,no-any-return]

    def run_key(self) -> str | None:
        if self.viewed_run is not None:
            return self.viewed_run
        rv = self.view.current_run
        return rv.key if rv is not None else None

    def on_mount(self) -> None:
        self.query_one(NodeTable).focus()
        self.refresh_view(force=True)

    def refresh_view(self, *, force: bool = False) -> None:
        """Bring every widget up to date with the view model (called on the app's refresh tick)."""
        app = self.app
        view = self.view
        self.query_one(RunHeader).show(view, app.info, app.run_title, app.clock())  # type: ignore[attr-defined]
        if view.version == self._last_version and not force:
            return
        self._last_version = view.version
        key = self.run_key()
        ascii_only: bool = app.ascii_only  # type: ignore[attr-defined]
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
        pane = self.query_one(LogPane)
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

    def action_toggle_follow(self) -> None:
        self.query_one(LogPane).toggle_follow(self.view)

    def action_resume_follow(self) -> None:
        pane = self.query_one(LogPane)
        if not pane.follow:
            pane.toggle_follow(self.view)

    def action_toggle_merged(self) -> None:
        self.merged = not self.merged
        self.query_one(LogPane).show_source(self._source(), self.view)
        self.notify("All nodes, merged" if self.merged else "Selected node only", timeout=2)

    def action_filter(self) -> None:
        self.query_one(LogPane).open_filter()

    def action_clear_filter(self) -> None:
        if not self.query_one(LogPane).close_filter():
            self.query_one(NodeTable).focus()

    def action_open_node_log(self) -> None:
        src = self._source()
        if src is not None:
            self.app.open_node_log(src.run, src.node)  # type: ignore[attr-defined]

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

    def action_export(self) -> None:
        self.app.export_pane(self.query_one(LogPane))  # type: ignore[attr-defined]
