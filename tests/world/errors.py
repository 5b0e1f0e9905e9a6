"""Error lines of the world corpus (tests/fixtures/world/errors/*.json): each file names its source and
holds items {kind, text, fatal, root_cause, why}.

Kinds: "error line" (one line or a few: is it fatal, and does the run's reason name its root cause) and
"traceback reason" (a whole traceback: the reason names the exception line, not the header). Each item is
judged as a live run judges a node: the text is parsed with the built-in signatures and the run is
finalised; fatal means a fatal error hit or a failed run whose steps were logged (a NaN loss)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from cvs_tui.core.judge.finalize import finalize_run
from cvs_tui.core.parse import parse_log_bytes
from world.check import WORLD, Check
from world.judging import planned


def judge(item: dict[str, Any], tmp: Path) -> tuple[bool, str]:
    """(fatal, the run's reason) for one item's text."""
    events = parse_log_bytes(item["text"].encode())
    run = finalize_run(planned(tmp, steps=1), [events])
    fatal_hit = any(e.severity == "fatal" for e in run.errors)
    stepped = any(n.steps_logged for n in run.nodes)
    fatal = fatal_hit or (stepped and run.status == "FAIL")
    return fatal, run.reason if fatal else ""


def items() -> list[tuple[Path, int]]:
    """(file, index) of every item."""
    return [
        (path, i)
        for path in sorted((WORLD / "errors").glob("*.json"))
        for i in range(len(json.loads(path.read_text())["items"]))
    ]


def check(path: Path, i: int, tmp: Path) -> Check:
    item = json.loads(path.read_text())["items"][i]
    fatal, reason = judge(item, tmp)
    ok = fatal == item["fatal"]
    exp = "fatal" if item["fatal"] else "benign"
    if item["fatal"] and item.get("root_cause"):
        exp += f", reason names {item['root_cause']!r}"
        ok = ok and item["root_cause"].lower() in reason.lower()
    return Check(
        kind=item["kind"],
        item=f"errors/{path.name}#{i}",
        ok=ok,
        expected=exp,
        got=("fatal" if fatal else "benign") + (f": {reason[:240]}" if reason else ""),
    )


def checks() -> list[Check]:
    with tempfile.TemporaryDirectory(prefix="cvs-world-") as tmp:
        return [check(path, i, Path(tmp)) for path, i in items()]
