"""One row per node of the viewed run: the master half of the master-detail dashboard.

A Line-API widget rather than a DataTable: each row is rendered once into a cached strip and only rows
whose text changed are rendered again, so 64+ nodes updating every tick cost a few rows, not the table.
"""

from __future__ import annotations

import re
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from cvs_tui.core.events import GpuTelemetryEvent, HealthState, NodeState
from cvs_tui.core.state import NodeHealthView, RunState, RunView
from cvs_tui.render.format import NODE_STATE_STYLE, fmt_float, fmt_rate
from cvs_tui.tui.widgets.sparkline import sparkline

SPARK_WIDTH = 16
# (label, width); the last column takes what is left.
COLUMNS: tuple[tuple[str, int], ...] = (
    ("node", 18),
    ("status", 11),
    ("health", 12),
    ("step/total", 12),
    ("loss", 8),
    ("loss trend", SPARK_WIDTH + 1),
    ("tok/s/dev", 10),
    ("s/step", 7),
    ("lag", 5),
    ("gpu %/W/°C", 15),
    ("errors", 7),
    ("last line", 0),
)
Cells = tuple[Text, ...]
# absl/glog header (`I1130 07:29:46.048968 139782156966784 file.py:265] `): the table shows the message.
_GLOG_HEADER = re.compile(r"^[IWEF]\d{4} [\d:.]+ +\d+ [^\]]{1,80}\] ")


def short_line(line: str) -> str:
    return _GLOG_HEADER.sub("", line[:400], count=1)[:300]


HEALTH_STYLE = {
    HealthState.OK: "green",
    HealthState.WARN: "yellow",
    HealthState.FAIL: "bold red",
    HealthState.NOT_CHECKED: "dim italic",
}


def health_cell(hv: NodeHealthView | None) -> Text:
    """ok / warn / FAIL / not checked; a node without health events is not checked (never ok)."""
    if hv is None:
        return Text("-", style="dim")
    label = "FAIL" if hv.state is HealthState.FAIL else hv.state.value
    return Text(label, style=HEALTH_STYLE[hv.state])


def telemetry_text(ev: GpuTelemetryEvent | None) -> str:
    """Mean utilisation, power and temperature over the node's GPUs in its latest sample."""
    if ev is None or not ev.samples:
        return "-"

    def mean(xs: list[float | None]) -> str:
        vals = [x for x in xs if x is not None]
        return f"{sum(vals) / len(vals):.0f}" if vals else "?"

    s = ev.samples
    return f"{mean([x.util_pct for x in s])}/{mean([x.power_w for x in s])}/{mean([x.temp_c for x in s])}"


class NodeTable(Widget, can_focus=True):
    """Rows keyed by rank with a row cursor; posts :class:`NodeTable.Highlighted` when it moves."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "cursor(-1)", "Up", show=False),
        Binding("down,j", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "cursor_to(0)", "First", show=False),
        Binding("end", "cursor_to(-1)", "Last", show=False),
    ]
    COMPONENT_CLASSES: ClassVar[set[str]] = {"node-table--header", "node-table--cursor", "node-table--stripe"}
    DEFAULT_CSS = """
    NodeTable { height: 1fr; }
    NodeTable > .node-table--header { text-style: bold; background: $panel; }
    NodeTable > .node-table--cursor { background: $primary 35%; text-style: bold; }
    NodeTable:focus > .node-table--cursor { background: $primary 70%; }
    NodeTable > .node-table--stripe { background: $surface-lighten-1 30%; }
    """

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
        """Take the run's current state; only rows on screen are formatted now, the rest when shown."""
        if rv is None:
            return
        if rv.key != self._shown_run:
            self._shown_run = rv.key
            self._cells.clear()
            self._strips.clear()
            self._ranks = []
            self.cursor = self.top = 0
        self._row_context = (rv, rv.median_step(), view.root_cause(rv.key), ascii_only, view.health)
        changed = False
        ranks = sorted(rv.nodes)
        if ranks != self._ranks:
            self._ranks = ranks
            self._strips.clear()
            changed = True
        self._stale = set(ranks)
        for row in range(self.top, min(len(ranks), self.top + self._visible_rows)):
            changed = self._ensure_cells(ranks[row]) or changed
        if changed:
            self.refresh()

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
        lag = "-" if median is None or nv.step is None else f"{nv.step - median:+.0f}"
        nonfinite = nv.loss is not None and fmt_float(nv.loss) in ("NaN", "inf", "-inf")
        err_style = "bold red" if nv.fatal_hits else ("yellow" if nv.error_hits else "dim")
        return (
            Text(name, style="bold red" if rank == root else ""),
            Text(nv.state.value, style=NODE_STATE_STYLE[nv.state]),
            health_cell(hv),
            Text(f"{'-' if nv.step is None else nv.step}/{rv.total_steps or '?'}"),
            Text(fmt_float(nv.loss), style="bold red" if nonfinite else ""),
            Text(sparkline(nv.losses, SPARK_WIDTH, ascii_only=ascii_only), style="cyan"),
            Text(fmt_rate(nv.tokens_per_s)),
            Text(fmt_float(nv.step_seconds)),
            Text(lag, style="yellow" if lag not in ("-", "+0") else ""),
            Text(telemetry_text(hv.telemetry if hv else None)),
            Text(str(nv.error_hits), style=err_style),
            Text(nv.detail, style="yellow")  # follow mode's "no progress for N s"
            if nv.state is NodeState.STALLED and nv.detail
            else Text(short_line(nv.last_line), style="dim"),
        )

    # -- rendering -----------------------------------------------------------------------------------
    @property
    def _visible_rows(self) -> int:
        return max(1, self.size.height - 1)

    def _line(self, cells: Cells, width: int, base: Style) -> Strip:
        text = Text(no_wrap=True, overflow="ellipsis")
        used = 0
        for (_, col_width), cell in zip(COLUMNS, cells, strict=True):
            w = col_width or max(0, width - used)
            if w <= 0:
                break
            piece = cell.copy()
            piece.truncate(w - 1, overflow="ellipsis", pad=True)
            text.append_text(piece)
            text.append(" ")
            used += w
        segments = list(text.render(self.app.console))
        strip = Strip(segments).crop_extend(0, width, base)
        return strip.apply_style(base) if base else strip

    def _header(self, width: int) -> Strip:
        style = self.get_component_rich_style("node-table--header")
        cells = tuple(Text(label) for label, _ in COLUMNS)
        strip = self._line(cells, width, style)
        if len(self._ranks) > self._visible_rows:
            shown = (
                f" {self.top + 1}-{min(self.top + self._visible_rows, len(self._ranks))}/{len(self._ranks)} "
            )
            strip = Strip.join([strip.crop(0, max(0, width - len(shown))), Strip([Segment(shown, style)])])
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
