"""One number formatter for every view: results and verdict text, the HTML reports, compare, the TUI.

Each view keeps its own look through ``style`` (and the placeholder it has always shown for a missing
value through ``missing``: "—" in reports and verdicts, "-" in the terminal tables):

* ``metric``: verdict and metric text in results.json: integers bare, 4 decimals below 1000, else 1;
* ``grouped``: report.html: thousands separators, integers bare, else ``digits`` decimals;
* ``compare``: compare's tables: 4 decimals for a loss, else 3 significant-ish digits by magnitude;
* ``fixed``: the TUI's loss and step time: ``digits`` decimals, NaN/inf spelled out;
* ``rate``: the TUI's throughput: 1.23M, 45.6k, 789;
* ``sig``: report.html and the verdict views: ``digits`` significant digits (3-4), thousands grouped,
  integers bare: 7,275 · 28.29 · 0.03755.
"""

from __future__ import annotations

import math
from typing import Literal

Style = Literal["metric", "grouped", "compare", "fixed", "rate", "sig"]
DASH = "—"


def format_number(
    x: float | None, style: Style = "metric", *, digits: int = 3, missing: str = DASH, unit: str = ""
) -> str:
    """``x`` as text in one view's style (see the module docstring); ``missing`` when there is none."""
    if x is None:
        return missing
    if style == "metric":
        if float(x).is_integer() and abs(x) < 1e15:
            return str(int(x))
        return f"{x:.4f}" if abs(x) < 1000 else f"{x:.1f}"
    if style == "grouped":
        if float(x).is_integer() and abs(x) < 1e12:
            return f"{int(x):,}"
        return f"{x:,.{digits}f}"
    if style == "compare":
        if unit == "loss":
            return f"{x:.4f}"
        a = abs(x)
        if a >= 1000:
            return f"{x:,.0f}"
        if a >= 10:
            return f"{x:.1f}"
        return f"{x:.3f}" if a >= 1 or x == 0 else f"{x:.3g}"
    if style == "sig":
        if not math.isfinite(x):
            return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
        if float(x).is_integer() and abs(x) < 1e15:
            return f"{int(x):,}"
        if abs(x) >= 10 ** (digits - 1):
            return f"{x:,.0f}"
        return f"{x:.{digits}g}"
    if style == "fixed":
        if not math.isfinite(x):
            return "NaN" if math.isnan(x) else ("inf" if x > 0 else "-inf")
        return f"{x:.{digits}f}"
    # rate
    if not math.isfinite(x):
        return missing
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e4:
        return f"{x / 1e3:.1f}k"
    return f"{x:.0f}"


def metric_text(value: float | None, absent: str | None = None, reason: str = "") -> str:
    """A metric's text: its number, or for a NaN/Inf metric the word its reason starts with."""
    if absent == "non_finite":
        return reason.split(" ", 1)[0] if reason else "nan"
    return format_number(value)


def format_pct(x: float | None, signed: bool = True) -> str:
    if x is None:
        return DASH
    return f"{x:+.1f} %" if signed else f"{x:.1f} %"


__all__ = ["DASH", "Style", "format_number", "format_pct", "metric_text"]
