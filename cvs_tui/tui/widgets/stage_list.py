"""Suite progress: every stage and every run, the outcome glyph first, the viewed run kept in view."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.message import Message

from cvs_tui.core.events import StageState
from cvs_tui.core.state import RunState, RunView
from cvs_tui.render.format import OUTCOME_MARK, OUTCOME_STYLE, STAGE_MARK, steps_done
from cvs_tui.tui.widgets.fixed_text import FixedText

RUN_STAGE_PREFIX = "run:"  # one stage per run: the Runs list already shows each run once


def run_cell(rv: RunView, *, ascii_only: bool) -> tuple[str, str, str]:
    """(glyph, style, progress) of a run: its outcome's mark, or a running mark and its percentage."""
    if rv.outcome is not None:
        uni, asc = OUTCOME_MARK[rv.outcome]
        return (asc if ascii_only else uni), OUTCOME_STYLE[rv.outcome], ""
    uni, asc, style = STAGE_MARK[StageState.RUNNING]
    done = steps_done(rv.min_step)
    pct = f" {min(100, int(done * 100 / rv.total_steps))}%" if rv.total_steps else ""
    return (asc if ascii_only else uni), style, pct


class StageList(FixedText):
    """Stages in the order they were announced (without the per-run ones), then the runs."""

    DEFAULT_CSS = """
    StageList { width: 34; height: 100%; padding: 0 1; overflow: hidden; text-wrap: nowrap;
                text-overflow: ellipsis; }
    """

    class StageClicked(Message):
        def __init__(self, stage: str) -> None:
            super().__init__()
            self.stage = stage

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._line_stage: list[str | None] = []  # what each line shows (a stage name, or None)
        self.content_width = 20  # the widest line, padding included (the dashboard sizes the panel)
        self._viewed_line = 0
        self._start = 0  # first line shown: the list is windowed so that the viewed run stays on screen
        self._text = Text()

    def show(self, view: RunState, viewed_run: str | None, *, ascii_only: bool, selected: str | None) -> None:
        # one line per stage and run, the outcome glyph first; reasons go to the dashboard's detail line
        text = Text(no_wrap=True, overflow="ellipsis")
        lines: list[str | None] = [None]
        text.append("Stages\n", style="bold underline")
        stages = [sv for sv in view.stages.values() if not sv.name.startswith(RUN_STAGE_PREFIX)]
        if not stages:
            text.append("(none yet)\n", style="dim")
            lines.append(None)
        widest = 8
        for sv in stages:
            uni, asc, style = STAGE_MARK[sv.state]
            text.append(f"{asc if ascii_only else uni} ", style=style)
            name_style = "bold" if sv.state is StageState.RUNNING else ""
            if sv.name == selected:
                name_style += " reverse"
            text.append(sv.name, style=name_style.strip())
            text.append("\n")
            lines.append(sv.name)
            widest = max(widest, len(sv.name) + 2)
        text.append("Runs\n", style="bold underline")
        lines.append(None)
        if not view.run_order:
            text.append("(none yet)\n", style="dim")
            lines.append(None)
        self._viewed_line = 0
        for key in view.run_order:
            rv = view.runs[key]
            glyph, style, pct = run_cell(rv, ascii_only=ascii_only)
            viewed = key == viewed_run
            text.append(f"{glyph} ", style=style)
            text.append(key, style="bold reverse" if viewed else "")
            if pct:
                text.append(pct, style="cyan")
            text.append("\n")
            if viewed:
                self._viewed_line = len(lines)
            lines.append(None)
            widest = max(widest, len(key) + 2 + len(pct))
        self._line_stage = lines
        self.content_width = widest + 3  # padding and the right border
        self._text = text
        self._show_window()

    def _show_window(self) -> None:
        """Show the lines from :attr:`_start`, moved so the viewed run's line is on screen (F5)."""
        parts = self._text.split("\n")
        height = max(1, self.size.height)
        line = self._viewed_line
        if line < self._start:
            self._start = line
        elif line >= self._start + height:
            self._start = line - height + 1
        self._start = max(0, min(self._start, max(0, len(parts) - height)))
        # its width is set by the dashboard from content_width, its height by the panel: no layout pass
        self.show_text(
            Text("\n", no_wrap=True, overflow="ellipsis").join(parts[self._start : self._start + height])
        )

    def on_resize(self, _event: events.Resize) -> None:
        self._show_window()

    def on_click(self, event: events.Click) -> None:
        row = self._start + event.y
        if 0 <= row < len(self._line_stage):
            stage = self._line_stage[row]
            if stage is not None:
                self.post_message(self.StageClicked(stage))
