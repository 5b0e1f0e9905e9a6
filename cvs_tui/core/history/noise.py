"""The noise model of one metric's series and the verdict of a new value against it.

A series is one metric of one group's runs in time order. Its *current level* starts after the last
change point (binary segmentation on clipped segment means, each side at least ``MIN_LEVEL_RUNS`` runs),
so a new level, once confirmed, is the baseline and old runs stop counting. The baseline is the median of
the current level's latest runs; the spread is that of every run around its own level's median (an RMS
without the largest tenth of the residuals; pooled over levels, so a step does not inflate it). A
candidate is judged twice: alone, and pooled with the run before it (a step shows in two runs long before
one run is extreme); either z past the alert line, with the change past compare's practical threshold,
is a verdict.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

from cvs_tui.core.compare.model import DEFAULT_THRESHOLD_PCT

Better = Literal["higher", "lower"]
REGRESSED = "REGRESSED"
IMPROVED = "IMPROVED"
NO_CHANGE = "NO CHANGE"
NOT_ENOUGH = "NOT ENOUGH HISTORY"

MIN_HISTORY = 5  # earlier runs of the group before any verdict: the spread needs them
MIN_LEVEL_RUNS = 3  # runs on each side of a change point: a new level is confirmed by three runs
CHANGE_Z = 4.0  # how far apart two levels' means must be, in standard errors, to be a change point
ALERT_Z = 2.75  # the candidate (or it and the run before) this many standard errors worse: an alert
POOLED_MIN_Z = 1.0  # the pooled test only counts when the candidate itself is this far on the same side
SMALL_SAMPLE = 4.0  # the alert line is ALERT_Z x (1 + SMALL_SAMPLE / n^1.5) for a spread from n runs, as
# a spread from few runs is itself uncertain: 5 runs 3.7, 10 runs 3.1, 30 runs 2.8 (tuned with CHANGE_Z and
# ALERT_Z by benchmarks/history_baselines.py: at most one false alert per 100 stable runs at 2-3 % noise)
MAD_SCALE = 1.4826  # MAD -> standard deviation for normal noise
TRIM = 0.1  # the share of largest residuals the spread leaves out: one wild run in ten changes nothing
MEDIAN_VAR = math.pi / 2  # variance of a sample median over that of a mean, for normal noise
REL_NOISE_FLOOR = 0.002  # a spread never below 0.2 % of the level (identical replays have MAD 0)
DEFAULT_PRACTICAL_PCT = DEFAULT_THRESHOLD_PCT  # compare's practical threshold: smaller changes are NO CHANGE


@dataclass(frozen=True, slots=True)
class Baseline:
    """What a candidate is judged against: the level, its spread and which runs they came from."""

    location: float  # median of the current level's runs
    spread: float  # robust standard deviation of one run
    runs: tuple[int, ...]  # indexes into the series of the runs the location came from
    level_start: int  # index of the first run of the current level
    changed_from: float | None  # the previous level's median, when a change point started this one


@dataclass(frozen=True, slots=True)
class Judgement:
    verdict: str
    baseline: Baseline | None
    z: float | None  # the deciding standard score, positive = worse
    delta_pct: float | None  # candidate vs baseline, percent of the baseline
    pooled: bool  # True when the candidate pooled with the run before decided it
    reason: str
    history_runs: int = 0  # runs the spread was learned from
    floor: float | None = None  # the band never goes below this (0 for a series that is never negative)

    @property
    def band(self) -> tuple[float, float] | None:
        """The values a single run may take without an alert (baseline ± alert line x spread)."""
        if self.baseline is None:
            return None
        half = (
            alert_line(self.history_runs)
            * self.baseline.spread
            * math.sqrt(1 + MEDIAN_VAR / len(self.baseline.runs))
        )
        lo, hi = self.baseline.location - half, self.baseline.location + half
        return (lo if self.floor is None else max(lo, self.floor)), hi


def _median(xs: np.ndarray) -> float:
    return float(np.median(xs))


def _split_scores(seg: np.ndarray, sigma: float) -> np.ndarray:
    """For each split k (MIN_LEVEL_RUNS <= k <= len - MIN_LEVEL_RUNS): the difference of the two sides'
    means in standard errors, over values clipped to the median ± 3 spreads (one wild run neither makes
    nor hides a level). Means place a split better than medians do; the clip keeps them robust."""
    med = _median(seg)
    x = np.clip(seg, med - 3 * sigma, med + 3 * sigma)
    n = len(x)
    k = np.arange(MIN_LEVEL_RUNS, n - MIN_LEVEL_RUNS + 1)
    csum = np.cumsum(x)
    left = csum[k - 1] / k
    right = (csum[-1] - csum[k - 1]) / (n - k)
    return np.abs(left - right) / (sigma * np.sqrt(1 / k + 1 / (n - k)))


def _diff_sigma(xs: np.ndarray) -> float:
    """A first spread that a level shift hardly moves: the MAD of successive differences."""
    if len(xs) < 2:
        return 0.0
    return MAD_SCALE * _median(np.abs(np.diff(xs) - _median(np.diff(xs)))) / math.sqrt(2)


def _floor(sigma: float, level: float) -> float:
    return max(sigma, REL_NOISE_FLOOR * abs(level))


def change_points(xs: Sequence[float]) -> list[int]:
    """Indexes where a new level starts, oldest first: the best split of the latest level while its two
    sides' (clipped) means differ by CHANGE_Z standard errors (raised for a short series, as the alert
    line is), each side at least MIN_LEVEL_RUNS runs. Only the latest level is split further: older
    levels no longer form any baseline."""
    arr = np.asarray(xs, dtype=float)
    if len(arr) < 2 * MIN_LEVEL_RUNS:
        return []
    sigma = _floor(_diff_sigma(arr), _median(arr))
    found: list[int] = []
    start = 0
    while len(arr) - start >= 2 * MIN_LEVEL_RUNS and sigma > 0:
        seg = arr[start:]
        scores = _split_scores(seg, sigma)
        best = int(np.argmax(scores))
        if scores[best] < CHANGE_Z * (1 + SMALL_SAMPLE / len(seg) ** 1.5):
            break
        start += MIN_LEVEL_RUNS + best
        found.append(start)
    return found


def _trimmed_rms(resid: np.ndarray, dof: int) -> float:
    """RMS of the residuals without the largest TRIM share (at least one from 10 runs on), rescaled
    to a normal standard deviation. Unlike a MAD it does not collapse when many runs log the same
    rounded value, and it is about 85 % efficient where a MAD is 37 %."""
    a = np.sort(np.abs(resid))
    k = int(TRIM * len(a))
    kept = a[: len(a) - k]
    if k == 0:
        return float(np.sqrt(np.sum(kept**2) / dof))
    q = len(kept) / len(a)
    c = NormalDist().inv_cdf((1 + q) / 2)
    share = 1 - 2 * c * NormalDist().pdf(c) / q  # E[X^2 | |X| < c] for a standard normal X
    return float(np.sqrt(np.mean(kept**2) / share * len(a) / dof))


def pooled_spread(xs: Sequence[float], starts: Sequence[int]) -> float:
    """The spread of one run around its own level's median, pooled over every level (a trimmed RMS)."""
    arr = np.asarray(xs, dtype=float)
    bounds = [0, *starts, len(arr)]
    resid = np.concatenate([arr[a:b] - _median(arr[a:b]) for a, b in itertools.pairwise(bounds)])
    dof = max(len(resid) - len(bounds) + 1, 1)  # one median fitted per level
    return _trimmed_rms(resid, dof)


def baseline(history: Sequence[float], *, last: int = 20) -> Baseline | None:
    """The baseline the next run is judged against; None under MIN_HISTORY runs."""
    if len(history) < MIN_HISTORY:
        return None
    arr = np.asarray(history, dtype=float)
    starts = change_points(list(history))
    level = starts[-1] if starts else 0
    runs = tuple(range(max(level, len(arr) - last), len(arr)))
    location = _median(arr[list(runs)])
    spread = _floor(pooled_spread(list(history), starts), location)
    before = _median(arr[(starts[-2] if len(starts) > 1 else 0) : level]) if starts else None
    return Baseline(location, spread, runs, level, before)


def alert_line(runs: int) -> float:
    """The standard score past which a run is an alert, given how many runs the spread came from."""
    return ALERT_Z * (1 + SMALL_SAMPLE / max(runs, 1) ** 1.5)


def _worse(x: float, location: float, better: Better) -> float:
    return (location - x) if better == "higher" else (x - location)


def judge(
    history: Sequence[float],
    candidate: float,
    better: Better,
    *,
    last: int = 30,
    practical_pct: float = DEFAULT_PRACTICAL_PCT,
    min_change: float = 0.0,
) -> Judgement:
    """The candidate against the history before it (oldest first); only the latest ``last`` runs count."""
    history = list(history)[-last:] if last > 0 else []
    base = baseline(history, last=last)
    if base is None:
        return Judgement(
            NOT_ENOUGH, None, None, None, False, f"{len(history)} earlier run(s); {MIN_HISTORY} needed"
        )
    loc, n = base.location, len(base.runs)
    # a level of 0 (no stall in any run) has no spread: the smallest change that counts sets the scale
    sd = max(base.spread, min_change / ALERT_Z, 1e-12)
    line = alert_line(len(history))
    delta_pct = (candidate - loc) / abs(loc) * 100.0 if loc else None

    def big_enough(value: float, centre: float) -> bool:
        return abs(value - centre) >= max(min_change, practical_pct / 100.0 * abs(centre))

    z1 = _worse(candidate, loc, better) / (sd * math.sqrt(1 + MEDIAN_VAR / n))
    made: dict[str, Any] = {
        "history_runs": len(history),
        "floor": 0.0 if min(history) >= 0 and candidate >= 0 else None,
    }
    if z1 >= line and big_enough(candidate, loc):
        return Judgement(REGRESSED, base, z1, delta_pct, False, f"worse by z {z1:.1f} on its own", **made)
    prev = len(history) - 1
    others = [i for i in base.runs if i != prev]
    if prev > base.level_start and z1 >= POOLED_MIN_Z and len(others) >= MIN_LEVEL_RUNS:
        # the run before is judged with the candidate only while it is on the current level
        loc2 = _median(np.asarray([history[i] for i in others]))
        pooled = (history[prev] + candidate) / 2
        z2 = _worse(pooled, loc2, better) / (sd * math.sqrt(0.5 + MEDIAN_VAR / len(others)))
        if z2 >= line and big_enough(pooled, loc2):
            why = f"worse by z {z2:.1f} with the run before"
            return Judgement(REGRESSED, base, z2, delta_pct, True, why, **made)
    if -z1 >= line and big_enough(candidate, loc):
        return Judgement(IMPROVED, base, z1, delta_pct, False, f"better by z {-z1:.1f}", **made)
    if abs(z1) >= line:
        why = f"significant but below the {practical_pct:g} % threshold"
        return Judgement(NO_CHANGE, base, z1, delta_pct, False, why, **made)
    return Judgement(NO_CHANGE, base, z1, delta_pct, False, "inside the noise band", **made)


__all__ = [
    "ALERT_Z",
    "CHANGE_Z",
    "IMPROVED",
    "MIN_HISTORY",
    "MIN_LEVEL_RUNS",
    "NOT_ENOUGH",
    "NO_CHANGE",
    "REGRESSED",
    "Baseline",
    "Better",
    "Judgement",
    "alert_line",
    "baseline",
    "change_points",
    "judge",
    "pooled_spread",
]
