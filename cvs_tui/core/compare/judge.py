"""Compare a base and a candidate (each one run or several repetitions): is the difference real?

Every performance figure is taken over each run's steady-state window as analysis defines it (warm-up and
steps whose interval holds a checkpoint save, an eval, a profiler boundary or a rampup are out), plus
isolated unexplained stalls; step time is a median/p95 and throughput is tokens over time. A difference is
IMPROVED or REGRESSED only when its confidence band excludes zero *and* it exceeds the practical threshold;
any toolchain, hardware or workload difference in the environment fingerprint makes the run NOT
COMPARABLE. The result is a plain data model (``CompareReport``) that the terminal, HTML and JSON views
render; nothing here imports a UI library.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from cvs_tui.core import compare_stats as cs
from cvs_tui.core.errors import UserError
from cvs_tui.core.results import Results, RunRecord, load_results

Verdict = Literal["IMPROVED", "REGRESSED", "NO CHANGE", "INCONCLUSIVE", "NOT COMPARABLE"]
IMPROVED: Verdict = "IMPROVED"
REGRESSED: Verdict = "REGRESSED"
NO_CHANGE: Verdict = "NO CHANGE"
INCONCLUSIVE: Verdict = "INCONCLUSIVE"
NOT_COMPARABLE: Verdict = "NOT COMPARABLE"

DEFAULT_THRESHOLD_PCT = 2.0
# Fewest clean steady-state steps per run for a performance claim (analysis accepts fewer for a smoke
# run's metrics; a comparison needs enough steps for its band to mean something).
COMPARE_MIN_STEPS = 20
# Fewest runs per side for a run-to-run claim when repetitions are given.
MIN_REPETITIONS = 3
# A window step longer than this many times the window median, with no logged event to explain it, is an
# isolated stall (a GC pause, a slow filesystem) and is left out...
STALL_FACTOR = 5.0
# ...as long as such steps are rare; more of them are a pattern, i.e. part of the performance.
STALL_MAX_FRACTION = 0.05
LOSS_RTOL = 0.01
LOSS_ATOL = 1e-6


# ---------------------------------------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------------------------------------
@dataclass(slots=True)
class RunInput:
    """One run as read from disk: its results and what the config or plan said about it."""

    label: str
    results: Results
    image: str | None = None
    maxtext: dict[str, dict[str, Any]] = field(default_factory=dict)  # run key -> maxtext_config


def _image_of(runtime: str | None, image: str | None) -> str | None:
    if runtime == "host":
        return "host (no container)"
    return image or None


def _from_plan(folder: Path, inp: RunInput) -> None:
    """The image and each run's maxtext_config from a live run's plan.json, when it has one."""
    try:
        plan = json.loads((folder / "plan.json").read_text(encoding="utf-8"))
        inp.image = _image_of(plan.get("container_runtime"), plan.get("container_image"))
        for r in plan.get("runs", []):
            if r.get("kind") != "ckpt_phase2" or r["key"] not in inp.maxtext:
                inp.maxtext[str(r["key"])] = dict(r.get("maxtext_config") or {})
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return


def load_input(path: str, *, config: str | None, side: str, run_key: str | None = None) -> RunInput:
    """A results.json, a run folder holding one, or raw node logs analysed with ``config``."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"--{side}: {p}: no such file or folder")
    if p.is_file() and p.suffix == ".json":
        inp = RunInput(str(p), load_results(p))
        _from_plan(p.parent, inp)
        return inp
    if p.is_dir() and (p / "results.json").is_file():
        inp = RunInput(str(p), load_results(p / "results.json"))
        _from_plan(p, inp)
        return inp
    if config is None:
        raise UserError(
            f"--{side}: {p} is neither a results.json nor a run folder holding one; to compare raw node "
            "logs add --config CONFIG (the config the run used)"
        )
    from cvs_tui.core.analysis import analyze_paths, resolve_run
    from cvs_tui.core.config.loader import load_config

    loaded = load_config(config)
    results = analyze_paths(loaded, [p], run_key)
    cfg = loaded.config
    inp = RunInput(str(p), results, image=_image_of(cfg.container.runtime.name, cfg.container.image))
    for run in results.runs:
        inp.maxtext[run.key] = dict(resolve_run(loaded, run.key).maxtext_config)
    return inp


def load_side(
    paths: Sequence[str], *, config: str | None, side: str, run_key: str | None = None
) -> list[RunInput]:
    """Every run of one side; raw logs are analysed with ``config`` (``run_key`` names their run)."""
    if not paths:
        raise UserError(f"--{side}: give at least one results.json, run folder or node log")
    return [load_input(p, config=config, side=side, run_key=run_key) for p in paths]


# ---------------------------------------------------------------------------------------------------------
# the data model
# ---------------------------------------------------------------------------------------------------------
@dataclass(slots=True)
class FingerprintRow:
    field: str
    category: str  # toolchain | hardware | workload | schedule | info
    base: str
    candidate: str
    differs: bool
    unknown: bool  # recorded on one side only, or on neither
    message: str = ""  # what differs, in words (empty when nothing does)


@dataclass(slots=True)
class MetricDelta:
    metric: str  # stable id
    label: str
    unit: str
    better: Literal["lower", "higher"]
    base: float | None
    candidate: float | None
    delta: float | None
    delta_pct: float | None
    band_lo_pct: float | None  # noise band of the Δ, in % of the base value
    band_hi_pct: float | None
    method: str
    verdict: Verdict
    reason: str = ""
    base_runs: list[float] = field(default_factory=list)  # per-run values (repetitions)
    candidate_runs: list[float] = field(default_factory=list)
    base_cv_pct: float | None = None  # run-to-run spread
    candidate_cv_pct: float | None = None


@dataclass(slots=True)
class LossCheck:
    shared_steps: int
    atol: float
    rtol: float
    tolerance_note: str
    first_diverging_step: int | None
    base_at_divergence: float | None
    candidate_at_divergence: float | None
    max_abs_diff: float | None
    verdict: Verdict
    reason: str


@dataclass(slots=True)
class ExcludedSteps:
    side: Literal["base", "candidate"]
    run: str
    clean_steps: int
    excluded: list[tuple[int, str]]


@dataclass(slots=True)
class RunComparison:
    key: str
    verdict: Verdict
    comparable: bool
    banner: list[str]
    fingerprint: list[FingerprintRow]
    metrics: list[MetricDelta]
    loss: LossCheck
    excluded: list[ExcludedSteps]
    notes: list[str]
    base_runs: int
    candidate_runs: int


@dataclass(slots=True)
class CompareReport:
    base: list[str]
    candidate: list[str]
    threshold_pct: float
    seed: int
    resamples: int
    min_steps: int
    within_run: bool
    runs: list[RunComparison]
    only_base: list[str]
    only_candidate: list[str]

    @property
    def regressed(self) -> bool:
        return any(m.verdict == REGRESSED for r in self.runs for m in r.metrics)

    @property
    def verdict(self) -> Verdict:
        return _worst([r.verdict for r in self.runs]) if self.runs else INCONCLUSIVE

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["schema"] = "cvs-tui-compare/1"
        d["verdict"] = self.verdict
        d["regressed"] = self.regressed
        return _finite(d)


def _finite(x: Any) -> Any:
    """JSON has no NaN: non-finite floats become null."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    return x


_ORDER: dict[str, int] = {REGRESSED: 0, INCONCLUSIVE: 1, IMPROVED: 2, NO_CHANGE: 3, NOT_COMPARABLE: 4}


def _worst(vs: Sequence[Verdict]) -> Verdict:
    """The run's headline: a regression first, then doubt, then a gain; NOT COMPARABLE rows alone count
    only when nothing else was judged."""
    return min(vs, key=lambda v: _ORDER[v]) if vs else INCONCLUSIVE


# ---------------------------------------------------------------------------------------------------------
# fingerprint
# ---------------------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------------------
# per-step samples over the window
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StepSample:
    step: int
    seconds: float  # the slowest node's
    tokens: float | None  # per device, over the step
    tflops: float | None  # per device, over the step


@dataclass(slots=True)
class RunSamples:
    samples: list[StepSample]
    excluded: list[tuple[int, str]]
    devices: int
    inconclusive: str  # why no performance claim can be made from this run ("" = fine)
    notes: list[str]
    losses: dict[int, float]


def run_samples(run: RunRecord, min_steps: int = COMPARE_MIN_STEPS) -> RunSamples:
    """The run's window steps as samples (straggler seconds, per-device work), minus isolated stalls."""
    maps = [{p.step: p for p in n.steps if p.kind == "train"} for n in run.nodes if n.steps]
    excluded = [(e.step, e.reason) for e in run.window.excluded]
    notes: list[str] = []
    samples: list[StepSample] = []
    for s in run.window.steps:
        pts = [m[s] for m in maps if s in m and m[s].seconds is not None]
        if not pts:
            continue
        secs = max(p.seconds or 0.0 for p in pts)
        tok = [p.tokens_per_sec * p.seconds for p in pts if p.tokens_per_sec is not None and p.seconds]
        fl = [p.tflops_per_sec * p.seconds for p in pts if p.tflops_per_sec is not None and p.seconds]
        samples.append(
            StepSample(
                s,
                secs,
                sum(tok) / len(pts) if len(tok) == len(pts) else None,
                sum(fl) / len(pts) if len(fl) == len(pts) else None,
            )
        )
    if samples:
        med = cs.p50([x.seconds for x in samples])
        slow = [x for x in samples if med > 0 and x.seconds > STALL_FACTOR * med]
        if slow and len(slow) <= max(1, math.floor(STALL_MAX_FRACTION * len(samples))):
            drop = {x.step for x in slow}
            excluded += [
                (
                    x.step,
                    f"isolated stall: {x.seconds:.3f} s is {x.seconds / med:.0f}x the window median "
                    f"{med:.3f} s with no logged event",
                )
                for x in slow
            ]
            samples = [x for x in samples if x.step not in drop]
        elif slow:
            notes.append(
                f"{len(slow)} window steps exceed {STALL_FACTOR:g}x the median step time; too many to be "
                "isolated stalls, so they are kept as part of the performance"
            )
    env = run.environment
    devices = env.num_devices or (env.devices_per_node or 1) * max(len(maps), 1)
    why = ""
    if run.window.status != "ok":
        why = f"steady-state window inconclusive: {run.window.reason}"
    elif len(samples) < min_steps:
        why = f"{len(samples)} clean steady-state steps, fewer than the {min_steps} a comparison needs"
    losses: dict[int, float] = {}
    first = next((n for n in run.nodes if n.steps), None)
    if first is not None:
        for p in first.steps:
            if p.kind == "train":
                losses[p.step] = p.loss if p.loss is not None else math.nan
    return RunSamples(samples, sorted(excluded), devices, why, notes, losses)


# ---------------------------------------------------------------------------------------------------------
# metrics
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PerfMetric:
    id: str
    label: str
    unit: str
    better: Literal["lower", "higher"]
    stat: Callable[[Sequence[StepSample]], float]
    needs: str = ""  # "tokens" | "tflops": the per-step field the statistic needs


def _secs(xs: Sequence[StepSample]) -> list[float]:
    return [x.seconds for x in xs]


def _rate(attr: str) -> Callable[[Sequence[StepSample]], float]:
    def f(xs: Sequence[StepSample]) -> float:
        return cs.ratio_of_sums([(getattr(x, attr) or 0.0, x.seconds) for x in xs])

    return f


PERF_METRICS: list[PerfMetric] = [
    PerfMetric("step_time_p50_ms", "step time p50", "ms", "lower", lambda xs: 1000.0 * cs.p50(_secs(xs))),
    PerfMetric("step_time_p95_ms", "step time p95", "ms", "lower", lambda xs: 1000.0 * cs.p95(_secs(xs))),
    PerfMetric(
        "tokens_per_sec_per_device", "tokens/s per device", "tok/s", "higher", _rate("tokens"), "tokens"
    ),
    PerfMetric("tokens_per_sec_total", "tokens/s total", "tok/s", "higher", _rate("tokens"), "tokens"),
    PerfMetric(
        "tflops_per_sec_per_device", "TFLOP/s per device", "TFLOP/s", "higher", _rate("tflops"), "tflops"
    ),
]


def _judge(
    delta: float, delta_pct: float, band: cs.Band, better: str, threshold_pct: float
) -> tuple[Verdict, str]:
    if not band.excludes_zero():
        return NO_CHANGE, "the difference lies inside the noise band"
    if abs(delta_pct) < threshold_pct:
        return NO_CHANGE, f"significant but below the {threshold_pct:g} % practical threshold"
    worse = delta > 0 if better == "lower" else delta < 0
    return (REGRESSED if worse else IMPROVED), f"band excludes 0 and |Δ| ≥ {threshold_pct:g} %"


def _pct(x: float, base: float) -> float | None:
    return x / base * 100.0 if base else None


def _perf_row(
    m: PerfMetric,
    base: Sequence[RunSamples],
    cand: Sequence[RunSamples],
    *,
    threshold_pct: float,
    seed: int,
    resamples: int,
    comparable: bool,
    within_run: bool,
) -> MetricDelta:
    scale_b = [float(r.devices) if m.id == "tokens_per_sec_total" else 1.0 for r in base]
    scale_c = [float(r.devices) if m.id == "tokens_per_sec_total" else 1.0 for r in cand]
    missing = [r for r in (*base, *cand) if m.needs and any(getattr(x, m.needs) is None for x in r.samples)]
    doubt = list(
        dict.fromkeys(
            [f"base: {r.inconclusive}" for r in base if r.inconclusive]
            + [f"candidate: {r.inconclusive}" for r in cand if r.inconclusive]
        )
    )
    vals_b = [m.stat(r.samples) * k if r.samples else math.nan for r, k in zip(base, scale_b, strict=True)]
    vals_c = [m.stat(r.samples) * k if r.samples else math.nan for r, k in zip(cand, scale_c, strict=True)]
    vb = statistics.fmean(vals_b) if len(vals_b) > 1 else vals_b[0]
    vc = statistics.fmean(vals_c) if len(vals_c) > 1 else vals_c[0]
    row = MetricDelta(
        m.id,
        m.label,
        m.unit,
        m.better,
        _num(vb),
        _num(vc),
        None,
        None,
        None,
        None,
        "",
        INCONCLUSIVE,
        base_runs=[v for v in vals_b if math.isfinite(v)] if len(base) > 1 else [],
        candidate_runs=[v for v in vals_c if math.isfinite(v)] if len(cand) > 1 else [],
        base_cv_pct=cs.cv_pct(vals_b) if len(base) > 1 and all(map(math.isfinite, vals_b)) else None,
        candidate_cv_pct=cs.cv_pct(vals_c) if len(cand) > 1 and all(map(math.isfinite, vals_c)) else None,
    )
    if row.base is not None and row.candidate is not None:
        row.delta = row.candidate - row.base
        row.delta_pct = _pct(row.delta, row.base)
    if not comparable:
        row.verdict, row.reason = NOT_COMPARABLE, "the environment fingerprints differ"
        return row
    if missing:
        row.reason = f"the step lines carry no {m.needs} figure"
        return row
    if doubt:
        row.reason = "; ".join(doubt)
        return row
    single = len(base) == 1 and len(cand) == 1
    if not single and (len(base) < MIN_REPETITIONS or len(cand) < MIN_REPETITIONS):
        row.reason = (
            f"{len(base)} base and {len(cand)} candidate runs: a run-to-run claim needs at least "
            f"{MIN_REPETITIONS} repetitions per side"
        )
        return row
    if single:
        k_b, k_c = scale_b[0], scale_c[0]
        if k_b != k_c:  # a device-count difference is a hardware difference; kept for safety
            row.reason = "device counts differ"
            return row
        band = cs.bootstrap_diff(
            base[0].samples, cand[0].samples, m.stat, seed=seed, resamples=resamples, name=m.label
        )
        band = cs.Band(band.lo * k_b, band.hi * k_b, band.method)
        method = band.method + " within runs"
        if m.id == "step_time_p50_ms":
            mw = cs.mann_whitney_u(_secs(base[0].samples), _secs(cand[0].samples))
            method += f"; Mann–Whitney U {mw.u:.0f}, p = {mw.p_value:.3g}"
        if not within_run:
            assert row.delta is not None and row.base
            row.band_lo_pct, row.band_hi_pct = _pct(band.lo, row.base), _pct(band.hi, row.base)
            row.method = method
            row.reason = (
                f"one run per side: run-to-run variance unknown; give {MIN_REPETITIONS}+ repetitions per "
                "side (or --within-run to judge on the within-run band)"
            )
            return row
    else:
        band = cs.welch_band(vals_b, vals_c)
        method = band.method + " (run-to-run)"
    assert row.delta is not None and row.base
    row.band_lo_pct, row.band_hi_pct = _pct(band.lo, row.base), _pct(band.hi, row.base)
    row.method = method
    row.verdict, row.reason = _judge(row.delta, row.delta_pct or 0.0, band, m.better, threshold_pct)
    return row


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _side_losses(runs: Sequence[RunSamples]) -> dict[int, float]:
    """Per-step loss of a side: its one run's, or the per-step median over its repetitions."""
    steps = set.intersection(*(set(r.losses) for r in runs)) if runs else set()
    return {s: statistics.median([r.losses[s] for r in runs]) for s in sorted(steps)}


def loss_check(
    base: Sequence[RunSamples], cand: Sequence[RunSamples], *, comparable: bool, reason: str = ""
) -> tuple[LossCheck, MetricDelta]:
    """Per-step loss alignment and the final-loss row."""
    lb, lc = _side_losses(base), _side_losses(cand)
    shared = sorted(set(lb) & set(lc))
    atol, note = cs.loss_atol(
        [v for v in lb.values() if math.isfinite(v)], [v for v in lc.values() if math.isfinite(v)], LOSS_ATOL
    )
    first = next((s for s in shared if not cs.within_tolerance(lb[s], lc[s], atol, LOSS_RTOL)), None)
    finite = [abs(lc[s] - lb[s]) for s in shared if math.isfinite(lb[s]) and math.isfinite(lc[s])]
    check = LossCheck(
        shared_steps=len(shared),
        atol=atol,
        rtol=LOSS_RTOL,
        tolerance_note=note,
        first_diverging_step=first,
        base_at_divergence=_num(lb[first]) if first is not None else None,
        candidate_at_divergence=_num(lc[first]) if first is not None else None,
        max_abs_diff=max(finite) if finite else None,
        verdict=NO_CHANGE,
        reason="",
    )
    last = shared[-1] if shared else None
    vb, vc = (lb[last], lc[last]) if last is not None else (math.nan, math.nan)
    row = MetricDelta(
        "final_loss",
        "final loss",
        "loss",
        "lower",
        _num(vb),
        _num(vc),
        None,
        None,
        None,
        None,
        f"|b − a| ≤ {atol:g} + {LOSS_RTOL:g}·|a| at the last shared step ({last})",
        NO_CHANGE,
    )
    if row.base is not None and row.candidate is not None:
        row.delta = row.candidate - row.base
        row.delta_pct = _pct(row.delta, row.base)
        tol = atol + LOSS_RTOL * abs(row.base)
        row.band_lo_pct, row.band_hi_pct = _pct(-tol, abs(row.base)), _pct(tol, abs(row.base))
    if not comparable or reason:
        why = reason or "the environment fingerprints differ"
        check.verdict, check.reason = NOT_COMPARABLE, why
        row.verdict, row.reason = NOT_COMPARABLE, why
        return check, row
    if not shared:
        check.verdict = row.verdict = INCONCLUSIVE
        check.reason = row.reason = "no step logged a loss on both sides"
        return check, row
    if first is None:
        check.reason = f"all {len(shared)} shared steps within tolerance ({note})"
        row.reason = "within tolerance"
        return check, row
    worse = not (lc[first] < lb[first])  # NaN on the candidate side is worse
    check.verdict = REGRESSED if worse else IMPROVED
    check.reason = (
        f"first diverging step {first}: base {lb[first]:.4g}, candidate {lc[first]:.4g} ({note}); "
        f"{sum(1 for s in shared if not cs.within_tolerance(lb[s], lc[s], atol, LOSS_RTOL))} of "
        f"{len(shared)} shared steps outside tolerance"
    )
    if cs.within_tolerance(vb, vc, atol, LOSS_RTOL):
        row.reason = f"within tolerance at the end, but the curves diverged at step {first}"
    else:
        row.verdict = REGRESSED if not (vc < vb) else IMPROVED
        row.reason = f"curves diverge from step {first}"
    return check, row


# ---------------------------------------------------------------------------------------------------------
# the comparison
# ---------------------------------------------------------------------------------------------------------
def _runs_by_key(side: Sequence[RunInput]) -> dict[str, list[tuple[RunInput, RunRecord]]]:
    out: dict[str, list[tuple[RunInput, RunRecord]]] = {}
    for inp in side:
        for r in inp.results.runs:
            out.setdefault(r.key, []).append((inp, r))
    return out


def compare_run(
    key: str,
    base: Sequence[tuple[RunInput, RunRecord]],
    cand: Sequence[tuple[RunInput, RunRecord]],
    *,
    threshold_pct: float = DEFAULT_THRESHOLD_PCT,
    seed: int = cs.DEFAULT_SEED,
    resamples: int = cs.DEFAULT_RESAMPLES,
    min_steps: int = COMPARE_MIN_STEPS,
    within_run: bool = False,
) -> RunComparison:
    rows = fingerprint_rows(base, cand)
    blocking = [r.message for r in rows if r.differs and r.category in BLOCKING]
    schedule = [r.message for r in rows if r.differs and r.category == "schedule"]
    comparable = not blocking
    sb = [run_samples(r, min_steps) for _, r in base]
    sc = [run_samples(r, min_steps) for _, r in cand]
    metrics = [
        _perf_row(
            m,
            sb,
            sc,
            threshold_pct=threshold_pct,
            seed=seed,
            resamples=resamples,
            comparable=comparable,
            within_run=within_run,
        )
        for m in PERF_METRICS
    ]
    loss, final = loss_check(
        sb, sc, comparable=comparable, reason="; ".join(schedule) if schedule and comparable else ""
    )
    metrics.append(final)
    notes = [n for r in (*sb, *sc) for n in r.notes]
    unknown = [r.field for r in rows if r.unknown and r.category in (*BLOCKING, "schedule")]
    if unknown:
        notes.append("not recorded on both sides, so not verified: " + ", ".join(unknown))
    if len(base) == 1 and len(cand) == 1 and within_run:
        notes.append(
            "judged on the within-run band (--within-run): it covers step-to-step noise only, not "
            "run-to-run variance"
        )
    excluded = [
        ExcludedSteps("base", i.label, len(s.samples), s.excluded) for (i, _), s in zip(base, sb, strict=True)
    ] + [
        ExcludedSteps("candidate", i.label, len(s.samples), s.excluded)
        for (i, _), s in zip(cand, sc, strict=True)
    ]
    if not comparable:
        verdict: Verdict = NOT_COMPARABLE
    else:
        verdict = _worst([m.verdict for m in metrics if m.verdict != NOT_COMPARABLE] or [NOT_COMPARABLE])
    return RunComparison(
        key=key,
        verdict=verdict,
        comparable=comparable,
        banner=blocking if blocking else [f"loss not compared: {ln}" for ln in schedule],
        fingerprint=rows,
        metrics=metrics,
        loss=loss,
        excluded=excluded,
        notes=notes,
        base_runs=len(base),
        candidate_runs=len(cand),
    )


def compare(
    base: Sequence[RunInput],
    cand: Sequence[RunInput],
    *,
    threshold_pct: float = DEFAULT_THRESHOLD_PCT,
    seed: int = cs.DEFAULT_SEED,
    resamples: int = cs.DEFAULT_RESAMPLES,
    min_steps: int = COMPARE_MIN_STEPS,
    within_run: bool = False,
) -> CompareReport:
    """Compare every run key present on both sides."""
    if not (threshold_pct >= 0 and math.isfinite(threshold_pct)):
        raise UserError(f"--threshold-pct: {threshold_pct} must be a finite number >= 0 (percent)")
    kb, kc = _runs_by_key(base), _runs_by_key(cand)
    shared = [k for k in kb if k in kc]
    if not shared:
        raise UserError(
            f"no run key is present on both sides (base: {sorted(kb) or 'none'}, candidate: "
            f"{sorted(kc) or 'none'}); compare results of the same sweep"
        )
    return CompareReport(
        base=[i.label for i in base],
        candidate=[i.label for i in cand],
        threshold_pct=threshold_pct,
        seed=seed,
        resamples=resamples,
        min_steps=min_steps,
        within_run=within_run,
        runs=[
            compare_run(
                k,
                kb[k],
                kc[k],
                threshold_pct=threshold_pct,
                seed=seed,
                resamples=resamples,
                min_steps=min_steps,
                within_run=within_run,
            )
            for k in shared
        ],
        only_base=[k for k in kb if k not in kc],
        only_candidate=[k for k in kc if k not in kb],
    )


# ---------------------------------------------------------------------------------------------------------
# output files
# ---------------------------------------------------------------------------------------------------------
def write_json(report: CompareReport, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(report.to_dict(), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return p


_STYLE = re.compile(r"<style>(.*?)</style>", re.S)


def render_html(report: CompareReport) -> str:
    """compare.html: the look of report.html (its stylesheet is taken from report.html.j2 itself)."""
    from markupsafe import Markup

    from cvs_tui.core.report.html import environment

    env = environment()
    assert env.loader is not None
    source, _, _ = env.loader.get_source(env, "report.html.j2")
    m = _STYLE.search(source)
    css = Markup(m.group(1) if m else "")  # our own template text, not input data
    return env.get_template("compare.html.j2").render(c=report, css=css, fmt=fmt_value, pct=fmt_pct)


def write_html(report: CompareReport, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(render_html(report), encoding="utf-8")
    return p


def fmt_value(x: float | None, unit: str = "") -> str:
    if x is None:
        return "—"
    if unit == "loss":
        return f"{x:.4f}"
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 10:
        return f"{x:.1f}"
    return f"{x:.3f}" if a >= 1 or x == 0 else f"{x:.3g}"


def fmt_pct(x: float | None, signed: bool = True) -> str:
    if x is None:
        return "—"
    return f"{x:+.1f} %" if signed else f"{x:.1f} %"


def band_text(m: MetricDelta) -> str:
    if m.band_lo_pct is None or m.band_hi_pct is None:
        return "—"
    return f"[{m.band_lo_pct:+.1f}, {m.band_hi_pct:+.1f}] %"


__all__ = [
    "COMPARE_MIN_STEPS",
    "DEFAULT_THRESHOLD_PCT",
    "CompareReport",
    "MetricDelta",
    "RunComparison",
    "RunInput",
    "band_text",
    "compare",
    "fmt_pct",
    "fmt_value",
    "load_input",
    "load_side",
    "render_html",
    "write_html",
    "write_json",
]
