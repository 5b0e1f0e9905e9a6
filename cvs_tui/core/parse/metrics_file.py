"""MaxText's ``metrics_file`` JSON lines: one object per step, full-precision loss and step time."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from cvs_tui.core.events import MetricsFileStep

_TRAIN_PREFIXES = ("learning/", "perf/")


def parse_metrics_file(path: str | os.PathLike[str]) -> list[MetricsFileStep]:
    """Train steps of a metrics file, in file order.

    MaxText writes NaN as a bare ``NaN`` (Python's json reads it). Eval records (only ``eval/`` keys; their
    ``step`` is the eval batch) and lines that are not a JSON object with an integral ``step`` are skipped.
    An unreadable file raises ``OSError``.
    """
    out: list[MetricsFileStep] = []
    with Path(path).open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            step = _parse_line(raw, lineno)
            if step is not None:
                out.append(step)
    return out


def _parse_line(raw: bytes, lineno: int) -> MetricsFileStep | None:
    raw = raw.strip()
    if not raw.startswith(b"{"):
        return None
    try:
        obj = json.loads(raw.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    step = obj.get("step")
    if isinstance(step, float) and math.isfinite(step) and step.is_integer():
        step = int(step)
    if not isinstance(step, int) or isinstance(step, bool):
        return None
    values: dict[str, float] = {}
    for key, val in obj.items():
        if key == "step" or isinstance(val, bool):
            continue
        if isinstance(val, int | float):
            values[str(key)] = float(val)
    if not any(k.startswith(_TRAIN_PREFIXES) for k in values):
        return None  # an eval record: its `step` counts eval batches, not train steps
    return MetricsFileStep(
        step=step,
        loss=values.get("learning/loss"),
        step_time_seconds=values.get("perf/step_time_seconds"),
        values=values,
        line=lineno,
    )
