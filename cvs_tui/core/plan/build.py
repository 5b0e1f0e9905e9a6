"""build_plan: config + nodes -> the Plan; raises UserError when the config and the nodes disagree."""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import SecretStr

from cvs_tui.core.cluster import Cluster
from cvs_tui.core.config.blocks import (
    DEFAULT_TELEMETRY_S,
    ThresholdKind,
    ThresholdSpec,
)
from cvs_tui.core.config.checks import PER_NODE_ENV_VARS
from cvs_tui.core.config.host_config import (
    GpuMode,
    Vendor,
    effective_host_config,
    gpu_mode,
    parse_runtime_args,
)
from cvs_tui.core.config.loader import LoadedConfig
from cvs_tui.core.config.model import DEFAULT_COORDINATOR_PORT, RunSpec
from cvs_tui.core.errors import UserError
from cvs_tui.core.plan.model import (
    CKPT1_KEY,
    CKPT2_KEY,
    CKPT_REF_KEY,
    HOST_KEYS_OFF,
    SMOKE_KEY,
    SPECIAL_SLUGS,
    JudgeSpec,
    Plan,
    PlannedNode,
    PlannedRun,
    RunKind,
    precision_of,
    xla_flags_value,
    yaml_dump,
)
from cvs_tui.core.plan.stages import PlanInput, plan_stages


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
        tokens_per_step=tokens_per_step(mc),
    )


def tokens_per_step(maxtext_config: dict[str, Any]) -> float | None:
    """Tokens one device trains per step as MaxText counts them (per_device_batch_size x max_target_length
    x gradient_accumulation_steps), None when the config does not give both as positive numbers."""
    try:
        batch = float(maxtext_config.get("per_device_batch_size"))  # type: ignore[arg-type]
        seq = float(maxtext_config.get("max_target_length"))  # type: ignore[arg-type]
        accum = float(maxtext_config.get("gradient_accumulation_steps") or 1)
    except (TypeError, ValueError):
        return None
    if not (batch > 0 and seq > 0 and accum > 0) or not math.isfinite(batch * seq * accum):
        return None
    return batch * seq * accum


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
    """Resolve everything a run needs; raises UserError when the config and the nodes disagree. In order:
    the nodes against the config's mode, the runs (:class:`_RunBase`), the container's name, the stage
    rows (``plan.stages``), how the trainer is launched (:class:`_Launch`) and the warnings; then
    ``{run_dir}`` is filled in."""
    _check_node_count(loaded, cluster)
    cfg = loaded.config
    base = _RunBase.of(loaded, cluster, run_id)
    runs = base.runs()
    container_name = _container_name(loaded, cluster, run_id)
    stages = plan_stages(
        PlanInput(loaded=loaded, cluster=cluster, out_dir=out_dir, runs=runs, container_name=container_name)
    )
    launch = _Launch.of(loaded, runs)
    tp = cfg.train_params
    tokenizer_path = tp.maxtext_config.get("tokenizer_path")
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
        coordinator_port=base.port,
        stages=stages,
        runs=runs,
        container_name=container_name,
        container_image=cfg.container.image,
        container_image_tar=cfg.container.image_tar or None,
        container_runtime=launch.runtime,
        container_lifetime=cfg.container.lifetime,
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
        checkpoint_resume=cfg.checkpoint_resume.model_dump(mode="json"),
        warnings=list(loaded.warnings) + _plan_warnings(loaded, cluster, runs, launch),
        preflight_errors=list(loaded.preflight_errors),
        host_config=launch.host_config,
        cluster_env=dict(cluster.env_vars),
        launcher_env=launch.env,
        ssh_password=SecretStr(cluster.password) if cluster.password else None,
        health_kernel_log=cfg.health.kernel_log,
        health_telemetry_s=None
        if launch.cpu_only
        else (cfg.health.telemetry_interval_s or DEFAULT_TELEMETRY_S),
    )
    # `{run_dir}` (left by the loader) is the run folder, known only now.
    run_dir = str(Path(out_dir).resolve())
    return Plan.model_validate(_replace_deep(plan.model_dump(), RUN_DIR_PLACEHOLDER, run_dir))


def _check_node_count(loaded: LoadedConfig, cluster: Cluster) -> None:
    nnodes = len(cluster.nodes)
    if loaded.mode == "single" and nnodes > 1:
        raise UserError(
            f"{cluster.source}: {nnodes} nodes given to a single-node config ({loaded.path.name} sets none "
            "of the NCCL RDMA device vars in container.env); use one node, or a distributed config"
        )


@dataclass(frozen=True)
class _RunBase:
    """What every run of one plan shares: the container env, XLA flags, the coordinator's port and where
    the runs write; :meth:`runs` plans the smoke test, the sweeps and the checkpoint-resume runs."""

    loaded: LoadedConfig
    cluster: Cluster
    env: dict[str, str]
    xla: str | None
    port: str
    run_root: str
    model: str

    @classmethod
    def of(cls, loaded: LoadedConfig, cluster: Cluster, run_id: str) -> _RunBase:
        cfg = loaded.config
        # Per-node vars in container.env are overridden per node (the loader warned): keep them out.
        env = {k: v for k, v in cfg.container.env.items() if k not in PER_NODE_ENV_VARS}
        xla = xla_flags_value(cfg.train_params.xla_flags)
        if xla is not None:
            env["XLA_FLAGS"] = xla
        port = env.get("JAX_COORDINATOR_PORT", DEFAULT_COORDINATOR_PORT)
        log_dir = cfg.paths.log_dir.rstrip("/") or "/"
        return cls(loaded, cluster, env, xla, port, f"{log_dir}/{run_id}", _label(loaded.model_label))

    def planned(
        self, key: str, slug: str, kind: RunKind, source: str | None, mc: dict[str, Any], name_slug: str
    ) -> PlannedRun:
        mc = copy.deepcopy(mc)
        run_name = f"cvs_{self.model}_{name_slug}"
        base_out = f"{self.run_root}/{name_slug}"
        mc["run_name"] = run_name
        mc["base_output_directory"] = base_out
        cpu = str(mc.get("hardware", "")).lower() == "cpu"
        if cpu and len(self.cluster.nodes) == 1:
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
            env=dict(self.env),
            xla_flags=self.xla,
            node_env=_node_env(self.cluster, self.port, cpu),
            threshold_cell=self.loaded.thresholds.get(key) if kind == "sweep" else None,
            judge=_judge_spec(self.loaded, key, kind, mc),
        )

    def runs(self) -> list[PlannedRun]:
        """The smoke test (when enabled), the selected sweeps, then the checkpoint-resume runs."""
        loaded = self.loaded
        runs: list[PlannedRun] = []
        smoke = loaded.config.smoke
        if smoke.enabled and loaded.runs:
            # The first selected sweep's model and mesh, at a small fixed shape in BF16.
            mc = dict(loaded.runs[0].maxtext_config)
            mc.update(
                steps=smoke.steps,
                per_device_batch_size=smoke.per_device_batch_size,
                max_target_length=smoke.max_target_length,
                quantization="",
            )
            runs.append(
                self.planned(SMOKE_KEY, SPECIAL_SLUGS[SMOKE_KEY], "smoke", loaded.runs[0].key, mc, "SMOKE")
            )
        for spec in loaded.runs:
            runs.append(self.planned(spec.key, spec.slug, "sweep", spec.key, spec.maxtext_config, spec.slug))
        if loaded.config.checkpoint_resume.enabled:
            runs += self.checkpoint_runs()
        return runs

    def checkpoint_runs(self) -> list[PlannedRun]:
        """Phase 1 (saves), phase 2 (restores) and, when asked, the uninterrupted reference run."""
        cr = self.loaded.config.checkpoint_resume
        sweep = _ckpt_sweep(self.loaded)
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
        runs = [
            self.planned(CKPT1_KEY, SPECIAL_SLUGS[CKPT1_KEY], "ckpt_phase1", sweep.key, p1, "CKPT"),
            self.planned(CKPT2_KEY, SPECIAL_SLUGS[CKPT2_KEY], "ckpt_phase2", sweep.key, p2, "CKPT"),
        ]
        if cr.reference_run:
            ref = base | {"steps": total, "enable_checkpointing": False}
            runs.append(
                self.planned(
                    CKPT_REF_KEY, SPECIAL_SLUGS[CKPT_REF_KEY], "ckpt_reference", sweep.key, ref, "CKPT_REF"
                )
            )
        return runs


def _container_name(loaded: LoadedConfig, cluster: Cluster, run_id: str) -> str:
    container = loaded.config.container
    if container.lifetime == "no_launch":
        return container.name  # an existing container the operator started
    if container.lifetime == "persistent":
        return _docker_name(f"{container.name}-{cluster.user}")
    return _docker_name(f"{container.name}-{cluster.user}-{run_id}")


@dataclass(frozen=True)
class _Launch:
    """How the trainer is started: the container runtime, whether every run is on CPU, how the container
    gets its GPU (``mode``), the Docker HostConfig and the launcher's env."""

    runtime: Literal["docker", "host"]
    cpu_only: bool
    mode: GpuMode
    host_config: dict[str, Any] | None
    env: dict[str, str]

    @classmethod
    def of(cls, loaded: LoadedConfig, runs: list[PlannedRun]) -> _Launch:
        cfg = loaded.config
        runtime = cfg.container.runtime.name
        cpu_only = bool(runs) and all(
            str(r.maxtext_config.get("hardware", "")).lower() == "cpu" for r in runs
        )
        mode = gpu_mode(cfg.gpu_name, cpu_only=cpu_only)
        host_config = None
        if runtime == "docker":
            vendor: Vendor | None = "amd" if mode == "amd" else "nvidia" if mode == "nvidia" else None
            host_config = effective_host_config(parse_runtime_args(cfg.container.runtime.args), vendor)
        env = {"HF_HOME": cfg.paths.models_dir}
        if runtime == "docker":
            env["PYTHONPATH"] = f"$PYTHONPATH:{cfg.train_params.maxtext_root}"
            if mode == "amd":
                env["LD_LIBRARY_PATH"] = "/opt/rocm/lib:$LD_LIBRARY_PATH"
        return cls(runtime, cpu_only, mode, host_config, env)


def _plan_warnings(
    loaded: LoadedConfig, cluster: Cluster, runs: list[PlannedRun], launch: _Launch
) -> list[str]:
    """What the plan warns of beyond the loader's warnings: the cluster's, then the plan's own."""
    cfg = loaded.config
    out = list(cluster.warnings)
    out += _precision_name_warnings(runs)
    if loaded.mode == "distributed" and len(cluster.nodes) == 1:
        out.append(
            f"{loaded.path.name} is a distributed config planned on 1 node ({cluster.source}): nothing "
            "crosses a node; give the nodes with --nodes or --cluster"
        )
    if not cfg.enforce_thresholds:
        out.append(
            "thresholds NOT enforced: metrics recorded, none gated "
            "(set enforce_thresholds: true in the config to gate them)"
        )
    if not cluster.verify_host_keys and not cluster.is_local:
        out.append(HOST_KEYS_OFF)
    if launch.runtime == "docker" and launch.mode == "auto":
        out.append(
            f"gpu_name {cfg.gpu_name!r} names no GPU vendor: each node's container gets AMD or NVIDIA "
            "defaults by what the node has (see preflight)"
        )
    return out


RUN_DIR_PLACEHOLDER = "{run_dir}"

_KEY_PRECISION = re.compile(r"(?:^|,)PRECISION=([A-Za-z0-9]+)")


def _precision_name_warnings(runs: list[PlannedRun]) -> list[str]:
    """Sweep keys that name a precision their runs do not compute in (CVS keys read PRECISION=BF16
    while a CPU config trains in float32): one line per (named, actual) pair, so no screen that shows
    the key contradicts the figures and the card."""
    keys: dict[tuple[str, str], list[str]] = {}
    for r in runs:
        m = _KEY_PRECISION.search(r.key) if r.kind == "sweep" else None
        if m and m.group(1).lower() != r.judge.precision:
            keys.setdefault((m.group(1), r.judge.precision), []).append(r.key)
    return [
        f"sweep key(s) {', '.join(ks)} name {named}, but the runs compute in {actual} (maxtext_config "
        f"dtype/quantization): the figures, MFU and the card say {actual}"
        for (named, actual), ks in keys.items()
    ]


def _replace_deep(node: Any, old: str, new: str) -> Any:
    if isinstance(node, str):
        return node.replace(old, new)
    if isinstance(node, dict):
        return {k: _replace_deep(v, old, new) for k, v in node.items()}
    if isinstance(node, list):
        return [_replace_deep(v, old, new) for v in node]
    return node
