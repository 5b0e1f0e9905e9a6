"""Build a validation card from results, and validate a card file (schema, structure, privacy).

Mapping (docs/card.md): each sweep run becomes a `pretrain_performance.<HW>.variants.<precision>` leaf;
the CKPT-1/CKPT-2/CKPT-REF runs become `checkpoint_resume.<HW>`; two or more sweep runs of one recipe
(model, precision, sequence length, steps, per-device batch, GPUs per node) on different GPU counts
become `pretrain_weak_scaling.<HW>`. Smoke runs are a gate, never an item. A leaf is `verified` only
when its run passed, completed, has a clean steady-state window, finite metrics and a date.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cvs_tui.core.card.facts import (
    CARD_DIGITS,
    CardSource,
    card_window,
    maxtext_config_for,
    resolve_hardware,
    run_date,
    run_problems,
    standard_metrics,
    thresholds_text,
    utc_date,
    workload_of,
)
from cvs_tui.core.card.resume import resume_leaf
from cvs_tui.core.card.rules import parse_card
from cvs_tui.core.card.schema import (
    PERFORMANCE_DISCLAIMER,
    Card,
    CardYamlError,
    Items,
    ModelFacts,
    PerfLeaf,
    PerfVariant,
    ResumeLeaf,
    ScalingLeaf,
    ScalingPoint,
    StandardMetrics,
    Status,
    VerificationEnvironment,
    Workload,
    flat,
    load_card_yaml,
    project_index,
)
from cvs_tui.core.errors import UserError
from cvs_tui.core.privacy import PrivacyContext, find_private
from cvs_tui.core.results import RunRecord


# ---------------------------------------------------------------------------------------------------------
# items
# ---------------------------------------------------------------------------------------------------------
@dataclass
class _Sweep:
    hw: str
    run: RunRecord
    src: CardSource
    workload: Workload
    metrics: StandardMetrics
    date: dt.date
    problems: list[str]


def _sweeps(sources: Sequence[CardSource], hw_of: dict[int, str]) -> list[_Sweep]:
    out = []
    for i, src in enumerate(sources):
        for run in src.results.runs:
            if run.kind != "sweep":
                continue  # smoke is a gate; checkpoint runs make checkpoint_resume
            mc = maxtext_config_for(src, run.key)
            w = workload_of(src, run, mc)
            m = standard_metrics(run)
            out.append(
                _Sweep(
                    hw_of[i], run, src, w, m, run_date(run, src.results, src.label), run_problems(run, m, w)
                )
            )
    return out


def _variant(s: _Sweep) -> PerfVariant:
    ok = not s.problems
    w = s.workload
    expected = (
        f"Completes {w.steps} steps on {w.num_gpus} GPU(s) with finite losses and a clean steady-state "
        f"window; {thresholds_text(s.run)}."
    )
    return PerfVariant(
        status="verified" if ok else "unverified",
        precision=w.precision,
        workload=w,
        window=card_window(s.run),
        last_verified=s.date if ok else None,
        metrics=s.metrics,
        expected_result=expected,
        result=None if ok else "; ".join(s.problems),
    )


def _perf_items(sweeps: list[_Sweep]) -> dict[str, PerfLeaf]:
    by_hw: dict[str, list[_Sweep]] = {}
    for s in sweeps:
        by_hw.setdefault(s.hw, []).append(s)
    out: dict[str, PerfLeaf] = {}
    for hw, group in by_hw.items():
        counts: dict[str, int] = {}
        for s in group:
            p = s.workload.precision or "bf16"
            counts[p] = counts.get(p, 0) + 1
        variants: dict[str, PerfVariant] = {}
        dates: dict[str, dt.date] = {}
        for s in sorted(group, key=lambda s: s.date):
            if s.workload.precision is None:  # a variant is keyed by its precision: refuse, don't guess
                raise UserError(
                    f"{s.src.label}: run {s.run.key!r}: precision unknown (bf16, fp8 or fp32 expected); "
                    "pass the run's config with --config, or leave this result out"
                )
            p = s.workload.precision
            w = s.workload
            key = (
                p if counts[p] == 1 else f"{p}_bs{w.per_device_batch_size}_sl{w.max_target_length}_n{w.nodes}"
            )
            variants[key] = _variant(s)  # the same workload twice: the later run stands
            dates[key] = s.date
        if not variants:
            continue
        status: Status = (
            "verified" if all(v.status == "verified" for v in variants.values()) else "unverified"
        )
        out[hw] = PerfLeaf(status=status, variants=dict(sorted(variants.items())))
    return out


def _scaling_items(sweeps: list[_Sweep]) -> dict[str, ScalingLeaf]:
    groups: dict[tuple[Any, ...], dict[int, _Sweep]] = {}
    for s in sorted(sweeps, key=lambda s: s.date):
        w = s.workload
        if None in (w.precision, w.max_target_length, w.per_device_batch_size):
            continue
        key = (
            s.hw,
            w.model,
            w.precision,
            w.max_target_length,
            w.steps,
            w.gpus_per_node,
            w.per_device_batch_size,
        )
        groups.setdefault(key, {})[w.num_gpus] = s  # the later run of one size stands
    out: dict[str, ScalingLeaf] = {}
    for key, by_gpus in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        hw = key[0]
        if len(by_gpus) < 2 or hw in out:
            continue
        pts = [by_gpus[n] for n in sorted(by_gpus)]
        ok = all(not s.problems for s in pts)
        points = [
            ScalingPoint(
                num_gpus=s.workload.num_gpus,
                global_batch_size=s.workload.global_batch_size or 0,
                workload=s.workload,
                metrics=s.metrics,
            )
            for s in pts
        ]
        problems = [f"{s.workload.num_gpus} GPU(s): {'; '.join(s.problems)}" for s in pts if s.problems]
        out[hw] = ScalingLeaf(
            status="verified" if ok else "unverified",
            precision=pts[0].workload.precision,
            last_verified=max(s.date for s in pts) if ok else None,
            points=points,
            expected_result="All points complete with finite metrics and no skipped or NaN steps; "
            "global batch "
            "grows in proportion to GPUs. Derive aggregate throughput and efficiency from the points.",
            result=None if ok else " | ".join(problems),
        )
    return out


# ---------------------------------------------------------------------------------------------------------
# the card
# ---------------------------------------------------------------------------------------------------------
def _environment(sources: Sequence[CardSource], image: str | None) -> VerificationEnvironment:
    facts: dict[str, set[str]] = {
        "jax": set(),
        "jaxlib": set(),
        "backend": set(),
        "step_logger_source": set(),
    }
    for src in sources:
        for run in src.results.runs:
            for k in facts:
                v = getattr(run.environment, k)
                if v:
                    facts[k].add(str(v))
    mixed = [f"{k} ({', '.join(sorted(v))})" for k, v in facts.items() if len(v) > 1]
    if mixed:
        raise UserError(
            f"the results come from different software stacks: {'; '.join(mixed)}; build one card per stack"
        )
    if image is None:
        images = set()
        for src in sources:
            if src.plan is not None and src.plan.container_runtime == "docker":
                images.add(src.plan.container_image)
        if len(images) > 1:
            raise UserError(
                "the results' configs name different images; build one card per image or pass --image"
            )
        image = next(iter(images), None)
    if image is not None and ("<changeme>" in image.lower() or not image.strip()):
        image = None
    one = {k: next(iter(v), None) for k, v in facts.items()}
    versions = {src.results.tool_version for src in sources}
    return VerificationEnvironment(
        base_container=image.strip() if image else None,
        # the step logger's file:line only says which log dialect was parsed; it identifies no MaxText
        # source, so the card leaves the fingerprint empty rather than pass a location off as one
        maxtext_source_fingerprint=None,
        jax_version=one["jax"],
        jaxlib_version=one["jaxlib"],
        backend=one["backend"],
        cvs_tui_version=sorted(versions)[-1],
    )


def _summary(items: Items) -> str:
    parts = []
    perf = items.pretrain_performance or {}
    if perf:
        scopes = [
            f"pretrain_performance.{hw} ({', '.join(sorted(leaf.variants))})" for hw, leaf in perf.items()
        ]
        parts.append(
            f"Performance scope: {'; '.join(scopes)}: the suite's training sweeps measured over the "
            "steady-state "
            "window, thresholds stated per variant."
        )
    else:
        parts.append(PERFORMANCE_DISCLAIMER)
    for hw in items.checkpoint_resume or {}:
        parts.append(
            f"checkpoint_resume.{hw} compares a resumed run with an uninterrupted run at sentinel steps."
        )
    for hw, leaf in (items.pretrain_weak_scaling or {}).items():
        gpus = [p.num_gpus for p in leaf.points]
        parts.append(
            f"Weak-scaling scope: pretrain_weak_scaling.{hw} from {gpus[0]} to {gpus[-1]} GPUs, "
            "raw points only."
        )
    parts.append("Smoke runs are a gate and are not items.")
    return " ".join(parts)


def build_card(
    sources: Sequence[CardSource], *, accelerator: str | None = None, image: str | None = None
) -> Card:
    """The validation card for ``sources`` (see the module docstring for the mapping)."""
    if not sources:
        raise UserError("card: give at least one run folder or results.json")
    hw_of = {i: resolve_hardware(s.results.gpu_name, accelerator, s.label) for i, s in enumerate(sources)}
    sweeps = _sweeps(sources, hw_of)
    resume: dict[str, tuple[dt.date, ResumeLeaf]] = {}
    for i, src in enumerate(sources):
        leaf = resume_leaf(src)
        if leaf is None:
            continue
        when = utc_date(src.results.created_at, src.label, "created_at")
        prev = resume.get(hw_of[i])
        if prev is None or when >= prev[0]:
            resume[hw_of[i]] = (when, leaf)
    items = Items(
        pretrain_performance=_perf_items(sweeps) or None,
        checkpoint_resume={hw: leaf for hw, (_, leaf) in resume.items()} or None,
        pretrain_weak_scaling=_scaling_items(sweeps) or None,
    )
    if not any((items.pretrain_performance, items.checkpoint_resume, items.pretrain_weak_scaling)):
        raise UserError(
            "card: the results hold no sweep or checkpoint-resume run (smoke alone is a gate, not an item)"
        )
    labels = sorted({s.results.model_label for s in sources if s.results.model_label})
    hws = sorted(set(hw_of.values()))
    model = labels[0] if len(labels) == 1 else ", ".join(labels) or "unnamed"
    return Card(
        title=f"{model} jaxmaxtext validation on {', '.join(hws)}",
        summary=_summary(items),
        verification_index=project_index(items),
        model=ModelFacts(label=model),
        verification_environment=_environment(sources, image),
        items=items,
    )


def validate_card_text(
    text: str, *, source: str = "card", context: PrivacyContext | None = None
) -> list[str]:
    """Every problem with a card, one line each: YAML structure (duplicate keys, anchors, aliases, tags),
    schema and allowlisted keys, hardware allowlist, verified evidence, index projection, summary, and the
    privacy check (card mode: `file:line:col category`, never the matched value)."""
    problems: list[str] = []
    try:
        data = load_card_yaml(text)
    except CardYamlError as exc:
        problems += [f"{source}: {p}" for p in exc.problems]
    else:
        _card, rules = parse_card(data)
        problems += [f"{source}: {p}" for p in rules]
    problems += [
        f"{source}:{f.line}:{f.col} {f.describe()}" for f in find_private(text, context, mode="card")
    ]
    return problems


def rederive_problems(text: str, rebuilt: Card, *, source: str = "card") -> tuple[list[str], int]:
    """Every number of the card's items checked against the card the named results build: one line
    per number that differs (the card's value and the re-derived one) or that the results do not give;
    the count of numbers that matched. A card that does not parse is left to validate_card_text."""
    try:
        data = load_card_yaml(text)
    except CardYamlError:
        return [], 0
    items = data.get("items") if isinstance(data, dict) else None
    if not isinstance(items, dict):
        return [], 0
    have = flat(items, "items")
    want = flat(rebuilt.model_dump(mode="json", exclude_none=True)["items"], "items")
    problems: list[str] = []
    matched = 0
    for key, value in have.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if key not in want:
            problems.append(f"{source}: {key}: {value} is not given by the results named (not re-derived)")
        elif not _same_number(value, want[key]):
            problems.append(f"{source}: {key}: {value} in the card, {want[key]} re-derived from the results")
        else:
            matched += 1
    return problems, matched


def _same_number(a: float, b: object) -> bool:
    if isinstance(b, bool) or not isinstance(b, int | float):
        return False
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    # the card keeps CARD_DIGITS significant digits: equal at that precision is equal
    return float(f"{a:.{CARD_DIGITS}g}") == float(f"{b:.{CARD_DIGITS}g}")


__all__ = ["build_card", "rederive_problems", "validate_card_text"]
