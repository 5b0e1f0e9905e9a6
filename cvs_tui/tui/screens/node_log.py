"""One node's log on the whole screen: follow, filter, export, or a window around a given line."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer

from cvs_tui.core.state import RunState
from cvs_tui.tui.screens.base import RunViewScreen
from cvs_tui.tui.widgets.log_pane import LogPane, LogSource

CONTEXT_LINES = 200  # lines either side of a jump target read back from the log file


class NodeLogScreen(RunViewScreen):
    # follow, filter and export are the log pane's keys; the pane holds the focus on this screen.
    BINDINGS: ClassVar[list[BindingType]] = [Binding("q,escape", "back", "Back")]

    def __init__(self, run: str, node: int | None, *, goto_line: int | None = None) -> None:
        super().__init__()
        self.source = LogSource(run, node)
        self.goto_line = goto_line

    def compose(self) -> ComposeResult:
        yield LogPane(numbered=True, id="pane")
        yield Footer()

    def on_mount(self) -> None:
        pane = self.query_one(LogPane)
        pane.wrap = self.app.dashboard.log_pane.wrap  # one wrap setting for the dashboard and full screen
        pane.log_widget.focus()
        if pane.wrap:  # wrapped lines need the pane's width, known once it is laid out
            self.call_after_refresh(self._fill)
        else:
            self._fill()

    def _fill(self) -> None:
        self.query_one(LogPane).show_source(self.source, self.view)
        if self.goto_line is not None and self.source.node is not None:
            self._show_context(self.goto_line)

    def _show_context(self, line: int) -> None:
        """The target line with context: from the ring buffer when held, else from the log on disk."""
        pane = self.query_one(LogPane)
        node = self.source.node
        assert node is not None
        rv = self.view.runs.get(self.source.run)
        nv = rv.nodes.get(node) if rv is not None else None
        lo, hi = max(1, line - CONTEXT_LINES), line + CONTEXT_LINES
        window: list[tuple[int, str]] = []
        if nv is not None and nv.lines.get(line) is not None:
            window = [(n, t) for n in range(lo, hi + 1) if (t := nv.lines.get(n)) is not None]
            where = "ring buffer"
        else:
            path = self.app.node_log_path(self.source.run, node)
            where = str(path) if path is not None else "no log file"
            if path is not None and path.is_file():
                with path.open("r", encoding="utf-8", errors="replace") as fh:
                    for n, text in enumerate(fh, start=1):
                        if n > hi:
                            break
                        if n >= lo:
                            window.append((n, text.rstrip("\n")[:1000]))
        if not window:
            self.notify(f"line {line} is no longer held and {where} could not be read", severity="warning")
            return
        pane.show_window(window, line, f"line {line} of node {node} ({where})")

    def update(self, view: RunState) -> None:
        self.query_one(LogPane).pump(view)

    @on(LogPane.FilterChanged)
    def _filter_changed(self, _event: LogPane.FilterChanged) -> None:
        self.query_one(LogPane).rebuild(self.view)

    def action_back(self) -> None:
        pane = self.query_one(LogPane)
        if not pane.close_filter():
            dash = self.app.dashboard.log_pane
            self.app.pop_screen()
            if dash.wrap != pane.wrap:  # a wrap toggled here holds on the dashboard too
                dash.wrap = pane.wrap
                dash.call_after_refresh(dash.rebuild, self.app.view)
