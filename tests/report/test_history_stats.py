"""The history's statistics: the noise model and change points (core/history/noise) and the lemon-node
score (core/history/hosts), on seeded series whose truth is known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cvs_tui.core.history import hosts as hh
from cvs_tui.core.history import noise as nz


def _verdicts(xs: list[float], better: nz.Better = "higher") -> list[str]:
    return [nz.judge(xs[:i], xs[i], better).verdict for i in range(len(xs))]


def test_too_little_history_is_said_not_judged() -> None:
    j = nz.judge([100.0, 101.0, 99.0], 50.0, "higher")
    assert j.verdict == nz.NOT_ENOUGH and j.baseline is None and "3 earlier" in j.reason


def test_stable_series_raise_at_most_one_alert_per_100_runs_on_average() -> None:
    rng = np.random.default_rng(7)
    alerts = [
        _verdicts(list(1000 * (1 + 0.02 * rng.standard_normal(100)))).count(nz.REGRESSED) for _ in range(10)
    ]
    assert sum(alerts) <= 10, alerts


def test_large_step_is_flagged_on_its_first_run_and_a_confirmed_level_is_the_new_baseline() -> None:
    rng = np.random.default_rng(3)
    xs = list(1000 * (1 + 0.01 * rng.standard_normal(40)))
    xs[25:] = [x * 0.9 for x in xs[25:]]  # 10 % slower from run 25
    v = _verdicts(xs)
    assert v[25] == nz.REGRESSED
    assert v[32:].count(nz.REGRESSED) <= 1  # re-based: the new level is the baseline
    base = nz.baseline(xs[:40])
    assert base is not None and base.level_start == 25 and base.changed_from is not None
    assert base.location == pytest.approx(900, rel=0.02) and base.changed_from == pytest.approx(
        1000, rel=0.02
    )


def test_direction_decides_which_change_is_a_regression() -> None:
    hist = [100.0, 101.0, 99.0, 100.5, 99.5, 100.0, 100.2, 99.8]
    assert nz.judge(hist, 130.0, "lower").verdict == nz.REGRESSED  # step time up
    assert nz.judge(hist, 130.0, "higher").verdict == nz.IMPROVED  # throughput up
    assert nz.judge(hist, 70.0, "higher").verdict == nz.REGRESSED


def test_pooled_run_before_flags_a_step_one_run_alone_does_not() -> None:
    rng = np.random.default_rng(5)
    hist = list(1000 * (1 + 0.02 * rng.standard_normal(20)))
    first = nz.judge(hist, 940.0, "higher")  # the first 6 % slower run: inside the band on its own
    assert first.verdict == nz.NO_CHANGE
    second = nz.judge([*hist, 940.0], 940.0, "higher")  # the second: the two together are past the line
    assert second.verdict == nz.REGRESSED and second.pooled and "with the run before" in second.reason


def test_one_bad_run_before_does_not_condemn_a_normal_candidate() -> None:
    hist = [1000.0 + d for d in (5, -8, 3, -2, 7, -4, 1, -6, 2, -3)] + [700.0]
    assert nz.judge(hist, 1001.0, "higher").verdict == nz.NO_CHANGE


def test_identical_replays_do_not_alert_on_rounding_and_zero_levels_use_the_smallest_change() -> None:
    same = [500.0] * 8
    assert nz.judge(same, 500.4, "higher").verdict == nz.NO_CHANGE  # below the practical threshold
    assert nz.judge(same, 450.0, "higher").verdict == nz.REGRESSED
    zero = [0.0] * 8  # stall seconds of clean runs
    assert nz.judge(zero, 2.0, "lower", min_change=5.0).verdict == nz.NO_CHANGE
    assert nz.judge(zero, 30.0, "lower", min_change=5.0).verdict == nz.REGRESSED


def test_band_is_the_alert_line_around_the_baseline_and_wider_for_a_short_history() -> None:
    rng = np.random.default_rng(11)
    xs = list(100 * (1 + 0.02 * rng.standard_normal(40)))
    j = nz.judge(xs[:39], xs[39], "higher")
    assert j.baseline is not None and j.band is not None
    half = (
        nz.alert_line(j.history_runs) * j.baseline.spread * math.sqrt(1 + math.pi / 2 / len(j.baseline.runs))
    )
    assert j.band == pytest.approx((j.baseline.location - half, j.baseline.location + half))
    assert nz.alert_line(5) > nz.alert_line(10) > nz.alert_line(30) > nz.ALERT_Z


def test_binomial_tail_matches_the_closed_form() -> None:
    assert hh.binom_tail(0, 10, 0.3) == 1.0
    assert hh.binom_tail(1, 10, 0.1) == pytest.approx(1 - 0.9**10)
    assert hh.binom_tail(3, 20, 0.01) == pytest.approx(
        sum(math.comb(20, i) * 0.01**i * 0.99 ** (20 - i) for i in range(3, 21))
    )


def test_holm_is_monotone_and_capped() -> None:
    assert hh.holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])


def _fleet(faults: dict[str, list[int]], hosts: int = 64, runs: int = 20) -> list[tuple]:
    return [
        (f"h{h:02d}", r, int(r in faults.get(f"h{h:02d}", [])), 0, 0, 0, 0)
        for r in range(runs)
        for h in range(hosts)
    ]


def test_lemon_at_fault_in_3_of_20_runs_among_64_hosts_is_flagged() -> None:
    # ten faults spread over other hosts (one run in two), and the lemon in runs 2, 9 and 15
    faults = {f"h{h:02d}": [h % 20] for h in range(10, 20)} | {"h00": [2, 9, 15]}
    scores = hh.score_hosts(_fleet(faults))
    flagged = [s.host for s in scores if s.flagged]
    assert flagged == ["h00"] and scores[0].faulty_runs == 3 and scores[0].counts["root_cause"] == 3


def test_fair_fleet_flags_none() -> None:
    faults = {f"h{h:02d}": [h % 20] for h in range(0, 64, 5)}  # 13 faults, at most one per host
    faults["h01"] = [3, 4]  # one host twice: chance, in a fleet this busy
    assert not any(s.flagged for s in hh.score_hosts(_fleet(faults)))


def test_host_seen_twice_in_one_run_counts_once() -> None:
    rows = [("a", 1, 1, 0, 0, 0, 0), ("a", 1, 0, 1, 0, 0, 0), ("b", 1, 0, 0, 0, 0, 0)]
    a = next(s for s in hh.score_hosts(rows) if s.host == "a")
    assert a.runs == 1 and a.faulty_runs == 1 and a.counts["straggler"] == 1
