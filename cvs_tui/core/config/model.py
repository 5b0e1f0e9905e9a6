"""The CVS jaxmaxtext config as pydantic models (strict: an unknown key anywhere is an error).

Only `train_params.maxtext_config` (and a sweep's overrides, and `container.runtime.args`,
`container.env`, `train_params.xla_flags`, `error_patterns`) are free-form maps: they pass through to
MaxText, Docker, the environment and the log scanner. Cross-field rules that need the whole document
(sweeps, thresholds, `<changeme>`) live in the loader so that every problem is reported at once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cvs_tui.core.config.blocks import (
    CheckpointResume,
    Convergence,
    Health,
    LossCurve,
    ScalingBaseline,
    Smoke,
)

DEFAULT_TRAIN_SCRIPT_PATHS = (
    "/workspace/maxtext/src/maxtext/trainers/pre_train/train.py",
    "/workspace/maxtext/src/MaxText/train.py",
)
DEFAULT_COORDINATOR_PORT = "12346"
_DOCKER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Paths(_Strict):
    """The `paths` block. Values may use `{user-id}`, `{env.NAME}` and each other (`{shared_fs}`)."""

    shared_fs: str = Field(description="Base path reachable from all nodes.")
    log_dir: str = Field(description="Training output root; each run gets <log_dir>/<run id>/.")
    models_dir: str = Field(
        default="{shared_fs}/cache/maxtext", description="Tokenizer/model cache (HF_HOME)."
    )
    hf_token_file: str = Field(default="{shared_fs}/.hf_token", description="Hugging Face token file.")
    temp_dir: str = Field(default="/tmp/{user-id}/jaxmaxtext", description="Per-user scratch on each node.")

    def as_dict(self) -> dict[str, str]:
        return self.model_dump()

    def __getitem__(self, key: str) -> str:
        return self.as_dict()[key]

    def items(self) -> list[tuple[str, str]]:
        return list(self.as_dict().items())


class Runtime(_Strict):
    name: Literal["docker", "host"] = Field(
        default="docker", description="docker, or host (no container: run on the node itself)."
    )
    args: dict[str, Any] = Field(
        default_factory=dict,
        description="docker run arguments (network, ipc, devices, ...); checked at load, see host_config.py.",
    )


class Container(_Strict):
    lifetime: Literal["per_run", "persistent", "no_launch"] = "per_run"
    name: str = Field(min_length=1, description="Container name prefix (user and run id are appended).")
    image: str = Field(default="", description="The MaxText/JAX image; pulled on a node that lacks it.")
    image_tar: str = Field(
        default="", description="An image tarball on every node's disk, loaded when the image is missing."
    )
    runtime: Runtime = Field(default_factory=Runtime)
    env: dict[str, str] = Field(default_factory=dict, description="Static env exported on every node.")

    @field_validator("name")
    @classmethod
    def _docker_name(cls, v: str) -> str:
        if not _DOCKER_NAME.match(v):
            raise ValueError("container name must match [A-Za-z0-9][A-Za-z0-9_.-]* (a Docker name)")
        return v


class TrainParams(_Strict):
    hf_model_id: str = Field(default="", description="Hugging Face repo of the tokenizer.")
    model_id: str | None = Field(default=None, description="Label for runs/reports; default model_name.")
    train_script_paths: list[str] = Field(
        default_factory=lambda: list(DEFAULT_TRAIN_SCRIPT_PATHS), min_length=1
    )
    maxtext_branch: str = ""
    maxtext_root: str = "/workspace/maxtext"
    maxtext_install_cmd: str = ""
    maxtext_config: dict[str, Any] = Field(description="Written verbatim to the MaxText YAML.")
    xla_flags: dict[str, str | int | float | bool] = Field(default_factory=dict)
    python: str = Field(default="python3", min_length=1, description="Interpreter that runs the trainer.")


class CvsConfig(_Strict):
    """A CVS jaxmaxtext config (`<gpu>_jaxmaxtext_<model>_<mode>.json`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="CVS jaxmaxtext config (cvs-tui)")

    gpu_name: str = Field(min_length=1, description="GPU label; mi35* selects the fp8 FP8 flavor.")
    gpus_per_node: int = Field(default=8, ge=1)
    threshold_json: str = Field(default="", description="Threshold file, resolved next to the config.")
    enforce_thresholds: bool = True
    paths: Paths
    container: Container
    train_params: TrainParams
    scaling_baseline: ScalingBaseline = Field(default_factory=ScalingBaseline)
    convergence: Convergence = Field(default_factory=Convergence)
    loss_curve: LossCurve = Field(default_factory=LossCurve)
    smoke: Smoke = Field(default_factory=Smoke)
    checkpoint_resume: CheckpointResume = Field(default_factory=CheckpointResume)
    health: Health = Field(default_factory=Health)
    error_patterns: dict[str, str] | None = Field(
        default=None, description="name -> regex, scanned beside the built-in set; absent = built-in only."
    )
    error_patterns_builtin: bool = Field(
        default=True,
        description="false: error_patterns replace the built-in set (upstream CVS) instead of adding to it.",
    )
    sweeps: dict[str, dict[str, Any]] = Field(default_factory=dict)
    runs: list[str] | None = Field(default=None, description="Sweep keys to run, in order; absent = all.")


@dataclass(frozen=True)
class RunSpec:
    """One selected sweep: its key (also the threshold cell key) and the merged MaxText config."""

    key: str
    maxtext_config: dict[str, Any]
    steps: int
    slug: str


# Names whose values are secrets (HF_TOKEN, hf_access_token, AWS_SECRET_ACCESS_KEY); `tokenizer_*` is not.
_SECRET_NAME = re.compile(r"TOKEN(?!IZ)|SECRET|KEY|PASSWORD|PASSWD|CREDENTIAL", re.I)


def is_secret_name(name: str) -> bool:
    """True for env/config key names whose values must never be shown."""
    return bool(_SECRET_NAME.search(name))


def is_secret_entry(name: str, value: Any) -> bool:
    """A key whose value must never be shown: its name says secret, or its value is shaped like a secret
    of a shape the privacy rules know (`MY_CREDS=hf_...`, audit 3 PW04)."""
    if value in ("", None):
        return False
    if is_secret_name(name):
        return True
    if not isinstance(value, str):
        return False
    from cvs_tui.core.privacy.secret_rules import holds_secret  # the rule set loads only when needed

    return holds_secret(value)


def dump_config(config: CvsConfig) -> dict[str, Any]:
    """The config as a JSON-ready dict that loads back to an equal CvsConfig (placeholders resolved)."""
    return config.model_dump(mode="json", exclude_none=True)
