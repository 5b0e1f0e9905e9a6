"""Findings, per-node health state, attribution to run and step, and the ``health.*`` metrics.

Pure data and functions: no I/O, no clock. The runner feeds findings in and asks which run/step a
finding belongs to and whether it fails that run; reports read the metrics.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from cvs_tui.core.events import HealthFindingEvent, HealthState, Severity


@dataclass(frozen=True, slots=True)
class HealthFinding:
    """A kernel line on ``node`` that matched ``signature``; times: since boot and since the epoch."""

    node: int
    signature: str
    severity: Severity
    line: str
    kernel_time: float
    wall_time: float
    host: str = ""
    detail: str = ""
    seq: int | None = None  # the kmsg sequence number (unique per boot and node)
    device: str | None = None  # the PCI address the line names
    incident: int | None = None  # the node's incident this line belongs to (1, 2, ...)

    def to_event(self, attribution: Attribution | None = None) -> HealthFindingEvent:
        a = attribution or Attribution()
        return HealthFindingEvent(
            node=self.node,
            host=self.host,
            signature=self.signature,
            severity=self.severity,
            line=self.line,
            kernel_time=self.kernel_time,
            wall_time=self.wall_time,
            detail=self.detail,
            run=a.run,
            step=a.step,
        )


@dataclass(slots=True)
class NodeHealth:
    """One node's kernel-log health: ``not checked`` until its log is being read, never ``ok`` before."""

    node: int
    host: str = ""
    checked: bool = False
    reason: str = "kernel log not read yet"
    findings: list[HealthFinding] = field(default_factory=list)

    def mark_checked(self) -> None:
        self.checked = True
        self.reason = ""

    def mark_not_checked(self, reason: str) -> None:
        self.checked = False
        self.reason = reason

    def add(self, finding: HealthFinding) -> None:
        self.findings.append(finding)

    @property
    def state(self) -> HealthState:
        # A fatal line read before access was lost still fails the node; otherwise unread = not checked.
        if any(f.severity is Severity.FATAL for f in self.findings):
            return HealthState.FAIL
        if not self.checked:
            return HealthState.NOT_CHECKED
        if self.findings:
            return HealthState.WARN
        return HealthState.OK


# ---------------------------------------------------------------------------------------------------------
# Attribution
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RunWindow:
    """One run's time span and, per node, its completed steps as ``(step, wall time)`` in time order."""

    run: str
    start: float
    end: float | None = None  # None while the run is still going
    steps: Mapping[int, Sequence[tuple[int, float]]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Attribution:
    """Where a finding falls. ``step`` is the step in progress on the finding's node (the last completed
    step + 1); None outside a run or before that node completed its first step (compile, start-up)."""

    run: str | None = None
    step: int | None = None
    last_completed_step: int | None = None

    @property
    def phase(self) -> str:
        if self.run is None:
            return "outside a run"
        return "before the first step" if self.last_completed_step is None else "training"


def attribute(finding: HealthFinding, windows: Iterable[RunWindow]) -> Attribution:
    """The run and step active on ``finding.node`` at ``finding.wall_time``.

    Runs do not overlap in a suite; if they did, the one that started last wins.
    """
    t = finding.wall_time
    active = [w for w in windows if w.start <= t and (w.end is None or t <= w.end)]
    if not active:
        return Attribution()
    w = max(active, key=lambda x: x.start)
    series = w.steps.get(finding.node, ())
    times = [at for _, at in series]
    i = bisect.bisect_right(times, t)
    if i == 0:
        return Attribution(run=w.run)
    last = series[i - 1][0]
    return Attribution(run=w.run, step=last + 1, last_completed_step=last)


def fails_run(finding: HealthFinding, attribution: Attribution) -> bool:
    """A fatal finding inside a run fails that run (the node is the root cause), trainer alive or not."""
    return finding.severity is Severity.FATAL and attribution.run is not None


def failure_reason(finding: HealthFinding) -> str:
    """The one-line run-failure reason for a fatal finding."""
    what = finding.signature + (f" ({finding.detail})" if finding.detail else "")
    where = finding.host or f"node {finding.node}"
    return f"node health: {what} on {where}: {finding.line[:200]}"


# ---------------------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------------------
# Names of the gateable health metrics (counts; lower is better). Proposed thresholds: see THRESHOLDS.
FATAL_FINDINGS = "health.findings.fatal"
WARNING_FINDINGS = "health.findings.warning"
NODES_FAILED = "health.nodes.fail"
NODES_WARN = "health.nodes.warn"
NODES_NOT_CHECKED = "health.nodes.not_checked"
ECC_CORRECTABLE_DELTA = "health.ecc.correctable_delta"
ECC_UNCORRECTABLE_DELTA = "health.ecc.uncorrectable_delta"

# Proposed default gates, metric -> maximum allowed; None = record only.
THRESHOLDS: dict[str, float | None] = {
    FATAL_FINDINGS: 0,
    WARNING_FINDINGS: None,
    NODES_NOT_CHECKED: None,  # strict sites set 0: an unread kernel log then fails the suite
    ECC_UNCORRECTABLE_DELTA: 0,
    ECC_CORRECTABLE_DELTA: None,
}


def health_metrics(
    findings: Iterable[HealthFinding],
    nodes: Iterable[NodeHealth] = (),
    *,
    ecc_correctable_delta: int | None = None,
    ecc_uncorrectable_delta: int | None = None,
) -> dict[str, float]:
    """``health.*`` metric values for one run (findings attributed to it) or a whole suite."""
    fl = list(findings)
    out: dict[str, float] = {
        FATAL_FINDINGS: float(sum(f.severity is Severity.FATAL for f in fl)),
        WARNING_FINDINGS: float(sum(f.severity is Severity.WARNING for f in fl)),
    }
    for sig in sorted({f.signature for f in fl}):
        out[f"health.signature.{sig}"] = float(sum(f.signature == sig for f in fl))
    nl = list(nodes)
    if nl:
        states = [n.state for n in nl]
        out[NODES_FAILED] = float(states.count(HealthState.FAIL))
        out[NODES_WARN] = float(states.count(HealthState.WARN))
        out[NODES_NOT_CHECKED] = float(states.count(HealthState.NOT_CHECKED))
    if ecc_correctable_delta is not None:
        out[ECC_CORRECTABLE_DELTA] = float(ecc_correctable_delta)
    if ecc_uncorrectable_delta is not None:
        out[ECC_UNCORRECTABLE_DELTA] = float(ecc_uncorrectable_delta)
    return out
