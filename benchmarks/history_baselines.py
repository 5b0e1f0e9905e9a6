"""Run-history baselines on synthetic series: cvs-tui's noise model beside a fixed ±5 % rule and a z ≥ 5 rule.

    python benchmarks/history_baselines.py [--series 200] [--seed 1]

Each series is a throughput (higher is better) with run-to-run noise of CV 2 % or 3 % (normal,
multiplicative). Every run is checked against the runs before it, as `cvs-tui history check` does:

* cvs-tui: ``core/history/noise.judge`` over the latest 30 runs (robust level and spread, change points,
  the candidate alone and pooled with the run before);
* ±5 % prev-run: REGRESSED when the run is ≥ 5 % worse than the run before (upstream CVS's panel);
* z ≥ 5: REGRESSED when (mean of up to 100 earlier runs - run) / their standard deviation ≥ 5
  (conbench's lookback z-score), from 5 earlier runs on.

Figures per rule and noise: false alerts in 100 stable runs (mean, and the share of series with at most
one); a 5 % step slowdown at run 40 of 70: the share flagged within 2 runs of the step (on the first or
second slow run), and the alerts raised from the 6th slow run on (a rule that never re-bases keeps
alerting on an accepted new level).

Lemon nodes (``core/history/hosts.score_hosts``): 64 hosts in every one of 20 runs; a fair fleet has a
fault in a share of runs, each on a random host; a lemon is also at fault in 3 of the 20 runs. Printed:
the share of fleets where the lemon is flagged and where a fair fleet flags any host, beside the naive
rule "at fault in ≥ 2 runs".
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

import numpy as np

from cvs_tui.core.history import hosts as hh
from cvs_tui.core.history import noise as nz

Rule = Callable[[Sequence[float], float], bool]  # (history, candidate) -> REGRESSED?


def rule_cvs(hist: Sequence[float], x: float) -> bool:
    return nz.judge(hist, x, "higher", last=30).verdict == nz.REGRESSED


def rule_pct(hist: Sequence[float], x: float) -> bool:
    return bool(hist) and x <= hist[-1] * 0.95


def rule_z5(hist: Sequence[float], x: float) -> bool:
    h = np.asarray(hist[-100:])
    if len(h) < nz.MIN_HISTORY:
        return False
    sd = float(h.std(ddof=1))
    return sd > 0 and (float(h.mean()) - x) / sd >= 5.0


RULES: dict[str, Rule] = {"cvs-tui": rule_cvs, "±5 % prev-run": rule_pct, "z ≥ 5": rule_z5}


def alerts(series: np.ndarray, rule: Rule) -> list[bool]:
    xs = series.tolist()
    return [rule(xs[:i], xs[i]) for i in range(len(xs))]


def series_figures(
    cv: float, n: int, rng: np.random.Generator
) -> dict[str, tuple[float, float, float, float]]:
    stable = [1000.0 * (1 + cv * rng.standard_normal(100)) for _ in range(n)]
    step_at, length = 40, 70
    stepped = []
    for _ in range(n):
        s = 1000.0 * (1 + cv * rng.standard_normal(length))
        s[step_at:] *= 0.95
        stepped.append(s)
    out = {}
    for name, rule in RULES.items():
        fa = np.array([sum(alerts(s, rule)) for s in stable])
        hits, late = 0, 0
        for s in stepped:
            a = alerts(s, rule)
            hits += a[step_at] or a[step_at + 1]
            late += sum(a[step_at + 5 :])
        out[name] = (float(fa.mean()), float(np.mean(fa <= 1)), hits / n, late / n)
    return out


def fleet(rng: np.random.Generator, hosts: int, runs: int, fault_share: float, lemon: bool) -> list[tuple]:
    at_fault = np.zeros((runs, hosts), dtype=int)
    for r in range(runs):
        if rng.random() < fault_share:
            at_fault[r, rng.integers(hosts)] = 1
    if lemon:
        at_fault[rng.choice(runs, size=3, replace=False), 0] = 1
    # (host, run id, root cause, straggler, fatal, warning, stalls): the fault as a root cause
    return [(f"h{h:02d}", r, int(at_fault[r, h]), 0, 0, 0, 0) for r in range(runs) for h in range(hosts)]


def lemon_figures(n: int, fault_share: float, rng: np.random.Generator) -> dict[str, tuple[float, float]]:
    found = {"cvs-tui": 0, "≥ 2 faults": 0}
    false = {"cvs-tui": 0, "≥ 2 faults": 0}
    for _ in range(n):
        s = hh.score_hosts(fleet(rng, 64, 20, fault_share, lemon=True))
        found["cvs-tui"] += any(x.flagged and x.host == "h00" for x in s)
        found["≥ 2 faults"] += any(x.faulty_runs >= 2 and x.host == "h00" for x in s)
        s = hh.score_hosts(fleet(rng, 64, 20, fault_share, lemon=False))
        false["cvs-tui"] += any(x.flagged for x in s)
        false["≥ 2 faults"] += any(x.faulty_runs >= 2 for x in s)
    return {k: (found[k] / n, false[k] / n) for k in found}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--series", type=int, default=200, help="series per figure (default 200)")
    ap.add_argument("--fleets", type=int, default=1000, help="fleets per lemon figure (default 1000)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    print(f"{args.series} series per cell; alerts = REGRESSED verdicts (a slower run)")
    print(
        f"{'noise':>5}  {'rule':<14} {'false alerts/100 runs':>22} {'series with ≤1':>15} "
        f"{'5 % step flagged ≤2 runs':>25} {'alerts from slow run 6 on':>26}"
    )
    for cv in (0.02, 0.03):
        for name, (fa, le1, hit, late) in series_figures(cv, args.series, rng).items():
            print(
                f"{cv * 100:>4.0f}%  {name:<14} {fa:>22.2f} {le1 * 100:>14.0f}% {hit * 100:>24.0f}% "
                f"{late:>26.2f}"
            )
    print()
    print(f"lemon node: 64 hosts x 20 runs, {args.fleets} fleets per cell; lemon at fault in 3 of 20 runs")
    print(f"{'fair fleet faults':<26} {'rule':<12} {'lemon flagged':>14} {'fair fleet: any flagged':>24}")
    for share, label in ((0.5, "one run in two"), (1.0, "every run")):
        for name, (hit, fa) in lemon_figures(args.fleets, share, rng).items():
            print(f"{label:<26} {name:<12} {hit * 100:>13.1f}% {fa * 100:>23.1f}%")
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
