"""The plan's model: what will run where, with which env and YAML (frozen pydantic models).

The runner executes a :class:`Plan` and never re-reads the config. ``Plan.display_dict()`` is the stable
JSON that ``cvs-tui plan --json`` prints and a run folder keeps as ``plan.json`` (secrets shown as ``***``).
"""

from __future__ import annotations

import secrets
import time
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, SecretStr, SerializerFunctionWrapHandler, model_serializer

from cvs_tui.core.config.blocks import (
    Convergence,
    LossCurve,
    ScalingBaseline,
    ThresholdSpec,
)
from cvs_tui.core.config.model import is_secret_entry

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
    # tokens per device per step (per_device_batch_size x max_target_length x gradient accumulation): the
    # tokens/s a log that prints neither Tokens/s/device nor total_weights is read with; None when unknown
    tokens_per_step: float | None = None


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
    """``env`` with the value of every secret-named key, and every value shaped like a secret whatever
    its name (`MY_CREDS=hf_...`, audit 3 PW04), masked."""
    return {k: (MASK if is_secret_entry(k, v) else v) for k, v in env.items()}


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


_DTYPES = {
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float32": "fp32",
    "fp32": "fp32",
    "float16": "fp16",
    "fp16": "fp16",
}


def precision_of(maxtext_config: dict[str, Any]) -> str:
    """The precision the run computes in: its quantization when one is set (fp8, int8, ...), else
    MaxText's ``dtype`` (bfloat16 by default). The one rule: MFU's peak, the plan and the card use it."""
    q = str(maxtext_config.get("quantization") or "").strip().lower()
    if q:
        return "fp8" if "fp8" in q else q
    dtype = str(maxtext_config.get("dtype") or "bfloat16").strip().lower()
    return _DTYPES.get(dtype, dtype)
