"""Kernel lines and incidents of the world corpus (tests/fixtures/world/kernel/*.yaml).

Two kinds of check:

* ``kernel line``: every line labelled ``fatal``, ``warning`` or ``benign`` gives exactly that
  (``benign``: no finding). ``none`` lines are context and are not scored on their own;
* ``kernel incident``: the incident's lines, fed in order through the node's incident grouping, give
  one incident of the labelled severity (the worst of its lines), opened by its first labelled line,
  and naming the labelled device. A benign-only incident must give no finding.

Against code without incident grouping every finding counts as its own incident (that is what a
reader of such code gets), so the BEFORE figures of ``benchmarks/world_corpus.py`` are comparable.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import yaml

from cvs_tui.core.health.signatures import match_message
from world.check import WORLD, Check

KERNEL = WORLD / "kernel"
_RANK = {"none": 0, "benign": 0, "warning": 1, "fatal": 2}


@dataclass(frozen=True)
class Line:
    t: float
    label: str
    message: str


@dataclass(frozen=True)
class Incident:
    file: str
    id: str
    device: str | None
    lines: tuple[Line, ...]

    @property
    def severity(self) -> str:
        worst = max((_RANK[ln.label] for ln in self.lines), default=0)
        return {0: "none", 1: "warning", 2: "fatal"}[worst]


def incidents() -> list[Incident]:
    out: list[Incident] = []
    for path in sorted(KERNEL.glob("*.yaml")):
        doc: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
        for inc in doc["incidents"]:
            lines = tuple(Line(float(t), str(label), str(msg)) for t, label, msg in inc["lines"])
            bad = [ln.label for ln in lines if ln.label not in _RANK]
            if bad:
                raise ValueError(f"{path.name}: {inc['id']}: unknown label(s) {bad}")
            out.append(Incident(path.name, str(inc["id"]), inc.get("device"), lines))
    return out


def _severity_of(message: str) -> tuple[str, str]:
    hit = match_message(message)
    if hit is None:
        return "none", "no finding"
    detail = f": {hit.detail}" if hit.detail else ""
    return hit.severity.value, f"{hit.severity.value} ({hit.signature}{detail})"


def line_checks() -> list[Check]:
    out: list[Check] = []
    for inc in incidents():
        for i, ln in enumerate(inc.lines):
            if ln.label == "none":
                continue
            got, shown = _severity_of(ln.message)
            want = "none" if ln.label == "benign" else ln.label
            out.append(
                Check(
                    "kernel line",
                    f"{inc.file}:{inc.id}#{i} {ln.message[:90]}",
                    got == want,
                    ln.label if ln.label != "benign" else "benign (no finding)",
                    shown,
                )
            )
    return out


@dataclass
class _Seen:
    """One incident as the code under test groups it (or one finding each, without grouping)."""

    severity: str
    devices: set[str]
    first_line: int


def _group(inc: Incident) -> list[_Seen]:
    try:
        grouping = importlib.import_module("cvs_tui.core.health.incidents")
    except ModuleNotFoundError:
        grouping = None
    seen: list[_Seen] = []
    if grouping is None:
        for i, ln in enumerate(inc.lines):
            hit = match_message(ln.message)
            if hit is not None:
                dev = getattr(hit, "device", None)
                seen.append(_Seen(hit.severity.value, {dev} if dev else set(), i))
        return seen
    grouper = grouping.IncidentGrouper()
    by_key: dict[int, _Seen] = {}
    for i, ln in enumerate(inc.lines):
        hit = match_message(ln.message)
        if hit is None:
            continue
        got = grouper.add(hit, ln.t)
        s = by_key.get(id(got))
        if s is None:
            s = by_key[id(got)] = _Seen(got.severity.value, set(got.devices), i)
            seen.append(s)
        s.severity = got.severity.value
        s.devices = set(got.devices)
    return seen


def _devices(g: _Seen) -> str:
    return ",".join(sorted(g.devices)) or "no device"


def incident_checks() -> list[Check]:
    out: list[Check] = []
    for inc in incidents():
        want = inc.severity
        first = next((i for i, ln in enumerate(inc.lines) if ln.label in ("fatal", "warning")), None)
        groups = _group(inc)
        expected = (
            "no finding"
            if want == "none"
            else f"one {want} incident opened by line {first}" + (f" on {inc.device}" if inc.device else "")
        )
        got = (
            "; ".join(f"{g.severity} incident from line {g.first_line} on {_devices(g)}" for g in groups)
            or "no finding"
        )
        if want == "none":
            ok = not groups
        else:
            ok = (
                len(groups) == 1
                and groups[0].severity == want
                and groups[0].first_line == first
                and (inc.device is None or inc.device in groups[0].devices)
            )
        out.append(Check("kernel incident", f"{inc.file}:{inc.id}", ok, expected, got))
    return out


def checks() -> list[Check]:
    return line_checks() + incident_checks()


__all__ = ["KERNEL", "Incident", "checks", "incident_checks", "incidents", "line_checks"]
