"""Rich pieces both front-ends draw the same way: the verdict table and an error hit's severity and text."""

from __future__ import annotations

from collections.abc import Collection

from rich.console import JustifyMethod
from rich.table import Table
from rich.text import Text

from cvs_tui.core.events import ErrorHit, Severity
from cvs_tui.core.judge.format import format_number
from cvs_tui.core.state import RunView
from cvs_tui.render.format import VERDICT_STYLE

_COLUMNS: tuple[tuple[str, JustifyMethod], ...] = (
    ("Metric", "left"),
    ("Expected", "right"),
    ("Actual", "right"),
    ("Unit", "left"),
)


def fill_verdict_table(
    table: Table,
    rv: RunView,
    *,
    notes: bool,
    status_justify: JustifyMethod = "left",
    only: Collection[str] | None = None,
) -> Table:
    """One row per verdict of ``rv`` into ``table`` (its title, box and width are the caller's); with
    ``only``, just the verdicts whose status is in it. Values at 4 significant digits (1, not 1.0000),
    the same on the console and the TUI's verdict screen."""
    for name, justify in _COLUMNS:
        table.add_column(name, justify=justify)
    table.add_column("Status", justify=status_justify)
    if notes:
        table.add_column("Note", ratio=1, overflow="fold")
    for v in rv.verdicts.values():
        if only is not None and v.status not in only:
            continue
        row: list[str | Text] = [
            v.metric,
            v.expected,
            format_number(v.actual, "sig", digits=4, missing="-"),
            v.unit,
            Text(v.status, style=VERDICT_STYLE.get(v.status, "")),
        ]
        if notes:
            row.append(Text(v.message, style="dim"))
        table.add_row(*row)
    return table


def hit_style(hit: ErrorHit) -> str:
    """Fatal hits in bold red, warnings in yellow."""
    return "bold red" if hit.severity is Severity.FATAL else "yellow"


def hit_summary(hit: ErrorHit, limit: int) -> str:
    """The first line of a hit's text, cut to ``limit`` characters."""
    return hit.text.splitlines()[0][:limit] if hit.text else ""
