"""Every rule `cvs-tui card validate` enforces beyond the schema: forbidden keys, hardware allowlist,
verified evidence, weak-scaling shape, index projection and summary."""

from __future__ import annotations

import datetime as dt
import difflib
import math
from collections.abc import Iterator
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

from cvs_tui.core.card.schema import (
    ALLOWED_KEY_EXCEPTIONS,
    FORBIDDEN_KEY_FRAGMENTS,
    HARDWARE_ALLOWLIST,
    ITEM_ORDER,
    PERFORMANCE_DISCLAIMER,
    Card,
    PerfLeaf,
    ResumeLeaf,
    ScalingLeaf,
    StandardMetrics,
    Workload,
    flat,
    project_index,
)


def _keys(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        for k, v in node.items():
            where = f"{path}.{k}" if path else str(k)
            yield where, str(k)
            yield from _keys(v, where)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _keys(v, f"{path}[{i}]")


def forbidden_keys(data: Any) -> list[str]:
    out = []
    for where, key in _keys(data):
        low = key.lower()
        if low in ALLOWED_KEY_EXCEPTIONS:
            continue
        hit = next((f for f in FORBIDDEN_KEY_FRAGMENTS if f in low), None)
        if hit:
            out.append(
                f"{where}: key contains the private fragment {hit!r}; cards carry no wiring, "
                "rename or drop it"
            )
    return out


def _hw_problems(where: str, hw: str) -> list[str]:
    if hw in HARDWARE_ALLOWLIST:
        return []
    return [
        f"{where}: hardware {hw!r} is not an allowlisted public accelerator ({', '.join(HARDWARE_ALLOWLIST)})"
    ]


def _verified_needs(where: str, date: dt.date | None, metrics: StandardMetrics | None) -> list[str]:
    out = []
    if date is None:
        out.append(f"{where}: status verified needs last_verified (a date)")
    if metrics is None:
        out.append(f"{where}: status verified needs the five standard metrics")
    else:
        bad = metrics.not_finite()
        if bad:
            out.append(
                f"{where}: status verified needs finite metrics; not finite or missing: {', '.join(bad)}"
            )
    return out


def _terminal(where: str, leaf: Any, fields: tuple[str, ...]) -> list[str]:
    """unsupported / not_applicable leaves state a limitation and carry no run data."""
    return [
        f"{where}: status {leaf.status} must leave {f} empty (a limitation carries no run data)"
        for f in fields
        if getattr(leaf, f, None) not in (None, [], {})
    ]


def _workload_complete(where: str, w: Workload | None) -> list[str]:
    if w is None:
        return [f"{where}: status verified needs a workload"]
    missing = [
        f
        for f in ("per_device_batch_size", "global_batch_size", "max_target_length", "precision")
        if getattr(w, f) is None
    ]
    out = [f"{where}.workload: status verified needs {', '.join(missing)}"] if missing else []
    if w.num_gpus != w.nodes * w.gpus_per_node:
        out.append(
            f"{where}.workload: num_gpus {w.num_gpus} is not nodes x gpus_per_node "
            f"({w.nodes * w.gpus_per_node})"
        )
    if (
        w.per_device_batch_size
        and w.global_batch_size
        and w.global_batch_size != w.per_device_batch_size * w.num_gpus
    ):
        out.append(
            f"{where}.workload: global_batch_size {w.global_batch_size} is not "
            "per_device_batch_size x num_gpus "
            f"({w.per_device_batch_size * w.num_gpus})"
        )
    return out


def _perf_rules(hw: str, leaf: PerfLeaf) -> list[str]:
    where = f"items.pretrain_performance.{hw}"
    out: list[str] = []
    if leaf.status in ("unsupported", "not_applicable"):
        out += _terminal(where, leaf, ("variants",))
        if not leaf.expected_result:
            out.append(f"{where}: status {leaf.status} needs expected_result stating the limitation")
        return out
    if not leaf.variants:
        out.append(f"{where}: needs at least one precision variant")
    for key, v in leaf.variants.items():
        vw = f"{where}.variants.{key}"
        if v.precision is None or not (key == v.precision or key.startswith(v.precision + "_")):
            out.append(
                f"{vw}: variant key must be its precision (or start with '<precision>_'), "
                f"got precision {v.precision!r}"
            )
        if v.workload is not None and v.workload.precision not in (None, v.precision):
            out.append(
                f"{vw}.workload.precision {v.workload.precision!r} differs from the variant "
                f"precision {v.precision!r}"
            )
        if v.status == "verified":
            out += _verified_needs(vw, v.last_verified, v.metrics)
            out += _workload_complete(vw, v.workload)
            if v.window is None:
                out.append(f"{vw}: status verified needs the steady-state window used")
        elif v.status in ("unsupported", "not_applicable"):
            out += _terminal(vw, v, ("workload", "window", "last_verified", "metrics"))
        if v.window is not None and v.window.first_step > v.window.last_step:
            out.append(
                f"{vw}.window: first_step {v.window.first_step} is after last_step {v.window.last_step}"
            )
    want = (
        "verified"
        if leaf.variants and all(v.status == "verified" for v in leaf.variants.values())
        else "unverified"
    )
    if leaf.variants and leaf.status != want:
        out.append(
            f"{where}: status {leaf.status!r} but its variants make it {want!r} "
            "(verified only when every variant is)"
        )
    return out


def _resume_rules(hw: str, leaf: ResumeLeaf) -> list[str]:
    where = f"items.checkpoint_resume.{hw}"
    if leaf.status in ("unsupported", "not_applicable"):
        return _terminal(
            where, leaf, ("precision", "workload", "resume", "resume_comparison", "last_verified", "metrics")
        )
    out: list[str] = []
    r, c = leaf.resume, leaf.resume_comparison
    if r is not None:
        if r.first_resumed_step != r.checkpoint_step + 1:
            out.append(
                f"{where}.resume: first_resumed_step {r.first_resumed_step} is not checkpoint_step + 1"
            )
        if r.last_step < r.first_resumed_step:
            out.append(f"{where}.resume: last_step {r.last_step} is before first_resumed_step")
    if leaf.status == "verified":
        if leaf.last_verified is None:
            out.append(f"{where}: status verified needs last_verified (a date)")
        if leaf.precision is None:
            out.append(f"{where}: status verified needs precision")
        out += _workload_complete(where, leaf.workload)
        if r is None or c is None:
            out.append(f"{where}: status verified needs resume and resume_comparison")
        else:
            if c.sentinel_steps != [r.first_resumed_step, r.last_step]:
                out.append(
                    f"{where}.resume_comparison: sentinel_steps must be [first_resumed_step, last_step]"
                )
            if not c.sentinels_match:
                out.append(f"{where}: status verified but sentinels_match is false")
        if leaf.metrics is not None:
            for name in ("checkpoint_save_seconds", "checkpoint_load_seconds"):
                v = getattr(leaf.metrics, name)
                if v is not None and not math.isfinite(v):
                    out.append(f"{where}.metrics.{name}: not finite")
    return out


def _scaling_rules(hw: str, leaf: ScalingLeaf) -> list[str]:
    where = f"items.pretrain_weak_scaling.{hw}"
    if leaf.status in ("unsupported", "not_applicable"):
        return _terminal(where, leaf, ("precision", "last_verified", "points"))
    out: list[str] = []
    pts = leaf.points
    if len(pts) < 2:
        out.append(f"{where}: weak scaling needs at least 2 points, got {len(pts)}")
    gpus = [p.num_gpus for p in pts]
    if gpus != sorted(set(gpus)):
        out.append(f"{where}.points: num_gpus must strictly increase ({gpus})")
    for i, p in enumerate(pts):
        pw = f"{where}.points[{i}]"
        if p.num_gpus != p.workload.num_gpus:
            out.append(f"{pw}: num_gpus {p.num_gpus} differs from workload.num_gpus {p.workload.num_gpus}")
        if p.global_batch_size != p.workload.global_batch_size:
            out.append(f"{pw}: global_batch_size differs from workload.global_batch_size")
        if p.workload.precision != leaf.precision:
            out.append(
                f"{pw}.workload.precision {p.workload.precision!r} differs from the leaf's {leaf.precision!r}"
            )
        if leaf.status == "verified":
            out += _workload_complete(pw, p.workload)
            bad = p.metrics.not_finite()
            if bad:
                out.append(
                    f"{pw}: status verified needs finite metrics; not finite or missing: {', '.join(bad)}"
                )
    if pts:
        first = pts[0].workload
        for i, p in enumerate(pts[1:], start=1):
            for f in ("model", "gpus_per_node", "max_target_length", "steps", "per_device_batch_size"):
                if getattr(p.workload, f) != getattr(first, f):
                    out.append(
                        f"{where}.points[{i}].workload.{f}: differs from point 0 "
                        "(weak scaling keeps the recipe)"
                    )
        ratios = {p.global_batch_size * pts[0].num_gpus == pts[0].global_batch_size * p.num_gpus for p in pts}
        if ratios != {True}:
            out.append(f"{where}.points: global_batch_size must grow in proportion to num_gpus")
    if leaf.status == "verified" and leaf.precision is None:
        out.append(f"{where}: status verified needs precision")
    if leaf.status == "verified" and leaf.last_verified is None:
        out.append(f"{where}: status verified needs last_verified (a date)")
    return out


def card_rules(card: Card) -> list[str]:
    """Rules beyond the schema: hardware allowlist, verified evidence, index projection, summary."""
    out: list[str] = []
    items = card.items
    if not any(getattr(items, n) for n in ITEM_ORDER):
        out.append(
            "items: the card holds no item (build it from results with at least one sweep or resume run)"
        )
    for name in ITEM_ORDER:
        for hw in getattr(items, name) or {}:
            out += _hw_problems(f"items.{name}.{hw}", hw)
    for hw, leaf in (items.pretrain_performance or {}).items():
        out += _perf_rules(hw, leaf)
    for hw, resume in (items.checkpoint_resume or {}).items():
        out += _resume_rules(hw, resume)
    for hw, scaling in (items.pretrain_weak_scaling or {}).items():
        out += _scaling_rules(hw, scaling)
    idx = card.verification_index
    for section in ("training", "performance", "weak_scaling"):
        for hw in getattr(idx, section) or {}:
            out += _hw_problems(f"verification_index.{section}.{hw}", hw)
    want = flat(project_index(items).model_dump(exclude_none=True))
    have = flat(idx.model_dump(exclude_none=True))
    for k in sorted(set(want) | set(have)):
        if want.get(k) != have.get(k):
            out.append(
                f"verification_index.{k}: {have.get(k, 'missing')!r} does not match the items "
                f"({want.get(k, 'absent')!r})"
            )
    perf_hw = sorted(items.pretrain_performance or {})
    summary = " ".join(card.summary.split())
    if not perf_hw and not summary.startswith(PERFORMANCE_DISCLAIMER):
        out.append(
            "summary: without a pretrain_performance leaf it must start with the performance disclaimer"
        )
    for hw in perf_hw:
        if f"pretrain_performance.{hw}" not in summary:
            out.append(f"summary: must name the performance scope pretrain_performance.{hw}")
    return out


def _card_keys() -> set[str]:
    """Every key name some part of a card may hold (the did-you-mean vocabulary)."""
    names: set[str] = set()
    todo: list[type[BaseModel]] = [Card]
    while todo:
        model = todo.pop()
        for name, f in model.model_fields.items():
            names.add(f.alias or name)
            for arg in _model_args(f.annotation):
                if arg not in todo:
                    todo.append(arg)
    return names


def _model_args(tp: object) -> list[type[BaseModel]]:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    return [m for a in get_args(tp) for m in _model_args(a)]


def _pydantic_lines(exc: ValidationError) -> list[str]:
    out = []
    for e in exc.errors():
        where = ".".join(str(x) for x in e["loc"]) or "card"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "key not allowed in a card"
            near = difflib.get_close_matches(str(e["loc"][-1]), sorted(_card_keys()), n=1, cutoff=0.75)
            if near:
                msg += f"; did you mean {near[0]!r}?"
        out.append(f"{where}: {msg}")
    return out


def parse_card(data: Any) -> tuple[Card | None, list[str]]:
    """(card, problems) from loaded YAML data: forbidden keys, then the schema, then the rules."""
    if not isinstance(data, dict):
        return None, ["card: the document must be a mapping (title, summary, verification_index, ...)"]
    problems = forbidden_keys(data)
    try:
        card = Card.model_validate(data)
    except ValidationError as exc:
        return None, problems + _pydantic_lines(exc)
    return card, problems + card_rules(card)


__all__ = ["card_rules", "forbidden_keys", "parse_card"]
