"""Stalls past their gate, live (judge/live_stalls.py): the real stalled MaxText CPU run of
tests/fixtures/maxtext (stopped with SIGSTOP for about 4 s after step 100's line) read step by step, as a
live run reads it, against an enforced stall gate; then judged whole by `analyze`, whose verdict on the
same gate must fail in the same words."""

from __future__ import annotations

from pathlib import Path

import pytest
from _analysis_samples import FIXTURES, load_local

from cvs_tui.core.config.blocks import ThresholdKind, ThresholdSpec
from cvs_tui.core.events import StepEvent, StepKind
from cvs_tui.core.judge.live_stalls import LiveStalls
from cvs_tui.core.judge.window import WARMUP_STEPS
from cvs_tui.core.parse import NodeLogParser
from cvs_tui.core.sources.offline import analyze_paths

KEY = "BS=2,PRECISION=BF16,SL=128"


def _steps(log: str) -> list[StepEvent]:
    p = NodeLogParser()
    evs = [*p.feed((FIXTURES / log).read_bytes()), *p.finish()]
    return [e for e in evs if isinstance(e, StepEvent) and e.kind is StepKind.TRAIN]


def _live(log: str, metric: str, value: float) -> tuple[LiveStalls, int | None]:
    gate = {metric: ThresholdSpec(kind=ThresholdKind.MAX, value=value)}
    live = LiveStalls(gate, enforce=True, ranks=1, warmup=WARMUP_STEPS)
    for ev in _steps(log):
        if live.on_step(0, ev.step, ev.seconds) is not None:
            return live, ev.step
    return live, None


@pytest.mark.parametrize(
    ("metric", "value"),
    [("training.longest_stall_seconds", 2.0), ("training.stall_count", 0.0), ("training.stall_seconds", 1.0)],
)
def test_a_stall_past_its_gate_is_told_at_its_step_in_the_judges_words(
    tmp_path: Path, metric: str, value: float
) -> None:
    live, at = _live("stall_sigstop.log", metric, value)
    assert live.broken is not None and at is not None
    assert 100 < at <= 104 and live.broken.step == at  # the step whose seconds hold the pause
    loaded = load_local(
        tmp_path, steps=200, runs=[KEY], thresholds={KEY: {metric: {"kind": "max", "value": value}}}
    )
    run = analyze_paths(loaded, [FIXTURES / "stall_sigstop.log"], KEY).runs[0]
    final = next(v for v in run.verdicts if v.metric == metric)
    assert final.status == "FAIL"
    # the same rule, the same words; the figure is the one known so far (the median of the steps so far)
    assert live.broken.message.split(": actual ")[0] == final.message.split(": actual ")[0] == metric
    assert live.broken.message.endswith(f"> max {value:g}") and final.message.endswith(f"> max {value:g}")
    assert live.broken.actual == pytest.approx(final.actual, rel=0.05)


def test_no_gate_is_broken_by_the_unpaused_run_or_under_a_wider_gate() -> None:
    assert _live("stall_baseline.log", "training.stall_count", 0.0)[0].broken is None
    assert _live("stall_sigstop.log", "training.longest_stall_seconds", 10.0)[0].broken is None


def test_a_stall_in_progress_breaks_the_gate_before_its_step_line_comes() -> None:
    gate = {"training.longest_stall_seconds": ThresholdSpec(kind=ThresholdKind.MAX, value=2.0)}
    live = LiveStalls(gate, enforce=True, ranks=2, warmup=WARMUP_STEPS)
    for step in range(1, 40):
        assert live.on_step(step % 2, step // 2, 0.25) is None
        assert live.on_step(1 - step % 2, step // 2, 0.25) is None
    assert live.on_silence(1, 1.0) is None  # past the limit (1.25 s) it is a stall, not before
    assert live.on_silence(1, 2.0) is None  # a stall, not yet past the gate (1.75 s lost)
    broken = live.on_silence(1, 2.5)
    assert broken is not None and broken.node == 1 and broken.step == 20
    assert broken.message == "training.longest_stall_seconds: actual 2.2500 > max 2"


def test_without_an_enforced_stall_gate_nothing_is_kept() -> None:
    info = {"training.stall_count": ThresholdSpec(kind=ThresholdKind.INFO, value=0.0)}
    assert not LiveStalls(info, enforce=True, ranks=1, warmup=3).gates
    gated = {"training.stall_count": ThresholdSpec(kind=ThresholdKind.MAX, value=0.0)}
    assert not LiveStalls(gated, enforce=False, ranks=1, warmup=3).gates
