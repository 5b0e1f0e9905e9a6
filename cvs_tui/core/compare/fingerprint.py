"""The environment fingerprint: toolchain, hardware, workload and schedule facts of both sides, and which
differences make two runs not comparable."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cvs_tui.core.compare.inputs import RunInput
from cvs_tui.core.compare.model import FingerprintRow
from cvs_tui.core.results import RunRecord


def _text(v: Any) -> str | None:
    if v is None or v == "":
        return None
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, list | tuple):
        return "(" + ", ".join(str(x) for x in v) + ")"
    return str(v)


def _mt(inp: RunInput, key: str, name: str) -> Any:
    mc = inp.maxtext.get(key)
    if mc is None:
        return None
    v = mc.get(name)
    if name == "quantization" and v is not None and str(v) == "":
        return "none"
    return v


def _schedule_steps(inp: RunInput, run: RunRecord) -> int | None:
    """MaxText's LR schedule length: learning_rate_schedule_steps, or the run's steps when it is -1/unset."""
    if run.key not in inp.maxtext:
        return None
    v = _mt(inp, run.key, "learning_rate_schedule_steps")
    try:
        n = int(v) if v is not None else -1
    except (TypeError, ValueError):
        return None
    return n if n > 0 else run.total_steps


FINGERPRINT: list[tuple[str, str, Callable[[RunInput, RunRecord], Any]]] = [
    ("JAX", "toolchain", lambda i, r: r.environment.jax),
    ("jaxlib", "toolchain", lambda i, r: r.environment.jaxlib),
    ("backend", "toolchain", lambda i, r: r.environment.backend),
    ("MaxText step-logger source", "toolchain", lambda i, r: r.environment.step_logger_source),
    ("image", "toolchain", lambda i, r: i.image),
    ("device count", "hardware", lambda i, r: r.environment.num_devices),
    ("mesh shape", "hardware", lambda i, r: r.environment.mesh_shape),
    ("nodes", "hardware", lambda i, r: len(r.nodes) or None),
    ("devices per node", "hardware", lambda i, r: r.environment.devices_per_node),
    ("parameters (billions)", "workload", lambda i, r: r.environment.parameters_billions),
    ("TFLOPs per step", "workload", lambda i, r: r.environment.tflops_per_step),
    ("model", "workload", lambda i, r: _mt(i, r.key, "model_name") or i.results.model_label or None),
    ("per-device batch", "workload", lambda i, r: _mt(i, r.key, "per_device_batch_size")),
    ("sequence length", "workload", lambda i, r: _mt(i, r.key, "max_target_length")),
    ("quantization", "workload", lambda i, r: _mt(i, r.key, "quantization")),
    ("dtype", "workload", lambda i, r: _mt(i, r.key, "dtype")),
    ("learning rate", "schedule", lambda i, r: _mt(i, r.key, "learning_rate")),
    ("LR schedule steps", "schedule", lambda i, r: _schedule_steps(i, r)),
    ("planned steps", "info", lambda i, r: r.total_steps),
    ("GPU name", "info", lambda i, r: i.results.gpu_name or None),
]
BLOCKING = ("toolchain", "hardware", "workload")
# maxtext_config keys that name, place or log a run without changing what one training step computes.
# Every other key is part of the recipe: a difference is a workload difference.
RUN_LOCAL_KEYS = frozenset(
    {
        "run_name", "base_output_directory", "steps", "metrics_file", "log_config", "log_period",
        "jax_cache_dir", "enable_checkpointing", "async_checkpointing", "checkpoint_period",
        "checkpoint_dir", "load_parameters_path", "load_full_state_path", "dataset_path",
        "hf_access_token", "tokenizer_path", "enable_goodput_recording", "monitor_goodput",
        "skip_jax_distributed_system", "eval_interval", "eval_steps", "enable_tensorboard",
        "tensorboard_dir", "profiler", "profiler_steps", "skip_first_n_steps_for_profiler",
        "upload_all_profiler_results", "gcs_metrics", "save_config_to_gcs",
    }
)  # fmt: skip
_ROW_KEYS = frozenset(
    {"model_name", "per_device_batch_size", "max_target_length", "quantization", "dtype", "learning_rate",
     "learning_rate_schedule_steps"}
)  # fmt: skip


def _recipe_rows(
    base: Sequence[tuple[RunInput, RunRecord]], cand: Sequence[tuple[RunInput, RunRecord]]
) -> list[FingerprintRow]:
    """The rest of maxtext_config: one row per differing key, else one summary row."""

    def recipes(side: Sequence[tuple[RunInput, RunRecord]]) -> list[dict[str, str]] | None:
        out = []
        for i, r in side:
            mc = i.maxtext.get(r.key)
            if mc is not None:
                out.append({k: _text(v) or "" for k, v in mc.items() if k not in RUN_LOCAL_KEYS | _ROW_KEYS})
        return out or None

    rb, rc = recipes(base), recipes(cand)
    name = "other maxtext_config keys"
    if rb is None or rc is None:
        return [
            FingerprintRow(
                name, "workload", "recorded" if rb else "not recorded", "recorded" if rc else "not recorded",
                False, True,
            )
        ]  # fmt: skip
    rows = []
    for k in sorted({k for d in (*rb, *rc) for k in d}):
        bs = sorted({d.get(k, "(unset)") for d in rb})
        cs_ = sorted({d.get(k, "(unset)") for d in rc})
        if len(bs) == 1 and bs == cs_:
            continue
        b, c = " | ".join(bs), " | ".join(cs_)
        if len(bs) > 1 or len(cs_) > 1:
            which = "base" if len(bs) > 1 else "candidate"
            msg = f"maxtext_config.{k} differs among the {which} runs: {b if len(bs) > 1 else c}"
        else:
            msg = f"maxtext_config.{k} differs: base {b}, candidate {c}"
        rows.append(FingerprintRow(f"maxtext_config.{k}", "workload", b, c, True, False, msg))
    if not rows:
        n = len({k for d in (*rb, *rc) for k in d})
        rows.append(FingerprintRow(name, "workload", f"{n} keys, same", f"{n} keys, same", False, False))
    return rows


def _side_value(
    runs: Sequence[tuple[RunInput, RunRecord]], get: Callable[..., Any]
) -> tuple[str | None, bool]:
    """(value, mixed): the side's value, and whether its repetitions disagree."""
    vals = [_text(get(i, r)) for i, r in runs]
    known = sorted({v for v in vals if v is not None})
    if not known:
        return None, False
    if len(known) > 1:
        return " | ".join(known), True
    return known[0], False


def fingerprint_rows(
    base: Sequence[tuple[RunInput, RunRecord]], cand: Sequence[tuple[RunInput, RunRecord]]
) -> list[FingerprintRow]:
    """Rows of the fingerprint diff; ``message`` names what differs."""
    rows: list[FingerprintRow] = []
    for name, cat, get in FINGERPRINT:
        b, b_mixed = _side_value(base, get)
        c, c_mixed = _side_value(cand, get)
        differs = b_mixed or c_mixed or (b is not None and c is not None and b != c)
        unknown = b is None or c is None
        msg = ""
        if b_mixed or c_mixed:
            which = "base" if b_mixed else "candidate"
            msg = f"{name} differs among the {which} runs: {b if b_mixed else c}"
        elif differs:
            msg = f"{name} differs: base {b}, candidate {c}"
        rows.append(
            FingerprintRow(name, cat, b or "not recorded", c or "not recorded", differs, unknown, msg)
        )
    info = [r for r in rows if r.category == "info"]
    return [r for r in rows if r.category != "info"] + _recipe_rows(base, cand) + info


__all__ = ["BLOCKING", "FINGERPRINT", "RUN_LOCAL_KEYS", "fingerprint_rows"]
