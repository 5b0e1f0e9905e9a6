"""summary.md: a GitHub job summary (Markdown) from the results model, through a jinja2 template."""

from __future__ import annotations

from cvs_tui.core.report import view
from cvs_tui.core.report.html import environment
from cvs_tui.core.results import Results, tally

ICON = {"PASS": "✅", "FAIL": "❌", "RECORD": "📝", "N/A": "➖"}


def md_cell(text: object) -> str:
    """Table-safe text: pipes and newlines would break a Markdown table row."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def render_markdown(results: Results) -> str:
    env = environment(html=False)
    env.filters["cell"] = md_cell
    return env.get_template("summary.md.j2").render(
        r=results,
        passed=results.passed,
        failures=results.failures,
        tally=tally(results),
        icon=ICON,
        verdicts={run.key: view.run_verdicts(run) for run in results.runs},
    )
