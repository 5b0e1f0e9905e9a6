"""The validation card format (`cvs-tui-card/1`): its models, the index projection and the YAML reader
and writer (unique keys, no anchors, aliases or tags). The rules are in ``card/rules.py``.

A card is a small YAML record of what a cluster and image verifiably did: throughput per precision
(`pretrain_performance`), checkpoint resume (`checkpoint_resume`) and multi-node weak scaling
(`pretrain_weak_scaling`), keyed by public accelerator name. It carries public facts only; the rules here
and the privacy check (card mode) keep hosts, paths, users and wiring out. docs/card.md describes it.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any, Final, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

CARD_FORMAT: Final = "cvs-tui-card/1"
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
Precision = Literal["bf16", "fp8", "fp32"]
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
    # stalls and goodput (docs/metrics.md): shown beside the five, not part of STANDARD_METRICS
    stall_count: int | None = None
    stall_seconds: float | None = None
    longest_stall_seconds: float | None = None
    goodput_pct: float | None = None

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


def flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(flat(v, f"{prefix}.{k}" if prefix else str(k)))
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
    _UniqueKeyLoader.construct_mapping,
)


def load_card_yaml(text: str) -> Any:
    """Parse card YAML strictly; raises CardYamlError listing every structural problem."""
    problems: list[str] = []
    try:
        for ev in yaml.parse(text, Loader=yaml.SafeLoader):
            assert ev.start_mark is not None  # the parser marks every event
            line = ev.start_mark.line + 1
            if isinstance(ev, yaml.AliasEvent):
                problems.append(
                    f"line {line}: alias *{ev.anchor} (aliases are not allowed; write the value out)"
                )
            elif anchor := getattr(ev, "anchor", None):
                problems.append(f"line {line}: anchor &{anchor} (anchors are not allowed)")
            if (tag := getattr(ev, "tag", None)) is not None:
                problems.append(f"line {line}: tag {tag} (tags are not allowed)")
    except yaml.YAMLError as exc:
        raise CardYamlError([f"not valid YAML: {' '.join(str(exc).split())}"]) from None
    except RecursionError:
        raise CardYamlError(["nesting too deep: this is not a card"]) from None
    if problems:
        raise CardYamlError(problems)
    loader = _UniqueKeyLoader(text)
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        raise CardYamlError([f"not valid YAML: {' '.join(str(exc).split())}"]) from None
    except (ValueError, OverflowError, RecursionError) as exc:
        # a date like 9999-99-99 or 0000-00-00, an int over 4300 digits, deep nesting (audit #18)
        msg = " ".join(str(exc).split())[:120] or type(exc).__name__
        raise CardYamlError([f"a value YAML cannot represent: {msg}; quote it as a string"]) from None
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
    "card_to_yaml",
    "load_card_yaml",
    "project_index",
]
