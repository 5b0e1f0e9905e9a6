"""Sweep keys (`BS=3,PRECISION=FP8,SL=8192`) and the `runs` selection.

A key is parsed into MaxText overrides; the sweep's own `{}` overrides are applied after it and win.
A key with no `=` at all is an opaque name (no parsed parameters), e.g. the implicit `default` sweep.
"""

from __future__ import annotations

import copy
import difflib
from typing import Any

from cvs_tui.core.config.model import RunSpec
from cvs_tui.core.config.problems import Problems, did_you_mean, jpath
from cvs_tui.core.slug import slugify

# Keys the driver injects into every run's YAML; a config that sets them would be silently overridden.
INJECTED_KEYS = ("run_name", "base_output_directory")
DEFAULT_SWEEP = "default"
TOKENS = ("BS", "PRECISION", "SL")


def fp8_flavor(gpu_name: str) -> str:
    """MaxText's FP8 quantization for the GPU: `fp8` on MI350-class (CDNA4), `nanoo_fp8` on CDNA3."""
    return "fp8" if gpu_name.lower().startswith("mi35") else "nanoo_fp8"


def parse_sweep_key(key: str, gpu_name: str) -> dict[str, Any]:
    """MaxText overrides encoded in a sweep key; raises ValueError naming the bad token."""
    if "=" not in key:
        if not key.strip():
            raise ValueError("empty sweep key")
        return {}
    out: dict[str, Any] = {}
    seen: set[str] = set()
    for raw in key.split(","):
        token = raw.strip()
        name, eq, value = token.partition("=")
        name, value = name.strip().upper(), value.strip()
        if not eq:
            raise ValueError(f"token '{token}' is not NAME=VALUE (expected BS, PRECISION or SL)")
        if name not in TOKENS:
            raise ValueError(
                f"unknown token '{name}'{did_you_mean(name, TOKENS)} (expected BS, PRECISION or SL)"
            )
        if name in seen:
            raise ValueError(f"token '{name}' appears twice")
        seen.add(name)
        if name in ("BS", "SL"):
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"{name} must be a positive integer, got '{value}'")
            out["per_device_batch_size" if name == "BS" else "max_target_length"] = int(value)
        else:
            prec = value.upper()
            if prec == "BF16":
                out["quantization"] = ""
            elif prec == "FP8":
                out["quantization"] = fp8_flavor(gpu_name)
            else:
                raise ValueError(f"PRECISION must be BF16 or FP8, got '{value}'")
    return out


def _steps_problem(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return f"steps must be a positive integer, got {value!r}"
    if value < 1:
        return f"steps must be a positive integer, got {value}"
    return None


def build_runs(doc: dict[str, Any], problems: Problems, warnings: list[str]) -> list[RunSpec]:
    """Selected sweeps as RunSpecs, in `runs` order. Works on the cleaned dict, guarding every type."""
    tp = doc.get("train_params")
    base = tp.get("maxtext_config") if isinstance(tp, dict) else None
    if not isinstance(base, dict):
        return []  # reported by schema validation
    gpu_name = g if isinstance(g := doc.get("gpu_name"), str) else ""
    base_path = ["train_params", "maxtext_config"]
    for k in INJECTED_KEYS:
        if k in base:
            problems.add(jpath([*base_path, k]), f"{k} is injected by cvs-tui for each run", "remove it")

    sweeps = doc.get("sweeps", {})
    if not isinstance(sweeps, dict):
        return []
    declared = dict(sweeps) if sweeps else {DEFAULT_SWEEP: {}}
    specs: dict[str, RunSpec] = {}
    slugs: dict[str, str] = {}
    for key, overrides in declared.items():
        where = ["sweeps", key]
        if not isinstance(overrides, dict):
            continue  # reported by schema validation
        try:
            parsed = parse_sweep_key(key, gpu_name)
        except ValueError as exc:
            problems.add(
                jpath(where),
                f"bad sweep key '{key}': {exc}",
                "write the key as BS=<int>,PRECISION=BF16|FP8,SL=<int>",
            )
            continue
        for k in INJECTED_KEYS:
            if k in overrides:
                problems.add(jpath([*where, k]), f"{k} is injected by cvs-tui for each run", "remove it")
        for k in overrides:
            if k not in base and k not in parsed and k not in INJECTED_KEYS:
                hint = did_you_mean(k, base, cutoff=0.75)
                if hint:
                    warnings.append(
                        f"{jpath([*where, k])}: '{k}' is not in train_params.maxtext_config{hint}; "
                        "it is passed to MaxText as is"
                    )
        merged = copy.deepcopy(base)
        merged.update(parsed)
        merged.update(copy.deepcopy(overrides))
        steps_where = [*where, "steps"] if "steps" in overrides else [*base_path, "steps"]
        if "steps" not in merged:
            close = difflib.get_close_matches("steps", [*base, *overrides], n=1, cutoff=0.75)
            hint = f" ('{close[0]}' is set: a typo?)" if close else ""
            problems.add(
                jpath([*base_path, "steps"]),
                f"required key is missing{hint}",
                "set the number of training steps",
            )
            continue
        bad = _steps_problem(merged["steps"])
        if bad:
            problems.add(jpath(steps_where), bad, "set a whole number of steps >= 1")
            continue
        slug = slugify(key)
        if not slug:
            problems.add(jpath(where), f"sweep key '{key}' has no letters or digits", "rename the sweep")
            continue
        if slug in slugs:
            problems.add(
                jpath(where),
                f"sweep key '{key}' gives the same folder name '{slug}' as '{slugs[slug]}'",
                "rename one of the sweeps",
            )
            continue
        slugs[slug] = key
        specs[key] = RunSpec(key=key, maxtext_config=merged, steps=merged["steps"], slug=slug)

    return _selected(doc.get("runs"), declared, specs, problems)


def _selected(
    runs: Any, declared: dict[str, Any], specs: dict[str, RunSpec], problems: Problems
) -> list[RunSpec]:
    """The sweeps ``runs`` selects, in its order (every declared sweep, in order, when it is absent)."""
    if runs is None:
        return [specs[k] for k in declared if k in specs]
    if not isinstance(runs, list):
        return []  # reported by schema validation
    if not runs:
        problems.add(
            "runs", "empty list selects nothing", "list sweep keys to run, or remove runs to run them all"
        )
    selected: list[RunSpec] = []
    for i, key in enumerate(runs):
        if not isinstance(key, str):
            continue
        if key not in declared:
            problems.add(
                jpath(["runs", i]),
                f"unknown sweep key '{key}'{did_you_mean(key, declared, cutoff=0.5)}",
                "use a key of the sweeps block",
            )
        elif key in (r.key for r in selected):
            problems.add(jpath(["runs", i]), f"sweep '{key}' is listed twice", "list each sweep once")
        elif key in specs:
            selected.append(specs[key])
    return selected
