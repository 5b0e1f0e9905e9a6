"""`cvs-tui analyze` of long runs: each node log is judged from its digest, so the process that combines
the nodes holds at most SERIES_CAP steps per node, and every metric and verdict is the one the judge
gives with every series whole (no cap). The logs are generated MaxText step lines (absl headers,
a checkpoint save every 2,500 steps, one inserted stall): tens of thousands of steps are not in any
fixture."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import pytest
from _analysis_samples import FIXTURES, load_local, planned

from cvs_tui.core.events import StepEvent
from cvs_tui.core.judge import node
from cvs_tui.core.judge.facts import RunFacts
from cvs_tui.core.judge.finalize import finalize_run
from cvs_tui.core.judge.node import NodeDigest
from cvs_tui.core.judge.records import bounded_window
from cvs_tui.core.judge.series import SERIES_CAP, curve_points, thin
from cvs_tui.core.plan import PlannedRun
from cvs_tui.core.results import RunRecord
from cvs_tui.core.sources import offline

KEY = "BS=2,PRECISION=BF16,SL=128"
STALL_AT = 7_777
STALL_SECONDS = 9.5


def _head() -> str:
    text = (FIXTURES / "single_20steps.log").read_text()
    return text[: text.index("I1130 07:28:34.235634")]


def write_log(path: Path, steps: int, *, seed: int, slower: float = 1.0) -> None:
    """A node log of ``steps`` train steps: ~20 ms steps with jitter, a checkpoint save every 2,500
    steps, and step STALL_AT taking STALL_SECONDS (its line and the clock jump with it)."""
    rnd = random.Random(seed)
    t = 6 * 3600.0
    out = [_head()]
    for s in range(steps):
        sec = (STALL_SECONDS if s == STALL_AT else 0.02 * rnd.lognormvariate(0, 0.1)) * slower
        t += sec
        hh, mm, ss = int(t // 3600), int(t % 3600 // 60), t % 60
        stamp = f"I1130 {hh:02d}:{mm:02d}:{ss:09.6f} 139736357583744"
        loss = 7.5 * (0.9999**s) + rnd.uniform(-0.01, 0.01)
        out.append(
            f"{stamp} metric_logger.py:265] completed step: {s}, seconds: {sec:.3f}, TFLOP/s/device: "
            f"{0.04 / sec:.3f}, Tokens/s/device: {512 / sec:.3f}, total_weights: 256, loss: {loss:.3f}, "
            f"lm_loss: {loss:.3f}, perplexity: 1800.000\n"
        )
        if s % 2500 == 0 and s:
            out.append(f"{stamp} checkpoint_manager.py:1527] [process=0] Saving checkpoint at step {s}\n")
    path.write_text("".join(out))


def _exact(run: PlannedRun, logs: list[Path]) -> RunRecord:
    """The judge with every series whole: every event of every node parsed in this process, no cap."""
    parsed = [offline.parse_log_file(p, None) for p in logs]
    cap = node.SERIES_CAP
    node.SERIES_CAP = 1 << 40
    try:
        return finalize_run(
            run,
            [evs for evs, _ in parsed],
            RunFacts(node_logs=logs, node_lines=[n for _, n in parsed]),
        )
    finally:
        node.SERIES_CAP = cap


def _same_judgement(big: RunRecord, exact: RunRecord) -> None:
    assert big.metrics == exact.metrics
    assert big.verdicts == exact.verdicts
    assert (big.outcome, big.reason, big.status) == (exact.outcome, exact.reason, exact.status)
    assert big.window == bounded_window(exact.window, SERIES_CAP)
    # the loss curve's slope is the exact one; its listed points are the exact ones, bounded
    assert big.loss_curve is not None and exact.loss_curve is not None
    assert big.loss_curve.model_dump(exclude={"points"}) == exact.loss_curve.model_dump(exclude={"points"})
    assert big.loss_curve.points == curve_points(exact.loss_curve.points, SERIES_CAP)
    assert big.errors == exact.errors and big.environment == exact.environment
    for b, e in zip(big.nodes, exact.nodes, strict=True):
        # every figure but the series is the same; the series are the exact ones, bounded
        assert b.model_dump(exclude={"steps", "window"}) == e.model_dump(exclude={"steps", "window"})
        assert b.window is not None and e.window is not None
        assert b.window.steps == thin(e.window.steps, SERIES_CAP)
        assert b.window.excluded == e.window.excluded
        kept = {p.step for p in b.steps}
        assert [p for p in e.steps if p.step in kept] == b.steps


@pytest.mark.parametrize("steps", [30_000, pytest.param(200_000, marks=pytest.mark.slow)])
def test_a_long_run_is_judged_as_the_exact_judge_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, steps: int
) -> None:
    logs = [tmp_path / "node0.log", tmp_path / "node1.log"]
    write_log(logs[0], steps, seed=1)
    write_log(logs[1], steps, seed=2, slower=1.02)
    loaded = load_local(tmp_path, steps=steps, runs=[KEY])
    run = planned(loaded, KEY)
    held: list[NodeDigest] = []
    finalize = offline.judge_run

    def spy(r: PlannedRun, digests: Sequence[NodeDigest], facts: RunFacts | None = None) -> RunRecord:
        held.extend(digests)
        return finalize(r, digests, facts)

    monkeypatch.setattr(offline, "judge_run", spy)
    big = offline.analyze_node_logs(run, logs, error_patterns=None)
    # what the combining process held per node: bounded series, no window steps, two step lines at most
    for d in held:
        assert len(d.record.steps) <= SERIES_CAP and d.record.window is not None
        assert len(d.record.window.steps) <= SERIES_CAP and d.window.steps == []
        assert sum(isinstance(e, StepEvent) for e in d.events) <= 2
        assert d.step_records == steps and d.thinned
    exact = _exact(run, logs)
    _same_judgement(big, exact)
    assert big.notes[:-2] == exact.notes and "bounded at 2,000 entries per node" in big.notes[-1]
    # the curve (every 10th step sampled) lists at most SERIES_CAP points, its verdict counts all
    sampled = len(exact.loss_curve.points) if exact.loss_curve else 0
    assert sampled > SERIES_CAP and big.loss_curve and len(big.loss_curve.points) <= SERIES_CAP
    assert f"loss curve bounded at 2,000 points ({sampled:,} sampled points)" in big.notes[-2]
    slope = next(v for v in big.verdicts if v.metric == "training.loss_curve_slope")
    assert f"over {sampled} points" in slope.message
    # the inserted stall is found on every node, and it stays on the bounded series and its chart
    for rec in big.nodes:
        assert [s.step for s in rec.stalls] == [STALL_AT]
        assert any(p.step == STALL_AT and p.seconds and p.seconds > 9 for p in rec.steps)
        assert rec.steps[-1].step == steps - 1
    assert big.outcome == "complete" and big.window.clean_steps > steps * 0.9


def test_a_short_run_keeps_every_step_and_adds_no_note(tmp_path: Path) -> None:
    """Below the cap the digest path gives the exact record, series included."""
    logs = [tmp_path / "node0.log"]
    write_log(logs[0], 1_500, seed=3)
    loaded = load_local(tmp_path, steps=1_500, runs=[KEY])
    run = planned(loaded, KEY)
    assert offline.analyze_node_logs(run, logs, error_patterns=None) == _exact(run, logs)


def test_the_pool_gives_the_same_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    logs = [tmp_path / "node0.log", tmp_path / "node1.log"]
    write_log(logs[0], 3_000, seed=4)
    write_log(logs[1], 3_000, seed=5)
    loaded = load_local(tmp_path, steps=3_000, runs=[KEY])
    run = planned(loaded, KEY)
    here = offline.analyze_node_logs(run, logs, error_patterns=None, workers=1)
    monkeypatch.setattr(offline, "POOL_MIN_BYTES", 0)
    pooled = offline.analyze_node_logs(run, logs, error_patterns=None, workers=2)
    assert pooled == here and pooled.nodes[1].steps_logged == 3_000


def test_resume_verdicts_compare_every_step_when_the_series_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkpoint-resume verdicts compare phase 2 with the reference run step by step: with the series
    bounded (here at 4 entries, the fixtures are short) they still see every step."""
    from _analysis_samples import write_config

    from cvs_tui.core.config.loader import load_config

    cfg = write_config(tmp_path, steps=12, runs=[KEY])
    folder = tmp_path / "run-1"
    for sub, src in [("CKPT_1", "ckpt_phase1"), ("CKPT_2", "ckpt_phase2"), ("CKPT_REF", "ckpt_reference")]:
        (folder / "logs" / sub).mkdir(parents=True)
        (folder / "logs" / sub / "node0.log").write_bytes((FIXTURES / f"{src}.log").read_bytes())
    whole = offline.analyze_paths(load_config(cfg), [folder])
    monkeypatch.setattr(node, "SERIES_CAP", 4)
    bounded = offline.analyze_paths(load_config(cfg), [folder])
    p2_whole, p2_bounded = whole.runs[1], bounded.runs[1]
    assert len(p2_bounded.nodes[0].steps) <= 4 < len(p2_whole.nodes[0].steps)
    assert "bounded at 4 entries" in p2_bounded.notes[-1]
    resume = [v for v in p2_whole.verdicts if v.metric.startswith("checkpoint.")]
    assert len(resume) == 3 and "6..11" in resume[1].message
    assert [v for v in p2_bounded.verdicts if v.metric.startswith("checkpoint.")] == resume


def test_the_file_clock_is_the_line_clock(tmp_path: Path) -> None:
    """Reading a log's clock a block at a time gives the clock of its whole text, whatever its endings."""
    from cvs_tui.core.judge.clock import file_line_clock, line_clock

    for log in sorted(FIXTURES.glob("*.log")):
        data = log.read_bytes()
        for variant in (data, data.rstrip(b"\n"), data.replace(b"\n", b"\r\n")):
            path = tmp_path / "node.log"
            path.write_bytes(variant)
            assert file_line_clock(path) == line_clock(variant), log.name
    assert line_clock((FIXTURES / "stall_sigstop.log").read_bytes())  # the fixtures do carry times


def test_a_bounded_loss_curve_keeps_its_ends_and_extremes() -> None:
    """curve_points: the points themselves up to the cap; above it at most cap points, the first and the
    last, and in every bucket the lowest and the highest loss (a spike stays on the chart)."""
    rnd = random.Random(7)
    pts = [(s * 10, 7.0 - s * 1e-4 + rnd.uniform(-0.01, 0.01)) for s in range(50_000)]
    pts[31_337] = (313_370, 99.0)
    pts[4_242] = (42_420, -5.0)
    assert curve_points(pts[:SERIES_CAP], SERIES_CAP) == pts[:SERIES_CAP]
    for cap in (4, 100, SERIES_CAP):
        got = curve_points(pts, cap)
        assert len(got) <= cap and got == sorted(got) and set(got) <= set(pts)
        assert got[0] == pts[0] and got[-1] == pts[-1]
        assert (313_370, 99.0) in got and (42_420, -5.0) in got
