"""Per-step samples over a run's steady-state window (the slowest node's seconds, per-device work), minus
isolated stalls and what the judge's steady-state rule drops (``judge.steady``: impossible steps and
disturbed edges; a record judged before the rule existed gets it here), and the run's losses: what
compare's statistics work on."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from cvs_tui.core.compare import stats as cs
from cvs_tui.core.compare.model import COMPARE_MIN_STEPS, STALL_FACTOR, STALL_MAX_FRACTION
from cvs_tui.core.judge.definitions import device_name, highest_peak
from cvs_tui.core.judge.steady import drop_reasons, steady_drops
from cvs_tui.core.results import RunRecord, StepPoint


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


def run_samples(run: RunRecord, min_steps: int = COMPARE_MIN_STEPS, gpu_name: str = "") -> RunSamples:
    """The run's window steps as samples (straggler seconds, per-device work), minus isolated stalls and
    the steady-state rule's drops (``gpu_name``: the config's, for the device's peak when the log names
    none)."""
    maps = [{p.step: p for p in n.steps if p.kind == "train"} for n in run.nodes if n.steps]
    excluded = [(e.step, e.reason) for e in run.window.excluded]
    notes: list[str] = []
    samples: list[StepSample] = []
    # the window steps some node's series lists, ascending: ``window.steps`` may list only every k-th step
    # of a long window (judge.series), its spans hold all of them
    window = run.window.spans()
    for s in sorted({s for m in maps for s in m if s in window}):
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
        logged = sorted({s for m in maps for s, p in m.items() if p.seconds is not None})
        steady = _steady(logged, maps, samples, device_name(gpu_name, run.environment.backend))
        excluded += steady.items()
        samples = [x for x in samples if x.step not in steady]
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
            if p.kind == "train" and (
                p.loss is not None or p.loss_text is not None
            ):  # a line without one: none
                losses[p.step] = p.loss if p.loss is not None else math.nan
    return RunSamples(samples, sorted(excluded), devices, why, notes, losses)


def _steady(
    logged: list[int], maps: list[dict[int, StepPoint]], samples: list[StepSample], device: str
) -> dict[int, str]:
    """The judge's steady-state rule over the run: every timed step in order, the samples as the window,
    the straggler seconds, the samples' median and MAD as the baseline, the device's highest peak."""
    import numpy as np

    if len(samples) < 3:
        return {}
    by = {x.step: x for x in samples}
    sec = np.fromiter(
        (max(p.seconds or 0.0 for m in maps if (p := m.get(s)) is not None) for s in logged), np.float64
    )
    win = np.fromiter((s in by for s in logged), np.bool_, len(logged))

    def rate(s: int) -> float:
        x = by.get(s)
        return x.tflops / x.seconds if x is not None and x.tflops is not None and x.seconds > 0 else math.nan

    rates = np.fromiter((rate(s) for s in logged), np.float64, len(logged))
    own = [x.seconds for x in samples]
    med = statistics.median(own)
    spread = 1.4826 * statistics.median([abs(v - med) for v in own])
    peak = highest_peak(device)
    d = steady_drops(sec, win, rates, med, spread, peak)
    return drop_reasons(np.asarray(logged, np.int64), sec, rates, d, med, spread, peak, device)


__all__ = ["RunSamples", "StepSample", "run_samples"]
