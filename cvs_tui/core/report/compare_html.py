"""compare.html: a comparison in the look of report.html (both include the ``_style.css`` partial)."""

from __future__ import annotations

from pathlib import Path

from cvs_tui.core.atomic import write_atomic
from cvs_tui.core.compare.model import CompareReport, MetricDelta, biggest_change, headline_reason
from cvs_tui.core.judge.format import DASH, format_number, format_pct


def _fmt(x: float | None, unit: str = "") -> str:
    return format_number(x, "compare", unit=unit)


def render_html(report: CompareReport) -> str:
    from cvs_tui.core.report.html import environment

    return (
        environment()
        .get_template("compare.html.j2")
        .render(c=report, fmt=_fmt, pct=format_pct, biggest=biggest_change, reason=headline_reason)
    )


def write_html(report: CompareReport, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(p, render_html(report))
    return p


def band_text(m: MetricDelta) -> str:
    """A metric's noise band as text, e.g. ``[-1.2, +0.8] %``."""
    if m.band_lo_pct is None or m.band_hi_pct is None:
        return DASH
    return f"[{m.band_lo_pct:+.1f}, {m.band_hi_pct:+.1f}] %"


__all__ = ["band_text", "render_html", "write_html"]
