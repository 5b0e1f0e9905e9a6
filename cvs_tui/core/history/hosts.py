"""Lemon nodes: is a host at fault (root cause, straggler, fatal or warning health finding, unexplained
stall) in more of its runs than the fleet's base rate explains?

Each host's count of at-fault runs is tested against a binomial with the rate of every *other* host
(leave-one-out, so a lemon does not raise its own bar): the upper tail P(X >= k | n, p). The p-values of
all hosts go through Holm's step-down (family-wise error ALPHA): with 64 hosts, a fair fleet flags none
in 1 - ALPHA of histories. A host needs MIN_FAULTS at-fault runs to be flagged at all.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

ALPHA = 0.05
MIN_FAULTS = 2
KINDS = ("root_cause", "straggler", "fatal", "warning", "stalls")


@dataclass(slots=True)
class HostScore:
    host: str
    runs: int
    faulty_runs: int  # runs where it was at fault in any way
    counts: dict[str, int]  # runs per kind of fault
    base_rate: float  # the rest of the fleet's at-fault runs per host-run
    p_value: float  # binomial upper tail
    adjusted: float  # Holm-adjusted p-value
    flagged: bool

    @property
    def expected(self) -> float:
        return self.runs * self.base_rate

    def to_dict(self) -> dict[str, object]:
        return {
            "host": self.host,
            "runs": self.runs,
            "faulty_runs": self.faulty_runs,
            "expected": self.expected,
            "counts": self.counts,
            "base_rate": self.base_rate,
            "p_value": self.p_value,
            "p_adjusted": self.adjusted,
            "flagged": self.flagged,
        }


def binom_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed exactly (n is a count of runs: small)."""
    if k <= 0:
        return 1.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    logp, logq = math.log(p), math.log1p(-p)
    total = 0.0
    for i in range(k, n + 1):
        total += math.exp(
            math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * logp + (n - i) * logq
        )
    return min(total, 1.0)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (monotone, capped at 1), in the input's order."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    m = len(p_values)
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        out[i] = running
    return out


def score_hosts(rows: Iterable[tuple[str, int, int, int, int, int, int]]) -> list[HostScore]:
    """``rows``: (host, run id, root cause, straggler, fatal, warning, stalls) per host per run (0/1 each).
    Scores most suspicious first."""
    per_host: dict[str, dict[int, tuple[int, ...]]] = {}
    for host, run_id, *flags in rows:
        seen = per_host.setdefault(host, {})
        prev = seen.get(run_id, (0,) * len(KINDS))
        seen[run_id] = tuple(
            max(a, int(b)) for a, b in zip(prev, flags, strict=True)
        )  # a host twice in a run
    if not per_host:
        return []
    n = {h: len(r) for h, r in per_host.items()}
    k = {h: sum(any(f) for f in r.values()) for h, r in per_host.items()}
    total_n, total_k = sum(n.values()), sum(k.values())
    scores = []
    for h, runs in per_host.items():
        rest_n, rest_k = total_n - n[h], total_k - k[h]
        # a fleet of one host, or no other host ever at fault: the rate of the whole fleet, floored at
        # half a fault over everything seen, so one host's single fault is not "infinitely" unusual
        base = (rest_k if rest_n else total_k) / (rest_n or total_n)
        base = max(base, 0.5 / max(total_n, 1))
        counts = {kind: sum(f[i] for f in runs.values()) for i, kind in enumerate(KINDS)}
        scores.append(HostScore(h, n[h], k[h], counts, base, binom_tail(k[h], n[h], base), 1.0, False))
    for s, adj in zip(scores, holm([s.p_value for s in scores]), strict=True):
        s.adjusted = adj
        s.flagged = adj <= ALPHA and s.faulty_runs >= MIN_FAULTS
    scores.sort(key=lambda s: (s.adjusted, s.p_value, -s.faulty_runs, s.host))
    return scores


__all__ = ["ALPHA", "KINDS", "MIN_FAULTS", "HostScore", "binom_tail", "holm", "score_hosts"]
