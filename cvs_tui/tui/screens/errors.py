"""Error incidents across nodes (hits a few lines apart grouped), fatal first, the root-cause node marked."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Footer, Static

from cvs_tui.core.events import Severity
from cvs_tui.core.parse.signatures import compile_signatures
from cvs_tui.core.state import RunState
from cvs_tui.render.incidents import Incident, group_incidents
from cvs_tui.render.renderables import hit_style, hit_summary
from cvs_tui.tui.screens.base import RunViewScreen


def pattern_count() -> int:
    """Error patterns of the default set (the config may replace them; the count is then the default's)."""
    return sum(s.origin != "benign" for s in compile_signatures(None))


def lines_scanned(view: RunState) -> int:
    return sum(nv.lines.next_line - 1 for rv in view.runs.values() for nv in rv.nodes.values())


class ErrorsScreen(RunViewScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q,escape", "back", "Back"),
        Binding("enter", "jump", "Jump to line"),
    ]

    DEFAULT_CSS = """
    ErrorsScreen #errors-title { height: 1; background: $panel; padding: 0 1; }
    ErrorsScreen DataTable { height: 1fr; }
    """

    def __init__(self) -> None:
        super().__init__()
        self._rows: list[Incident] = []
        self._seqs: list[int] = []

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
            ("line", "lines"),
            ("name", "incident"),
            ("tags", "also matched"),
            ("text", "text"),
        ):
            table.add_column(label, key=key)
        table.focus()
        self.refresh_view(force=True)

    def update(self, view: RunState) -> None:
        seqs = [r.seq for r in view.errors]
        if self._seqs and seqs == self._seqs:
            return
        self._seqs = seqs
        incidents = group_incidents(view.errors)
        table = self.query_one(DataTable)
        cursor = table.cursor_row
        table.clear()
        ascii_only = self.app.ascii_only
        roots = {run: view.root_cause(run) for run in view.runs}
        for i, inc in enumerate(incidents):
            lead = inc.lead.hit
            fatal = inc.severity is Severity.FATAL
            is_root = fatal and roots.get(inc.run) == inc.node
            mark = ("* " if ascii_only else "◆ ") if is_root else "  "
            table.add_row(
                Text(inc.severity.value.upper(), style=hit_style(lead)),
                inc.run,
                Text(
                    f"{mark}{inc.node}" + (" root cause" if is_root else ""),
                    style="bold red" if is_root else "",
                ),
                inc.lines,
                Text(inc.label, style="bold"),
                Text(", ".join(inc.tags), style="dim"),
                hit_summary(lead, 160),
                key=str(i),
            )
        self._rows = incidents
        if incidents:
            table.move_cursor(row=min(cursor, len(incidents) - 1))
        n_fatal = sum(inc.severity is Severity.FATAL for inc in incidents)
        title = Text()
        title.append("Errors ", style="bold")
        if not incidents:
            title.append(
                f"no error-pattern hits ({pattern_count()} patterns, {lines_scanned(view)} lines scanned)",
                style="green",
            )
        else:
            title.append(
                f"{n_fatal} fatal, {len(incidents) - n_fatal} warning incident(s)"
                f" from {len(view.errors)} hits",
                style="red" if n_fatal else "dim",
            )
        if view.errors_dropped:
            title.append(f", {view.errors_dropped} more warnings not listed", style="dim")
        if incidents:
            title.append("   Enter: open that line in the node's log", style="dim")
        self.query_one("#errors-title", Static).update(title)

    def selected(self) -> Incident | None:
        table = self.query_one(DataTable)
        if not self._rows or table.cursor_row < 0 or table.cursor_row >= len(self._rows):
            return None
        return self._rows[table.cursor_row]

    def action_jump(self) -> None:
        inc = self.selected()
        if inc is not None:
            self.app.open_node_log(inc.run, inc.node, goto_line=inc.lead.hit.line)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_jump()

    def action_back(self) -> None:
        self.app.pop_screen()
