"""The validation card format (`cvs-tui-card/1`) and every rule `cvs-tui card validate` enforces.

A card is a small YAML record of what a cluster and image verifiably did: throughput per precision
(`pretrain_performance`), checkpoint resume (`checkpoint_resume`) and multi-node weak scaling
(`pretrain_weak_scaling`), keyed by public accelerator name. It carries public facts only; the rules here
and the privacy check (card mode) keep hosts, paths, users and wiring out. docs/card.md describes it.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

CARD_FORMAT = "cvs-tui-card/1"
# Public accelerator names a card may use as hardware keys; extend here when a new target appears.
HARDWARE_ALLOWLIST: tuple[str, ...] = (
    "MI250X",
    "MI300A",
    "MI300X",
    "MI308X",
    "MI325X",
    "MI350X",
    "MI355X",
    "H100",
    "H200",
    "B200",
    "B300",
    "GB200",
    "GB300",
    "CPU",
)
STATUSES: tuple[str, ...] = ("verified", "unverified", "unsupported", "not_applicable")
Status = Literal["verified", "unverified", "unsupported", "not_applicable"]
Precision = Literal["bf16", "fp8"]
STANDARD_METRICS: tuple[str, ...] = (
    "tflops_per_sec_per_gpu",
    "tokens_per_sec_per_gpu",
    "tokens_per_sec_total",
    "step_time_p50_ms",
    "final_loss",
)
FUNCTIONAL_ITEMS: tuple[str, ...] = ("checkpoint_resume",)
ITEM_ORDER: tuple[str, ...] = ("pretrain_performance", "checkpoint_resume", "pretrain_weak_scaling")
PERFORMANCE_DISCLAIMER = (
    "Performance disclaimer: this card does not record a canonical pretrain performance result; reported "
    "timing and throughput metrics are functional verification observations, not standalone optimized "
    "performance results."
)
# Key names that would carry launcher or site wiring; `base_container` is the one allowed exception.
FORBIDDEN_KEY_FRAGMENTS: tuple[str, ...] = (
    "account",
    "cluster",
    "container",
    "evidence",
    "executor",
    "host",
    "job",
    "launcher",
    "mount",
    "node_list",
    "nodelist",
    "partition",
)
ALLOWED_KEY_EXCEPTIONS = frozenset({"base_container"})


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StandardMetrics(_M):
    """The five standard training metrics over the steady-state window (null when not produced)."""

    tflops_per_sec_per_gpu: float | None = None
    tokens_per_sec_per_gpu: float | None = None
    tokens_per_sec_total: float | None = None
    step_time_p50_ms: float | None = None
    final_loss: float | None = None

    def not_finite(self) -> list[str]:
        out = []
        for name in STANDARD_METRICS:
            v = getattr(self, name)
            if v is None or isinstance(v, bool) or not math.isfinite(v):
                out.append(name)
        return out


class Workload(_M):
    """What ran, as data instead of a command line (no launcher wiring can leak through it)."""

    model: str
    nodes: int = Field(ge=1)
    gpus_per_node: int = Field(ge=1)
    num_gpus: int = Field(ge=1)
    per_device_batch_size: int | None = Field(default=None, ge=1)
    global_batch_size: int | None = Field(default=None, ge=1)
    max_target_length: int | None = Field(default=None, ge=1)
    steps: int = Field(ge=1)
    precision: Precision | None = None


class Window(_M):
    """The steady-state window the metrics were computed over."""

    first_step: int = Field(ge=0)
    last_step: int = Field(ge=0)
    clean_steps: int = Field(ge=1)
    excluded_steps: list[int] = Field(default_factory=list)


class PerfVariant(_M):
    status: Status
    precision: Precision | None = None
    workload: Workload | None = None
    window: Window | None = None
    last_verified: dt.date | None = None
    metrics: StandardMetrics | None = None
    expected_result: str
    result: str | None = None


class PerfLeaf(_M):
    status: Status
    variants: dict[str, PerfVariant] = Field(default_factory=dict)
    expected_result: str | None = None  # only for an unsupported/not_applicable leaf without variants


class ResumePoint(_M):
    checkpoint_step: int = Field(ge=0)
    first_resumed_step: int = Field(ge=1)
    last_step: int = Field(ge=1)


class ResumeComparison(_M):
    reference: Literal["uninterrupted_run"]
    sentinel_steps: list[int]
    loss_relative_tolerance: float = Field(ge=0)
    loss_absolute_tolerance: float = Field(ge=0)
    loss_source: Literal["log_3dp", "metrics_file"]
    sentinels_match: bool


class ResumeMetrics(_M):
    """Record-only timings."""

    checkpoint_save_seconds: float | None = None
    checkpoint_load_seconds: float | None = None


class ResumeLeaf(_M):
    status: Status
    precision: Precision | None = None
    workload: Workload | None = None
    resume: ResumePoint | None = None
    resume_comparison: ResumeComparison | None = None
    last_verified: dt.date | None = None
    metrics: ResumeMetrics | None = None
    expected_result: str
    result: str | None = None


class ScalingPoint(_M):
    num_gpus: int = Field(ge=1)
    global_batch_size: int = Field(ge=1)
    workload: Workload
    metrics: StandardMetrics


class ScalingLeaf(_M):
    status: Status
    precision: Precision | None = None
    last_verified: dt.date | None = None
    points: list[ScalingPoint] = Field(default_factory=list)
    expected_result: str
    result: str | None = None


class Items(_M):
    pretrain_performance: dict[str, PerfLeaf] | None = None
    checkpoint_resume: dict[str, ResumeLeaf] | None = None
    pretrain_weak_scaling: dict[str, ScalingLeaf] | None = None


class StatusBuckets(_M):
    verified: list[str] | None = None
    unverified: list[str] | None = None
    unsupported: list[str] | None = None
    not_applicable: list[str] | None = None


class VerificationIndex(_M):
    training: dict[str, StatusBuckets] | None = None
    performance: dict[str, Status] | None = None
    weak_scaling: dict[str, Status] | None = None


class ModelFacts(_M):
    label: str = Field(min_length=1)


class VerificationEnvironment(_M):
    """Public software facts only: no hosts, paths or users."""

    base_container: str | None = None
    maxtext_source_fingerprint: str | None = None
    jax_version: str | None = None
    jaxlib_version: str | None = None
    backend: str | None = None
    cvs_tui_version: str


class Card(_M):
    card_format: Literal["cvs-tui-card/1"] = CARD_FORMAT
    title: str = Field(min_length=1)
    summary: str = Field(min_length=1)
    verification_index: VerificationIndex
    model: ModelFacts
    verification_environment: VerificationEnvironment
    items: Items


# ---------------------------------------------------------------------------------------------------------
# the index: an exact projection of the items
# ---------------------------------------------------------------------------------------------------------
def project_index(items: Items) -> VerificationIndex:
    """The verification_index the items imply: functional items under training.<HW>.<status>, the
    performance and weak-scaling leaves as scalars."""
    training: dict[str, dict[str, list[str]]] = {}
    for name in FUNCTIONAL_ITEMS:
        for hw, leaf in (getattr(items, name) or {}).items():
            training.setdefault(hw, {}).setdefault(leaf.status, []).append(name)
    perf = {hw: leaf.status for hw, leaf in (items.pretrain_performance or {}).items()}
    scaling = {hw: leaf.status for hw, leaf in (items.pretrain_weak_scaling or {}).items()}
    return VerificationIndex(
        training={hw: StatusBuckets(**b) for hw, b in training.items()} or None,
        performance=perf or None,
        weak_scaling=scaling or None,
    )


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(d, list):
        return {prefix: sorted(map(str, d))}
    return {prefix: d}


# ---------------------------------------------------------------------------------------------------------
# YAML: unique keys, no anchors/aliases/tags
# ---------------------------------------------------------------------------------------------------------
class CardYamlError(Exception):
    """The card is not plain YAML (duplicate key, anchor, alias, tag or syntax); one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that records duplicate mapping keys instead of keeping the last one."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[str] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (list, dict)):
                continue
            if key in seen:
                self.duplicates.append(f"line {key_node.start_mark.line + 1}: duplicate key {key!r}")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _UniqueKeyLoader.construct_mapping,  # type: ignore[arg-type]
)


def load_card_yaml(text: str) -> Any:
    """Parse card YAML strictly; raises CardYamlError listing every structural problem."""
    problems: list[str] = []
    try:
        for ev in yaml.parse(text, Loader=yaml.SafeLoader):
            line = ev.start_mark.line + 1
            if isinstance(ev, yaml.AliasEvent):
                problems.append(
                    f"line {line}: alias *{ev.anchor} (aliases are not allowed; write the value out)"
                )
            elif getattr(ev, "anchor", None):
                problems.append(f"line {line}: anchor &{ev.anchor} (anchors are not allowed)")
            if getattr(ev, "tag", None) is not None:
                problems.append(f"line {line}: tag {ev.tag} (tags are not allowed)")
    except yaml.YAMLError as exc:
        raise CardYamlError([f"not valid YAML: {' '.join(str(exc).split())}"]) from None
    if problems:
        raise CardYamlError(problems)
    loader = _UniqueKeyLoader(text)
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        raise CardYamlError([f"not valid YAML: {' '.join(str(exc).split())}"]) from None
    finally:
        loader.dispose()
    if loader.duplicates:
        raise CardYamlError(loader.duplicates)
    return data


class _NoAliasDumper(yaml.SafeDumper):
    """SafeDumper that writes repeated objects out in full: a card has no anchors or aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def card_to_yaml(card: Card) -> str:
    data = card.model_dump(mode="python", exclude_none=True)
    return yaml.dump(
        data, Dumper=_NoAliasDumper, sort_keys=False, default_flow_style=False, allow_unicode=True, width=100
    )


# ---------------------------------------------------------------------------------------------------------
# rules
# ---------------------------------------------------------------------------------------------------------
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
    for hw, leaf in (items.checkpoint_resume or {}).items():
        out += _resume_rules(hw, leaf)
    for hw, leaf in (items.pretrain_weak_scaling or {}).items():
        out += _scaling_rules(hw, leaf)
    idx = card.verification_index
    for section in ("training", "performance", "weak_scaling"):
        for hw in getattr(idx, section) or {}:
            out += _hw_problems(f"verification_index.{section}.{hw}", hw)
    want = _flat(project_index(items).model_dump(exclude_none=True))
    have = _flat(idx.model_dump(exclude_none=True))
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


def _pydantic_lines(exc: ValidationError) -> list[str]:
    out = []
    for e in exc.errors():
        where = ".".join(str(x) for x in e["loc"]) or "card"
        msg = "key not allowed in a card" if e["type"] == "extra_forbidden" else e["msg"]
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


__all__ = [
    "CARD_FORMAT",
    "HARDWARE_ALLOWLIST",
    "PERFORMANCE_DISCLAIMER",
    "STANDARD_METRICS",
    "Card",
    "CardYamlError",
    "Items",
    "PerfLeaf",
    "PerfVariant",
    "ResumeComparison",
    "ResumeLeaf",
    "ResumeMetrics",
    "ResumePoint",
    "ScalingLeaf",
    "ScalingPoint",
    "StandardMetrics",
    "VerificationEnvironment",
    "VerificationIndex",
    "Window",
    "Workload",
    "card_rules",
    "card_to_yaml",
    "load_card_yaml",
    "parse_card",
    "project_index",
]
