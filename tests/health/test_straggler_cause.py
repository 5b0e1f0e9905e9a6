"""The straggler's node and cause class on injected scenarios (tests/health/_straggler_scenarios.py: replays
of real amd-smi and nvidia-smi output and real kernel lines with the fault written into copies), and none
on clean runs. benchmarks/straggler_cause.py prints the figures per vendor."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from _straggler_scenarios import NV_FIELDS_BEFORE, clean, corpus, scenario

from cvs_tui.core.health.host import host_point, parse_probe
from cvs_tui.core.health.straggler import Cause, NodeEvidence, find_straggler, slow_window
from cvs_tui.core.health.telemetry import parse_amd_smi_metric

PER_CAUSE = 8


def test_the_slowed_node_and_its_cause_class_are_named_in_at_least_85_percent() -> None:
    right: Counter[Cause] = Counter()
    scenarios = corpus(seed=30, per_cause=PER_CAUSE)
    misses = []
    for sc in scenarios:
        got = find_straggler(sc.nodes, sc.job)
        assert sc.cause is not None
        if got is not None and got.node == sc.slow_node and got.cause is sc.cause:
            right[sc.cause] += 1
            assert got.what_if_pct > 0 and got.slowdown_pct > 0
            assert got.line().startswith(f"straggler: node {sc.slow_node} (n{sc.slow_node}), {sc.cause}: ")
        else:
            misses.append((sc.cause, round(sc.slowdown, 3), got and (got.node, got.cause)))
    share = sum(right.values()) / len(scenarios)
    assert share >= 0.85, (share, misses)
    assert all(right[c] >= PER_CAUSE // 2 for c in Cause), right  # no class is left to chance


def test_no_straggler_is_named_on_clean_runs() -> None:
    named = [got.line() for sc in clean(seed=31, count=30) if (got := find_straggler(sc.nodes, sc.job))]
    assert named == []


def test_on_nvidia_nodes_the_cause_class_is_named_as_on_amd() -> None:
    """Replays of a recorded H100's ``nvidia-smi -q`` with the fault in its own sections (clock event
    reasons, SM clock, GPU Link Info, ECC and remapped rows), read as the ``--query-gpu`` fields."""
    right: Counter[Cause] = Counter()
    scenarios = corpus(seed=30, per_cause=PER_CAUSE, vendor="nvidia")
    misses = []
    for sc in scenarios:
        got = find_straggler(sc.nodes, sc.job)
        if got is not None and got.node == sc.slow_node and got.cause is sc.cause:
            right[got.cause] += 1
        else:
            misses.append((sc.cause, round(sc.slowdown, 3), got and (got.node, got.cause)))
    assert sum(right.values()) / len(scenarios) >= 0.85, misses
    assert all(right[c] >= PER_CAUSE // 2 for c in Cause), right
    named = [g.line() for sc in clean(31, 20, vendor="nvidia") if (g := find_straggler(sc.nodes, sc.job))]
    assert named == []


def _nvidia(seed: int, cause: Cause, count: int, **kw: Any) -> list[str]:
    """The evidence named for ``count`` NVIDIA scenarios of ``cause`` (those whose cause was named)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        sc = scenario(rng, cause, "nvidia", **kw)
        got = find_straggler(sc.nodes, sc.job)
        out.append(got.evidence if got is not None and got.cause is cause else "")
    return out


def test_nvidia_evidence_names_the_reason_the_link_maximum_and_the_remapped_rows() -> None:
    throttle = _nvidia(35, Cause.THROTTLE, 3)
    assert all(any(r in e for r in ("SW power cap", "HW slowdown", "SW thermal slowdown")) for e in throttle)
    assert all("(its maximum " in e for e in _nvidia(35, Cause.LINK, 2))
    assert all("remapped rows +" in e for e in _nvidia(36, Cause.ECC, 2, ecc_via_rows=True))
    assert all("ECC error totals +" in e for e in _nvidia(36, Cause.ECC, 2, ecc_via_rows=False))


def test_without_the_new_nvidia_fields_a_throttle_is_no_throttle() -> None:
    """The baseline: asked only the 10 fields read before, a throttled node is at best a clock drop."""
    assert _nvidia(30, Cause.THROTTLE, 2, nv_fields=NV_FIELDS_BEFORE) == ["", ""]


def test_a_slowdown_no_node_explains_names_no_one() -> None:
    """The job slowed, but every node's samples stayed as they were: no straggler is invented."""
    rng = random.Random(32)
    sc = scenario(rng, Cause.CLOCK)
    healthy = scenario(random.Random(33), None)
    n = min(len(sc.nodes), len(healthy.nodes))
    nodes = [replace(h, node=k) for k, h in enumerate(healthy.nodes[:n])]
    assert slow_window(sc.job) is not None
    assert find_straggler(nodes, sc.job) is None


def test_the_what_if_is_the_time_the_window_lost() -> None:
    job = [(float(i), 1.0) for i in range(1, 41)] + [(40.0 + 1.2 * i, 1.2) for i in range(1, 21)]
    w = slow_window(job)
    assert w is not None and w.healthy_s == 1.0 and w.slow_s == pytest.approx(1.2)
    # 64 s run, 4 s lost to the window: without it the run takes 60 s, 6.7 % more tokens/s
    assert w.lost_s == pytest.approx(4.0) and w.total_s == pytest.approx(64.0)


def test_a_node_lagging_on_its_own_is_its_own_window() -> None:
    """Independent ranks (no collective): the slow node's own step times lag; a CPU quota explains it."""
    base = [0.25] * 100
    fast = NodeEvidence(0, "a", step_seconds=base)
    probe = "cpu  1000 0 0 0 0 0 0 0 0 0\nsched 1 0 1\ncg throttled_time {}\n"
    pts = [host_point(parse_probe(probe.format(0), 0.0), parse_probe(probe.format(2_000_000_000), 5.0))]
    calm = [host_point(parse_probe(probe.format(0), 0.0), parse_probe(probe.format(0), 5.0))]
    at2 = [p.model_copy(update={"at": 2.0}) for p in pts]
    slow = NodeEvidence(1, "b", step_seconds=[0.30] * 100, host_timing=at2)
    fast = replace(fast, host_timing=[p.model_copy(update={"at": 2.0}) for p in calm])
    job = [(0.3 * i, 0.30) for i in range(1, 101)]
    got = find_straggler([fast, slow], job)
    assert got is not None and (got.node, got.cause) == (1, Cause.HOST_CPU)
    assert "trainer throttled by its CPU quota 40 % in the window vs 0 %" in got.evidence


def test_amd_smi_throttle_and_link_fields_are_read_from_the_recording() -> None:
    import json

    from _straggler_scenarios import RECORDED

    (s,) = parse_amd_smi_metric(json.dumps(RECORDED))
    assert (s.throttled, s.pcie_width, s.pcie_speed_gts, s.gfx_clock_mhz) == (False, 8, 16.0, 800.0)


def test_the_host_probe_reads_steal_pressure_and_the_trainer_cgroup() -> None:
    a = parse_probe(
        "cpu  100 0 50 800 0 0 0 50 7 0\npsi some avg10=1.50 avg60=0 avg300=0 total=9\n"
        "sched 5 1000000000 3\ncg nr_throttled 1\ncg throttled_usec 500000\n",
        10.0,
    )
    b = parse_probe(
        "cpu  200 0 50 800 0 0 0 150 7 0\npsi some avg10=22.00 avg60=0 avg300=0 total=9\n"
        "sched 5 2000000000 3\ncg throttled_usec 3000000\n",
        15.0,
    )
    p = host_point(a, b)
    assert (p.steal_pct, p.cpu_pressure_pct, p.trainer_wait_pct, p.trainer_throttled_pct) == (
        50.0,
        22.0,
        20.0,
        50.0,
    )
    none = host_point(parse_probe("", 0.0), parse_probe("psi \n", 5.0))  # nothing readable: None, never 0
    assert (none.steal_pct, none.cpu_pressure_pct, none.trainer_throttled_pct) == (None, None, None)


def test_the_console_prints_the_straggler_after_the_run_end_line() -> None:
    from rich.console import Console

    from cvs_tui.cli.console import ConsoleView
    from cvs_tui.core.events import RunEndEvent, RunOutcome, RunStartEvent, VerdictEvent

    console = Console(record=True, width=300, color_system=None)
    cv = ConsoleView(console)
    line = (
        "straggler: node 1 (n1), clock drop: graphics clock 1700 MHz vs 2100 MHz on the other nodes (-19 %)"
    )
    cv.handle(RunStartEvent("R", 10, ("n0", "n1")))
    cv.handle(VerdictEvent("R", "straggler", "RECORD", "none", 4.2, "% tokens/s without it", line))
    console.export_text(clear=True)
    cv.handle(RunEndEvent("R", RunOutcome.COMPLETE))
    out = console.export_text(clear=True).splitlines()
    assert out[-2].startswith("run R complete") and out[-1] == f"  {line}"


def test_the_report_names_the_straggler_and_its_cause(tmp_path: Path) -> None:
    from _analysis_samples import load_local, sample_results

    from cvs_tui.core.health.straggler import straggler_record, straggler_verdict
    from cvs_tui.core.report import write_reports

    results = sample_results(load_local(tmp_path / "", steps=20))
    sc = corpus(seed=34, per_cause=1)[0]
    got = find_straggler(sc.nodes, sc.job)
    assert got is not None
    run = results.runs[0]
    run.straggler_cause = straggler_record(got)
    run.verdicts.append(straggler_verdict(got))
    write_reports(results, tmp_path)
    html = (tmp_path / "report.html").read_text()
    assert f"Straggler: node {got.node} (n{got.node}), <b>{got.cause}</b>" in html
    assert f"without node {got.node}: +{got.what_if_pct:.1f} % tokens/s" in html
    assert (
        got.line() in (tmp_path / "summary.md").read_text()
        or "straggler" in (tmp_path / "summary.md").read_text()
    )
