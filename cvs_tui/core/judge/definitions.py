"""What each metric means: its unit and definition (shown verbatim in report.html and docs/metrics.md),
the dense peak TFLOP/s MFU divides by, and the value-or-why-not a metric is."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, NamedTuple

from cvs_tui.core.events import SystemInfoEvent
from cvs_tui.core.judge.format import metric_text

# Dense (no sparsity) peak TFLOP/s per device, keyed (device family, precision): MFU divides by it and a
# step faster than it is impossible (judge.steady). Vendor figures:
# - AMD Instinct data sheets: MI300X and MI325X 1307.4 bf16 / 2614.9 fp8; MI350X (2.2 GHz) 2306.9 /
#   4613.7; MI355X (2.4 GHz) 2516.6 / 5033.2. `mi3xx` and `mi35x` are config labels for the families.
# - NVIDIA data sheets (SXM, dense = half the "with sparsity" figure): A100 312 bf16; H100 and H200 989.4
#   bf16 / 1978.9 fp8; B200 (HGX) 2250 bf16 / 4500 fp8.
# - Google Cloud TPU system architecture pages, "peak compute per chip (bf16)": v4 275, v5e 197,
#   v5p 459, v6e (Trillium) 918. No fp8 on these chips.
PEAK_TFLOPS: dict[tuple[str, str], float] = {
    ("mi300x", "bf16"): 1307.4,
    ("mi300x", "fp8"): 2614.9,
    ("mi325x", "bf16"): 1307.4,
    ("mi325x", "fp8"): 2614.9,
    ("mi3xx", "bf16"): 1307.4,
    ("mi3xx", "fp8"): 2614.9,
    ("mi35x", "bf16"): 2516.6,
    ("mi35x", "fp8"): 5033.2,
    ("mi350x", "bf16"): 2306.9,
    ("mi350x", "fp8"): 4613.7,
    ("mi355x", "bf16"): 2516.6,
    ("mi355x", "fp8"): 5033.2,
    ("a100", "bf16"): 312.0,
    ("h100", "bf16"): 989.4,
    ("h100", "fp8"): 1978.9,
    ("h200", "bf16"): 989.4,
    ("h200", "fp8"): 1978.9,
    ("b200", "bf16"): 2250.0,
    ("b200", "fp8"): 4500.0,
    ("tpu v4", "bf16"): 275.0,
    ("tpu v5e", "bf16"): 197.0,
    ("tpu v5p", "bf16"): 459.0,
    ("tpu v6e", "bf16"): 918.0,
}

# A TPU as JAX names it (device_kind, also in MaxText's "Jax Backend: ... TFRT TPU v6 lite" header) or as
# Cloud names it (v6e, v5litepod, Trillium): its family in PEAK_TFLOPS. "TPU v5" alone is v5p.
_TPU_NAMES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bv6\s*(?:e|lite)\b|\btrillium\b"), "tpu v6e"),
    (re.compile(r"\bv5\s*(?:e|lite|litepod)\b"), "tpu v5e"),
    (re.compile(r"\bv5p\b|\btpu\s*v5\b"), "tpu v5p"),
    (re.compile(r"\bv4\b"), "tpu v4"),
)


_CLOUD_TYPE = re.compile(r"\s*v[4-6](?:e|p|lite|litepod)?(?:-\d+)?\s*$")  # an accelerator type: v6e-256


def tpu_family(name: str) -> str | None:
    """The PEAK_TFLOPS family of a TPU name (``TPU v6 lite``, ``v6e``, ``v5litepod-16``), else None."""
    text = name.lower()
    if "tpu" not in text and "trillium" not in text and not _CLOUD_TYPE.match(text):
        return None
    for pattern, family in _TPU_NAMES:
        if pattern.search(text):
            return family
    return None


class DevicePeak(NamedTuple):
    """A device as the judge names it and its dense peak TFLOP/s at the run's precision (None: unknown)."""

    name: str
    tflops: float | None


def log_backend(events: Iterable[object]) -> str | None:
    """The ``Jax Backend`` header value of a log's events, else None."""
    return next((e.value for e in events if isinstance(e, SystemInfoEvent) and e.key == "backend"), None)


def device_peak(gpu_name: str, precision: str, events: Iterable[object] = ()) -> DevicePeak:
    """The device a log ran on (``device_name``) and its peak at ``precision``."""
    name = device_name(gpu_name, log_backend(events))
    return DevicePeak(name, peak_tflops(name, precision))


def highest_peak(name: str) -> float | None:
    """The device's peak at its fastest listed precision: no step of any run on it can beat it."""
    peaks = [p for prec in ("bf16", "fp8") if (p := peak_tflops(name, prec)) is not None]
    return max(peaks) if peaks else None


def device_name(gpu_name: str, backend: str | None) -> str:
    """The device a run's peak is looked up for: the TPU its log's ``Jax Backend`` header names (the log
    knows what it ran on), else the config's ``gpu_name`` (a GPU's backend names only its driver)."""
    if backend:
        family = tpu_family(backend)
        if family is not None:
            return "TPU " + family.removeprefix("tpu ")
    return gpu_name


Absence = Literal["feature_off", "inconclusive", "not_produced", "non_finite"]


@dataclass(frozen=True, slots=True)
class MetricDef:
    unit: str
    definition: str


METRIC_DEFINITIONS: dict[str, MetricDef] = {
    "training.tflops_per_sec_per_gpu": MetricDef(
        "TFLOP/s/GPU",
        "Model TFLOPs each device did in the steady-state window divided by the window's time (sum over "
        "window steps of TFLOP/s/device x seconds, over the sum of seconds); never a mean of per-step rates.",
    ),
    "training.tokens_per_sec_per_gpu": MetricDef(
        "tok/s/GPU",
        "Tokens per device in the steady-state window (Tokens/s/device x seconds per step, or total_weights "
        "/ devices, or the plan's per_device_batch_size x max_target_length when the log prints neither) "
        "divided by the window's time: tokens_per_sec_total / all devices.",
    ),
    "training.tokens_per_sec_total": MetricDef(
        "tok/s total",
        "Tokens of every node in the window (each node's per-device tokens x its devices) divided by the "
        "window's time, where each window step takes the slowest node's seconds.",
    ),
    "training.scaling_efficiency_pct": MetricDef(
        "%",
        "tokens_per_sec_total / ((nodes / scaling_baseline.num_nodes) x "
        "scaling_baseline.tokens_per_sec_total)"
        " x 100. N/A when the baseline is 0.",
    ),
    "training.mfu_pct": MetricDef(
        "%",
        "tflops_per_sec_per_gpu / the device's dense peak TFLOP/s for the run's precision x 100. N/A when "
        "the device's peak is unknown (CPU, an unlisted GPU); a TPU is the one its log's backend header "
        "names.",
    ),
    "training.step_time_seconds": MetricDef(
        "s/step",
        "Mean step time over the steady-state window (window time / window steps); each step takes the "
        "slowest node's seconds.",
    ),
    "training.step_time_mean_ms": MetricDef("ms/step", "Mean step time over the steady-state window, in ms."),
    "training.step_time_p50_ms": MetricDef(
        "ms/step", "Median step time over the steady-state window (linear interpolation), in ms."
    ),
    "training.step_time_p95_ms": MetricDef(
        "ms/step", "95th percentile step time over the steady-state window (linear interpolation), in ms."
    ),
    "training.stall_count": MetricDef(
        "stalls",
        "Steps judged stalls on any node (one count per step number; synchronous training stalls every "
        "node at the same step).",
    ),
    "training.stall_seconds": MetricDef(
        "s",
        "Time lost to stalls: the sum over stalled steps of (seconds - the node's median step seconds), "
        "the slowest node's excess for each step.",
    ),
    "training.longest_stall_seconds": MetricDef(
        "s", "The largest single stall's lost time (seconds - median)."
    ),
    "training.goodput_pct": MetricDef(
        "%",
        "100 x judged steps x the steady-state step time (`training.step_time_seconds`) / wall time, "
        "where wall time is the sum of the judged steps' seconds plus any log-gap stalls: the time from "
        "the end of the last warm-up step to the end of the last step (MaxText's host intervals tile "
        "the wall clock). Checkpoint saves, evals and stalls all lower it; warm-up and rampup count "
        "neither way. The slowest node's figure is the run's.",
    ),
    "training.final_loss": MetricDef(
        "loss",
        "Training loss of the last logged step. NaN or Inf there is a failure, never replaced by the last "
        "finite value.",
    ),
    "training.loss_decreased": MetricDef(
        "bool", "1 when the final loss is finite and below the first logged loss, else 0."
    ),
    "training.eval_loss": MetricDef(
        "loss", "Loss of the last completed eval. N/A when eval is not configured (eval_interval <= 0)."
    ),
    "training.steps_to_target": MetricDef(
        "steps",
        "First step whose loss (eval loss when target_metric is eval_loss, or auto and eval ran; else "
        "training loss) is <= convergence.target_value. N/A when target_value <= 0.",
    ),
    "training.time_to_target_seconds": MetricDef(
        "s",
        "Sum of logged step seconds up to and including steps_to_target (compute time, not wall time).",
    ),
    "training.loss_curve_slope": MetricDef(
        "loss/step",
        "Least-squares slope of the sampled training loss (every loss_curve.sample_every steps, the "
        "milestone steps, the first and the last); passes when below loss_curve.max_slope.",
    ),
    "training.checkpoint_save_seconds": MetricDef(
        "s",
        "Seconds of the last completed checkpoint save (orbax 'Finished save', else its blocking part), "
        "slowest node.",
    ),
    "training.checkpoint_load_seconds": MetricDef(
        "s", "Seconds of the slowest node's checkpoint restore ('Finished load' / restoring)."
    ),
    # Node health (live runs with the node_health stage): findings are kernel-log lines matching a
    # signature, attributed to the run by their time on the node. Gate them in a threshold cell.
    "health.findings.fatal": MetricDef(
        "count", "Fatal kernel-log findings on any node during the run (any one also fails the run)."
    ),
    "health.findings.warning": MetricDef(
        "count", "Warning kernel-log findings (correctable ECC, throttling, ...) on any node during the run."
    ),
    "health.nodes.fail": MetricDef("nodes", "Nodes whose health was FAIL when the run ended (suite so far)."),
    "health.nodes.warn": MetricDef("nodes", "Nodes whose health was warn when the run ended (suite so far)."),
    "health.nodes.not_checked": MetricDef(
        "nodes", "Nodes whose kernel log could not be read (not checked) when the run ended; never ok."
    ),
}


@dataclass(slots=True)
class MetricValue:
    name: str
    value: float | None
    unit: str
    absent: Absence | None = None
    reason: str = ""

    @property
    def text(self) -> str:
        return metric_text(self.value, self.absent, self.reason)


def peak_tflops(gpu_name: str, precision: str) -> float | None:
    """Dense peak TFLOP/s of a device name (a GPU label or a TPU name) at a precision, else None."""
    name = gpu_name.lower().strip()
    family = tpu_family(name)
    if family is not None:
        return PEAK_TFLOPS.get((family, precision))
    for family in sorted({k[0] for k in PEAK_TFLOPS}, key=len, reverse=True):
        if family in name:
            return PEAK_TFLOPS.get((family, precision))
    return None


__all__ = [
    "METRIC_DEFINITIONS",
    "PEAK_TFLOPS",
    "Absence",
    "DevicePeak",
    "MetricDef",
    "MetricValue",
    "device_name",
    "device_peak",
    "highest_peak",
    "log_backend",
    "peak_tflops",
    "tpu_family",
]
