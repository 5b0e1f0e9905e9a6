"""Stalls on real MaxText CPU runs (``tests/fixtures/maxtext/regen_stalls.sh`` makes the logs).

* ``stall_sigstop.log``: a 200-step run stopped with SIGSTOP for about 4 s once its log showed step 100,
  then resumed (``stall_sigstop.json`` holds when, as the log's clock prints it);
  ``stall_baseline.log``: the same run at the same time, never paused.
* ``stall_async_ckpt.log``: 60 steps with ``async_checkpointing=true``, a save every 10 steps.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from _judge_events import node_window

from cvs_tui.core.events import LogEvent, StepEvent
from cvs_tui.core.judge.background import background_intervals
from cvs_tui.core.judge.clock import absl_clock_time, line_clock
from cvs_tui.core.judge.stalls import StallReport
from cvs_tui.core.parse.parser import parse_log_bytes

FIX = Path(__file__).parents[1] / "fixtures" / "maxtext"


def _load(name: str) -> tuple[bytes, list[LogEvent], dict[int, float], StallReport]:
    data = (FIX / name).read_bytes()
    events = parse_log_bytes(data)
    clock = line_clock(data)
    report = node_window(events, clock).stalls
    assert report is not None
    return data, events, clock, report


def _steady(events: list[LogEvent], clock: dict[int, float]) -> tuple[int, ...]:
    """The judged steps that are not stalls: in these runs (no save, eval or profiler) the window."""
    return tuple(node_window(events, clock).steps)


def _tokens_per_s(events: list[LogEvent], keep: set[int]) -> float:
    """Tokens per second over the given steps: tokens in them over their time, never a mean of rates."""
    steps = [e for e in events if isinstance(e, StepEvent) and e.step in keep]
    tokens = sum((e.tokens_per_device or 0.0) * (e.seconds or 0.0) for e in steps)
    return tokens / sum(e.seconds or 0.0 for e in steps)


def _block_rates(events: list[LogEvent], steps: tuple[int, ...], blocks: int = 4) -> list[float]:
    size = len(steps) // blocks
    return [_tokens_per_s(events, set(steps[k * size : (k + 1) * size])) for k in range(blocks)]


def test_the_sigstop_pause_is_the_one_stall() -> None:
    data, _events, clock, report = _load("stall_sigstop.log")
    pause = json.loads((FIX / "stall_sigstop.json").read_text())
    assert report.stall_count == 1
    (stall,) = report.stalls
    assert stall.source == "seconds"
    assert stall.step > pause["pause_after_step_line"]
    assert abs(stall.excess - pause["pause_seconds"]) < 0.5
    assert stall.reason.endswith(", unexplained")  # no checkpoint, eval or profiler in this run
    # the stall's estimated wall interval is where the process really was stopped
    line_no = pause["pause_after_step_line"]
    text = data.decode()
    head = re.search(rf"^I(\d{{4}} [\d:.]+) \d+ \S+\] completed step: {line_no},", text, re.M)
    assert head is not None
    line = text.count("\n", 0, head.start()) + 1
    offset = clock[line] - absl_clock_time(head.group(1))
    stop = absl_clock_time(pause["stop_clock"]) + offset
    cont = absl_clock_time(pause["cont_clock"]) + offset
    assert stall.start is not None and stall.end is not None
    # placed from the running sum of seconds, anchored on step lines written a step or two late: as
    # precise as the two median steps of slack the attribution allows
    tolerance = 2 * stall.median
    assert abs(stall.start - stop) < tolerance and abs(stall.end - cont) < tolerance


def test_goodput_of_the_paused_run_is_below_100() -> None:
    _data, _events, _clock, paused = _load("stall_sigstop.log")
    _data, _events, _clock, baseline = _load("stall_baseline.log")
    goodput = paused.goodput_pct()
    assert goodput is not None and goodput < 100.0
    (stall,) = paused.stalls
    expected = 100.0 * (paused.wall_seconds - stall.excess) / paused.wall_seconds
    assert abs(goodput - expected) < 1.0
    assert baseline.stall_count == 0
    assert baseline.goodput_pct() is not None and abs((baseline.goodput_pct() or 0.0) - 100.0) < 1e-9


def test_steady_rate_without_the_stall_is_within_the_unpaused_noise() -> None:
    _d, paused_events, paused_clock, paused = _load("stall_sigstop.log")
    _d, base_events, base_clock, _baseline = _load("stall_baseline.log")
    blocks = _block_rates(base_events, _steady(base_events, base_clock))
    low, high = min(blocks), max(blocks)
    steady_steps = _steady(paused_events, paused_clock)
    steady = _tokens_per_s(paused_events, set(steady_steps))
    assert low <= steady <= high, (steady, blocks)
    # before: the stall left in the window drags the rate down by about its share of the time
    (stall,) = paused.stalls
    judged = set(steady_steps) | {stall.step}
    before = _tokens_per_s(paused_events, judged)
    assert before < steady * (1.0 - 0.5 * stall.excess / paused.wall_seconds)


def test_async_checkpoint_saves_are_real_intervals_and_stalls_land_on_them() -> None:
    _data, events, clock, report = _load("stall_async_ckpt.log")
    saves = [iv for iv in background_intervals(events, clock) if iv.kind == "save"]
    assert [iv.step for iv in saves] == [0, 10, 20, 30, 40, 50, 59]
    for iv in saves:
        assert iv.label.startswith(f"the async save of step {iv.step} (background save ")
        assert iv.start is not None and iv.end is not None and iv.end > iv.start
    assert report.stall_count >= 1
    for stall in report.stalls:
        assert stall.cause is not None and stall.cause.kind == "save", stall.reason
        assert not stall.by_step_number
        # found by time; the step numbers agree: a save of step S blocks the interval of S+1
        assert stall.cause.step is not None and 0 <= stall.step - stall.cause.step <= 2, stall.reason
