"""The dashboard's top lines: what is running where, how far along, how long to go."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text
from textual.widgets import Static

from cvs_tui.core.state import RunState
from cvs_tui.render.format import fmt_duration


class RunHeader(Static):
    """Config, model, mode, GPU, current stage, elapsed and ETA."""

    DEFAULT_CSS = """
    RunHeader { height: 2; background: $panel; padding: 0 1; }
    """

    def show(self, view: RunState, info: Mapping[str, str], title: str, now: float) -> None:
        line1 = Text()
        line1.append(title or "cvs-tui", style="bold")
        known = ("config", "model", "mode", "gpu")
        for key in (*known, *(k for k in info if k not in known)):
            value = info.get(key)
            if value:
                line1.append(f"  {key} ", style="dim")
                line1.append(value)
        line2 = Text()
        stage = view.current_stage
        rv = view.current_run
        if view.suite_end is not None:
            verdict = "PASSED" if view.suite_end.passed else "FAILED"
            line2.append(f"suite {verdict}", style="bold green" if view.suite_end.passed else "bold red")
        elif stage is not None:
            line2.append("stage ", style="dim")
            line2.append(stage.name, style="bold")
        else:
            line2.append("waiting for events", style="dim")
        if rv is not None:
            line2.append("  run ", style="dim")
            line2.append(rv.key)
            top = rv.min_step
            if rv.total_steps:
                line2.append(f" step {'-' if top is None else top}/{rv.total_steps}")
        if view.first_at is not None:
            end = view.suite_end.at if view.suite_end is not None and view.suite_end.at else now
            line2.append("  elapsed ", style="dim")
            line2.append(fmt_duration(max(0.0, end - view.first_at)))
        if rv is not None and view.suite_end is None:
            eta = view.eta_seconds(rv)
            line2.append("  ETA ", style="dim")
            line2.append("-" if eta is None else fmt_duration(eta))
        self.update(Text("\n").join([line1, line2]))
