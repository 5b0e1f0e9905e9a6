"""The history beside each headline figure: "against the last N runs" and a small inline SVG of the
series (history, the baseline's band, this run's point). Numbers only reach the SVG, so it is safe
markup; no run folder, host or path is named (the runs are counted, not listed)."""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup

from cvs_tui.core.history.check import MetricCheck, RunCheck
from cvs_tui.core.history.noise import IMPROVED, REGRESSED
from cvs_tui.core.judge.format import format_number, format_pct

WIDTH, HEIGHT, PAD = 120, 28, 3
POINT_CLASS = {REGRESSED: "bad", IMPROVED: "good"}


@dataclass(frozen=True, slots=True)
class TrendCell:
    svg: Markup
    text: str  # "vs last 12 runs: 1,250 (1,180 – 1,320)"
    verdict: str
    delta: str  # the change against the baseline, "-6.1 %"


def trend_svg(history: list[float], value: float, band: tuple[float, float], verdict: str) -> Markup:
    """History as a line, the band as a shaded strip, this run as the last point (red when it regressed,
    green when it improved)."""
    ys = [*history, value, *band]
    lo, hi = min(ys), max(ys)
    span = (hi - lo) or abs(hi) or 1.0
    n = len(history) + 1

    def x(i: int) -> float:
        return PAD + (WIDTH - 2 * PAD) * (i / (n - 1) if n > 1 else 1.0)

    def y(v: float) -> float:
        return HEIGHT - PAD - (HEIGHT - 2 * PAD) * (v - lo) / span

    points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(history))
    top, bottom = y(band[1]), y(band[0])
    cls = POINT_CLASS.get(verdict, "same")
    return Markup(
        f'<svg class="trend" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="this run against its history">'
        f'<rect class="band" x="0" y="{top:.1f}" width="{WIDTH}" height="{max(bottom - top, 0.5):.1f}"/>'
        f'<polyline fill="none" stroke="currentColor" stroke-width="1" points="{points}"/>'
        f'<circle class="{cls}" cx="{x(n - 1):.1f}" cy="{y(value):.1f}" r="2.8"/></svg>'
    )


def trend_cell(mc: MetricCheck) -> TrendCell | None:
    j = mc.judgement
    if mc.value is None or j is None or j.baseline is None or j.band is None:
        return None
    lo, hi = j.band
    text = (
        f"vs last {len(mc.history)} runs: {format_number(j.baseline.location, 'sig')} "
        f"({format_number(lo, 'sig')} – {format_number(hi, 'sig')})"
    )
    return TrendCell(
        trend_svg(mc.series, mc.value, j.band, mc.verdict), text, mc.verdict, format_pct(j.delta_pct)
    )


def trend_cells(rc: RunCheck) -> dict[str, TrendCell]:
    """metric name -> its cell, for the metrics with a baseline."""
    return {m.metric.name: c for m in rc.metrics if (c := trend_cell(m)) is not None}


__all__ = ["TrendCell", "trend_cell", "trend_cells", "trend_svg"]
