"""Text sparklines for table cells: one string instead of one widget per node."""

from __future__ import annotations

import math
from collections.abc import Sequence

UNICODE_BARS = "▁▂▃▄▅▆▇█"
ASCII_BARS = "_.-=+*#"


def sparkline(values: Sequence[float], width: int, *, ascii_only: bool = False) -> str:
    """The last values as bars, bucketed to ``width`` (mean per bucket). Non-finite values are dropped."""
    data = [v for v in values if math.isfinite(v)]
    if not data or width <= 0:
        return ""
    bars = ASCII_BARS if ascii_only else UNICODE_BARS
    if len(data) > width:
        # Mean per bucket so one spike does not dominate a whole bucket.
        size = len(data) / width
        data = [
            sum(chunk) / len(chunk)
            for i in range(width)
            if (chunk := data[int(i * size) : max(int((i + 1) * size), int(i * size) + 1)])
        ]
    lo, hi = min(data), max(data)
    span = hi - lo
    if span <= 0:
        return bars[len(bars) // 2] * len(data)
    top = len(bars) - 1
    return "".join(bars[min(top, int((v - lo) / span * top + 0.5))] for v in data)
