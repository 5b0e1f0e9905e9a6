"""Straggler cause: which node held a run back, why, and what the run lost to it.

In synchronous training the collectives hold every host to the slowest one, so every host logs nearly
the same step time: the slow host is found from what differs between hosts while the job was slow,
not from its own step line. The rule (docs/metrics.md, "Straggler cause"):

1. **The slow window** (:func:`slow_window`): the job's step time (per step, the longest over nodes)
   smoothed by a rolling median of ``SMOOTH`` steps; healthy = the 20th percentile of the smoothed
   series; the window is the longest stretch (gaps up to ``GAP`` steps bridged, at least
   ``MIN_STEPS``) above healthy × (1 + ``SLOW_PCT`` %). A node whose own median step time lags the
   others' by more than ``SLOW_PCT`` % (independent ranks, or a node slow from the start) makes the
   whole run its window, with the other nodes' median as healthy.
2. **Evidence per node and cause class**, in the window against the node's own samples outside it
   and against the other nodes in it, each scored so that 1.0 is a clear sign:
   thermal or power throttling (the GPU tool says throttled, or names a thermal/power reason, in at
   least ``MIN_FLAGGED`` samples and more often than outside the window and than on the other nodes;
   kernel "GPU is throttled"), clock drop (graphics clock ``CLOCK_DROP_PCT`` % below its own or its
   peers' level), ECC or retired pages (ECC totals, retired pages or remapped rows rising; kernel
   RAS/bad-page/row-remap lines), PCIe/XGMI link downgrade (fewer lanes or a lower speed than before,
   than the peers or than the link's own maximum; kernel AER/link/XGMI lines), host CPU contention (CPU
   steal, CPU pressure, the trainer throttled by its CPU quota or waiting for a CPU, ``HOST_PP``
   points above before/peers; kernel soft-lockup/hung-task/RCU lines), NIC errors (kernel NIC/RDMA
   lines). A clock drop explained by a throttle counts as the throttle.
3. **The straggler**: the node with the highest score of at least 1.0 that beats every other node's
   score for the same cause by ``MARGIN`` (a change every node shows is the cluster's, not a
   straggler's). No window, or no such node: no straggler is named.
4. **What-if** (the OSDI'25 "what if no straggler" method, on the job's own step times): the seconds
   the window lost over healthy, as tokens/s the whole run would have gained without them.

Long because the four steps share the window, the evidence types and the constants, in the order
docs/metrics.md gives them; each cause class is its own small function.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeVar

from cvs_tui.core.health.model import RunWindow
from cvs_tui.core.results import (
    HostPoint,
    NodeHealthRecord,
    RunRecord,
    StragglerRecord,
    TelemetryPoint,
    VerdictRecord,
)

SLOW_PCT = 5.0  # the job is slow when its smoothed step time is this far above healthy (as STRAGGLER_LAG_PCT)
SMOOTH = 7  # rolling median width, steps
GAP = 3  # slow stretches this close are one window
MIN_STEPS = 5  # a window is at least this many steps
CLOCK_DROP_PCT = 8.0  # a graphics clock this far below its own or its peers' level is a drop
HOST_PP = 10.0  # percentage points of CPU steal/pressure/throttled/wait over before or peers
MARGIN = 0.5  # the straggler's score beats every other node's for that cause by this much
MIN_FLAGGED = 3  # a throttle flag counts once set in this many samples of the window (15 s at 5 s)
PAD_S = 10.0  # findings and samples this close before the window count in it (a sampling interval)


class Cause(StrEnum):
    THROTTLE = "thermal or power throttling"
    CLOCK = "clock drop"
    ECC = "ECC or retired pages"
    LINK = "PCIe/XGMI link downgrade"
    HOST_CPU = "host CPU contention"
    NIC = "NIC errors"


# kernel-log signatures (health/signatures.py) that speak for a cause
FINDING_CAUSE: dict[str, Cause] = {
    "amdgpu_throttled": Cause.THROTTLE,
    "cpu_thermal_throttle": Cause.THROTTLE,
    "amdgpu_ras": Cause.ECC,
    "amdgpu_bad_pages": Cause.ECC,
    "amdgpu_poison": Cause.ECC,
    "mce_corrected": Cause.ECC,
    "nvidia_xid": Cause.ECC,  # warning-level Xids are row remaps and contained ECC errors
    "ecc_correctable_rise": Cause.ECC,  # from telemetry (runner/health_watch.py)
    "amdgpu_ras_xgmi": Cause.LINK,
    "pcie_aer": Cause.LINK,
    "pcie_link_down": Cause.LINK,
    "soft_lockup": Cause.HOST_CPU,
    "hung_task": Cause.HOST_CPU,
    "rcu_stall": Cause.HOST_CPU,
    "nic_link_down": Cause.NIC,
    "rdma_port_state": Cause.NIC,
    "mlx5_health": Cause.NIC,
}


@dataclass(frozen=True)
class NodeEvidence:
    """What is known of one node over a run: samples and kernel findings on the wall clock."""

    node: int
    host: str = ""
    telemetry: Sequence[TelemetryPoint] = ()
    host_timing: Sequence[HostPoint] = ()
    findings: Sequence[tuple[float, str]] = ()  # (wall time, signature)
    step_seconds: Sequence[float] = ()  # its own logged step times (warm-up excluded by the caller)


@dataclass(frozen=True)
class Window:
    start: float
    end: float
    healthy_s: float  # the job's healthy step time
    slow_s: float  # its mean step time in the window
    lost_s: float  # seconds the window took over healthy
    total_s: float  # the job's step seconds over the run
    whole_run_node: int | None = None  # a node slow over the whole run (its own lag), if that is the window


@dataclass(frozen=True)
class StragglerCause:
    node: int
    host: str
    cause: Cause
    evidence: str
    window: Window
    score: float

    @property
    def slowdown_pct(self) -> float:
        return 100.0 * (self.window.slow_s / self.window.healthy_s - 1.0)

    @property
    def what_if_pct(self) -> float:
        """Tokens/s the run would have gained without the window's lost seconds."""
        w = self.window
        return 100.0 * (w.total_s / max(w.total_s - w.lost_s, 1e-9) - 1.0)

    def line(self) -> str:
        w = self.window
        return (
            f"straggler: node {self.node} ({self.host}), {self.cause}: {self.evidence}; the job was "
            f"{self.slowdown_pct:.0f} % slower for {w.end - w.start:.0f} s; without node {self.node}: "
            f"+{self.what_if_pct:.1f} % tokens/s"
        )


def _rolling_median(xs: Sequence[float], k: int) -> list[float]:
    h = k // 2
    return [statistics.median(xs[max(0, i - h) : i + h + 1]) for i in range(len(xs))]


def _pctile(xs: Sequence[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * len(s)))]


def slow_window(job: Sequence[tuple[float, float]]) -> Window | None:
    """The window where the job ran slow, from (wall time, step seconds) per step; None if it did not."""
    if len(job) < max(MIN_STEPS * 2, SMOOTH):
        return None
    ats = [a for a, _ in job]
    secs = [s for _, s in job]
    smooth = _rolling_median(secs, SMOOTH)
    healthy = _pctile(smooth, 0.2)
    if healthy <= 0:
        return None
    slow = [i for i, v in enumerate(smooth) if v > healthy * (1 + SLOW_PCT / 100)]
    best: tuple[int, int] | None = None
    i = 0
    while i < len(slow):
        j = i
        while j + 1 < len(slow) and slow[j + 1] - slow[j] <= GAP + 1:
            j += 1
        a, b = slow[i], slow[j]
        if b - a + 1 >= MIN_STEPS and (best is None or b - a > best[1] - best[0]):
            best = (a, b)
        i = j + 1
    if best is None:
        return None
    a, b = best
    inside = secs[a : b + 1]
    lost = sum(max(s - healthy, 0.0) for s in inside)
    start = ats[a] - secs[a]  # the first slow step began one step time before its line
    return Window(start, ats[b], healthy, statistics.fmean(inside), lost, sum(secs))


def lagging_node(nodes: Sequence[NodeEvidence], job: Sequence[tuple[float, float]]) -> Window | None:
    """A node whose own median step time lags the others' by more than SLOW_PCT: the whole run is its
    window, the others' median the healthy step time."""
    meds = {n.node: statistics.median(n.step_seconds) for n in nodes if len(n.step_seconds) >= MIN_STEPS}
    if len(meds) < 2 or not job:
        return None
    worst = max(meds, key=lambda k: meds[k])
    others = statistics.median([v for k, v in meds.items() if k != worst])
    if others <= 0 or meds[worst] <= others * (1 + SLOW_PCT / 100):
        return None
    secs = [s for _, s in job]
    lost = sum(max(s - others, 0.0) for s in secs)
    start = job[0][0] - job[0][1]
    return Window(start, job[-1][0], others, meds[worst], lost, sum(secs), whole_run_node=worst)


# -- evidence ------------------------------------------------------------------------------------------
@dataclass
class _Score:
    score: float = 0.0
    why: list[str] = field(default_factory=list)

    def add(self, score: float, why: str) -> None:
        if score > 0:
            self.score += score
            self.why.append(why)


_P = TypeVar("_P", TelemetryPoint, HostPoint)


def _split(pts: Sequence[_P], w: Window) -> tuple[list[_P], list[_P]]:
    inside = [p for p in pts if w.start - PAD_S <= p.at <= w.end]
    outside = [p for p in pts if p.at < w.start - PAD_S or p.at > w.end + PAD_S]
    return inside, outside


def _mean(values: Sequence[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return statistics.fmean(xs) if xs else None


def _node_scores(n: NodeEvidence, w: Window, peers: Sequence[NodeEvidence]) -> dict[Cause, _Score]:
    sc = {c: _Score() for c in Cause}
    tin, tout = _split(n.telemetry, w)
    peer_tin = [p for o in peers for p in _split(o.telemetry, w)[0]]
    hin, hout = _split(n.host_timing, w)
    peer_hin = [p for o in peers for p in _split(o.host_timing, w)[0]]
    _throttle(sc[Cause.THROTTLE], tin, tout, peer_tin)
    _clock(sc[Cause.CLOCK], tin, tout, peer_tin)
    _ecc(sc[Cause.ECC], n, w)
    _link(sc[Cause.LINK], tin, tout, peer_tin)
    _host_cpu(sc[Cause.HOST_CPU], hin, hout, peer_hin)
    _findings(sc, n, w)
    if sc[Cause.THROTTLE].score >= 1.0:  # the throttle explains the clock drop
        sc[Cause.CLOCK] = _Score()
    return sc


_T = Sequence[TelemetryPoint]


def _throttle(score: _Score, tin: _T, tout: _T, peer_tin: _T) -> None:
    """The throttle flag, and each reason where the tool names them (nvidia-smi): a GPU at its power
    limit shows "SW power cap" on and off all run long, on every node, which must neither hide a thermal
    slowdown new in the window nor pass for one."""
    reasons = sorted({r for p in tin for r in p.throttle_reasons or ()})
    flags: list[tuple[str, Callable[[TelemetryPoint], bool | None]]] = [
        *((f" ({r})", _reason_flag(r)) for r in reasons),
        ("", lambda p: p.throttled),  # last: a reason rising as much is the one named
    ]
    best: tuple[float, str] | None = None
    for what, flag in flags:
        f_in = [f for p in tin if (f := flag(p)) is not None]
        f_out = [f for p in tout if (f := flag(p)) is not None]
        f_peers = [f for p in peer_tin if (f := flag(p)) is not None]
        if sum(f_in) < MIN_FLAGGED:
            continue
        level = max(_share(f_out), _share(f_peers))  # above both its own level and its peers'
        rise = _share(f_in) - level
        if best is None or rise > best[0]:
            best = (
                rise,
                f"GPU throttled{what} in {sum(f_in)}/{len(f_in)} samples of the window "
                f"({sum(f_out)}/{len(f_out)} outside it, {100 * _share(f_peers):.0f} % on the other nodes)",
            )
    if best is not None:
        score.add(2 * best[0], best[1])


def _clock(score: _Score, tin: _T, tout: _T, peer_tin: _T) -> None:
    """A graphics clock below the node's own level outside the window, or its peers'."""
    clk_in = _mean([p.gfx_clock_mhz for p in tin])
    for ref, what in (
        (_mean([p.gfx_clock_mhz for p in tout]), "outside the window"),
        (_median_or_none([p.gfx_clock_mhz for p in peer_tin]), "on the other nodes"),
    ):
        if clk_in is not None and ref:
            drop = 100 * (ref - clk_in) / ref
            if drop >= CLOCK_DROP_PCT / 2:
                score.add(
                    drop / CLOCK_DROP_PCT,
                    f"graphics clock {clk_in:.0f} MHz vs {ref:.0f} MHz {what} ({-drop:.0f} %)",
                )
                break


def _ecc(score: _Score, n: NodeEvidence, w: Window) -> None:
    """Error and memory-repair counters that rose in the window, by more than they rose before it."""
    rises: list[str] = []
    total_rise = 0
    for label, count in _COUNTERS:
        series = [(p.at, v) for p in n.telemetry if (v := count(p)) is not None]
        if len(series) < 2:
            continue
        before = [v for a, v in series if a < w.start - PAD_S]
        during = [v for a, v in series if w.start - PAD_S <= a <= w.end]
        if during:
            base = before[-1] if before else series[0][1]
            rose = max(during) - base
            earlier = before[-1] - before[0] if len(before) >= 2 else 0
            if rose > 0 and rose > earlier:
                rises.append(f"{label} +{rose}")
                total_rise += rose
    if rises:
        score.add(1.0 + min(total_rise, 1000) / 1000, f"{', '.join(rises)} in the window")


def _link(score: _Score, tin: _T, tout: _T, peer_tin: _T) -> None:
    """A PCIe link narrower or slower than outside the window, than its peers', or than its own maximum
    (unless it was already below it before the window)."""
    for attr, top, unit in (
        ("pcie_width", "pcie_width_max", "lanes"),
        ("pcie_speed_gts", "pcie_speed_max_gts", "GT/s"),
    ):
        now_v = _least([getattr(p, attr) for p in tin])
        before_v = _least([getattr(p, attr) for p in tout])
        most = _median_or_none([getattr(p, top) for p in tin])
        refs = [
            (_median_or_none([getattr(p, attr) for p in tout]), "outside the window"),
            (_median_or_none([getattr(p, attr) for p in peer_tin]), "on the other nodes"),
            (most if before_v is None or most is None or before_v >= most else None, "its maximum"),
        ]
        for ref, what in refs:
            if now_v is not None and ref and now_v < ref:
                of = f" (its maximum {most:g})" if most and what != "its maximum" else ""
                score.add(1.5, f"PCIe link {now_v:g} {unit} vs {ref:g} {what}{of}")
                break


def _host_cpu(
    score: _Score, hin: Sequence[HostPoint], hout: Sequence[HostPoint], peer_hin: Sequence[HostPoint]
) -> None:
    """Host CPU steal, pressure or the trainer's quota above the node's own level and its peers'."""
    for attr, what in (
        ("steal_pct", "CPU steal"),
        ("cpu_pressure_pct", "CPU pressure"),
        ("trainer_throttled_pct", "trainer throttled by its CPU quota"),
        ("trainer_wait_pct", "trainer waiting for a CPU"),
    ):
        v_in = _mean([getattr(p, attr) for p in hin])
        if v_in is None:
            continue
        levels = [
            r
            for r in (
                _mean([getattr(p, attr) for p in hout]),
                _median_or_none([getattr(p, attr) for p in peer_hin]),
            )
            if r is not None
        ]
        if not levels:
            continue
        level = max(levels)  # above both its own level and its peers'
        score.add((v_in - level) / HOST_PP, f"{what} {v_in:.0f} % in the window vs {level:.0f} %")


def _findings(sc: dict[Cause, _Score], n: NodeEvidence, w: Window) -> None:
    """Kernel findings in the window, each counted for the cause class its signature belongs to."""
    hits: dict[Cause, list[str]] = {}
    for at, sig in n.findings:
        cause = FINDING_CAUSE.get(sig)
        if cause is not None and w.start - PAD_S <= at <= w.end:
            hits.setdefault(cause, []).append(sig)
    for cause, sigs in hits.items():
        sc[cause].add(
            min(len(sigs), 3) * 1.0,
            f"{len(sigs)} kernel line(s) in the window: {', '.join(sorted(set(sigs)))}",
        )


def _reason_flag(reason: str) -> Callable[[TelemetryPoint], bool | None]:
    return lambda p: None if p.throttle_reasons is None else reason in p.throttle_reasons


def _share(flags: Sequence[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


def _ecc_total(p: TelemetryPoint) -> int | None:
    if p.ecc_correctable is None and p.ecc_uncorrectable is None:
        return None
    return (p.ecc_correctable or 0) + (p.ecc_uncorrectable or 0)


# running totals whose rise in the window is a sign of failing GPU memory
_COUNTERS: tuple[tuple[str, Callable[[TelemetryPoint], int | None]], ...] = (
    ("ECC error totals", _ecc_total),
    ("retired pages", lambda p: p.retired_pages),
    ("remapped rows", lambda p: p.remapped_rows),
)


def _median_or_none(values: Sequence[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return statistics.median(xs) if xs else None


def _least(values: Sequence[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return min(xs) if xs else None


def find_straggler(
    nodes: Sequence[NodeEvidence],
    job: Sequence[tuple[float, float]],
    *,
    window: Callable[[Sequence[tuple[float, float]]], Window | None] = slow_window,
) -> StragglerCause | None:
    """The node that held the run back and why (see the module doc); None when none is found."""
    if len(nodes) < 2:
        return None
    w = lagging_node(nodes, job) or window(job)
    if w is None:
        return None
    scores = {n.node: _node_scores(n, w, [o for o in nodes if o.node != n.node]) for n in nodes}
    best: tuple[float, int, Cause] | None = None
    for n in nodes:
        for cause, s in scores[n.node].items():
            if s.score < 1.0:
                continue
            rivals = max((scores[o.node][cause].score for o in nodes if o.node != n.node), default=0.0)
            if s.score - rivals < MARGIN:
                continue
            if best is None or s.score > best[0]:
                best = (s.score, n.node, cause)
    if best is None:
        return None
    score, node, cause = best
    if w.whole_run_node is not None and w.whole_run_node != node:
        return None  # the lagging node shows nothing; another node's sign does not explain its lag
    host = next(n.host for n in nodes if n.node == node)
    return StragglerCause(node, host, cause, "; ".join(scores[node][cause].why), w, score)


# -- a judged run ----------------------------------------------------------------------------------------
WARMUP_STEPS = 3  # as the watchdog and the judge: the first steps' times are not step times


def run_evidence(
    rec: RunRecord, health: Sequence[NodeHealthRecord], window: RunWindow
) -> tuple[list[NodeEvidence], list[tuple[float, float]]]:
    """Each node's evidence inside the run's time span, and the job's (wall time, step seconds) per step:
    the latest arrival over nodes and the longest logged seconds (the job runs at its slowest rank)."""
    end = window.end if window.end is not None else math.inf
    by_rank = {h.rank: h for h in health}
    nodes: list[NodeEvidence] = []
    seconds: dict[int, dict[int, float]] = {}
    for nr in rec.nodes:
        own = {
            p.step: p.seconds
            for p in nr.steps
            if p.kind == "train" and p.seconds is not None and math.isfinite(p.seconds) and p.seconds > 0
        }
        seconds[nr.rank] = own
        h = by_rank.get(nr.rank)
        nodes.append(
            NodeEvidence(
                node=nr.rank,
                host=nr.host,
                telemetry=[p for p in h.telemetry if window.start <= p.at <= end] if h else [],
                host_timing=[p for p in h.host_timing if window.start <= p.at <= end] if h else [],
                findings=[
                    (f.wall_time, f.signature)
                    for f in (h.findings if h else [])
                    if window.start <= f.wall_time <= end
                ],
                step_seconds=[own[s] for s in sorted(own)][WARMUP_STEPS:],
            )
        )
    arrivals: dict[int, float] = {}
    for rank_steps in window.steps.values():
        for step, at in rank_steps:
            arrivals[step] = max(arrivals.get(step, at), at)
    job: list[tuple[float, float]] = []
    for step in sorted(arrivals)[WARMUP_STEPS:]:
        secs = [own[step] for own in seconds.values() if step in own]
        if secs:
            job.append((arrivals[step], max(secs)))
    return nodes, job


def straggler_record(cause: StragglerCause) -> StragglerRecord:
    return StragglerRecord(
        node=cause.node,
        host=cause.host,
        cause=cause.cause.value,
        evidence=cause.evidence,
        window_start=cause.window.start,
        window_end=cause.window.end,
        slowdown_pct=round(cause.slowdown_pct, 2),
        what_if_pct=round(cause.what_if_pct, 2),
    )


def straggler_verdict(cause: StragglerCause) -> VerdictRecord:
    """The straggler as a RECORD verdict (never fails a run): every front-end and report lists it."""
    return VerdictRecord(
        metric="straggler",
        status="RECORD",
        expected="none",
        actual=round(cause.what_if_pct, 2),
        actual_text=f"node {cause.node} ({cause.host}): {cause.cause}",
        unit="% tokens/s without it",
        message=cause.line(),
    )
