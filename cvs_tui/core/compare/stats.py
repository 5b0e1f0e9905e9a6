"""Statistics for comparing two runs: robust centre, seeded bootstrap bands, rank tests, loss tolerance.

Pure Python and deterministic: every resampling takes a ``random.Random(seed)``, so the same inputs give
the same band on every machine.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from cvs_tui.core.judge.metrics import percentile

T = TypeVar("T")

DEFAULT_SEED = 20240611
DEFAULT_RESAMPLES = 2000
CONFIDENCE = 0.95
LOG_LOSS_DECIMALS = 3  # MaxText's step lines print `loss: 7.501`

# Two-sided 97.5 % Student t quantiles by degrees of freedom (1..30); above 30 the normal value is close
# enough for a band that is then rounded for display.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t975(df: float) -> float:
    if df < 1:
        return _T975[0]
    if df > 30:
        return 1.96
    lo = math.floor(df)
    hi = min(lo + 1, 30)
    frac = df - lo
    return _T975[lo - 1] + (_T975[hi - 1] - _T975[lo - 1]) * frac


@dataclass(frozen=True, slots=True)
class Band:
    """A confidence interval for candidate − base (same unit as the statistic)."""

    lo: float
    hi: float
    method: str

    def excludes_zero(self) -> bool:
        return self.lo > 0 or self.hi < 0


def p50(xs: Sequence[float]) -> float:
    return percentile(xs, 50)


def p95(xs: Sequence[float]) -> float:
    return percentile(xs, 95)


def ratio_of_sums(pairs: Sequence[tuple[float, float]]) -> float:
    """Work over time: sum of work / sum of seconds (a harmonic rate, never a mean of per-step rates)."""
    t = sum(s for _, s in pairs)
    return sum(w for w, _ in pairs) / t if t > 0 else math.nan


def _quantile_band(diffs: list[float], method: str, level: float = CONFIDENCE) -> Band:
    diffs.sort()
    a = (1.0 - level) / 2.0
    return Band(percentile(diffs, 100 * a), percentile(diffs, 100 * (1 - a)), method)


def bootstrap_diff(
    base: Sequence[T],
    cand: Sequence[T],
    stat: Callable[[Sequence[T]], float],
    *,
    seed: int = DEFAULT_SEED,
    resamples: int = DEFAULT_RESAMPLES,
    name: str = "statistic",
    block: int = 1,
) -> Band:
    """Percentile bootstrap CI of stat(cand) − stat(base), each side resampled with replacement: single
    values, or with ``block`` > 1 runs of ``block`` consecutive values (a moving-block bootstrap: values
    whose neighbours share their time, as step times under asynchronous dispatch do, keep their partners,
    so the band is not widened by time that merely moved)."""
    rng = random.Random(seed)
    diffs: list[float] = []
    for _ in range(resamples):
        b = _resample(base, rng, block)
        c = _resample(cand, rng, block)
        diffs.append(stat(c) - stat(b))
    how = f"moving-block bootstrap (blocks of {block} steps)" if block > 1 else "bootstrap"
    return _quantile_band(
        diffs, f"{how} 95% CI of the {name} difference ({resamples} resamples, seed {seed})"
    )


def _resample(xs: Sequence[T], rng: random.Random, block: int) -> list[T]:
    n = len(xs)
    if block <= 1 or n <= block:
        return [xs[rng.randrange(n)] for _ in range(n)]
    out: list[T] = []
    while len(out) < n:
        i = rng.randrange(n - block + 1)
        out += xs[i : i + block]
    return out[:n]


@dataclass(frozen=True, slots=True)
class RankTest:
    u: float
    p_value: float


def mann_whitney_u(base: Sequence[float], cand: Sequence[float]) -> RankTest:
    """Two-sided Mann–Whitney U with the normal approximation and tie correction."""
    n1, n2 = len(base), len(cand)
    allv = sorted([(v, 0) for v in base] + [(v, 1) for v in cand])
    ranks = [0.0] * len(allv)
    ties = 0.0
    i = 0
    while i < len(allv):
        j = i
        while j + 1 < len(allv) and allv[j + 1][0] == allv[i][0]:
            j += 1
        r = (i + j) / 2.0 + 1.0
        for k in range(i, j + 1):
            ranks[k] = r
        t = j - i + 1
        ties += t**3 - t
        i = j + 1
    r1 = sum(r for r, (_, side) in zip(ranks, allv, strict=True) if side == 0)
    u1 = r1 - n1 * (n1 + 1) / 2.0
    mu = n1 * n2 / 2.0
    n = n1 + n2
    var = n1 * n2 / 12.0 * ((n + 1) - ties / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        return RankTest(u1, 1.0)
    z = (abs(u1 - mu) - 0.5) / math.sqrt(var)
    p = 2.0 * (1.0 - statistics.NormalDist().cdf(max(z, 0.0)))
    return RankTest(u1, min(1.0, p))


def welch_band(base: Sequence[float], cand: Sequence[float]) -> Band:
    """95 % Welch t interval of mean(cand) − mean(base): the run-to-run band from repetitions."""
    mb, mc = statistics.fmean(base), statistics.fmean(cand)
    vb, vc = statistics.variance(base), statistics.variance(cand)
    se2 = vb / len(base) + vc / len(cand)
    d = mc - mb
    if se2 <= 0:
        return Band(d, d, "Welch t 95% CI over the runs' values (no run-to-run spread)")
    df_den = (vb / len(base)) ** 2 / (len(base) - 1) + (vc / len(cand)) ** 2 / (len(cand) - 1)
    df = se2**2 / df_den if df_den > 0 else 1.0
    h = t975(df) * math.sqrt(se2)
    return Band(d - h, d + h, f"Welch t 95% CI over the runs' values (df {df:.1f})")


def pct_of(x: float, base: float) -> float | None:
    """``x`` as a percentage of ``base`` (None when ``base`` is 0)."""
    return x / base * 100.0 if base else None


# Quarters a run's window is cut into to see how far its own figure drifts (a loaded machine's load comes
# and goes within one run as well as between runs).
DRIFT_PARTS = 4


def drift_pct(
    xs: Sequence[T], stat: Callable[[Sequence[T]], float], parts: int = DRIFT_PARTS
) -> float | None:
    """How far the statistic moves inside one run: the largest over the smallest of its value on each of
    ``parts`` contiguous slices of the window, as a percent above 1 (0 = steady). None when a slice is too
    short (under 2 samples) or a value is not a positive finite number."""
    n = len(xs)
    if n < 2 * parts:
        return None
    vals = [stat(xs[i * n // parts : (i + 1) * n // parts]) for i in range(parts)]
    if not all(math.isfinite(v) and v > 0 for v in vals):
        return None
    return (max(vals) / min(vals) - 1.0) * 100.0


def cv_pct(xs: Sequence[float]) -> float | None:
    """Coefficient of variation in percent (run-to-run spread of one side)."""
    if len(xs) < 2:
        return None
    m = statistics.fmean(xs)
    return statistics.stdev(xs) / m * 100.0 if m else None


def decimals_of(values: Sequence[float], max_decimals: int = 6) -> int | None:
    """The fewest decimals that print every value exactly (3 for MaxText's `loss: 7.501` lines)."""
    if not values:
        return None
    for d in range(max_decimals + 1):
        if all(abs(v - round(v, d)) <= 1e-9 * max(1.0, abs(v)) for v in values):
            return d
    return None


def loss_atol(base_losses: Sequence[float], cand_losses: Sequence[float], atol: float) -> tuple[float, str]:
    """Absolute tolerance raised to the print precision: a difference of two values printed to d decimals
    can be off by one unit in the last place (2 × 0.5 × 10^-d)."""
    d_b = decimals_of(base_losses)
    d_c = decimals_of(cand_losses)
    coarse = [d for d in (d_b, d_c) if d is not None and d <= 4]
    if not coarse:
        return atol, f"atol {atol:g} (full-precision losses)"
    # the finest coarse side is the print precision; fewer than MaxText's 3 decimals only means the values
    # happened to be round
    d = max(*coarse, LOG_LOSS_DECIMALS)
    q = 10.0 ** (-d)
    if q > atol:
        return q, f"atol raised to {q:g}: losses are printed with {d} decimals (±{q / 2:g} per value)"
    return atol, f"atol {atol:g}"
