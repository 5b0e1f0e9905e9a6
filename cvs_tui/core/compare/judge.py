"""Judging a comparison: per metric, is the candidate's difference real (its confidence band excludes
zero) and large enough (above the practical threshold)? And do the loss curves agree step by step?

Every performance figure is taken over each run's steady-state window as the judge defines it (warm-up
and steps whose interval holds a checkpoint save, an eval, a profiler boundary or a rampup are out, and
so are the steady-state rule's impossible steps and disturbed edges), plus isolated unexplained stalls;
step time is a median/p95 and throughput is tokens over time. Any toolchain, hardware or workload
difference in the environment fingerprint makes the run NOT COMPARABLE.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cvs_tui.core.atomic import write_atomic
from cvs_tui.core.compare import stats as cs
from cvs_tui.core.compare.fingerprint import BLOCKING, fingerprint_rows
from cvs_tui.core.compare.inputs import RunInput
from cvs_tui.core.compare.loss import loss_check
from cvs_tui.core.compare.model import (
    COMPARE_MIN_STEPS,
    DEFAULT_THRESHOLD_PCT,
    IMPROVED,
    INCONCLUSIVE,
    MIN_REPETITIONS,
    NO_CHANGE,
    NOT_COMPARABLE,
    REGRESSED,
    CompareReport,
    ExcludedSteps,
    MetricDelta,
    RunComparison,
    Verdict,
    worst,
)
from cvs_tui.core.compare.noise import tail_alone, within_drift
from cvs_tui.core.compare.samples import RunSamples, StepSample, run_samples
from cvs_tui.core.errors import UserError
from cvs_tui.core.judge.format import format_pct
from cvs_tui.core.judge.records import finite
from cvs_tui.core.judge.steady import CONTEXT
from cvs_tui.core.results import RunRecord


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


# The rate rows (work over summed step time) and the robust row whose direction they must not contradict:
# the median step time cannot be moved by time that moves between neighbouring steps, a stall or a
# handful of impossibly fast steps.
RATE_ROWS = ("tokens_per_sec_per_device", "tokens_per_sec_total", "tflops_per_sec_per_device")
ROBUST_ROW = "step_time_p50_ms"


def _judge(
    delta: float, delta_pct: float, band: cs.Band, better: str, threshold_pct: float
) -> tuple[Verdict, str]:
    if not band.excludes_zero():
        return NO_CHANGE, "the difference lies inside the noise band"
    if abs(delta_pct) < threshold_pct:
        return NO_CHANGE, f"significant but below the {threshold_pct:g} % practical threshold"
    worse = delta > 0 if better == "lower" else delta < 0
    return (REGRESSED if worse else IMPROVED), f"band excludes 0 and |Δ| ≥ {threshold_pct:g} %"


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
    """One performance row. Long because each early return is one reason a row stays INCONCLUSIVE or NOT
    COMPARABLE, in the order they are checked; splitting it would scatter that order."""
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
        finite(vb),
        finite(vc),
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
        row.delta_pct = cs.pct_of(row.delta, row.base)
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
            base[0].samples,
            cand[0].samples,
            m.stat,
            seed=seed,
            resamples=resamples,
            name=m.label,
            block=CONTEXT if m.id in RATE_ROWS else 1,  # a rate sums step times, which telescope
        )
        band = cs.Band(band.lo * k_b, band.hi * k_b, band.method)
        method = band.method + " within runs"
        if m.id == "step_time_p50_ms":
            mw = cs.mann_whitney_u(_secs(base[0].samples), _secs(cand[0].samples))
            method += f"; Mann–Whitney U {mw.u:.0f}, p = {mw.p_value:.3g}"
        if not within_run:
            assert row.delta is not None and row.base
            row.band_lo_pct, row.band_hi_pct = cs.pct_of(band.lo, row.base), cs.pct_of(band.hi, row.base)
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
    row.band_lo_pct, row.band_hi_pct = cs.pct_of(band.lo, row.base), cs.pct_of(band.hi, row.base)
    row.method = method
    row.verdict, row.reason = _judge(row.delta, row.delta_pct or 0.0, band, m.better, threshold_pct)
    if single and row.verdict in (IMPROVED, REGRESSED):
        within_drift(row, m.stat, m.label, base[0].samples, cand[0].samples)
    return row


def flag_contradictions(rows: Sequence[MetricDelta], threshold_pct: float) -> None:
    """A rate row whose change points the other way from the median step time's, each beyond the practical
    threshold, says two things about one pair of runs: it is not headlined (``contradicted_by``) and it
    decides nothing (INCONCLUSIVE, unless the environments already make it NOT COMPARABLE). A rate change
    the median does not see (a heavier tail at the same median) is not a contradiction and stands."""
    p50 = next((m for m in rows if m.metric == ROBUST_ROW), None)
    if p50 is None or not p50.base or not p50.candidate:
        return
    faster_pct = (p50.base / p50.candidate - 1.0) * 100.0  # the speed change the median step time implies
    if abs(faster_pct) < threshold_pct:
        return
    for m in rows:
        if m.metric not in RATE_ROWS or m.delta_pct is None or abs(m.delta_pct) < threshold_pct:
            continue
        if (m.delta_pct > 0) == (faster_pct > 0):
            continue
        m.contradicted_by = (
            f"{p50.label} says {format_pct(faster_pct)} speed, this row {format_pct(m.delta_pct)}: "
            "the steady window still holds steps whose time moved to a neighbour"
        )
        if m.verdict != NOT_COMPARABLE:
            m.verdict, m.reason = INCONCLUSIVE, f"contradicted by {m.contradicted_by}"


def same_speed(rows: Sequence[MetricDelta], threshold_pct: float) -> str:
    """ "the same speed (...)" when the median step time and every rate row moved less than the practical
    threshold, else ""."""
    speed = [m for m in rows if m.metric in (ROBUST_ROW, *RATE_ROWS) and m.delta_pct is not None]
    if not speed or any(abs(m.delta_pct or 0.0) >= threshold_pct for m in speed):
        return ""
    shown = ", ".join(
        f"{m.label} {format_pct(m.delta_pct)}" for m in speed if m.metric != "tokens_per_sec_total"
    )
    return f"the same speed ({shown}: within the {threshold_pct:g} % threshold)"


# Stall time that differs by less than this is the same (the stall rule's own floor: a second lost).
STALL_SECONDS_SAME = 1.0


def _stall_seconds(run: RunRecord) -> float | None:
    m = next((m for m in run.metrics if m.name == "training.stall_seconds"), None)
    return m.value if m is not None else None


def _stall_unmeasured(side: str, runs: Sequence[RunRecord]) -> str:
    """Why a side has no stall time: the judge's own reason (a run too short for a step-time baseline),
    or that the results predate the metric."""
    for r in runs:
        m = next((m for m in r.metrics if m.name == "training.stall_seconds"), None)
        if m is None:
            return f"{side}: not recorded (results older than the stall metrics)"
        if m.value is None:
            return f"{side}: {m.reason or m.absent or 'not measured'}"
    return ""


def stall_row(base: Sequence[RunRecord], cand: Sequence[RunRecord], *, comparable: bool) -> MetricDelta:
    """Time lost to stalls (training.stall_seconds, mean over a side's runs), compared on its own: the
    steady rates above are free of stalls, so a stall shows here and nowhere else. It does not decide the
    run's verdict (a stall is an event, not the machine's speed); it differs when the sides are more than
    STALL_SECONDS_SAME apart."""
    vb = [v for r in base if (v := _stall_seconds(r)) is not None]
    vc = [v for r in cand if (v := _stall_seconds(r)) is not None]
    row = MetricDelta(
        "stall_seconds",
        "time lost to stalls",
        "s",
        "lower",
        statistics.fmean(vb) if vb else None,
        statistics.fmean(vc) if vc else None,
        None,
        None,
        None,
        None,
        f"mean of training.stall_seconds per side; the same within {STALL_SECONDS_SAME:g} s",
        NO_CHANGE,
        base_runs=vb,
        candidate_runs=vc,
    )
    if not comparable:
        row.verdict, row.reason = NOT_COMPARABLE, "the environment fingerprints differ"
        return row
    if row.base is None or row.candidate is None:
        why = [w for w in (_stall_unmeasured("base", base), _stall_unmeasured("candidate", cand)) if w]
        if len(why) == 2 and why[0].split(": ", 1)[1] == why[1].split(": ", 1)[1]:
            why = ["both sides: " + why[0].split(": ", 1)[1]]
        row.verdict, row.reason = INCONCLUSIVE, "stall time not measured: " + "; ".join(why)
        return row
    row.delta = row.candidate - row.base
    row.delta_pct = cs.pct_of(row.delta, row.base) if row.base > 0 else None
    if abs(row.delta) <= STALL_SECONDS_SAME:
        row.reason = "within a second"
    else:
        row.verdict = REGRESSED if row.delta > 0 else IMPROVED
        row.reason = f"{abs(row.delta):.3g} s {'more' if row.delta > 0 else 'less'} lost to stalls"
    return row


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
    sb = [run_samples(r, min_steps, i.results.gpu_name) for i, r in base]
    sc = [run_samples(r, min_steps, i.results.gpu_name) for i, r in cand]
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
    flag_contradictions(metrics, threshold_pct)
    if within_run and len(base) == 1 and len(cand) == 1:
        tail_alone(metrics, ROBUST_ROW)
    loss, final = loss_check(
        sb, sc, comparable=comparable, reason="; ".join(schedule) if schedule and comparable else ""
    )
    metrics.append(final)
    stalls = stall_row([r for _, r in base], [r for _, r in cand], comparable=comparable)
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
        verdict = worst([m.verdict for m in metrics if m.verdict != NOT_COMPARABLE] or [NOT_COMPARABLE])
    metrics.append(stalls)  # shown beside the rates, not part of the verdict (see stall_row)
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
        speed=same_speed(metrics, threshold_pct),
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
        same_run=len(base) == len(cand)
        and all(b.results == c.results for b, c in zip(base, cand, strict=True)),
    )


def write_json(report: CompareReport, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(p, json.dumps(report.to_dict(), indent=2, allow_nan=False) + "\n")
    return p


__all__ = ["PERF_METRICS", "compare", "compare_run", "flag_contradictions", "write_json"]
