"""The resolved plan: config + nodes -> exactly what will run where, with which env and YAML.

The runner executes a Plan and never re-reads the config. `Plan.display_dict()` is the stable JSON that
`cvs-tui plan --json` prints and a run folder keeps as `plan.json` (secrets shown as `***`).
"""

from __future__ import annotations

import copy
import json
import os
import re
import secrets
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, SecretStr, SerializerFunctionWrapHandler, model_serializer

from cvs_tui.core.cluster import Cluster
from cvs_tui.core.config.blocks import (
    DEFAULT_TELEMETRY_S,
    Convergence,
    LossCurve,
    ScalingBaseline,
    ThresholdKind,
    ThresholdSpec,
)
from cvs_tui.core.config.host_config import Vendor, effective_host_config, gpu_mode, parse_runtime_args
from cvs_tui.core.config.loader import PER_NODE_ENV_VARS, LoadedConfig
from cvs_tui.core.config.model import DEFAULT_COORDINATOR_PORT, RunSpec, is_secret_name
from cvs_tui.core.errors import UserError

PLAN_SCHEMA_VERSION = 1
# The run catalogue. Special runs: key -> slug (the sweep runs use their sweep key and slug).
SMOKE_KEY, CKPT1_KEY, CKPT2_KEY, CKPT_REF_KEY = "SMOKE", "CKPT-1", "CKPT-2", "CKPT-REF"
SPECIAL_SLUGS = {SMOKE_KEY: "SMOKE", CKPT1_KEY: "CKPT_1", CKPT2_KEY: "CKPT_2", CKPT_REF_KEY: "CKPT_REF"}
MASK = "***"

RunKind = Literal["smoke", "sweep", "ckpt_phase1", "ckpt_phase2", "ckpt_reference"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PlannedStage(_Frozen):
    name: str
    enabled: bool
    reason: str


class PlannedNode(_Frozen):
    host: str
    rank: int
    local: bool
    user: str | None = None
    port: int | None = None
    key_file: str | None = None


SlurmFiles = Literal["auto", "shared", "node-local"]


class PlannedSlurm(_Frozen):
    """Where a ``launcher: slurm`` plan runs: an allocation, or the one cvs-tui will request."""

    job_id: str | None  # None: not allocated yet (`plan --slurm` outside an allocation)
    nodes: list[str]  # Slurm node names in rank order (rank 0 = first); empty until allocated
    salloc_args: list[str]  # what `salloc --no-shell` is given when cvs-tui requests the allocation
    owned: bool  # requested by cvs-tui: released at the end, also on failure and Ctrl-C
    # where the step's files live: the run folder on shared storage, node-local scratch (logs from
    # the step's labelled stdout), or auto (node-local when a node does not see the run folder)
    files: SlurmFiles = "auto"

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # the default is left out: plan.json keeps the shape it had before --slurm-files
        d: dict[str, Any] = handler(self)
        if d.get("files") == "auto":
            del d["files"]
        return d


class JudgeSpec(_Frozen):
    """Everything the judge needs to know about one run besides its logs (see core/judge)."""

    cell_key: str | None  # the threshold cell's key, None when the run has no cell
    cell: dict[str, ThresholdSpec]  # the gates (empty for smoke and checkpoint runs)
    enforce: bool  # enforce_thresholds for sweeps; smoke and checkpoint runs record only
    extra_specs: dict[str, ThresholdSpec]  # gates outside the cell (checkpoint save/load seconds)
    loss_curve: LossCurve  # `enforce` is the run's: only sweeps gate on the loss curve
    convergence: Convergence
    scaling_baseline: ScalingBaseline
    precision: str  # bf16, fp8, ...: picks the peak TFLOP/s for MFU
    eval_configured: bool  # eval_interval > 0
    checkpointing: bool  # enable_checkpointing
    gpus_per_node: int
    gpu_name: str


class PlannedRun(_Frozen):
    key: str
    slug: str
    kind: RunKind
    source_sweep: str | None
    steps: int
    run_name: str
    base_output_directory: str
    maxtext_config: dict[str, Any]
    yaml_text: str
    env: dict[str, str]
    xla_flags: str | None
    node_env: list[dict[str, str]]
    threshold_cell: dict[str, ThresholdSpec] | None
    judge: JudgeSpec


# said in plan, run and plan.json whenever SSH host keys go unchecked (audit #16)
HOST_KEYS_OFF = (
    "SSH host-key checks are off (verify_host_keys: false or --no-host-key-check): "
    "a node's identity is not verified"
)


class Plan(_Frozen):
    schema_version: int = PLAN_SCHEMA_VERSION
    run_id: str
    config_path: str
    threshold_path: str
    out_dir: str
    mode: Literal["single", "distributed"]
    gpu_name: str
    gpus_per_node: int
    model_label: str
    enforce_thresholds: bool
    user: str
    cluster_source: str
    known_hosts: str | None
    verify_host_keys: bool
    launcher: str = "nodes"  # how the runs start on the nodes: a key of runner.launch.LAUNCHERS
    slurm: PlannedSlurm | None = None  # launcher "slurm": the allocation
    nodes: list[PlannedNode]
    coordinator: str
    coordinator_port: str
    stages: list[PlannedStage]
    runs: list[PlannedRun]
    container_name: str
    container_image: str
    container_image_tar: str | None = None
    container_runtime: Literal["docker", "host"]
    container_lifetime: str
    container_args: dict[str, Any]
    paths: dict[str, str]
    python: str
    train_script_paths: list[str]
    hf_model_id: str
    tokenizer_path: str | None
    maxtext_root: str
    maxtext_branch: str
    maxtext_install_cmd: str
    error_patterns: dict[str, str] | None
    checkpoint_resume: dict[str, Any]
    warnings: list[str]
    preflight_errors: list[str]
    # The Docker HostConfig the container gets (runtime.args + upstream's defaults); None for runtime host.
    host_config: dict[str, Any] | None = None
    cluster_env: dict[str, str] = {}  # the cluster file's env_vars: before every command, in the launcher
    launcher_env: dict[str, str] = {}  # HF_HOME, PYTHONPATH, LD_LIBRARY_PATH ($NAME expands)
    ssh_password: SecretStr | None = None
    # Node health (config `health`): how the kernel log is read, and the telemetry interval (None: off,
    # always for hardware: cpu).
    health_kernel_log: Literal["plain", "sudo", "off"] = "plain"
    health_telemetry_s: float | None = None

    def run(self, key: str) -> PlannedRun:
        """The planned run with this key (a sweep key, SMOKE, CKPT-1, CKPT-2 or CKPT-REF)."""
        for r in self.runs:
            if r.key == key:
                return r
        raise KeyError(key)

    def stage(self, name: str) -> PlannedStage:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(name)

    def display_dict(self) -> dict[str, Any]:
        """Stable JSON for `plan --json` and plan.json, with secret values masked."""
        d = self.model_dump(mode="json")
        for run in d["runs"]:
            run["env"] = mask_env(run["env"])
            run["maxtext_config"] = mask_env(run["maxtext_config"])
            run["yaml_text"] = yaml_dump(run["maxtext_config"])
            run["node_env"] = [mask_env(e) for e in run["node_env"]]
        d["cluster_env"] = mask_env(d["cluster_env"])
        d["ssh_password"] = MASK if self.ssh_password is not None else None
        return d


def mask_env(env: dict[str, Any]) -> dict[str, Any]:
    return {k: (MASK if is_secret_name(k) and v not in ("", None) else v) for k, v in env.items()}


def yaml_dump(config: dict[str, Any]) -> str:
    return yaml.safe_dump(config, sort_keys=False, default_flow_style=False, allow_unicode=True)


def new_run_id() -> str:
    """Sortable, unique enough for concurrent runs: UTC time + 4 random hex digits."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)


def xla_flags_value(flags: dict[str, Any]) -> str | None:
    """`--k=v ...` in map order; bools as true/false; None when the map is empty (XLA keeps its defaults)."""
    if not flags:
        return None
    parts = []
    for k, v in flags.items():
        value = ("true" if v else "false") if isinstance(v, bool) else str(v)
        parts.append(f"--{k}={value}")
    return " ".join(parts)


def precision_of(maxtext_config: dict[str, Any]) -> str:
    q = str(maxtext_config.get("quantization") or "").lower()
    return "fp8" if "fp8" in q else (q or "bf16")


def _judge_spec(loaded: LoadedConfig, key: str, kind: RunKind, mc: dict[str, Any]) -> JudgeSpec:
    cfg = loaded.config
    cr = cfg.checkpoint_resume
    cell = loaded.thresholds.get(key) if kind == "sweep" else None
    extra: dict[str, ThresholdSpec] = {}
    if kind == "ckpt_phase1" and cr.max_save_seconds > 0:
        extra["training.checkpoint_save_seconds"] = ThresholdSpec(
            kind=ThresholdKind.MAX, value=cr.max_save_seconds
        )
    if kind == "ckpt_phase2" and cr.max_load_seconds > 0:
        extra["training.checkpoint_load_seconds"] = ThresholdSpec(
            kind=ThresholdKind.MAX, value=cr.max_load_seconds
        )
    try:
        eval_interval = int(mc.get("eval_interval", 0) or 0)
    except (TypeError, ValueError):
        eval_interval = 0
    return JudgeSpec(
        cell_key=key if cell is not None else None,
        cell=dict(cell or {}),
        enforce=kind == "sweep" and cfg.enforce_thresholds,
        extra_specs=extra,
        loss_curve=cfg.loss_curve.model_copy(update={"enforce": kind == "sweep" and cfg.loss_curve.enforce}),
        convergence=cfg.convergence,
        scaling_baseline=cfg.scaling_baseline,
        precision=precision_of(mc),
        eval_configured=eval_interval > 0,
        checkpointing=bool(mc.get("enable_checkpointing", False)),
        gpus_per_node=cfg.gpus_per_node,
        gpu_name=cfg.gpu_name,
    )


def _docker_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]+", "-", text).strip("-.") or "cvs"


def _label(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._\-]+", "_", text).strip("_") or "model"


def _node_env(cluster: Cluster, port: str, cpu: bool) -> list[dict[str, str]]:
    n = len(cluster.nodes)
    coord = cluster.coordinator_ip
    out = []
    for node in cluster.nodes:
        env = {
            "JAX_COORDINATOR_IP": coord,
            "JAX_COORDINATOR_PORT": port,
            "NNODES": str(n),
            "NODE_RANK": str(node.rank),
            "JAX_PROCESS_INDEX": str(node.rank),
        }
        if cpu:  # MaxText's CPU path reads XPK's names (its coordinator port is fixed at 1234)
            env |= {
                "JAX_COORDINATOR_ADDRESS": coord,
                "JOB_INDEX": "0",
                "JOB_COMPLETION_INDEX": str(node.rank),
                "PROCESSES_IN_JOB": str(n),
                "JAX_PROCESS_COUNT": str(n),
            }
        out.append(env)
    return out


def _ckpt_sweep(loaded: LoadedConfig) -> RunSpec:
    wanted = loaded.config.checkpoint_resume.sweep
    for r in loaded.runs:
        if not wanted or r.key == wanted:
            return r
    raise UserError(
        f"checkpoint_resume.sweep: '{wanted}' is not among the selected runs; "
        f'add it to runs or set it to one of {[r.key for r in loaded.runs]} (or "" for the first)'
    )


def build_plan(loaded: LoadedConfig, cluster: Cluster, *, out_dir: Path, run_id: str) -> Plan:
    """Resolve everything a run needs; raises UserError when the config and the nodes disagree."""
    cfg = loaded.config
    nnodes = len(cluster.nodes)
    if loaded.mode == "single" and nnodes > 1:
        raise UserError(
            f"{cluster.source}: {nnodes} nodes given to a single-node config ({loaded.path.name} sets none "
            "of the NCCL RDMA device vars in container.env); use one node, or a distributed config"
        )
    # Per-node vars in container.env are overridden per node (the loader warned): keep them out.
    env = {k: v for k, v in cfg.container.env.items() if k not in PER_NODE_ENV_VARS}
    xla = xla_flags_value(cfg.train_params.xla_flags)
    if xla is not None:
        env["XLA_FLAGS"] = xla
    port = env.get("JAX_COORDINATOR_PORT", DEFAULT_COORDINATOR_PORT)
    log_dir = cfg.paths.log_dir.rstrip("/") or "/"
    run_root = f"{log_dir}/{run_id}"
    model = _label(loaded.model_label)

    def planned(
        key: str, slug: str, kind: RunKind, source: str | None, mc: dict[str, Any], name_slug: str
    ) -> PlannedRun:
        mc = copy.deepcopy(mc)
        run_name = f"cvs_{model}_{name_slug}"
        base_out = f"{run_root}/{name_slug}"
        mc["run_name"] = run_name
        mc["base_output_directory"] = base_out
        cpu = str(mc.get("hardware", "")).lower() == "cpu"
        if cpu and nnodes == 1:
            mc.setdefault("skip_jax_distributed_system", True)
        steps = mc["steps"]
        return PlannedRun(
            key=key,
            slug=slug,
            kind=kind,
            source_sweep=source,
            steps=steps,
            run_name=run_name,
            base_output_directory=base_out,
            maxtext_config=mc,
            yaml_text=yaml_dump(mc),
            env=dict(env),
            xla_flags=xla,
            node_env=_node_env(cluster, port, cpu),
            threshold_cell=loaded.thresholds.get(key) if kind == "sweep" else None,
            judge=_judge_spec(loaded, key, kind, mc),
        )

    runs: list[PlannedRun] = []
    smoke = cfg.smoke
    if smoke.enabled and loaded.runs:
        # The first selected sweep's model and mesh, at a small fixed shape in BF16.
        mc = dict(loaded.runs[0].maxtext_config)
        mc.update(
            steps=smoke.steps,
            per_device_batch_size=smoke.per_device_batch_size,
            max_target_length=smoke.max_target_length,
            quantization="",
        )
        runs.append(planned(SMOKE_KEY, SPECIAL_SLUGS[SMOKE_KEY], "smoke", loaded.runs[0].key, mc, "SMOKE"))
    for spec in loaded.runs:
        runs.append(planned(spec.key, spec.slug, "sweep", spec.key, spec.maxtext_config, spec.slug))
    cr = cfg.checkpoint_resume
    if cr.enabled:
        sweep = _ckpt_sweep(loaded)
        total = cr.steps_before_ckpt + cr.steps_after_resume
        base = dict(sweep.maxtext_config)
        base.update(cr.smoke_model_overrides)
        # One LR schedule for all three so the losses at the boundary are comparable.
        base["learning_rate_schedule_steps"] = total
        p1 = base | {"steps": cr.steps_before_ckpt, "enable_checkpointing": True}
        p1["checkpoint_period"] = cr.checkpoint_period
        # Phase 2: same run_name and base_output_directory, so MaxText restores the latest checkpoint itself;
        # its logs still go to their own folder (CKPT_2).
        # Its checkpoint_period is past its last step (as upstream), so it writes no full checkpoint of its
        # own: only the restore is tested, and the folder holds phase 1's checkpoints alone.
        p2 = p1 | {"steps": total, "checkpoint_period": total + 1}
        runs.append(planned(CKPT1_KEY, SPECIAL_SLUGS[CKPT1_KEY], "ckpt_phase1", sweep.key, p1, "CKPT"))
        runs.append(planned(CKPT2_KEY, SPECIAL_SLUGS[CKPT2_KEY], "ckpt_phase2", sweep.key, p2, "CKPT"))
        if cr.reference_run:
            ref = base | {"steps": total, "enable_checkpointing": False}
            runs.append(
                planned(
                    CKPT_REF_KEY, SPECIAL_SLUGS[CKPT_REF_KEY], "ckpt_reference", sweep.key, ref, "CKPT_REF"
                )
            )

    lifetime = cfg.container.lifetime
    runtime = cfg.container.runtime.name
    if lifetime == "no_launch":
        container_name = cfg.container.name  # an existing container the operator started
    elif lifetime == "persistent":
        container_name = _docker_name(f"{cfg.container.name}-{cluster.user}")
    else:
        container_name = _docker_name(f"{cfg.container.name}-{cluster.user}-{run_id}")

    tokenizer_path = cfg.train_params.maxtext_config.get("tokenizer_path")
    # Each registered stage plans its own rows. Imported here, not at the top: the stage modules use
    # this module's types (they import no runner machinery, see runner/stages/base.py).
    from cvs_tui.core.runner.stages import plan_stages
    from cvs_tui.core.runner.stages.base import PlanInput

    stages = plan_stages(
        PlanInput(loaded=loaded, cluster=cluster, out_dir=out_dir, runs=runs, container_name=container_name)
    )
    tp = cfg.train_params
    cpu_only = bool(runs) and all(str(r.maxtext_config.get("hardware", "")).lower() == "cpu" for r in runs)
    mode = gpu_mode(cfg.gpu_name, cpu_only=cpu_only)
    host_config = None
    if runtime == "docker":
        vendor: Vendor | None = "amd" if mode == "amd" else "nvidia" if mode == "nvidia" else None
        host_config = effective_host_config(parse_runtime_args(cfg.container.runtime.args), vendor)
    launcher_env = {"HF_HOME": cfg.paths.models_dir}
    if runtime == "docker":
        launcher_env["PYTHONPATH"] = f"$PYTHONPATH:{tp.maxtext_root}"
        if mode == "amd":
            launcher_env["LD_LIBRARY_PATH"] = "/opt/rocm/lib:$LD_LIBRARY_PATH"
    extra_warnings = list(cluster.warnings)
    if not cluster.verify_host_keys and not cluster.is_local:
        extra_warnings.append(HOST_KEYS_OFF)
    if runtime == "docker" and mode == "auto":
        extra_warnings.append(
            f"gpu_name {cfg.gpu_name!r} names no GPU vendor: each node's container gets AMD or NVIDIA "
            "defaults by what the node has (see preflight)"
        )
    plan = Plan(
        run_id=run_id,
        config_path=str(loaded.path),
        threshold_path=str(loaded.threshold_path),
        out_dir=str(out_dir),
        mode=loaded.mode,
        gpu_name=cfg.gpu_name,
        gpus_per_node=cfg.gpus_per_node,
        model_label=loaded.model_label,
        enforce_thresholds=cfg.enforce_thresholds,
        user=cluster.user,
        cluster_source=cluster.source,
        known_hosts=cluster.known_hosts,
        verify_host_keys=cluster.verify_host_keys,
        nodes=[
            PlannedNode(
                host=n.host, rank=n.rank, local=n.local, user=n.user, port=n.port, key_file=n.key_file
            )
            for n in cluster.nodes
        ],
        coordinator=cluster.coordinator_ip,
        coordinator_port=port,
        stages=stages,
        runs=runs,
        container_name=container_name,
        container_image=cfg.container.image,
        container_image_tar=cfg.container.image_tar or None,
        container_runtime=runtime,
        container_lifetime=lifetime,
        container_args=dict(cfg.container.runtime.args),
        paths=cfg.paths.as_dict(),
        python=tp.python,
        train_script_paths=list(tp.train_script_paths),
        hf_model_id=tp.hf_model_id,
        tokenizer_path=str(tokenizer_path) if tokenizer_path is not None else None,
        maxtext_root=tp.maxtext_root,
        maxtext_branch=tp.maxtext_branch,
        maxtext_install_cmd=tp.maxtext_install_cmd,
        error_patterns=loaded.error_patterns,
        checkpoint_resume=cr.model_dump(mode="json"),
        warnings=list(loaded.warnings) + extra_warnings,
        preflight_errors=list(loaded.preflight_errors),
        host_config=host_config,
        cluster_env=dict(cluster.env_vars),
        launcher_env=launcher_env,
        ssh_password=SecretStr(cluster.password) if cluster.password else None,
        health_kernel_log=cfg.health.kernel_log,
        health_telemetry_s=None if cpu_only else (cfg.health.telemetry_interval_s or DEFAULT_TELEMETRY_S),
    )
    # `{run_dir}` (left by the loader) is the run folder, known only now.
    run_dir = str(Path(out_dir).resolve())
    return Plan.model_validate(_replace_deep(plan.model_dump(), RUN_DIR_PLACEHOLDER, run_dir))


RUN_DIR_PLACEHOLDER = "{run_dir}"


def _replace_deep(node: Any, old: str, new: str) -> Any:
    if isinstance(node, str):
        return node.replace(old, new)
    if isinstance(node, dict):
        return {k: _replace_deep(v, old, new) for k, v in node.items()}
    if isinstance(node, list):
        return [_replace_deep(v, old, new) for v in node]
    return node


_SLURM_FILES = {
    "auto": "the run folder if every node sees it, else node-local (checked at preflight)",
    "shared": "the run folder, on storage every node shares (logs followed from it)",
    "node-local": "node-local scratch (temp_dir); logs from the step's labelled stdout",
}


def _format_slurm_files(files: str, w: Callable[[str], None]) -> None:
    w(f"  files       {files}: {_SLURM_FILES.get(files, files)}  (--slurm-files)")


def _format_slurm(d: dict[str, Any], w: Callable[[str], None]) -> None:
    sl = d["slurm"]
    if sl["job_id"] is None:
        request = shlex.join(sl["salloc_args"])
        w(f"  slurm       will request: salloc --no-shell {request}  (released at the end)")
        _format_slurm_files(sl.get("files", "auto"), w)
        for n in d["nodes"]:
            w(f"  rank {n['rank']}  node {n['rank'] + 1} of the allocation, in Slurm's node-list order")
        return
    how = "requested by cvs-tui, released at the end" if sl["owned"] else "the allocation cvs-tui runs in"
    w(f"  slurm       job {sl['job_id']}  ({how})")
    _format_slurm_files(sl.get("files", "auto"), w)
    for n, name in zip(d["nodes"], sl["nodes"], strict=True):
        coord = "  (coordinator)" if n["rank"] == 0 else ""
        w(f"  rank {n['rank']}  {name}  address {n['host']}  srun --jobid {sl['job_id']} -w {name}{coord}")


def format_plan(plan: Plan) -> str:
    """The plan as plain text for a terminal (secrets masked)."""
    d = plan.display_dict()
    out: list[str] = []
    w = out.append
    w(f"Plan {d['run_id']}  ({d['mode']}, {len(d['nodes'])} node(s) x {d['gpus_per_node']} GPU(s))")
    w(f"  config      {d['config_path']}")
    w(f"  thresholds  {d['threshold_path']}  (enforce_thresholds: {str(d['enforce_thresholds']).lower()})")
    w(f"  model       {d['model_label']}   gpu {d['gpu_name']}   user {d['user']}")
    w(f"  run folder  {d['out_dir']}")
    rt = d["container_runtime"]
    if rt == "host":
        w("  container   none (runtime host: runs on each node itself)")
    else:
        w(f"  container   {d['container_name']}  image {d['container_image']}  ({d['container_lifetime']})")
    w(f"  trainer     {d['python']} {' | '.join(d['train_script_paths'])}  (first that exists)")
    if d["host_config"] is not None:
        w("  HostConfig  " + json.dumps(d["host_config"], sort_keys=True))
    for k, v in d["cluster_env"].items():
        w(f"  node env    {k}={v}  (cluster file env_vars, before every command)")
    for k, v in d["launcher_env"].items():
        w(f"  launcher    {k}={v}")
    for line in d["preflight_errors"]:
        w(f"  PREFLIGHT ERROR: {line}")
    for line in d["warnings"]:
        w(f"  warning: {line}")
    w("")
    w("Nodes")
    if d.get("slurm") is not None:
        _format_slurm(d, w)
    for n in [] if d.get("slurm") is not None else d["nodes"]:
        how = (
            "local" if n["local"] else f"ssh {n['user']}@{n['host']}" + (f":{n['port']}" if n["port"] else "")
        )
        coord = "  (coordinator)" if n["rank"] == 0 else ""
        w(f"  rank {n['rank']}  {n['host']}  {how}{coord}")
    w(f"  coordinator {d['coordinator']}:{d['coordinator_port']}")
    w("")
    w("Stages")
    for i, s in enumerate(d["stages"], 1):
        mark = "run " if s["enabled"] else "skip"
        w(f"  {i:2d}. [{mark}] {s['name']:<18} {s['reason']}")
    for r in d["runs"]:
        w("")
        w(f"Run {r['key']}  ({r['kind']}, {r['steps']} steps, logs/{r['slug']}/)")
        w(f"  run_name               {r['run_name']}")
        w(f"  base_output_directory  {r['base_output_directory']}")
        w(f"  XLA_FLAGS              {r['xla_flags'] if r['xla_flags'] else '(not set)'}")
        w("  env")
        for k, v in r["env"].items():
            if k != "XLA_FLAGS":
                w(f"    {k}={v}")
        w("  per-node env")
        for rank, e in enumerate(r["node_env"]):
            w(f"    rank {rank}: " + " ".join(f"{k}={v}" for k, v in e.items()))
        cell = r["threshold_cell"]
        if r["kind"] == "sweep":
            if cell is None:
                w("  thresholds: no cell for this key (every metric is recorded, none gated)")
            else:
                w("  thresholds")
                for metric, spec in cell.items():
                    extra = ""
                    if spec.get("tolerance_pct") is not None:
                        extra = f" +/-{spec['tolerance_pct']}%"
                    if spec.get("reference"):
                        extra = f" x {spec['reference']}"
                    w(f"    {metric}: {spec['kind']} {spec['value']}{extra}")
        w("  MaxText YAML")
        for line in r["yaml_text"].splitlines():
            w(f"    {line}")
    return "\n".join(out) + "\n"


def _secret_leaves(node: Any, named: bool = False) -> list[str]:
    if isinstance(node, dict):
        return [v for k, x in node.items() for v in _secret_leaves(x, named or is_secret_name(str(k)))]
    if isinstance(node, list):
        return [v for x in node for v in _secret_leaves(x, named)]
    return [node] if named and isinstance(node, str) and node else []


def secret_values(plan: Plan) -> list[str]:
    """Every secret value the plan carries (values of secret-named env vars, cluster env_vars and
    maxtext_config keys) and the token file's content when it is readable here: what must be masked
    wherever node output is shown or written (audit #11b)."""
    out = _secret_leaves(plan.cluster_env)
    if plan.ssh_password is not None:  # the SSH password a node may echo (L14)
        out.append(plan.ssh_password.get_secret_value())
    for r in plan.runs:
        out += _secret_leaves(r.env) + _secret_leaves(r.maxtext_config)
        for env in r.node_env:
            out += _secret_leaves(env)
    token_file = plan.paths.get("hf_token_file")
    if token_file:
        try:
            with open(os.path.expanduser(token_file), encoding="utf-8", errors="replace") as fh:
                out.append(fh.read(4096).strip())
        except OSError:
            pass  # on the nodes only, or not there: nothing to mask from here
    return [v for v in out if v]
