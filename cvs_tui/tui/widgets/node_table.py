"""One row per node of the viewed run: the master half of the master-detail dashboard.

A Line-API widget rather than a DataTable: each row is rendered once into a cached strip and only rows
whose text changed are rendered again, so 64+ nodes updating every tick cost a few rows, not the table.
"""

from __future__ import annotations

import math
import time
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.strip import Strip
from textual.timer import Timer
from textual.widget import Widget

from cvs_tui.core.events import NodeState
from cvs_tui.core.state import NodeHealthView, RunState, RunView
from cvs_tui.render.format import NODE_STATE_STYLE, fmt_float, fmt_rate, fmt_steps
from cvs_tui.tui.widgets.node_cells import (
    health_cell,
    last_line_cell,
    stalls_cell,
    status_word,
    telemetry_text,
)
from cvs_tui.tui.widgets.sparkline import sparkline

SPARK_WIDTH = 16
# While a run streams, rows are formatted again at most this often (every row changes on every tick at
# 256 nodes, and formatting plus repainting them was the largest cost per tick); keys, sort and filter
# act at once, and the latest state always lands within this time.
ROW_REFRESH_SECONDS = 0.5
# (label, widest it gets, priority): a column is as wide as its widest cell (up to the cap) and, when the
# screen is narrow, columns are dropped from the lowest priority up, so `lag`, `errors` and `health`
# survive at 80 columns while the loss trend and the last line go first. The last column takes the rest.
COLUMNS: tuple[tuple[str, int, int], ...] = (
    ("node", 18, 10),
    ("status", 12, 9),
    ("health", 12, 6),
    ("steps", 12, 8),
    ("loss", 8, 5),
    ("loss trend", SPARK_WIDTH + 1, 1),
    ("tok/s/dev", 10, 4),
    ("s/step", 7, 3),
    ("lag", 6, 7),
    ("gpu %/W/°C", 15, 2),
    ("errors", 7, 7),
    ("stalls", 11, 3),
    ("last line", 0, 0),
)
LAST_LINE_MIN = 12  # the last line is shown only when at least this much room is left for it
SORT_MODES: tuple[str, ...] = ("node", "lag", "errors", "status")
# status sort: the nodes that need a look first
_STATUS_ORDER: dict[NodeState, int] = {
    NodeState.FAILED: 0,
    NodeState.UNREACHABLE: 1,
    NodeState.HUNG: 2,
    NodeState.STOPPED: 3,
    NodeState.WAITING: 4,
    NodeState.CONNECTING: 5,
    NodeState.STARTING: 6,
    NodeState.TRAINING: 7,
    NodeState.DONE: 8,
}
Cells = tuple[Text, ...]


class NodeTable(Widget, can_focus=True):
    """Rows keyed by rank with a row cursor; posts :class:`NodeTable.Highlighted` when it moves."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "cursor(-1)", "Up", show=False),
        Binding("down,j", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "cursor_to(0)", "First", show=False),
        Binding("end", "cursor_to(-1)", "Last", show=False),
        Binding("s", "cycle_sort", "Sort", show=False),
    ]
    COMPONENT_CLASSES: ClassVar[set[str]] = {"node-table--header", "node-table--cursor", "node-table--stripe"}
    DEFAULT_CSS = """
    NodeTable { height: 1fr; }
    NodeTable > .node-table--header { text-style: bold; background: $panel; }
    NodeTable > .node-table--cursor { background: $primary 35%; text-style: bold; }
    NodeTable:focus > .node-table--cursor { background: $primary 70%; }
    NodeTable > .node-table--stripe { background: $surface-lighten-1 30%; }
    """

    class Reordered(Message):
        """Sort or filter changed: the owner shows the table again with the current view."""

    class Highlighted(Message):
        def __init__(self, rank: int) -> None:
            super().__init__()
            self.rank = rank

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._shown_run: str | None = None
        self._ranks: list[int] = []
        self._cells: dict[int, Cells] = {}
        self._strips: dict[tuple[int, int, bool], Strip] = {}  # (rank, width, cursor) -> rendered row
        self.cursor = 0
        self.top = 0  # first row shown
        self._row_context: (
            tuple[RunView, float | None, int | None, bool, dict[int, NodeHealthView]] | None
        ) = None
        self._stale: set[int] = set()  # rows whose text may be out of date (formatted when shown)
        self.sort_mode = SORT_MODES[0]
        self.name_filter = ""  # keep rows whose node, host or status contains this (case-insensitive)
        self._total = 0  # rows before the filter
        self._layout_key: tuple[int, tuple[int, ...]] | None = None
        self._layout: list[tuple[int, int]] = []  # (column index, width) shown
        self._natural: list[int] | None = None  # each column's content width; None: measure again
        self._formatted_at = -math.inf  # when show() last took the run's state (monotonic)
        self._due = False  # take the next state at once (sort, filter, a caller that needs it now)
        self._latest: tuple[RunState, RunView, bool] | None = None  # held back by the rate cap
        self._flush_timer: Timer | None = None

    # -- data ----------------------------------------------------------------------------------------
    @property
    def row_count(self) -> int:
        return len(self._ranks)

    def selected_rank(self) -> int | None:
        return self._ranks[self.cursor] if self._ranks else None

    def select_rank(self, rank: int) -> None:
        if rank in self._ranks:
            self.move_cursor(self._ranks.index(rank))

    def show(self, view: RunState, rv: RunView | None, *, ascii_only: bool) -> None:
        """Take the run's current state (at most every ROW_REFRESH_SECONDS while it streams, the latest
        one after that); only rows on screen are formatted now, the rest when shown."""
        if rv is None:
            return
        now = time.monotonic()
        if rv.key == self._shown_run and not self._due and now - self._formatted_at < ROW_REFRESH_SECONDS:
            self._latest = (view, rv, ascii_only)
            if self._flush_timer is None:
                wait = self._formatted_at + ROW_REFRESH_SECONDS - now
                self._flush_timer = self.set_timer(wait, self._flush)
            return
        self._formatted_at, self._due, self._latest = now, False, None
        if rv.key != self._shown_run:
            self._shown_run = rv.key
            self._cells.clear()
            self._natural = None
            self._strips.clear()
            self._ranks = []
            self.cursor = self.top = 0
        self._row_context = (rv, rv.median_step(), view.root_cause(rv.key), ascii_only, view.health)
        changed = False
        ranks = self._ordered(rv, view)
        if ranks != self._ranks:
            keep = self.selected_rank()
            self._ranks = ranks
            self._strips.clear()
            changed = True
            if keep in ranks:
                self.cursor = ranks.index(keep)
            self.cursor = max(0, min(self.cursor, len(ranks) - 1))
            self._scroll_to_cursor()
        self._stale = set(ranks)
        for row in range(self.top, min(len(ranks), self.top + self._visible_rows)):
            changed = self._ensure_cells(ranks[row]) or changed
        if changed:
            self.refresh()

    def _flush(self) -> None:
        self._flush_timer = None
        if self._latest is not None:
            view, rv, ascii_only = self._latest
            rows = len(self._ranks)
            self.show(view, rv, ascii_only=ascii_only)
            if len(self._ranks) != rows:  # nodes joined: the screen sizes the panel to the rows
                self.post_message(self.Reordered())

    def hurry(self) -> None:
        """Take the state held back by the rate cap now, and the next one at once."""
        self._due = True
        if self._latest is not None:
            if self._flush_timer is not None:
                self._flush_timer.stop()
            self._flush()

    def _ordered(self, rv: RunView, view: RunState) -> list[int]:
        """The run's ranks, filtered by :attr:`name_filter` and sorted by :attr:`sort_mode`."""
        ranks = sorted(rv.nodes)
        self._total = len(ranks)
        needle = self.name_filter.strip().lower()
        if needle:
            health = view.health
            ranks = [
                r
                for r in ranks
                if needle
                in f"{r} {rv.nodes[r].host} {rv.nodes[r].state.value} "
                f"{health[r].state.value if r in health else ''}".lower()
            ]
        nodes = rv.nodes
        if self.sort_mode == "lag":
            median = rv.median_step() or 0.0
            # most behind first; nodes without a step yet are the furthest behind
            ranks.sort(key=lambda r: (nodes[r].step is not None, (nodes[r].step or 0) - median, r))
        elif self.sort_mode == "errors":
            ranks.sort(key=lambda r: (-nodes[r].fatal_hits, -nodes[r].error_hits, r))
        elif self.sort_mode == "status":
            ranks.sort(key=lambda r: (_STATUS_ORDER.get(nodes[r].state, 9), r))
        return ranks

    def set_filter(self, text: str) -> None:
        self.name_filter = text
        self._after_reorder()

    def action_cycle_sort(self) -> None:
        self.sort_mode = SORT_MODES[(SORT_MODES.index(self.sort_mode) + 1) % len(SORT_MODES)]
        self._after_reorder()
        self.notify(f"nodes sorted by {self.sort_mode}", timeout=2)

    def _after_reorder(self) -> None:
        # the next show() reorders; ask the screen for one now so the key feels instant
        self._due = True
        self.refresh()
        self.post_message(self.Reordered())

    def _ensure_cells(self, rank: int) -> bool:
        """Format a row if the run moved since it was last formatted. Returns whether its text changed."""
        if rank not in self._stale or self._row_context is None:
            return False
        self._stale.discard(rank)
        rv, median, root, ascii_only, health = self._row_context
        cells = self._row_cells(rv, rank, median, root, ascii_only, health.get(rank))
        if self._cells.get(rank) == cells:
            return False
        self._cells[rank] = cells
        self._natural = None
        for is_cursor in (False, True):
            self._strips.pop((rank, self.size.width, is_cursor), None)
        return True

    @staticmethod
    def _row_cells(
        rv: RunView,
        rank: int,
        median: float | None,
        root: int | None,
        ascii_only: bool,
        hv: NodeHealthView | None = None,
    ) -> Cells:
        nv = rv.nodes[rank]
        name = f"{rank:>2} {nv.host}" if nv.host else f"{rank:>2}"
        if rank == root:
            name = ("*" if ascii_only else "◆") + name[1:]
        # a whole number of steps, never "-0" (two nodes a step apart sit half a step off their median)
        lag = "-" if median is None or nv.step is None else f"{round(nv.step - median):+d}"
        nonfinite = nv.loss is not None and fmt_float(nv.loss) in ("NaN", "inf", "-inf")
        err_style = "bold red" if nv.fatal_hits else ("yellow" if nv.error_hits else "dim")
        return (
            Text(name, style="bold red" if rank == root else ""),
            Text(status_word(nv), style=NODE_STATE_STYLE[nv.state]),
            health_cell(hv),
            Text(fmt_steps(nv.step, rv.total_steps)),
            Text(fmt_float(nv.loss), style="bold red" if nonfinite else ""),
            Text(sparkline(nv.losses, SPARK_WIDTH, ascii_only=ascii_only), style="cyan"),
            Text(fmt_rate(nv.tokens_per_s)),
            Text(fmt_float(nv.step_seconds)),
            Text(lag, style="yellow" if lag not in ("-", "+0") else ""),
            Text(telemetry_text(hv.telemetry if hv else None)),
            Text(str(nv.error_hits), style=err_style),
            stalls_cell(nv.stalls),
            Text(nv.detail, style="yellow")  # follow mode's "no progress for N s"
            if nv.state is NodeState.STALLED and nv.detail
            else last_line_cell(nv.phase, nv.last_line),
        )

    # -- rendering -----------------------------------------------------------------------------------
    @property
    def _visible_rows(self) -> int:
        return max(1, self.size.height - 1)

    def _columns(self, width: int) -> list[tuple[int, int]]:
        """(column index, width) of the columns that fit in ``width``, in display order."""
        if self._natural is None:
            natural: list[int] = []
            for i, (label, cap, _prio) in enumerate(COLUMNS):
                widest = max((cells[i].cell_len for cells in self._cells.values()), default=0)
                natural.append(min(cap, max(len(label), widest) + 1) if cap else 0)
            self._natural = natural
        natural = self._natural
        key = (width, tuple(natural))
        if key == self._layout_key:
            return self._layout
        shown = set(range(len(COLUMNS)))
        by_priority = sorted(range(len(COLUMNS)), key=lambda i: COLUMNS[i][2])
        for i in by_priority:
            fixed = sum(natural[j] for j in shown)
            last_room = width - fixed if len(COLUMNS) - 1 in shown else 0
            if fixed <= width and (len(COLUMNS) - 1 not in shown or last_room >= LAST_LINE_MIN):
                break
            shown.discard(i)
        layout = [(i, natural[i] or max(0, width - sum(natural[j] for j in shown))) for i in sorted(shown)]
        if layout != self._layout:
            self._strips.clear()
        self._layout_key, self._layout = key, layout
        return layout

    def _line(self, cells: Cells, width: int, base: Style) -> Strip:
        text = Text(no_wrap=True, overflow="ellipsis")
        for i, col_width in self._columns(width):
            if col_width <= 0:
                continue
            piece = cells[i].copy()
            piece.truncate(col_width - 1, overflow="ellipsis", pad=True)
            text.append_text(piece)
            text.append(" ")
        segments = list(text.render(self.app.console))
        strip = Strip(segments).crop_extend(0, width, base)
        return strip.apply_style(base) if base else strip

    def _header(self, width: int) -> Strip:
        style = self.get_component_rich_style("node-table--header")
        # the sorted column carries the mark in its own label; notes go only where no label is
        mark = "v" if getattr(self.app, "ascii_only", False) else "▼"
        sorted_by = self.sort_mode if self.sort_mode != SORT_MODES[0] else None
        cells = tuple(Text(f"{label}{mark}" if label == sorted_by else label) for label, _, _ in COLUMNS)
        strip = self._line(cells, width, style)
        used = len(strip.text.rstrip())
        notes = []
        if self.name_filter:
            notes.append(f"{self.name_filter!r}: {len(self._ranks)}/{self._total}")
        if len(self._ranks) > self._visible_rows:
            notes.append(
                f"{self.top + 1}-{min(self.top + self._visible_rows, len(self._ranks))}/{len(self._ranks)}"
            )
        if notes:
            shown = f" {'  '.join(notes)} "
            if used + 1 + len(shown) <= width:  # never over a column's label (the toasts said it too)
                strip = Strip.join([strip.crop(0, width - len(shown)), Strip([Segment(shown, style)])])
        return strip

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if y == 0:
            return self._header(width)
        row = self.top + y - 1
        if row >= len(self._ranks):
            return Strip.blank(width, self.rich_style)
        rank = self._ranks[row]
        self._ensure_cells(rank)
        is_cursor = row == self.cursor
        key = (rank, width, is_cursor)
        strip = self._strips.get(key)
        if strip is None:
            if is_cursor:
                base = self.get_component_rich_style("node-table--cursor")
            elif row % 2:
                base = self.get_component_rich_style("node-table--stripe")
            else:
                base = Style()
            strip = self._strips[key] = self._line(self._cells[rank], width, base)
        return strip

    def on_resize(self, _event: events.Resize) -> None:
        self._strips.clear()
        self._scroll_to_cursor()

    # -- cursor --------------------------------------------------------------------------------------
    def move_cursor(self, row: int) -> None:
        if not self._ranks:
            return
        row = max(0, min(len(self._ranks) - 1, row))
        if row == self.cursor:
            return
        old, self.cursor = self.cursor, row
        for r in (old, row):
            if r < len(self._ranks):
                for is_cursor in (False, True):
                    self._strips.pop((self._ranks[r], self.size.width, is_cursor), None)
        self._scroll_to_cursor()
        self.refresh()
        self.post_message(self.Highlighted(self._ranks[row]))

    def _scroll_to_cursor(self) -> None:
        rows = self._visible_rows
        if self.cursor < self.top:
            self.top = self.cursor
        elif self.cursor >= self.top + rows:
            self.top = self.cursor - rows + 1
        self.top = max(0, min(self.top, max(0, len(self._ranks) - rows)))

    def action_cursor(self, delta: int) -> None:
        self.move_cursor(self.cursor + delta)

    def action_page(self, delta: int) -> None:
        self.move_cursor(self.cursor + delta * self._visible_rows)

    def action_cursor_to(self, row: int) -> None:
        self.move_cursor(len(self._ranks) - 1 if row < 0 else row)

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        event.stop()
        self.move_cursor(self.cursor + 1)

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        event.stop()
        self.move_cursor(self.cursor - 1)

    def on_click(self, event: events.Click) -> None:
        if event.y >= 1:
            self.move_cursor(self.top + event.y - 1)
