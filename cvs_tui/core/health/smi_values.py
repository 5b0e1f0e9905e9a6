"""Reading the values GPU tools print: numbers with or without units, ``{"value", "unit"}`` objects, and
the words a tool prints for what it cannot give (None, never 0)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any


class TelemetryError(Exception):
    """A tool's output could not be read; the message names the tool and what was wrong."""


_NUM = re.compile(r"^\s*\(?\s*([-+]?\d+(?:\.\d+)?)")


def _num(v: Any) -> float | None:
    """A number from 72, "72", "72.0", "(800Mhz)", {"value": 72, "unit": "%"}; None for N/A & co."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, Mapping):
        return _num(v.get("value"))
    if isinstance(v, str):
        m = _NUM.match(v)
        return float(m.group(1)) if m else None
    return None


def _mib(v: Any) -> float | None:
    """Memory in MiB from an amd-smi ``{"value", "unit"}`` (amd-smi's "MB" are MiB)."""
    n = _num(v)
    if n is None:
        return None
    unit = str(v.get("unit", "MB")).upper() if isinstance(v, Mapping) else "MB"
    return n * {"B": 1 / 2**20, "KB": 1 / 1024, "MB": 1.0, "GB": 1024.0}.get(unit, 1.0)


def _int(v: Any) -> int | None:
    n = _num(v)
    return int(n) if n is not None else None


def _first(d: Mapping[str, Any], *keys: str) -> Any:
    for k in keys:
        if k in d and _num(d[k]) is not None:
            return d[k]
    return None
