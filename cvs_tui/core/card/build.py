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
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cvs_tui.core.card.rules import parse_card
from cvs_tui.core.card.schema import (
    HARDWARE_ALLOWLIST,
    PERFORMANCE_DISCLAIMER,
    Card,
    CardYamlError,
    Items,
    ModelFacts,
    PerfLeaf,
    PerfVariant,
    ResumeComparison,
    ResumeLeaf,
    ResumeMetrics,
    ResumePoint,
    ScalingLeaf,
    ScalingPoint,
    StandardMetrics,
    VerificationEnvironment,
    Window,
    Workload,
    card_to_yaml,
    load_card_yaml,
    project_index,
)
from cvs_tui.core.cluster import local_cluster
from cvs_tui.core.config.loader import LoadedConfig
from cvs_tui.core.errors import UserError
from cvs_tui.core.judge.checkpoint import SENTINEL_ATOL, SENTINEL_RTOL, record_losses, restored_step
from cvs_tui.core.offline import read_plan
from cvs_tui.core.plan import Plan, build_plan, precision_of
from cvs_tui.core.privacy import PrivacyContext, find_private
from cvs_tui.core.results import Results, RunRecord, VerdictRecord, load_results

_METRIC_NAMES = {
    "tflops_per_sec_per_gpu": "training.tflops_per_sec_per_gpu",
    "tokens_per_sec_per_gpu": "training.tokens_per_sec_per_gpu",
    "tokens_per_sec_total": "training.tokens_per_sec_total",
    "step_time_p50_ms": "training.step_time_p50_ms",
    "final_loss": "training.final_loss",
}


@dataclass(frozen=True)
class CardSource:
    """One results file and what is known about the run that made it."""

    results: Results
    label: str  # the path given, for messages
    loaded: LoadedConfig | None = None  # the config when it could be read
    plan: Plan | None = None  # the run's plan: each run's maxtext_config, the image

    def __post_init__(self) -> None:
        if self.plan is None and self.loaded is not None:
            object.__setattr__(self, "plan", _config_plan(self.loaded, self.results))


def _config_plan(loaded: LoadedConfig, results: Results) -> Plan | None:
    """The config's plan for these results (a local cluster of their node count); None when the config
    cannot plan them."""
    nodes = max((len(r.nodes) for r in results.runs), default=1) if loaded.mode == "distributed" else 1
    try:
        return build_plan(loaded, local_cluster(max(nodes, 1)), out_dir=loaded.path.parent, run_id="card")
    except UserError:
        return None


def load_card_source(path: str | os.PathLike[str], loaded: LoadedConfig | None = None) -> CardSource:
    """A run folder (holding results.json, and plan.json when a live run made it) or a results.json file.
    With ``loaded``, the plan is the config's."""
    p = Path(path)
    file = p / "results.json" if p.is_dir() else p
    if p.is_dir() and not file.is_file():
        raise UserError(f"{p}: no results.json in this folder; pass a run folder or a results.json")
    return CardSource(load_results(file), str(p), loaded, None if loaded else read_plan(file.parent))


def with_config(src: CardSource, loaded: LoadedConfig | None, *, explicit: bool = True) -> CardSource:
    """``src`` with the config ``loaded``: the config's plan replaces the run folder's plan.json when
    ``explicit`` (given with --config) or when the folder has none."""
    keep = None if explicit else src.plan
    return CardSource(src.results, src.label, loaded, keep)


def resolve_hardware(gpu_name: str, accelerator: str | None, where: str) -> str:
    """The public accelerator key: --accelerator when given, else gpu_name when it names one exactly."""
    allowed = ", ".join(HARDWARE_ALLOWLIST)
    if accelerator is not None:
        name = accelerator.strip().upper()
        if name not in HARDWARE_ALLOWLIST:
            raise UserError(
                f"--accelerator {accelerator!r}: not an allowlisted public accelerator; use one of {allowed}"
            )
        return name
    name = gpu_name.strip().upper().replace("-", "").replace("_", "")
    if name in HARDWARE_ALLOWLIST:
        return name
    raise UserError(
        f"{where}: gpu_name {gpu_name!r} does not name one public accelerator; pass --accelerator NAME "
        f"(one of {allowed})"
    )


# ---------------------------------------------------------------------------------------------------------
# facts from a run
# ---------------------------------------------------------------------------------------------------------
def _key_fields(key: str) -> dict[str, str]:
    out = {}
    for part in key.split(","):
        k, eq, v = part.partition("=")
        if eq:
            out[k.strip().upper()] = v.strip()
    return out


def _int(v: Any) -> int | None:
    try:
        return int(v) if v is not None and str(v).strip() != "" else None
    except (TypeError, ValueError):
        return None


def _precision(text: Any) -> str | None:
    t = str(text or "").strip().lower()
    if not t or t in ("bf16", "bfloat16"):
        return "bf16" if t else None
    return "fp8" if "fp8" in t else None


def _maxtext_config_for(src: CardSource, run_key: str) -> dict[str, Any] | None:
    if src.plan is None:
        return None
    try:
        return dict(src.plan.run(run_key).maxtext_config)
    except KeyError:
        return None


def _workload(src: CardSource, run: RunRecord, mc: dict[str, Any] | None) -> Workload:
    res = src.results
    nodes = max(1, len(run.nodes))
    gpn = res.gpus_per_node or run.environment.devices_per_node or 1
    if mc is not None:
        pdb, seq = _int(mc.get("per_device_batch_size")), _int(mc.get("max_target_length"))
        prec = _precision(precision_of(mc))
    else:
        kf = _key_fields(run.key)
        pdb, seq, prec = _int(kf.get("BS")), _int(kf.get("SL")), _precision(kf.get("PRECISION"))
    return Workload(
        model=res.model_label or "unnamed",
        nodes=nodes,
        gpus_per_node=gpn,
        num_gpus=nodes * gpn,
        per_device_batch_size=pdb,
        global_batch_size=pdb * nodes * gpn if pdb else None,
        max_target_length=seq,
        steps=max(1, run.total_steps),
        precision=prec,  # type: ignore[arg-type]
    )


def _metrics(run: RunRecord) -> StandardMetrics:
    vals: dict[str, float | None] = {}
    for short, full in _METRIC_NAMES.items():
        m = run.metric(full)
        v = m.value if m is not None else None
        vals[short] = v if v is not None and math.isfinite(v) else None
    return StandardMetrics(**vals)


def _date(run: RunRecord, res: Results) -> dt.date:
    ts = run.ended_at or run.started_at or res.created_at
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).date()


def _window(run: RunRecord) -> Window | None:
    w = run.window
    if w.status != "ok" or not w.steps:
        return None
    first, last = min(w.steps), max(w.steps)
    excluded = sorted({x.step for x in w.excluded if first <= x.step <= last})
    return Window(first_step=first, last_step=last, clean_steps=len(w.steps), excluded_steps=excluded)


def _run_problems(run: RunRecord, metrics: StandardMetrics | None, workload: Workload | None) -> list[str]:
    """Why a run cannot back a verified leaf (public words only: no log text, which may be private)."""
    out = []
    if run.outcome != "complete":
        out.append(f"run outcome {run.outcome}")
    out += [f"failed {v.metric}" for v in run.verdicts if v.status == "FAIL"]
    if run.status != "PASS" and not out:
        out.append("run status FAIL")
    if run.window.status != "ok":
        out.append("steady-state window inconclusive")
    if metrics is not None and metrics.not_finite():
        out.append(f"metrics not produced or not finite: {', '.join(metrics.not_finite())}")
    if workload is not None:
        missing = [
            f
            for f in ("per_device_batch_size", "max_target_length", "precision")
            if getattr(workload, f) is None
        ]
        if missing:
            out.append(f"workload facts unknown: {', '.join(missing)} (pass --config)")
    return out


def _thresholds(run: RunRecord) -> str:
    gates = [
        f"{v.metric.removeprefix('training.')} {v.expected} {v.unit}".strip()
        for v in run.verdicts
        if v.gated and v.metric.startswith("training.") and v.status in ("PASS", "FAIL")
    ]
    cell = f" (threshold cell {run.threshold_cell})" if run.threshold_cell else ""
    if not gates:
        return f"no metric is gated for this run{cell}; the metrics are recorded as measured"
    return f"gated{cell}: {'; '.join(gates)}"


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
            mc = _maxtext_config_for(src, run.key)
            w = _workload(src, run, mc)
            m = _metrics(run)
            out.append(_Sweep(hw_of[i], run, src, w, m, _date(run, src.results), _run_problems(run, m, w)))
    return out


def _variant(s: _Sweep) -> PerfVariant:
    ok = not s.problems
    w = s.workload
    expected = (
        f"Completes {w.steps} steps on {w.num_gpus} GPU(s) with finite losses and a clean steady-state "
        f"window; {_thresholds(s.run)}."
    )
    return PerfVariant(
        status="verified" if ok else "unverified",
        precision=w.precision,
        workload=w,
        window=_window(s.run),
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
                    f"{s.src.label}: run {s.run.key!r}: precision unknown (bf16 or fp8 expected); pass the "
                    "run's config with --config, or leave this result out"
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
        status = "verified" if all(v.status == "verified" for v in variants.values()) else "unverified"
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


def _verdict(run: RunRecord, metric: str) -> VerdictRecord | None:
    return next((v for v in run.verdicts if v.metric == metric), None)


def _resume_problems(p2: RunRecord, has_ref: bool) -> tuple[list[str], bool]:
    """What the judge's checkpoint verdicts on phase 2 say (the card does not judge again), and whether
    the sentinel losses matched the reference."""
    problems: list[str] = []
    if _verdict(p2, "checkpoint.resumed") is None:
        problems.append("the results hold no checkpoint.resumed verdict; analyze the run again")
    sentinels = _verdict(p2, "checkpoint.sentinel_losses")
    match = sentinels is not None and sentinels.status == "PASS"
    if has_ref and sentinels is None:
        problems.append("the results hold no checkpoint.sentinel_losses verdict; analyze the run again")
    elif has_ref and not match:
        problems.append("resumed losses differ from the uninterrupted run at the sentinel steps")
    return problems, match


def _resume_leaf(src: CardSource) -> ResumeLeaf | None:
    runs = {r.kind: r for r in src.results.runs}
    p2 = runs.get("ckpt_phase2")
    if p2 is None:
        return None
    p1, ref = runs.get("ckpt_phase1"), runs.get("ckpt_reference")
    res = src.results
    problems, match = _resume_problems(p2, ref is not None)
    l2 = record_losses(p2)
    l1 = record_losses(p1) if p1 is not None else {}
    restored = restored_step(p2)
    ckpt = restored if restored is not None else (max(l1) if l1 else None)
    resume = None
    comparison = None
    if ckpt is not None and l2:
        first, last = min(l2), max(l2)
        resume = ResumePoint(checkpoint_step=ckpt, first_resumed_step=first, last_step=last)
        if ref is not None:
            comparison = ResumeComparison(
                reference="uninterrupted_run",
                sentinel_steps=[first, last],
                loss_relative_tolerance=SENTINEL_RTOL,
                loss_absolute_tolerance=SENTINEL_ATOL,
                loss_source="log_3dp",
                sentinels_match=match,
            )
    else:
        problems.append("phase 2 logged no restore or no finite loss")
    if ref is None:
        problems.append("no uninterrupted reference run (CKPT-REF) in these results")
    for r in (p1, p2, ref):
        if r is not None and (r.outcome != "complete" or r.status != "PASS"):
            problems.append(f"{r.key}: " + "; ".join(_run_problems(r, None, None) or ["run status FAIL"]))
    base = ref or p2
    mc = _maxtext_config_for(src, "CKPT-REF")
    if mc is not None:
        w = _workload(src, base, mc)
    else:  # checkpoint runs reuse a sweep's workload: known when the results hold exactly one
        sweeps = {
            (
                _workload(src, r, None).per_device_batch_size,
                _workload(src, r, None).max_target_length,
                _workload(src, r, None).precision,
            )
            for r in res.runs
            if r.kind == "sweep"
        }
        w = _workload(src, base, None)
        if len(sweeps) == 1:
            pdb, seq, prec = next(iter(sweeps))
            w = w.model_copy(
                update={
                    "per_device_batch_size": pdb,
                    "global_batch_size": pdb * w.num_gpus if pdb else None,
                    "max_target_length": seq,
                    "precision": prec,
                }
            )
    missing = [
        f for f in ("per_device_batch_size", "max_target_length", "precision") if getattr(w, f) is None
    ]
    if missing:
        problems.append(f"workload facts unknown: {', '.join(missing)} (pass --config)")
    save = p1.metric("training.checkpoint_save_seconds") if p1 is not None else None
    load = p2.metric("training.checkpoint_load_seconds")
    ok = not problems
    return ResumeLeaf(
        status="verified" if ok else "unverified",
        precision=w.precision,
        workload=w,
        resume=resume,
        resume_comparison=comparison,
        last_verified=_date(p2, res) if ok else None,
        metrics=ResumeMetrics(
            checkpoint_save_seconds=save.value if save is not None and save.value is not None else None,
            checkpoint_load_seconds=load.value if load is not None and load.value is not None else None,
        ),
        expected_result=(
            "The run restored from checkpoint k resumes at step k+1 and its losses at every step it shares "
            f"with an uninterrupted run (sentinels [k+1, last]) match within {SENTINEL_ATOL:g} + "
            f"{SENTINEL_RTOL:g} x |reference| (the checkpoint.resumed and checkpoint.sentinel_losses "
            "verdicts)."
        ),
        result=None if ok else "; ".join(problems),
    )


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
        maxtext_source_fingerprint=one["step_logger_source"],
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
        leaf = _resume_leaf(src)
        if leaf is None:
            continue
        when = dt.datetime.fromtimestamp(src.results.created_at, tz=dt.UTC).date()
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


__all__ = [
    "CardSource",
    "build_card",
    "card_to_yaml",
    "load_card_source",
    "resolve_hardware",
    "validate_card_text",
    "with_config",
]
