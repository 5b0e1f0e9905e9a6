"""The config's test blocks and the threshold spec, with the defaults the reference documents."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    # allow_inf_nan: an infinite threshold or target always passes (audit #19), whatever the source
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ScalingBaseline(_Strict):
    tokens_per_sec_total: float = 0.0  # 0.0 disables scaling_efficiency_pct (record-only / N/A)
    num_nodes: int = Field(default=1, ge=1)


class TargetMetric(StrEnum):
    AUTO = "auto"
    TRAIN_LOSS = "train_loss"
    EVAL_LOSS = "eval_loss"


class Convergence(_Strict):
    target_metric: TargetMetric = TargetMetric.AUTO
    target_value: float = 0.0  # <= 0 disables steps_to_target / time_to_target_seconds


class LossCurve(_Strict):
    sample_every: int = Field(default=10, ge=1)  # 0 or less would sample nothing or loop (audit #19)
    milestone_steps: list[int] = Field(default_factory=lambda: [100, 500, 1000, 5000])
    max_slope: float = 0.0
    enforce: bool = True


class Smoke(_Strict):
    enabled: bool = True
    steps: int = Field(default=5, ge=1)
    per_device_batch_size: int = Field(default=1, ge=1)
    max_target_length: int = Field(default=2048, ge=1)


class CheckpointResume(_Strict):
    enabled: bool = False
    sweep: str = ""
    steps_before_ckpt: int = Field(default=6, ge=1)
    steps_after_resume: int = Field(default=6, ge=1)
    checkpoint_period: int = Field(default=5, ge=1)
    loss_tolerance: float = 0.1
    max_save_seconds: float = 0.0
    max_load_seconds: float = 0.0
    delete_ckpt_dir: bool = True
    # false: no uninterrupted CKPT-REF run (big models); phase 2 is then compared with phase 1 only
    reference_run: bool = True
    smoke_model_overrides: dict[str, object] = Field(default_factory=dict)


class ThresholdKind(StrEnum):
    MIN = "min"
    MAX = "max"
    MAX_MS = "max_ms"
    MIN_TOK_S = "min_tok_s"
    WITHIN = "within"
    MIN_RATIO = "min_ratio"
    INFO = "info"


class ThresholdSpec(_Strict):
    """One `{metric: spec}` entry of a threshold cell."""

    kind: ThresholdKind
    value: float
    tolerance_pct: float | None = None  # required by `within`
    reference: str | None = None  # required by `min_ratio`: another metric of the same run

    @model_validator(mode="after")
    def _needs(self) -> ThresholdSpec:
        if self.kind is ThresholdKind.WITHIN and self.tolerance_pct is None:
            raise ValueError("kind 'within' needs a tolerance_pct key")
        if self.kind is ThresholdKind.MIN_RATIO and not self.reference:
            raise ValueError("kind 'min_ratio' needs a reference key (the metric to divide by)")
        return self


DEFAULT_TELEMETRY_S = 5.0  # health.telemetry_interval_s when absent


class Health(_Strict):
    """Node health beside training: the kernel log per node and GPU telemetry (docs/config-format.md)."""

    kernel_log: Literal["plain", "sudo", "off"] = Field(
        default="plain",
        description="Read /dev/kmsg as the login user (plain), with sudo -n (sudo), or not at all (off).",
    )
    telemetry_interval_s: float | None = Field(
        default=None,
        gt=0,
        description="Seconds between GPU telemetry samples; absent = 5, always off for hardware: cpu.",
    )
