"""Convert a pre-2026 CVS jaxmaxtext config (`training{}` + `sweeps[]` + `enabled_sweep_list`) to the
current layout (`train_params`, root test blocks, `container.env`, `sweeps{}` + `runs[]`).

Pure: dicts in, dicts and notes out. Old sweep names such as
`NNODES=1,STEPS=30,PRECISION=BF16,BATCH=5,GBS=40,SEQLEN=8192` are labels whose tokens the current key
parser does not know, so each becomes an opaque key (its slug, e.g. `NNODES_1_STEPS_30_...`) that keeps
its `maxtext_overrides`; the threshold cells are renamed the same way, so nothing is lost or guessed.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cvs_tui.core.config.loader import foreign_layout, is_old_layout
from cvs_tui.core.config.problems import Problems
from cvs_tui.core.config.thresholds import read_json_object
from cvs_tui.core.errors import UserError
from cvs_tui.core.slug import slugify

# Old `nccl` / `jax_distributed` fields the old launcher exported -> their env var in container.env
# (ib_tc / ib_sl / ib_gid_index were never exported: the configs repeat them in env_vars).
_NCCL_ENV = {
    "ib_hca": "NCCL_IB_HCA",
    "socket_ifname": "NCCL_SOCKET_IFNAME",
    "gloo_socket_ifname": "GLOO_SOCKET_IFNAME",
}
_JAX_ENV = {
    "coordinator_port": "JAX_COORDINATOR_PORT",
    "initialization_timeout_seconds": "JAX_DISTRIBUTED_INITIALIZATION_TIMEOUT_SECONDS",
    "heartbeat_timeout_seconds": "JAX_DISTRIBUTED_HEARTBEAT_TIMEOUT_SECONDS",
}
# Forced by the old launcher on single-node runs, after env_vars.
_SINGLE_NODE_ENV = {"NCCL_IB_DISABLE": "1", "NCCL_SHM_DISABLE": "0", "NCCL_P2P_DISABLE": "0"}
_PER_NODE = ("NNODES", "NODE_RANK", "JAX_PROCESS_INDEX", "JAX_COORDINATOR_IP")
_TEST_BLOCKS = ("scaling_baseline", "convergence", "loss_curve", "smoke", "checkpoint_resume")
_DROPPED = ("nic_type", "rdma_lib", "verify_dmesg", "train_script")


@dataclass
class Migrated:
    config: dict[str, Any]
    thresholds: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)


def _comments(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if not k.startswith("_")}


def _env(
    old: dict[str, Any], training: dict[str, Any], distributed: bool, notes: list[str]
) -> dict[str, str]:
    env = {k: str(v) for k, v in _comments(training.get("env_vars") or {}).items()}
    for name in _PER_NODE:
        if name in env:
            del env[name]
            notes.append(f"training.env_vars.{name}: dropped (cvs-tui sets it per node)")
    if distributed:
        nccl = _comments(training.get("nccl") or old.get("nccl") or {})
        for key, var in _NCCL_ENV.items():
            if nccl.get(key) not in (None, "") and var not in env:
                env[var] = str(nccl[key])
        jax = _comments(training.get("jax_distributed") or old.get("jax_distributed") or {})
        for key, var in _JAX_ENV.items():
            if jax.get(key) not in (None, "") and var not in env:
                env[var] = str(jax[key])
        if jax.get("coordinator_ip") not in (None, "", "auto"):
            notes.append("jax_distributed.coordinator_ip: dropped (the first node is the coordinator)")
    else:
        env.update(_SINGLE_NODE_ENV)  # what the old launcher forced for single-node runs
    return env


def migrate_config(old: dict[str, Any], old_thresholds: dict[str, Any] | None) -> Migrated:
    """The current-layout config (and renamed threshold cells) for an old-layout config."""
    notes: list[str] = []
    training = copy.deepcopy(_comments(old.get("training") or {}))
    distributed = training.get("distributed", True) is not False
    model = _comments(old.get("model") or {})
    tok = _comments(training.get("tokenizer") or {})
    mc = dict(training.get("maxtext_config") or {})
    mc.setdefault("steps", training.get("steps", 30))
    mc.setdefault("enable_checkpointing", training.get("enable_checkpointing", False))
    if tok.get("tokenizer_path"):
        mc["tokenizer_path"] = tok["tokenizer_path"]
    container = copy.deepcopy(_comments(old.get("container") or {}))
    container["env"] = _env(old, training, distributed, notes)
    train_params: dict[str, Any] = {"hf_model_id": tok.get("hf_model_id", "")}
    if model.get("id") and model["id"] != mc.get("model_name"):
        train_params["model_id"] = model["id"]
    if training.get("train_script_paths"):
        train_params["train_script_paths"] = training["train_script_paths"]
    train_params["maxtext_config"] = mc
    train_params["xla_flags"] = training.get("xla_flags") or {}
    new: dict[str, Any] = {
        "_comment": "Converted from the pre-2026 CVS layout by `cvs-tui config migrate`; review it.",
        "gpu_name": old.get("gpu_arch") or "mi3xx",
        "threshold_json": old.get("threshold_json", ""),
        "enforce_thresholds": old.get("enforce_thresholds", True),
        "gpus_per_node": training.get("gpus_per_node", 8),
        "paths": _comments(old.get("paths") or {}),
        "container": container,
        "train_params": train_params,
    }
    for block in _TEST_BLOCKS:
        if isinstance(training.get(block), dict):
            new[block] = _comments(training[block])
    if isinstance(training.get("error_patterns"), dict):
        new["error_patterns"] = _comments(training["error_patterns"])
    rename: dict[str, str] = {}
    sweeps: dict[str, Any] = {}
    for sweep in training.get("sweeps") or []:
        name = str(sweep.get("name", ""))
        key = slugify(name) or "default"
        rename[name] = key
        sweeps[key] = dict(sweep.get("maxtext_overrides") or {})
    if sweeps:
        new["sweeps"] = sweeps
        enabled = training.get("enabled_sweep_list") or list(rename)
        new["runs"] = [rename.get(n, n) for n in enabled]
        notes.append("sweep names became opaque keys (their slugs); thresholds cells renamed to match")
    if "distributed" in training:
        notes.append("training.distributed: now implied (distributed = NCCL device vars in container.env)")
    for key in _DROPPED:
        if key in training:
            notes.append(f"training.{key}: dropped (the current layout has no such field)")
    thresholds = None
    if old_thresholds is not None:
        thresholds = {rename.get(k, k): v for k, v in old_thresholds.items()}
    return Migrated(config=new, thresholds=thresholds, notes=notes)


def write_migrated(old_path: Path, dest: Path | None, *, force: bool = False) -> list[str]:
    """Read ``old_path``, write the current layout to ``dest`` (and its threshold file); report lines."""
    problems = Problems()
    old = read_json_object(old_path, "config file", problems)
    problems.raise_if_any()
    assert old is not None
    if (foreign := foreign_layout(old, old_path)) is not None:
        raise UserError(f"{foreign} (config migrate converts the pre-2026 jaxmaxtext layout only)")
    if "train_params" in old:
        raise UserError(f"{old_path}: already in the current layout (train_params); nothing to migrate")
    if not is_old_layout(old):
        raise UserError(
            f"{old_path}: neither the pre-2026 layout (a training block) nor the current one (train_params); "
            "config migrate cannot convert it"
        )
    dest = dest or old_path.with_name(f"{old_path.stem}_migrated.json")
    if dest.is_dir():
        dest = dest / old_path.name
    given = g if isinstance(g := old.get("threshold_json"), str) else ""
    old_thr_path = old_path.parent / (given.strip() or f"{old_path.stem}_threshold.json")
    old_thr = read_json_object(old_thr_path, "threshold file", Problems()) if old_thr_path.is_file() else None
    result = migrate_config(old, old_thr)
    thr_dest = dest.with_name(f"{dest.stem}_threshold.json")
    outputs = [dest] + ([thr_dest] if result.thresholds is not None else [])
    existing = [str(p) for p in outputs if p.exists()]
    if existing and not force:
        raise UserError([f"{p}: already exists; pass --force to overwrite" for p in existing])
    if result.thresholds is not None:
        result.config["threshold_json"] = thr_dest.name
        thr_dest.write_text(json.dumps(result.thresholds, indent=2) + "\n", encoding="utf-8")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(result.config, indent=2) + "\n", encoding="utf-8")
    lines = [f"wrote {p}" for p in outputs]
    lines += [f"note: {n}" for n in result.notes]
    lines.append(f"Next: `cvs-tui config validate {dest}`")
    return lines
