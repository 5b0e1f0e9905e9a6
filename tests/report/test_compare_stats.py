"""The comparison statistics: seeded bootstrap bands, rank test, Welch band, loss tolerance."""

from __future__ import annotations

import math

from cvs_tui.core.compare import stats as cs
from cvs_tui.core.judge.checkpoint import loss_agreement


def test_bootstrap_is_deterministic() -> None:
    base = [0.030 + 0.001 * (i % 7) for i in range(40)]
    cand = [0.031 + 0.001 * (i % 5) for i in range(40)]
    a = cs.bootstrap_diff(base, cand, cs.p50, seed=1, resamples=500)
    b = cs.bootstrap_diff(base, cand, cs.p50, seed=1, resamples=500)
    assert (a.lo, a.hi) == (b.lo, b.hi)
    assert "seed 1" in a.method


def test_bootstrap_band_separates_shifted_samples_only() -> None:
    base = [1.0 + 0.01 * (i % 10) for i in range(50)]
    same = cs.bootstrap_diff(base, list(base), cs.p50, resamples=800)
    assert same.lo <= 0 <= same.hi and not same.excludes_zero()
    shifted = cs.bootstrap_diff(base, [x + 0.5 for x in base], cs.p50, resamples=800)
    assert shifted.excludes_zero() and shifted.lo > 0.4


def test_ratio_of_sums_is_harmonic_not_mean_of_rates() -> None:
    # two steps of 100 tokens: 1 s and 9 s. Mean of rates 55.6 tok/s; true rate 200 / 10 = 20.
    assert cs.ratio_of_sums([(100.0, 1.0), (100.0, 9.0)]) == 20.0
    assert math.isnan(cs.ratio_of_sums([]))


def test_mann_whitney() -> None:
    same = cs.mann_whitney_u([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0])
    assert same.p_value > 0.9
    apart = cs.mann_whitney_u([float(i) for i in range(20)], [float(i) + 100 for i in range(20)])
    assert apart.u == 0 and apart.p_value < 1e-6


def test_welch_band_sign_and_width() -> None:
    band = cs.welch_band([1.0, 1.1, 0.9], [2.0, 2.1, 1.9])
    assert band.lo > 0.5 and band.hi < 1.5
    wide = cs.welch_band([1.0, 3.0, 0.5], [2.0, 0.8, 2.5])
    assert not wide.excludes_zero()
    assert cs.t975(2) == 4.303 and cs.t975(100) == 1.96


def test_loss_tolerance_follows_print_precision() -> None:
    atol, note = cs.loss_atol([7.501, 7.486, 7.456], [7.5, 7.47], 1e-6)
    assert atol == 1e-3 and "3 decimals" in note
    atol, _ = cs.loss_atol([7.50123456, 7.4861234], [7.50123457], 1e-6)
    assert atol == 1e-6
    assert loss_agreement(10.0, 10.0 + 1e-3 + 0.1 - 1e-9, 1e-3, 0.01)
    assert not loss_agreement(10.0, 10.0 + 1e-3 + 0.1 + 1e-6, 1e-3, 0.01)
    assert not loss_agreement(7.0, math.nan, 1e-3, 0.01)
    assert loss_agreement(math.nan, math.nan, 1e-3, 0.01)


def test_cv_pct() -> None:
    assert cs.cv_pct([1.0]) is None
    assert abs((cs.cv_pct([9.0, 10.0, 11.0]) or 0) - 10.0) < 1e-9
