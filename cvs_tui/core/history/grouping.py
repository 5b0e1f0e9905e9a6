"""Which runs are comparable: a group is one *series* (config, run key, GPU, node count) on one *stack*
(the environment fingerprint `compare` blocks on: toolchain, hardware, workload, and the rest of the
recipe). A run of a known series on a new stack opens a new group, and the change is named."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from cvs_tui.core.compare.fingerprint import BLOCKING, FINGERPRINT, RUN_LOCAL_KEYS
from cvs_tui.core.compare.inputs import RunInput
from cvs_tui.core.results import RunRecord


def _plain(v: Any) -> Any:
    """JSON-stable: floats at 6 significant digits (what compare's fingerprint prints), lists kept."""
    if isinstance(v, float):
        return float(f"{v:.6g}")
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    return v


def series_of(inp: RunInput, run: RunRecord) -> dict[str, Any]:
    return {
        "config": inp.results.config_name,
        "run": run.key,
        "gpu": inp.results.gpu_name or None,
        "nodes": len(run.nodes) or len(inp.results.hosts) or None,
    }


def stack_of(inp: RunInput, run: RunRecord) -> dict[str, Any]:
    """compare's blocking fingerprint rows, then every recipe key of the run's maxtext_config."""
    out: dict[str, Any] = {}
    for name, category, get in FINGERPRINT:
        if category in BLOCKING:
            out[name] = _plain(get(inp, run))
    recipe = inp.maxtext.get(run.key)
    if recipe is not None:
        for k in sorted(recipe):
            if k not in RUN_LOCAL_KEYS:
                out[f"maxtext_config.{k}"] = _plain(recipe[k])
    return out


def fits(stack: dict[str, Any], group_stack: dict[str, Any]) -> bool:
    """A run whose log did not record some facts (a run that died before MaxText printed them) belongs
    with a group that agrees on every fact it did record; it never opens a group of its own for that."""
    return all(v is None or group_stack.get(k) == v for k, v in stack.items())


def canonical(d: dict[str, Any]) -> str:
    return json.dumps(d, sort_keys=True, separators=(",", ":"), default=str)


def group_key(series: dict[str, Any], stack: dict[str, Any]) -> str:
    return hashlib.sha256((canonical(series) + "\n" + canonical(stack)).encode()).hexdigest()


def label_of(series: dict[str, Any]) -> str:
    gpu = series.get("gpu") or "no GPU name"
    nodes = series.get("nodes")
    return f"{series['config']} · {series['run']} · {gpu} · {nodes if nodes is not None else '?'} node(s)"


def stack_change(old: dict[str, Any], new: dict[str, Any]) -> str:
    """What differs between two stacks, as compare words it ("JAX 0.4.30 -> 0.5.0; ...")."""
    parts = []
    for k in sorted(set(old) | set(new), key=lambda k: (k.startswith("maxtext_config."), k)):
        a, b = old.get(k), new.get(k)
        if a != b:
            parts.append(f"{k} {_show(a)} -> {_show(b)}")
    return "; ".join(parts)


def _show(v: Any) -> str:
    if v is None:
        return "(not recorded)"
    if isinstance(v, list):
        return "(" + ", ".join(str(x) for x in v) + ")"
    return str(v)


__all__ = ["canonical", "fits", "group_key", "label_of", "series_of", "stack_change", "stack_of"]
