"""Every error-signature hit across nodes, fatal first, the root-cause node marked."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Footer, Static

from cvs_tui.core.events import Severity
from cvs_tui.core.state import ErrorRow, RunState
from cvs_tui.render.renderables import hit_style, hit_summary
from cvs_tui.tui.screens.base import RunViewScreen


class ErrorsScreen(RunViewScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "back", "Back"),
        Binding("enter", "jump", "Jump to line"),
    ]

    DEFAULT_CSS = """
    ErrorsScreen #errors-title { height: 1; background: $panel; padding: 0 1; }
    ErrorsScreen DataTable { height: 1fr; }
    """

    def __init__(self) -> None:
        super().__init__()
        self._rows: list[ErrorRow] = []

    def compose(self) -> ComposeResult:
        yield Static(id="errors-title")
        yield DataTable(cursor_type="row", zebra_stripes=True, id="errors")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for key, label in (
            ("sev", "severity"),
            ("run", "run"),
            ("node", "node"),
            ("line", "line"),
            ("name", "signature"),
            ("text", "text"),
        ):
            table.add_column(label, key=key)
        table.focus()
        self.refresh_view(force=True)

    def update(self, view: RunState) -> None:
        rows = view.errors_sorted()
        if self._rows and [r.seq for r in rows] == [r.seq for r in self._rows]:
            return
        table = self.query_one(DataTable)
        cursor = table.cursor_row
        table.clear()
        ascii_only = self.app.ascii_only
        roots = {run: view.root_cause(run) for run in view.runs}
        for row in rows:
            hit = row.hit
            fatal = hit.severity is Severity.FATAL
            is_root = fatal and roots.get(row.run) == row.node
            mark = ("* " if ascii_only else "◆ ") if is_root else "  "
            table.add_row(
                Text(hit.severity.value.upper(), style=hit_style(hit)),
                row.run,
                Text(
                    f"{mark}{row.node}" + (" root cause" if is_root else ""),
                    style="bold red" if is_root else "",
                ),
                str(hit.line),
                hit.name,
                hit_summary(hit, 160),
                key=str(row.seq),
            )
        self._rows = rows
        if rows:
            table.move_cursor(row=min(cursor, len(rows) - 1))
        n_fatal = sum(r.hit.severity is Severity.FATAL for r in rows)
        title = Text()
        title.append("Errors ", style="bold")
        title.append(f"{n_fatal} fatal, {len(rows) - n_fatal} warnings", style="red" if n_fatal else "dim")
        if view.errors_dropped:
            title.append(f", {view.errors_dropped} more warnings not listed", style="dim")
        title.append("   Enter: open that line in the node's log", style="dim")
        self.query_one("#errors-title", Static).update(title)

    def selected(self) -> ErrorRow | None:
        table = self.query_one(DataTable)
        if not self._rows or table.cursor_row < 0 or table.cursor_row >= len(self._rows):
            return None
        return self._rows[table.cursor_row]

    def action_jump(self) -> None:
        row = self.selected()
        if row is not None:
            self.app.open_node_log(row.run, row.node, goto_line=row.hit.line)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_jump()

    def action_back(self) -> None:
        self.app.pop_screen()
