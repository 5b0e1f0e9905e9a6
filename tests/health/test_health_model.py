"""Findings, per-node health state, attribution to run/step, health.* metrics."""

from __future__ import annotations

from cvs_tui.core.events import HealthState, Severity
from cvs_tui.core.health.model import (
    FATAL_FINDINGS,
    NODES_NOT_CHECKED,
    HealthFinding,
    NodeHealth,
    RunWindow,
    attribute,
    fails_run,
    failure_reason,
    health_metrics,
)


def _f(node: int, t: float, sev: Severity = Severity.FATAL, sig: str = "amdgpu_reset") -> HealthFinding:
    return HealthFinding(
        node, sig, sev, "amdgpu 0000:08:00.0: amdgpu: GPU reset begin!", t - 1000.0, t, host=f"n{node}"
    )


RUNS = [
    RunWindow("SMOKE", start=100.0, end=200.0, steps={0: [(0, 130.0), (1, 140.0)], 1: [(0, 131.0)]}),
    RunWindow("2x8", start=210.0, end=None, steps={0: [(0, 250.0), (1, 255.0), (2, 260.0)], 1: []}),
]


def test_node_state_never_ok_before_the_log_is_read() -> None:
    n = NodeHealth(node=0)
    assert n.state is HealthState.NOT_CHECKED
    n.mark_checked()
    assert n.state is HealthState.OK
    n.add(_f(0, 1.0, Severity.WARNING))
    assert n.state is HealthState.WARN
    n.add(_f(0, 2.0))
    assert n.state is HealthState.FAIL
    u = NodeHealth(node=1)
    u.mark_not_checked("cannot read /dev/kmsg as the login user: Operation not permitted")
    assert u.state is HealthState.NOT_CHECKED and "Operation not permitted" in u.reason


def test_attribution_run_and_step_in_progress() -> None:
    a = attribute(_f(0, 257.0), RUNS)
    assert (a.run, a.step, a.last_completed_step, a.phase) == ("2x8", 2, 1, "training")
    assert fails_run(_f(0, 257.0), a)


def test_finding_before_the_first_step_belongs_to_the_run_with_no_step() -> None:
    a = attribute(_f(1, 220.0), RUNS)
    assert (a.run, a.step, a.phase) == ("2x8", None, "before the first step")
    assert fails_run(_f(1, 220.0), a)  # a fatal line during compile still fails the run


def test_outside_any_run_and_warnings_do_not_fail() -> None:
    gap = attribute(_f(0, 205.0), RUNS)
    assert gap.run is None and not fails_run(_f(0, 205.0), gap)
    w = _f(0, 135.0, Severity.WARNING, "amdgpu_throttled")
    a = attribute(w, RUNS)
    assert (a.run, a.step) == ("SMOKE", 1) and not fails_run(w, a)


def test_event_and_reason_carry_node_run_step() -> None:
    f = _f(1, 131.5)
    ev = f.to_event(attribute(f, RUNS))
    assert (ev.node, ev.run, ev.step, ev.signature) == (1, "SMOKE", 1, "amdgpu_reset")
    assert failure_reason(f).startswith("node health: amdgpu_reset on n1: amdgpu 0000:08:00.0")


def test_metrics_count_per_severity_and_nodes() -> None:
    n0, n1 = NodeHealth(0), NodeHealth(1)
    n0.mark_checked()
    fs = [_f(0, 1.0), _f(0, 2.0, Severity.WARNING, "amdgpu_throttled")]
    for f in fs:
        n0.add(f)
    m = health_metrics(fs, [n0, n1], ecc_uncorrectable_delta=2)
    assert m[FATAL_FINDINGS] == 1.0 and m["health.findings.warning"] == 1.0
    assert m["health.signature.amdgpu_throttled"] == 1.0
    assert m["health.nodes.fail"] == 1.0 and m[NODES_NOT_CHECKED] == 1.0
    assert m["health.ecc.uncorrectable_delta"] == 2.0
