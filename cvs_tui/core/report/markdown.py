"""summary.md: a GitHub job summary (Markdown) from the results model, through a jinja2 template."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cvs_tui.core.report import view
from cvs_tui.core.report.html import environment
from cvs_tui.core.results import Results, tally

if TYPE_CHECKING:
    from cvs_tui.core.history.trend import Trend

ICON = {"PASS": "✅", "FAIL": "❌", "RECORD": "📝", "N/A": "➖"}


def md_cell(text: object) -> str:
    """Table-safe text: pipes and newlines would break a Markdown table row."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def regression_lines(trend: Trend | None) -> list[str]:
    """One line per metric that regressed against its history."""
    from cvs_tui.core.judge.format import format_number, format_pct

    out = []
    for key, rc in trend.runs.items() if trend is not None else ():
        for m in rc.regressed:
            j = m.judgement
            if j is None or j.baseline is None or j.band is None:
                continue
            lo, hi = j.band
            out.append(
                f"`{key}` {m.metric.label} {format_number(m.value, 'sig')} {m.metric.unit}: "
                f"{format_pct(j.delta_pct)} against the baseline {format_number(j.baseline.location, 'sig')} "
                f"(band {format_number(lo, 'sig')} – {format_number(hi, 'sig')}) of the last "
                f"{len(m.history)} runs: REGRESSED"
            )
    return out


def render_markdown(results: Results, trend: Trend | None = None) -> str:
    env = environment(html=False)
    env.filters["cell"] = md_cell
    return env.get_template("summary.md.j2").render(
        r=results,
        passed=results.passed,
        failures=results.failures,
        tally=tally(results),
        icon=ICON,
        verdicts={run.key: view.run_verdicts(run) for run in results.runs},
        regressions=regression_lines(trend),
        health_notes=view.health_notes(results),
    )
