"""Slurm endings of the world corpus (tests/fixtures/world/slurm/*.yaml).

One ``slurm ending`` check per posted ending: cvs-tui's reading of the lines names the scheduler's
cause, and where the label has them, the node, the exit code and the signal.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import yaml

from world.check import WORLD, Check

SLURM = WORLD / "slurm"


@dataclass(frozen=True)
class Ending:
    file: str
    id: str
    lines: tuple[str, ...]
    expect: dict[str, Any]


def endings() -> list[Ending]:
    out: list[Ending] = []
    for path in sorted(SLURM.glob("*.yaml")):
        doc: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
        for e in doc["endings"]:
            out.append(Ending(path.name, str(e["id"]), tuple(str(x) for x in e["lines"]), dict(e["expect"])))
    return out


def _describe(fields: dict[str, Any]) -> str:
    keys = ("cause", "node", "code", "signal")
    return ", ".join(f"{k}={fields[k]}" for k in keys if fields.get(k) is not None)


def checks() -> list[Check]:
    try:
        reader = importlib.import_module("cvs_tui.core.parse.endings")
    except ModuleNotFoundError:
        reader = None
    out: list[Check] = []
    for e in endings():
        item = f"{e.file}:{e.id}"
        want = {k: e.expect.get(k) for k in ("cause", "node", "code", "signal")}
        if reader is None:
            out.append(Check("slurm ending", item, False, _describe(want), "no Slurm ending reader"))
            continue
        got_ending = reader.read_ending(e.lines)
        got = (
            {}
            if got_ending is None
            else {
                "cause": got_ending.cause,
                "node": got_ending.node,
                "code": got_ending.code,
                "signal": got_ending.signal,
            }
        )
        ok = bool(got) and all(got.get(k) == v for k, v in want.items() if k == "cause" or v is not None)
        out.append(Check("slurm ending", item, ok, _describe(want), _describe(got) or "not named"))
    return out


__all__ = ["SLURM", "Ending", "checks", "endings"]
