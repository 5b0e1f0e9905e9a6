"""Strict JSON for the files a user gives us (configs, cluster and threshold files, results.json, plan.json).

Python's ``json`` accepts ``NaN``/``Infinity``, turns ``1e400`` into inf, lets a duplicate key silently
win, raises ``ValueError`` (not ``JSONDecodeError``) on a 5000-digit integer and ``RecursionError`` on deep
nesting. A non-finite threshold always passes (audit #19), a duplicate key hides a typo (#20), and the
other two ended in a traceback (#18). ``loads_strict`` turns each into one ``JsonInputError`` whose message
says what is wrong; callers add the file name.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

MAX_DEPTH = 64  # our files nest 6 levels at most; deeper input is garbage, refused before any recursion


class JsonInputError(ValueError):
    """The text is not strict JSON; the message is one line without the file name."""


def _no_constant(name: str) -> Any:
    raise JsonInputError(f"non-finite number {name} is not allowed; use a finite number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonInputError(f"number {text[:40]} is out of range (not finite); use a finite number")
    return value


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise JsonInputError(f"duplicate key {k[:80]!r}; keep only one")
        out[k] = v
    return out


def _too_deep(data: Any) -> bool:
    """Container nesting beyond MAX_DEPTH (an explicit stack: the check itself never recurses)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        children: Iterable[Any] = node.values() if isinstance(node, dict) else node
        if depth > MAX_DEPTH:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def loads_strict(text: str, *, finite: bool = True) -> Any:
    """Parse ``text`` as JSON, refusing NaN/Infinity, non-finite numbers, duplicate keys, integers
    Python will not convert and nesting deeper than MAX_DEPTH: all as ``JsonInputError``. With
    ``finite=False`` (files we wrote ourselves, which may record a NaN) non-finite numbers are kept.
    A syntax error stays a ``json.JSONDecodeError`` so callers can name its line and column."""
    try:
        if finite:
            data = json.loads(
                text, parse_constant=_no_constant, parse_float=_finite_float, object_pairs_hook=_unique
            )
        else:
            data = json.loads(text, object_pairs_hook=_unique)
    except json.JSONDecodeError:
        raise
    except JsonInputError:
        raise
    except (ValueError, RecursionError, OverflowError) as exc:
        # e.g. "Exceeds the limit (4300 digits) for integer string conversion"
        raise JsonInputError(str(exc).splitlines()[0][:160] or type(exc).__name__) from None
    if _too_deep(data):
        raise JsonInputError(f"nesting deeper than {MAX_DEPTH} levels; this is not a cvs-tui file")
    return data


__all__ = ["MAX_DEPTH", "JsonInputError", "loads_strict"]
