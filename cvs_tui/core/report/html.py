"""report.html: one self-contained page (inline CSS and SVG, no external URL) from the results model."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from cvs_tui.core.judge.format import format_number
from cvs_tui.core.report import view
from cvs_tui.core.report.charts import loss_chart, resume_chart, step_time_chart
from cvs_tui.core.results import NodeHealthRecord, Results, RunRecord, tally
from cvs_tui.core.textsafe import sanitize_text

if TYPE_CHECKING:
    from cvs_tui.core.history.trend import Trend

TEMPLATES = Path(__file__).with_name("templates")


def environment(*, html: bool = True) -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(["html", "j2"]) if html else False,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        finalize=_safe_output,
    )
    env.filters["num"] = _num
    env.filters["when"] = fmt_time
    env.filters["secs"] = fmt_secs
    env.filters["mesh"] = fmt_mesh
    env.filters["sig"] = view.sig
    return env


def _safe_output(value: object) -> object:
    """Every ``{{ }}`` value: node text loses its control characters before it reaches report.html or
    summary.md (audit #5); markup we built ourselves (the SVG charts) is left alone."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return sanitize_text(value, keep_newlines=True)
    return value


def _num(x: float | None, digits: int = 1) -> str:
    return format_number(x, "grouped", digits=digits)


def fmt_time(ts: float | None) -> str:
    if ts is None:
        return "—"
    try:
        return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (ValueError, OverflowError, OSError):  # an edited results.json: -1e12, 1e300, NaN (audit #18)
        return f"invalid time ({ts!r})"


def fmt_mesh(axes: list[int]) -> str:
    """MaxText logs one entry per mesh axis, mostly 1s: show the axes that shard."""
    sharded = [str(a) for a in axes if a != 1]
    if not sharded:
        return f"1 ({len(axes)} axes, all 1)"
    rest = len(axes) - len(sharded)
    return " × ".join(sharded) + (f" ({len(axes)} axes, the rest 1)" if rest else "")


def fmt_secs(s: float | None) -> str:
    if s is None:
        return "—"
    if s < 60:
        return f"{s:.1f} s"
    m, sec = divmod(round(s), 60)
    return f"{m} min {sec:02d} s" if m < 60 else f"{m // 60} h {m % 60:02d} min"


def _chart(draw: Callable[[RunRecord], str | None], run: RunRecord) -> str | None:
    """A chart, or none when matplotlib cannot lay out the numbers (a hand-edited results.json with
    +-1e308 or steps near 2**63: "arange: cannot compute length"): the report is still written (audit #18)."""
    try:
        return draw(run)
    except (ValueError, OverflowError, MemoryError):
        return None


def render_html(results: Results, trend: Trend | None = None) -> str:
    charts = {}
    for run in results.runs:
        loss = _chart(loss_chart, run)
        step = _chart(step_time_chart, run)
        # the SVG comes from matplotlib, not from log text: safe to embed as markup
        charts[run.key] = {
            "loss": Markup(loss) if loss else None,
            "step": Markup(step) if step else None,
        }
    # the slowest node's last logged step is the run's progress, told as completed steps (index + 1) of
    # the steps asked for, as the live view and the console count them
    last_step = {
        run.key: min((n.last_step for n in run.nodes if n.last_step is not None), default=None)
        for run in results.runs
    }
    health_charts = {n.rank: telemetry_chart(n) for n in results.node_health}
    provenance, missing = view.provenance_rows(results)
    resume = resume_chart(results)
    return (
        environment()
        .get_template("report.html.j2")
        .render(
            r=results,
            health_charts=health_charts,
            health_notes=view.health_notes(results),
            charts=charts,
            tally=tally(results),
            passed=results.passed,
            failures=results.failures,
            last_step=last_step,
            headline=view.headline(results, trend),
            history=history_notes(trend),
            headline_cols=view.HEADLINE,
            verdicts={run.key: view.run_verdicts(run) for run in results.runs},
            environments=view.environments(results),
            provenance=provenance,
            provenance_missing=missing,
            resume_chart=Markup(resume) if resume else None,  # matplotlib's SVG, not log text
        )
    )


def history_notes(trend: Trend | None) -> list[str]:
    """One line per run with a history: which group and how many runs, and a changed stack."""
    if trend is None:
        return []
    out = []
    for key, rc in trend.runs.items():
        runs = max((len(m.history) for m in rc.metrics), default=0)
        line = f"{key}: against the last {runs} runs of its group" + (f" ({rc.note})" if rc.note else "")
        out.append(line)
    return out


def telemetry_chart(n: NodeHealthRecord, width: int = 240, height: int = 40) -> Markup | None:
    """A small inline SVG of the node's mean GPU utilisation (0-100 %) over the suite; None under 2 points."""
    pts = [(p.at, p.util_pct) for p in n.telemetry if p.util_pct is not None]
    if len(pts) < 2:
        return None
    t0, t1 = pts[0][0], pts[-1][0]
    span = (t1 - t0) or 1.0
    xy = " ".join(
        f"{(t - t0) / span * width:.1f},{height - min(max(u, 0.0), 100.0) / 100 * height:.1f}" for t, u in pts
    )
    # numbers only (formatted floats): safe to embed as markup
    return Markup(
        f'<svg class="telemetry" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'role="img" aria-label="GPU utilisation over time">'
        f'<polyline fill="none" stroke="currentColor" points="{xy}"/></svg>'
    )
