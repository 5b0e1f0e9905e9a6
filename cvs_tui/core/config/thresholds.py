"""The threshold file (`<cell key>: {"training.<metric>": spec}`) and its coverage of the sweeps."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cvs_tui.core.config.blocks import ThresholdKind, ThresholdSpec
from cvs_tui.core.config.problems import Problems, did_you_mean, jpath
from cvs_tui.core.inputfile import CONFIG_MAX, InputFileError, read_text_capped
from cvs_tui.core.jsonsafe import JsonInputError, loads_strict

# Every metric the suite records (all under `training.`); the same names as judge.definitions's
# METRIC_DEFINITIONS (tests/judge/test_gated_metrics.py keeps them equal).
KNOWN_METRICS = (
    "tflops_per_sec_per_gpu",
    "tokens_per_sec_per_gpu",
    "tokens_per_sec_total",
    "scaling_efficiency_pct",
    "step_time_seconds",
    "step_time_mean_ms",
    "step_time_p50_ms",
    "step_time_p95_ms",
    "stall_count",
    "stall_seconds",
    "longest_stall_seconds",
    "goodput_pct",
    "final_loss",
    "loss_decreased",
    "eval_loss",
    "steps_to_target",
    "time_to_target_seconds",
    "mfu_pct",
    "checkpoint_save_seconds",
    "checkpoint_load_seconds",
    "loss_curve_slope",
)
KNOWN_METRIC_NAMES = tuple(f"training.{m}" for m in KNOWN_METRICS)
# Metrics upstream CVS requires every cell to specify (any kind, `info` included) when thresholds are
# enforced: a cell without them would silently record what it was meant to gate.
GATED_METRICS = (
    "training.tflops_per_sec_per_gpu",
    "training.tokens_per_sec_per_gpu",
    "training.final_loss",
    "training.loss_decreased",
)
_SPEC_KEYS = ("kind", "value", "tolerance_pct", "reference")

Thresholds = dict[str, dict[str, ThresholdSpec]]


def read_json_object(path: Path, label: str, problems: Problems) -> dict[str, Any] | None:
    """Read a JSON object from ``path``; a problem line (naming the file) instead of an exception."""
    try:
        text = read_text_capped(path, CONFIG_MAX)
    except FileNotFoundError:
        problems.add(str(path), f"{label} not found", "check the path")
        return None
    except InputFileError as exc:
        problems.add(str(path), f"cannot read {label}: {exc}", "check the path")
        return None
    except (OSError, UnicodeDecodeError) as exc:
        problems.add(str(path), f"cannot read {label}: {exc}", "check the file and its permissions")
        return None
    try:
        data = loads_strict(text)
    except json.JSONDecodeError as exc:
        problems.add(
            str(path),
            f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
            "fix the JSON syntax",
        )
        return None
    except JsonInputError as exc:  # NaN/Infinity, 1e400, duplicate key, huge int, deep nesting
        problems.add(str(path), f"invalid {label}: {exc}", "fix the file")
        return None
    if not isinstance(data, dict):
        problems.add(
            str(path), f"{label} must be a JSON object, got {type(data).__name__}", "wrap it in {...}"
        )
        return None
    return data


def parse_thresholds(data: dict[str, Any], problems: Problems, warnings: list[str]) -> Thresholds:
    """Validate every cell and spec; `_` keys (comments) are dropped at the root and inside cells."""
    out: Thresholds = {}
    for cell, metrics in data.items():
        if cell.startswith("_"):
            continue
        if not isinstance(metrics, dict):
            problems.add(
                jpath([cell]),
                f"a cell must map metrics to specs, got {type(metrics).__name__}",
                "fix the cell",
            )
            out[cell] = {}  # present (and reported): no second "no cell" line for it
            continue
        specs: dict[str, ThresholdSpec] = {}
        for metric, spec in metrics.items():
            if metric.startswith("_"):
                continue
            where = [cell, metric]
            if metric not in KNOWN_METRIC_NAMES:
                hint = did_you_mean(metric, KNOWN_METRIC_NAMES) or (
                    f" (the suite records: {', '.join(KNOWN_METRIC_NAMES)})"
                )
                warnings.append(
                    f"{problems.prefix}{jpath(where)}: '{metric}' is not a metric the suite records"
                    f"{hint}; it will report N/A"
                )
            if not isinstance(spec, dict):
                problems.add(
                    jpath(where), 'a spec must be an object like {"kind": "min", "value": 1}', "fix it"
                )
                continue
            spec = {k: v for k, v in spec.items() if not k.startswith("_")}
            bad = False
            kind = spec.get("kind")
            if isinstance(kind, str) and kind not in {k.value for k in ThresholdKind}:
                kinds = [k.value for k in ThresholdKind]
                problems.add(
                    jpath([*where, "kind"]),
                    f"unknown threshold kind '{kind}'{did_you_mean(kind, kinds)}",
                    f"use one of {', '.join(kinds)}",
                )
                bad = True
            for key in spec:
                if key not in _SPEC_KEYS:
                    problems.add(
                        jpath([*where, key]),
                        f"unknown key '{key}'{did_you_mean(key, _SPEC_KEYS)}",
                        "remove or rename it",
                    )
                    bad = True
            if bad:
                continue
            try:
                specs[metric] = ThresholdSpec.model_validate(spec)
            except ValidationError as exc:
                for err in exc.errors(include_url=False):
                    loc = [*where, *err["loc"]]
                    msg = err["msg"].removeprefix("Value error, ")
                    fix = "add it" if err["type"] == "missing" else "fix the spec"
                    if err["type"] == "missing":
                        msg = "required key is missing"
                    problems.add(jpath(loc), msg, fix)
        out[cell] = specs
    return out


def check_coverage(
    thresholds: Thresholds,
    *,
    declared: Iterable[str],
    selected: Iterable[str],
    enforce: bool,
    threshold_name: str,
    problems: Problems,
    warnings: list[str],
) -> None:
    """Cells must match sweep keys exactly: a selected sweep without a cell, or a cell matching no sweep.

    With `enforce_thresholds: true` each mismatch is an error (a gated run could silently fall back to
    record-only); otherwise a warning, since nothing is gated.
    """
    declared = list(declared)
    lines: list[tuple[str, str, str]] = []
    for key in selected:
        if key not in thresholds:
            lines.append(
                (
                    jpath(["sweeps", key]),
                    f"sweep has no cell in {threshold_name}",
                    "add a cell with this exact key",
                )
            )
    for cell in thresholds:
        if cell not in declared:
            lines.append(
                (
                    f"{threshold_name}: {jpath([cell])}",
                    f"cell matches no sweep key{did_you_mean(cell, declared, cutoff=0.5)}",
                    "rename the cell to a sweep key or remove it",
                )
            )
    for path, problem, fix in lines:
        if enforce:
            problems.add(path, problem, f"{fix} (or set enforce_thresholds to false)")
        else:
            warnings.append(f"{path}: {problem}; {fix} (enforce_thresholds is false: record-only)")


def check_gated(
    data: dict[str, Any],
    *,
    selected: Iterable[str],
    enforce: bool,
    threshold_name: str,
    problems: Problems,
    warnings: list[str],
) -> None:
    """Each selected sweep's cell must name every metric of :data:`GATED_METRICS` (as upstream checks).

    Works on the file as read: a metric whose spec is malformed is reported once, for its spec.
    """
    for key in selected:
        cell = data.get(key)
        if not isinstance(cell, dict):
            continue  # no cell, or not an object: reported by check_coverage / parse_thresholds
        for metric in GATED_METRICS:
            if metric in cell:
                continue
            path = f"{threshold_name}: {jpath([key, metric])}"
            problem = f"cell '{key}' has no spec for gated metric {metric}"
            fix = f'add e.g. "{metric}": {{"kind": "min", "value": ...}} to the cell'
            if enforce:
                problems.add(path, problem, f"{fix} (or set enforce_thresholds to false)")
            else:
                warnings.append(f"{path}: {problem}; {fix} (enforce_thresholds is false: record-only)")


def threshold_candidates(config_path: Path) -> list[Path]:
    """Threshold files next to a config: `<stem>_threshold.json`, else `*_<model>_<mode>_threshold.json`."""
    stem = config_path.stem
    own = config_path.with_name(f"{stem}_threshold.json")
    if own.exists():
        return [own]
    _, _, rest = stem.partition("_")
    if not rest:
        return []
    return sorted(config_path.parent.glob(f"*_{rest}_threshold.json"))
