"""Suite progress: every stage and every run with its state."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from cvs_tui.core.events import StageState
from cvs_tui.core.state import RunState
from cvs_tui.render.format import OUTCOME_STYLE, STAGE_MARK


class StageList(Static):
    """Stages in the order they were announced, then the runs with their step progress."""

    DEFAULT_CSS = """
    StageList { width: 34; padding: 0 1; overflow-y: auto; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def show(self, view: RunState, viewed_run: str | None, *, ascii_only: bool) -> None:
        # one line per stage and run: a long reason is cut, not wrapped (the full text is in the report)
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append("Stages\n", style="bold underline")
        if not view.stages:
            text.append("(none yet)\n", style="dim")
        for sv in view.stages.values():
            uni, asc, style = STAGE_MARK[sv.state]
            text.append(f"{asc if ascii_only else uni} ", style=style)
            text.append(sv.name, style="bold" if sv.state is StageState.RUNNING else "")
            if sv.detail and sv.state in (StageState.FAILED, StageState.SKIPPED):
                text.append(f" {sv.detail[:40]}", style="dim")
            text.append("\n")
        text.append("Runs\n", style="bold underline")
        if not view.run_order:
            text.append("(none yet)\n", style="dim")
        for key in view.run_order:
            rv = view.runs[key]
            pointer = (">" if ascii_only else "▸") if key == viewed_run else " "
            text.append(f"{pointer}{key} ", style="bold" if key == viewed_run else "")
            if rv.outcome is not None:
                text.append(rv.outcome.value, style=OUTCOME_STYLE[rv.outcome])
            else:
                top = rv.min_step
                done = 0 if top is None else top + 1
                if rv.total_steps:
                    pct = min(100, int(done * 100 / rv.total_steps))
                    text.append(f"{pct:3d}% {done}/{rv.total_steps}", style="cyan")
                else:
                    text.append("running", style="cyan")
            text.append("\n")
        self.update(text)
