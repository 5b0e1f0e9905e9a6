"""The dashboard's top lines: what is running where (one line), then the status line that is never cut.

Line 1 is the title and the plan's facts; the config name is shortened to fit. Line 2 leads with the
suite verdict (or the running stage), then the viewed run's step counter, elapsed time and ETA. When the
user views another run than the one the suite is at, line 2 says so.
"""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text

from cvs_tui.core.state import RunState
from cvs_tui.render.format import fmt_duration, fmt_steps
from cvs_tui.tui.widgets.fixed_text import FixedText

KNOWN_INFO = ("config", "model", "mode", "gpu")


def ellipsize(text: str, width: int) -> str:
    """``text`` cut to ``width`` cells with a trailing ellipsis (never below one character)."""
    if len(text) <= width:
        return text
    return text[: max(0, width - 1)] + "…"


def header_line(info: Mapping[str, str], title: str, width: int) -> Text:
    """One line: the title and each fact; the config name gives up room first, then the tail is cut."""
    facts = [(k, info[k]) for k in (*KNOWN_INFO, *(k for k in info if k not in KNOWN_INFO)) if info.get(k)]
    fixed = len(title or "cvs-tui") + sum(len(k) + 3 + len(v) for k, v in facts if k != "config")
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(title or "cvs-tui", style="bold")
    for key, value in facts:
        if key == "config":
            room = width - fixed - len(key) - 3
            value = ellipsize(value, max(12, room))
        line.append(f"  {key} ", style="dim")
        line.append(value)
    line.truncate(width, overflow="ellipsis")
    return line


class RunHeader(FixedText):
    """Config, model, mode, GPU on one line; the verdict or stage, run, steps, elapsed and ETA below."""

    DEFAULT_CSS = """
    RunHeader { height: 2; background: $panel; padding: 0 1; text-wrap: nowrap; }
    """

    def show(
        self,
        view: RunState,
        info: Mapping[str, str],
        title: str,
        now: float,
        viewed_run: str | None = None,
    ) -> None:
        width = max(20, self.size.width - 2)
        line1 = header_line(info, title, width)
        line2 = Text(no_wrap=True, overflow="ellipsis")
        stage = view.current_stage
        if view.suite_end is not None:
            verdict = "PASSED" if view.suite_end.passed else "FAILED"
            line2.append(f"suite {verdict}", style="bold green" if view.suite_end.passed else "bold red")
        elif stage is not None:
            line2.append("stage ", style="dim")
            line2.append(stage.name, style="bold")
        else:
            line2.append("waiting for events", style="dim")
        current = view.current_run
        rv = view.runs.get(viewed_run) if viewed_run is not None else current
        if rv is not None:
            viewing = current is not None and rv.key != current.key
            line2.append("  viewing " if viewing else "  run ", style="dim")
            line2.append(rv.key, style="bold" if viewing else "")
            if rv.total_steps:
                line2.append(f" step {fmt_steps(rv.min_step, rv.total_steps)}")
            if viewing and current is not None and view.suite_end is None:
                line2.append(f" (suite at {current.key})", style="dim")
        if view.first_at is not None:
            end = view.suite_end.at if view.suite_end is not None and view.suite_end.at else now
            line2.append("  elapsed ", style="dim")
            line2.append(fmt_duration(max(0.0, end - view.first_at)))
        if current is not None and view.suite_end is None:
            eta = view.eta_seconds(current)
            line2.append("  ETA ", style="dim")
            line2.append("-" if eta is None else fmt_duration(eta))
        line2.truncate(width, overflow="ellipsis")
        self.show_text(Text("\n", no_wrap=True).join([line1, line2]))
