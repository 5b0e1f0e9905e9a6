"""What report.html shows first, derived from the results model: the headline table per sweep, each run's
verdicts split into the signal (PASS / FAIL) and the rest (RECORD / N/A), the environment once, and the
provenance facts that were recorded."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cvs_tui.core.health.telemetry_notes import telemetry_notes
from cvs_tui.core.judge.format import format_number
from cvs_tui.core.results import Environment, Results, RunRecord, VerdictRecord

if TYPE_CHECKING:
    from cvs_tui.core.history.trend import Trend
    from cvs_tui.core.report.trend import TrendCell

SIG_DIGITS = 4
# The headline columns: (metric, header); the per-GPU figures a cluster is bought for, then goodput.
HEADLINE: tuple[tuple[str, str], ...] = (
    ("training.tokens_per_sec_per_gpu", "Tok/s/GPU"),
    ("training.step_time_p50_ms", "Step p50 (ms)"),
    ("training.tflops_per_sec_per_gpu", "TFLOP/s/GPU"),
    ("training.mfu_pct", "MFU %"),
    ("training.goodput_pct", "Goodput %"),
)
HEADLINE_KINDS = ("smoke", "sweep")
SIGNAL = ("PASS", "FAIL")
WINDOW_NOTE = "steady-state window too short (reason under the table)"


def sig(x: float | None, digits: int = SIG_DIGITS) -> str:
    return format_number(x, "sig", digits=digits)


@dataclass(slots=True)
class Cell:
    text: str  # the value, 3-4 significant digits, or "—"
    status: str = ""  # the verdict's status; empty when the metric has no verdict
    expected: str = ""  # the threshold as the verdict states it ("-" when none)
    why: str = ""  # why there is no value (inconclusive window, feature off)
    trend: TrendCell | None = None  # the figure against the run's history, when it has one


@dataclass(slots=True)
class HeadlineRow:
    key: str
    slug: str
    status: str
    outcome: str
    cells: list[Cell]


@dataclass(slots=True)
class VerdictRow:
    v: VerdictRecord
    actual: str  # the value at 3-4 significant digits (or the judge's text for a non-number)
    message: str  # the verdict's message, the run's window reason replaced by a pointer


@dataclass(slots=True)
class RunVerdicts:
    signal: list[VerdictRow] = field(default_factory=list)  # PASS / FAIL
    rest: list[VerdictRow] = field(default_factory=list)  # RECORD / N/A, behind a toggle
    record: int = 0
    na: int = 0


def _actual(v: VerdictRecord) -> str:
    return sig(v.actual) if v.actual is not None else v.actual_text


def _message(v: VerdictRecord, run: RunRecord) -> str:
    """The inconclusive-window reason is stated once per run (under its table), not in every row."""
    msg = v.message
    if v.metric and msg.startswith(f"{v.metric}: "):
        msg = msg[len(v.metric) + 2 :]
    reason = run.window.reason
    if run.window.status == "inconclusive" and reason and reason in msg:
        msg = msg.replace(reason, WINDOW_NOTE)
    return msg


def run_verdicts(run: RunRecord) -> RunVerdicts:
    out = RunVerdicts()
    for v in run.verdicts:
        row = VerdictRow(v, _actual(v), _message(v, run))
        (out.signal if v.status in SIGNAL else out.rest).append(row)
        out.record += v.status == "RECORD"
        out.na += v.status == "N/A"
    return out


def _cell(run: RunRecord, metric: str) -> Cell:
    v = next((v for v in run.verdicts if v.metric == metric), None)
    m = run.metric(metric)
    value = m.value if m is not None else (v.actual if v is not None else None)
    why = ""
    if value is None:
        why = (m.reason if m is not None else "") or (v.message if v is not None else "not produced")
        if run.window.status == "inconclusive" and run.window.reason and run.window.reason in why:
            why = "inconclusive: " + run.window.reason
    return Cell(
        text=sig(value),
        status=v.status if v is not None else "",
        expected=v.expected if v is not None and v.expected not in ("-", "") else "",
        why=why,
    )


def headline(results: Results, trend: Trend | None = None) -> list[HeadlineRow]:
    """One row per smoke or sweep run: the key per-GPU figures, each with its verdict and threshold, and
    against the run's history when ``trend`` holds it."""
    from cvs_tui.core.report.trend import trend_cells

    rows = []
    for r in results.runs:
        if r.kind not in HEADLINE_KINDS:
            continue
        cells = [_cell(r, m) for m, _ in HEADLINE]
        check = trend.runs.get(r.key) if trend is not None else None
        if check is not None:
            by_metric = trend_cells(check)
            for (m, _), c in zip(HEADLINE, cells, strict=True):
                c.trend = by_metric.get(m)
        rows.append(HeadlineRow(r.key, r.slug, r.status, r.outcome, cells))
    return rows


def health_notes(results: Results) -> dict[int, list[str]]:
    """Per node rank, what its latest GPU sample says as health notes (throttling, PCIe links below their
    maximum, fields not readable), named by node index so ``--public`` output holds no host."""
    return {
        n.rank: telemetry_notes(f"node {n.rank}", n.telemetry_tool, n.telemetry_last)
        for n in results.node_health
    }


def environment_rows(env: Environment) -> list[tuple[str, str]]:
    """The environment facts that were logged; a 0 MaxText prints for "unknown" is left out, not shown."""
    rows: list[tuple[str, str]] = []
    if env.jax or env.jaxlib:
        rows.append(("JAX / jaxlib", f"{env.jax or '—'} / {env.jaxlib or '—'}"))
    if env.backend:
        rows.append(("Backend", env.backend))
    if env.num_devices:
        per = f" ({env.devices_per_node} per node)" if env.devices_per_node else ""
        rows.append(("Devices", f"{env.num_devices}{per}"))
    if env.mesh_shape:
        sharded = [str(a) for a in env.mesh_shape if a != 1]
        rows.append(("Mesh", " × ".join(sharded) if sharded else f"1 ({len(env.mesh_shape)} axes, all 1)"))
    if env.parameters_billions:
        rows.append(("Parameters", f"{sig(env.parameters_billions)} billion"))
    if env.tflops_per_step:
        rows.append(("TFLOPs per step (per device)", sig(env.tflops_per_step)))
    if env.memory_estimate_gb:
        rows.append(("Memory estimate", f"{sig(env.memory_estimate_gb)} GB"))
    if env.step_logger_source:  # which MaxText step logger printed the lines: the log dialect parsed
        rows.append(("Step logger source", env.step_logger_source))
    return rows


def _env_key(env: Environment) -> tuple[object, ...]:
    return tuple(environment_rows(env))


def environments(results: Results) -> list[tuple[list[str], list[tuple[str, str]]]]:
    """The environment once: one block per distinct environment, with the runs it covers."""
    groups: dict[tuple[object, ...], tuple[list[str], Environment]] = {}
    for r in results.runs:
        if not environment_rows(r.environment):
            continue
        groups.setdefault(_env_key(r.environment), ([], r.environment))[0].append(r.key)
    return [(keys, environment_rows(env)) for keys, env in groups.values()]


def duration(results: Results) -> float | None:
    """Wall time from the first stage or run start to the last end."""
    spans = [(s.started_at, s.ended_at) for s in results.stages]
    spans += [(r.started_at, r.ended_at) for r in results.runs]
    starts = [a for a, _ in spans if a]
    ends = [b for _, b in spans if b]
    return max(ends) - min(starts) if starts and ends and max(ends) >= min(starts) else None


def provenance_rows(results: Results) -> tuple[list[tuple[str, str]], list[str]]:
    """(label, value) for each recorded fact, and the labels of those that were not recorded."""
    p = results.provenance
    python = f"Python {p.python}" if p.python else ""
    facts: list[tuple[str, str | None]] = [
        ("cvs-tui", results.tool_version),
        ("Command", p.command or None),
        ("Config", results.config_path),
        ("Config sha256", p.config_sha256),
        ("Thresholds", results.threshold_path),
        ("Thresholds sha256", p.threshold_sha256),
        ("Image", p.image),
        ("Image digest", p.image_digest),
        ("GPU", f"{results.gpu_name} × {results.gpus_per_node}/node" if results.gpu_name else None),
        ("GPU driver", p.gpu_driver),
        ("ROCm", p.rocm_version),
        ("Controller", " · ".join(x for x in (p.controller_host, p.cpu_model, python) if x) or None),
        ("Duration", _secs(duration(results))),
    ]
    shown = [(k, v) for k, v in facts if v]
    # no image (runtime "host", or an older file) means no digest to miss either
    missing = [k for k, v in facts if not v and not (k.startswith("Image") and not p.image)]
    return shown, missing


def _secs(s: float | None) -> str | None:
    if s is None:
        return None
    if s < 60:
        return f"{s:.1f} s"
    m, sec = divmod(round(s), 60)
    return f"{m} min {sec:02d} s" if m < 60 else f"{m // 60} h {m % 60:02d} min"
