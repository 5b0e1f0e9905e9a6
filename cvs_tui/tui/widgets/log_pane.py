"""The log pane: one node's lines (or all nodes merged with prefixes), follow mode, filter and export.

Lines come from the view model's ring buffers and are written in batches on the app's refresh tick, never
one call per line. Follow is on by default; any upward scroll turns it off and a counter shows how many
lines arrived since; ``f`` or ``End`` resumes. The pane owns its keys (follow, resume, filter, export) and
their actions; ``follow`` (on the log) and ``pending`` are reactives whose watchers keep the status line
current.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.events import MouseScrollUp
from textual.message import Message
from textual.reactive import var
from textual.widgets import Input, Log

from cvs_tui.core.state import RunState
from cvs_tui.tui.widgets.fixed_text import FixedText
from cvs_tui.tui.widgets.log_lines import LevelHighlighter, read_lines, wrap_line

if TYPE_CHECKING:
    from textual import getters

    from cvs_tui.tui.app import CvsApp

LOG_MAX_LINES = 20000  # lines held by the widget; the view model and the files on disk hold the rest
OLDER_CHUNK = 500  # lines read back from the node's log file each time the user scrolls past the top


class FollowLog(Log):
    """A Log that turns follow off the moment the user scrolls up, and back on at the end."""

    class FollowChanged(Message):
        def __init__(self, follow: bool) -> None:
            super().__init__()
            self.follow = follow

    follow: var[bool] = var(True, init=False)

    class AtTop(Message):
        """The user scrolled up against the first line shown (older lines may be read back)."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(max_lines=LOG_MAX_LINES, auto_scroll=False, highlight=True, **kwargs)  # type: ignore[arg-type]
        self.highlighter = LevelHighlighter()

    def _at_top(self) -> None:
        if self.scroll_y <= 0:
            self.post_message(self.AtTop())

    def watch_follow(self, follow: bool) -> None:
        self.post_message(self.FollowChanged(follow))

    def set_follow(self, follow: bool) -> None:
        self.follow = follow  # set at once: the next batch must already see it
        if follow:
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    def action_scroll_up(self) -> None:
        self.set_follow(False)
        self._at_top()
        super().action_scroll_up()

    def action_page_up(self) -> None:
        self.set_follow(False)
        self._at_top()
        super().action_page_up()

    def action_scroll_home(self) -> None:
        self.set_follow(False)
        super().action_scroll_home()
        self.post_message(self.AtTop())

    def action_scroll_end(self) -> None:
        self.set_follow(True)

    def _on_mouse_scroll_up(self, event: MouseScrollUp) -> None:
        self.set_follow(False)
        self._at_top()
        super()._on_mouse_scroll_up(event)


@dataclass(frozen=True, slots=True)
class LogSource:
    run: str
    node: int | None  # None = all nodes merged

    @property
    def label(self) -> str:
        return f"{self.run} · all nodes" if self.node is None else f"{self.run} · node {self.node}"


class LineFilter:
    """Case-insensitive substring filter; a leading ``!`` keeps the lines that do not match."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.invert = text.startswith("!")
        needle = text[1:] if self.invert else text
        self._re = re.compile(re.escape(needle), re.IGNORECASE) if needle else None

    @property
    def active(self) -> bool:
        return self._re is not None

    def keep(self, line: str) -> bool:
        if self._re is None:
            return True
        return (self._re.search(line) is None) == self.invert


class LogPane(Vertical):
    """Log plus a status line and a filter box (``/``)."""

    # A host screen whose focus sits outside the pane lists these on itself too (see DashboardScreen).
    FOLLOW: ClassVar[Binding] = Binding("f", "toggle_follow", "Follow")
    RESUME: ClassVar[Binding] = Binding("G", "resume_follow", "Resume follow", show=False)
    FILTER: ClassVar[Binding] = Binding("slash", "filter", "Filter")
    EXPORT: ClassVar[Binding] = Binding("ctrl+s,x", "export", "Export")
    WRAP: ClassVar[Binding] = Binding("w", "toggle_wrap", "Wrap", show=False)
    BINDINGS: ClassVar[list[BindingType]] = [FOLLOW, RESUME, FILTER, EXPORT, WRAP]

    if TYPE_CHECKING:
        app = getters.app(CvsApp)  # typed for the checker only; see screens/base.py

    pending: var[int] = var(0, init=False)  # lines that arrived while follow was off

    DEFAULT_CSS = """
    LogPane { height: 1fr; border: round $accent; }
    LogPane > FollowLog { height: 1fr; }
    LogPane > #log-status { height: 1; background: $panel; }
    LogPane > Input { display: none; height: 3; }
    LogPane > Input.-shown { display: block; }
    """

    def __init__(self, *, numbered: bool = False, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.numbered = numbered
        self.source: LogSource | None = None
        self.filter = LineFilter("")
        self._next_line = 1  # next node line to write
        self._merged_seq = 0  # merged lines written so far
        self._held = 0  # lines considered (before the filter) since the last rebuild
        self._shown = 0  # lines written (after the filter) since the last rebuild
        self._static_note: str | None = None  # set while showing a window read from disk
        self.wrap = False
        self._first_shown = 1  # number of the oldest node line in the pane (read back from disk below it)
        self._older_notice = ""

    def compose(self) -> ComposeResult:
        yield FollowLog(id="log")
        yield FixedText(id="log-status")
        yield Input(placeholder="filter lines (text, or !text to hide); Enter keeps, Esc clears", id="filter")

    @property
    def log_widget(self) -> FollowLog:
        return self.query_one(FollowLog)

    @property
    def follow(self) -> bool:
        return self.log_widget.follow

    # -- sources -------------------------------------------------------------------------------------
    def show_source(self, source: LogSource | None, view: RunState) -> None:
        if source == self.source and self._static_note is None:
            return
        self.source = source
        self._static_note = None
        self.rebuild(view)

    def rebuild(self, view: RunState) -> None:
        """Redraw from the ring buffer (after a source, filter or mode change)."""
        log = self.log_widget
        log.clear()
        self._next_line, self._merged_seq = 1, 0
        self._held = self._shown = 0
        self.pending = 0
        self._static_note = None
        self._older_notice = ""
        self._first_shown = 0  # set by the first batch below
        self.pump(view, rebuilding=True)
        if log.follow:
            log.scroll_end(animate=False, immediate=True, x_axis=False)
        self.update_status()

    def _format_node(self, first: int, lines: list[str]) -> list[str]:
        if not self.numbered:
            return lines
        return [f"{n:>7}  {text}" for n, text in enumerate(lines, start=first)]

    def pump(self, view: RunState, *, rebuilding: bool = False) -> int:
        """Write the lines that arrived since the last call, in one batch. Returns lines written."""
        src = self.source
        if src is None or self._static_note is not None:
            return 0
        rv = view.runs.get(src.run)
        if rv is None:
            return 0
        if src.node is None:
            self._merged_seq, items = rv.merged_since(self._merged_seq)
            raw = [f"[n{node:02d}] {text}" for node, text in items]
        else:
            nv = rv.nodes.get(src.node)
            if nv is None:
                return 0
            first, lines = nv.lines.since(self._next_line)
            self._next_line = nv.lines.next_line
            if not self._first_shown:
                self._first_shown = first
            raw = self._format_node(first, lines)
        if not raw:
            return 0
        self._held += len(raw)
        batch = [line for line in raw if self.filter.keep(line)] if self.filter.active else raw
        if not batch:
            self.update_status()
            return 0
        self._shown += len(batch)
        log = self.log_widget
        log.write_lines(self._wrapped(batch), scroll_end=False)
        if log.follow:
            log.scroll_end(animate=False, immediate=True, x_axis=False)
        elif not rebuilding:
            self.pending += len(batch)
        self.update_status()
        return len(batch)

    def show_window(self, lines: list[tuple[int, str]], target: int, note: str) -> None:
        """Show numbered lines around ``target`` (e.g. an error), follow off, the target marked."""
        log = self.log_widget
        log.set_follow(False)
        log.clear()
        self.pending = 0
        self._static_note = note
        out = []
        target_index = 0
        for i, (n, text) in enumerate(lines):
            mark = ">>" if n == target else "  "
            if n == target:
                target_index = i
            out.append(f"{mark}{n:>6}  {text}")
        log.write_lines(out, scroll_end=False)
        self._shown = self._held = len(out)
        self.call_after_refresh(self._center_on, target_index)
        self.update_status()

    def _center_on(self, index: int) -> None:
        log = self.log_widget
        log.scroll_to(y=max(0, index - log.size.height // 2), animate=False, immediate=True)

    def _wrapped(self, lines: list[str]) -> list[str]:
        if not self.wrap:
            return lines
        width = max(20, self.log_widget.scrollable_content_region.width - 1)
        return [piece for line in lines for piece in wrap_line(line, width)]

    @on(FollowLog.AtTop)
    def _at_top(self, event: FollowLog.AtTop) -> None:
        """Read the next older lines of this node back from the run folder (the ring buffer dropped them)."""
        event.stop()
        src = self.source
        if src is None or src.node is None or self._static_note is not None or self._first_shown <= 1:
            return
        path = self.app.node_log_path(src.run, src.node)
        if path is None or not path.is_file():
            return
        lo = max(1, self._first_shown - OLDER_CHUNK)
        try:
            older = read_lines(path, lo, self._first_shown - 1)
        except OSError as exc:
            self.notify(f"older lines: {exc}", severity="warning")
            return
        if not older:
            return
        self._first_shown = lo
        kept = [line for line in self._format_node(lo, older) if self.filter.keep(line)]
        pieces = self._wrapped(kept)
        log = self.log_widget
        current = list(log.lines)
        log.clear()
        log.write_lines([*pieces, *current], scroll_end=False)
        self._held += len(older)
        self._shown += len(kept)
        self._older_notice = f"lines {lo}+ read back from {path.name}"
        log.scroll_to(y=len(pieces), animate=False, immediate=True)
        self.update_status()

    # -- keys --------------------------------------------------------------------------------------------
    def action_toggle_follow(self) -> None:
        self.toggle_follow(self.app.view)

    def action_resume_follow(self) -> None:
        if not self.follow:
            self.toggle_follow(self.app.view)

    def action_filter(self) -> None:
        self.open_filter()

    def action_export(self) -> None:
        self.app.export_pane(self)

    def action_toggle_wrap(self) -> None:
        self.wrap = not self.wrap
        if self._static_note is None:
            self.rebuild(self.app.view)
        self.notify("Wrap long lines" if self.wrap else "Long lines cut (scroll right)", timeout=2)

    def watch_pending(self, _pending: int) -> None:
        self.update_status()

    # -- follow, filter, export ----------------------------------------------------------------------
    def toggle_follow(self, view: RunState) -> None:
        log = self.log_widget
        if self._static_note is not None:
            # Leaving a window read from disk: back to the live buffer, following.
            log.follow = True
            self.rebuild(view)
            return
        log.set_follow(not log.follow)
        if log.follow:
            self.pending = 0
        self.update_status()

    @on(FollowLog.FollowChanged)
    def _follow_changed(self, event: FollowLog.FollowChanged) -> None:
        if event.follow:
            self.pending = 0
        self.update_status()

    def open_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("-shown")
        box.focus()

    def set_filter(self, text: str, view: RunState) -> None:
        self.filter = LineFilter(text)
        self.rebuild(view)

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.filter = LineFilter(event.value)
        self.post_message(self.FilterChanged())

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        box = self.query_one("#filter", Input)
        if not box.value:
            box.remove_class("-shown")
        self.log_widget.focus()

    def close_filter(self) -> bool:
        """Esc in the filter box: clear it and hide it. Returns whether anything was open."""
        box = self.query_one("#filter", Input)
        if not box.has_class("-shown") and not self.filter.active:
            return False
        box.value = ""
        box.remove_class("-shown")
        self.filter = LineFilter("")
        self.post_message(self.FilterChanged())
        self.log_widget.focus()
        return True

    class FilterChanged(Message):
        """The filter text changed; the owner rebuilds with the current view."""

    def export(self, directory: Path) -> Path:
        """Write the lines currently in the pane (filtered as shown) to a new file in ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        src = self.source
        what = (
            "log" if src is None else (f"{src.run}-all" if src.node is None else f"{src.run}-node{src.node}")
        )
        what = re.sub(r"[^A-Za-z0-9._-]+", "_", what)
        path = directory / f"{what}-{time.strftime('%Y%m%d-%H%M%S')}.log"
        n = 1
        while path.exists():
            n += 1
            path = directory / f"{what}-{time.strftime('%Y%m%d-%H%M%S')}-{n}.log"
        path.write_text("".join(f"{line}\n" for line in self.log_widget.lines), encoding="utf-8")
        return path

    def update_status(self) -> None:
        text = Text()
        log = self.log_widget
        if self._static_note is not None:
            text.append(" CONTEXT ", style="bold reverse yellow")
            text.append(f" {self._static_note}  f: back to live", style="yellow")
        elif log.follow:
            text.append(" FOLLOW ", style="bold reverse green")
        else:
            text.append(" PAUSED ", style="bold reverse yellow")
            text.append(f" {self.pending} new lines  (f or End resumes)", style="yellow")
        if self.wrap:
            text.append("  wrap", style="cyan")
        if self._older_notice:
            text.append(f"  {self._older_notice}", style="dim")
        if self.filter.active:
            text.append(f"   filter {self.filter.text!r}: {self._shown}/{self._held} lines", style="cyan")
        self.query_one("#log-status", FixedText).show_text(text)
        title = self.source.label if self.source is not None else "log"
        if str(self.border_title) != title:  # setting it repaints the whole pane, even to the same title
            self.border_title = title
