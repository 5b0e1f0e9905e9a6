"""Where a card's facts come from: the results (and the run's plan, for the workload), one run at a time:
workload, the five standard metrics, the window, the date, and why a run cannot back a verified leaf."""

from __future__ import annotations

import datetime as dt
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cvs_tui.core.card.schema import (
    HARDWARE_ALLOWLIST,
    StandardMetrics,
    Window,
    Workload,
)
from cvs_tui.core.cluster import local_cluster
from cvs_tui.core.config.loader import LoadedConfig
from cvs_tui.core.errors import UserError
from cvs_tui.core.plan import Plan, build_plan, precision_of
from cvs_tui.core.results import Results, RunRecord, load_results
from cvs_tui.core.run_folder import RunFolder
from cvs_tui.core.sources.inputs import read_plan

_METRIC_NAMES = {
    "tflops_per_sec_per_gpu": "training.tflops_per_sec_per_gpu",
    "tokens_per_sec_per_gpu": "training.tokens_per_sec_per_gpu",
    "tokens_per_sec_total": "training.tokens_per_sec_total",
    "step_time_p50_ms": "training.step_time_p50_ms",
    "final_loss": "training.final_loss",
    "stall_count": "training.stall_count",
    "stall_seconds": "training.stall_seconds",
    "longest_stall_seconds": "training.longest_stall_seconds",
    "goodput_pct": "training.goodput_pct",
}
CARD_DIGITS = 4  # significant digits a card keeps: a published record, not the raw float


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
    file = RunFolder(p).results_path if p.is_dir() else p
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


def effective_precision(mc: dict[str, Any]) -> str | None:
    """The precision the run computed in: fp8 quantization, else MaxText's `dtype` (bfloat16 by default);
    None for anything else (int8, a dtype the card has no word for)."""
    p = precision_of(mc)
    return p if p in ("bf16", "fp8", "fp32") else None


def _rounded(v: float) -> float:
    return float(f"{v:.{CARD_DIGITS}g}")


def _precision(text: Any) -> str | None:
    t = str(text or "").strip().lower()
    if not t or t in ("bf16", "bfloat16"):
        return "bf16" if t else None
    return "fp8" if "fp8" in t else None


def maxtext_config_for(src: CardSource, run_key: str) -> dict[str, Any] | None:
    if src.plan is None:
        return None
    try:
        return dict(src.plan.run(run_key).maxtext_config)
    except KeyError:
        return None


def workload_of(src: CardSource, run: RunRecord, mc: dict[str, Any] | None) -> Workload:
    res = src.results
    nodes = max(1, len(run.nodes))
    gpn = res.gpus_per_node or run.environment.devices_per_node or 1
    if mc is not None:
        pdb, seq = _int(mc.get("per_device_batch_size")), _int(mc.get("max_target_length"))
        prec = effective_precision(mc)
    else:
        kf = _key_fields(run.key)
        # without a config the key's PRECISION label is all there is (the CLI says so on stderr)
        pdb, seq, prec = _int(kf.get("BS")), _int(kf.get("SL")), _precision(kf.get("PRECISION"))
    try:
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
    except ValidationError as exc:  # a run key such as `BS=0,...` (audit 3 RD02)
        err = exc.errors()[0]
        field = ".".join(str(x) for x in err["loc"])
        where = "the config" if mc is not None else f"run key {run.key!r}"
        raise UserError(
            f"{src.label}: {field} {err.get('input')!r} from {where} is not usable ({err['msg'].lower()}); "
            "fix that run in results.json or pass the config that ran it"
        ) from None


def standard_metrics(run: RunRecord) -> StandardMetrics:
    vals: dict[str, float | None] = {}
    for short, full in _METRIC_NAMES.items():
        m = run.metric(full)
        v = m.value if m is not None else None
        vals[short] = _rounded(v) if v is not None and math.isfinite(v) else None
    count = vals.pop("stall_count")
    return StandardMetrics(**vals, stall_count=int(count) if count is not None else None)


def run_date(run: RunRecord, res: Results, where: str = "results.json") -> dt.date:
    if run.ended_at:
        return utc_date(run.ended_at, where, f"run {run.key!r} ended_at")
    if run.started_at:
        return utc_date(run.started_at, where, f"run {run.key!r} started_at")
    return utc_date(res.created_at, where, "created_at")


def utc_date(ts: float, where: str, field: str) -> dt.date:
    """The UTC date of a results.json time stamp; one that is no time (NaN, Infinity, out of the
    platform's range) is a UserError naming the file and field (audit 3 RD03)."""
    try:
        if not math.isfinite(ts):
            raise ValueError
        return dt.datetime.fromtimestamp(ts, tz=dt.UTC).date()
    except (ValueError, OverflowError, OSError):
        raise UserError(
            f"{where}: {field} {ts!r} is not a time (seconds since 1970); fix or regenerate that results.json"
        ) from None


def card_window(run: RunRecord) -> Window | None:
    w = run.window
    first, last = w.first_step, w.last_step
    if w.status != "ok" or first is None or last is None:
        return None
    excluded = sorted({x.step for x in w.excluded if first <= x.step <= last})
    return Window(first_step=first, last_step=last, clean_steps=w.clean_steps, excluded_steps=excluded)


def run_problems(run: RunRecord, metrics: StandardMetrics | None, workload: Workload | None) -> list[str]:
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


def thresholds_text(run: RunRecord) -> str:
    gates = [
        f"{v.metric.removeprefix('training.')} {v.expected} {v.unit}".strip()
        for v in run.verdicts
        if v.gated and v.metric.startswith("training.") and v.status in ("PASS", "FAIL")
    ]
    cell = f" (threshold cell {run.threshold_cell})" if run.threshold_cell else ""
    if not gates:
        return f"no metric is gated for this run{cell}; the metrics are recorded as measured"
    return f"gated{cell}: {'; '.join(gates)}"


__all__ = ["CardSource", "load_card_source", "resolve_hardware", "with_config"]
