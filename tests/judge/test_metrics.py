"""Metric maths on hand-built event lists: window rules, throughput, multi-node totals, loss, convergence."""

from __future__ import annotations

import math

import pytest
from _judge_events import compute_metrics, node_window
from hypothesis import given, settings
from hypothesis import strategies as st

from cvs_tui.core.config.blocks import Convergence, LossCurve, ScalingBaseline
from cvs_tui.core.events import (
    CheckpointAction,
    CheckpointEvent,
    DevicesEvent,
    EvalDialect,
    EvalEvent,
    EvalStartEvent,
    StepEvent,
    StepKind,
    SystemInfoEvent,
    TflopsPerStepEvent,
)
from cvs_tui.core.judge.definitions import DevicePeak, device_peak, peak_tflops
from cvs_tui.core.judge.metrics import RunContext, percentile
from cvs_tui.core.judge.steady import band
from cvs_tui.core.judge.window import MIN_CLEAN_STEPS


def steps(
    n: int,
    *,
    secs: float = 2.0,
    tok: float = 1000.0,
    tfl: float = 100.0,
    start: int = 0,
    loss0: float = 10.0,
    line0: int = 100,
) -> list[StepEvent]:
    return [
        StepEvent(
            step=s,
            loss=loss0 - 0.1 * (s - start),
            line=line0 + 2 * (s - start),
            seconds=secs,
            tflops_per_device=tfl,
            tokens_per_device=tok,
        )
        for s in range(start, start + n)
    ]


def ctx(**kw) -> RunContext:
    base = dict(num_nodes=1, gpus_per_node=8)
    base.update(kw)
    return RunContext(**base)


def test_warmup_is_dropped_and_throughput_is_window_tokens_over_window_time() -> None:
    evs = steps(12)
    # step 0 is a 60 s compile step with an absurd rate; a mean of rates would be polluted by it
    evs[0] = StepEvent(
        step=0, loss=10.0, line=100, seconds=60.0, tflops_per_device=3.0, tokens_per_device=30.0
    )
    # a dispatch artefact: very short step with a huge rate, followed by a long one
    evs[6] = StepEvent(
        step=6, loss=9.4, line=112, seconds=0.5, tflops_per_device=400.0, tokens_per_device=4000.0
    )
    evs[7] = StepEvent(
        step=7, loss=9.3, line=114, seconds=3.5, tflops_per_device=400 / 7, tokens_per_device=4000 / 7
    )
    out = compute_metrics([evs], ctx())
    assert out.window_steps == list(range(3, 12))
    assert out.node_windows[0].excluded[0].startswith("warm-up")
    m = out.metrics
    assert m["training.step_time_seconds"].value == pytest.approx(2.0)
    # tokens in window: 7 normal steps x 2000 + 2000 + 2000 = 18000 over 18 s
    assert m["training.tokens_per_sec_per_gpu"].value == pytest.approx(1000.0)
    assert m["training.tflops_per_sec_per_gpu"].value == pytest.approx(100.0)
    assert m["training.tokens_per_sec_total"].value == pytest.approx(8000.0)
    # the mean of per-step rates would be larger: the honest figure is not it
    rates = [e.tokens_per_device for e in evs if e.step >= 3]
    assert sum(rates) / len(rates) > 1250
    assert m["training.step_time_p50_ms"].value == pytest.approx(2000.0)
    assert m["training.step_time_p95_ms"].value == pytest.approx(
        percentile([2.0] * 7 + [0.5, 3.5], 95) * 1000
    )


def test_first_three_logged_steps_are_warmup_for_a_resumed_run() -> None:
    evs = steps(10, start=6)
    win = node_window(evs)
    assert win.steps == list(range(9, 16))
    assert set(win.excluded) == {6, 7, 8}


def test_checkpoint_eval_profiler_rampup_steps_are_excluded_with_reasons() -> None:
    evs = steps(30)

    def after(step: int, *new: object) -> None:
        i = next(i for i, e in enumerate(evs) if isinstance(e, StepEvent) and e.step == step)
        evs[i + 1 : i + 1] = list(new)

    # a save of step 10 written two step lines early (as MaxText's delayed metric writer does)
    after(8, CheckpointEvent(action=CheckpointAction.SAVE_START, line=119, step=10))
    # an eval after train step 15: start, running eval steps (no train step), the final eval line
    after(
        13,
        EvalStartEvent(step=15, line=129),
        EvalEvent(step=0, loss=8.0, dialect=EvalDialect.RUNNING, line=130),
    )
    after(15, EvalEvent(step=15, loss=8.0, dialect=EvalDialect.CURRENT, line=133))
    # a save line naming no step: dropped by position (the three steps after the last step line)
    after(22, CheckpointEvent(action=CheckpointAction.WAIT_PREVIOUS, line=150, seconds=0.5))
    evs[5] = StepEvent(step=5, loss=9.5, line=110, kind=StepKind.PROFILER)
    win = node_window(evs)
    for s in (10, 11, 12):
        assert "checkpoint save at step 10 (line 119)" in win.excluded[s]
    for s in (15, 16, 17):
        assert "eval at step 15" in win.excluded[s]
    for s in (23, 24, 25):
        assert "after the line of step 22" in win.excluded[s]
    assert all("profiler" in win.excluded[s] for s in (5, 6, 7))
    assert win.steps == [3, 4, 8, 9, 13, 14, 18, 19, 20, 21, 22, 26, 27, 28, 29]


def test_rampup_steps_are_not_in_the_window() -> None:
    evs = [StepEvent(step=s, loss=5.0, line=s, kind=StepKind.RAMPUP) for s in range(4)] + steps(12, start=4)
    win = node_window(evs)
    assert all(s not in win.steps for s in range(0, 7))
    assert all("rampup" in win.excluded[s] for s in range(4))


def test_too_few_clean_steps_is_inconclusive_not_a_number() -> None:
    evs = steps(3 + MIN_CLEAN_STEPS - 1)
    out = compute_metrics([evs], ctx())
    assert out.window_status == "inconclusive"
    tf = out.metrics["training.tflops_per_sec_per_gpu"]
    assert tf.value is None and tf.absent == "inconclusive"
    assert f"fewer than the minimum {MIN_CLEAN_STEPS}" in tf.reason
    # loss metrics do not need the window
    assert out.metrics["training.final_loss"].value is not None
    ok = compute_metrics([steps(3 + MIN_CLEAN_STEPS)], ctx())
    assert ok.window_status == "ok"


def test_two_nodes_sum_devices_and_flag_the_straggler() -> None:
    fast = steps(15, secs=2.0, tok=1000.0)
    slow = steps(15, secs=2.4, tok=1000.0 * 2.0 / 2.4)
    dev = DevicesEvent(num_devices=16, mesh_shape=(16,), line=5)
    out = compute_metrics([[dev, *fast], [dev, *slow]], ctx(num_nodes=2))
    m = out.metrics
    # each window step takes the slowest node's seconds
    assert m["training.step_time_seconds"].value == pytest.approx(2.4)
    # per device 2000 tokens per step on both nodes over 2.4 s -> 833.3 per device, 16 devices
    assert m["training.tokens_per_sec_per_gpu"].value == pytest.approx(2000 / 2.4)
    assert m["training.tokens_per_sec_total"].value == pytest.approx(16 * 2000 / 2.4)
    s0, s1 = out.node_stats
    assert s1.straggler and not s0.straggler
    assert s1.lag_pct is not None and s1.lag_pct > 5
    assert s0.lag_pct is not None and s0.lag_pct < 0


def test_devices_per_node_follows_the_log_and_says_so() -> None:
    dev = DevicesEvent(num_devices=4, mesh_shape=(4,), line=5)
    out = compute_metrics([[dev, *steps(12)]], ctx(gpus_per_node=8))
    assert out.devices_per_node == 4
    assert out.metrics["training.tokens_per_sec_total"].value == pytest.approx(4000.0)
    assert any("gpus_per_node is 8" in n for n in out.notes)


def test_total_weights_and_tflops_per_step_fallbacks() -> None:
    evs = [
        StepEvent(step=s, loss=5.0 - s * 0.01, line=s + 10, seconds=2.0, total_weights=8192.0)
        for s in range(12)
    ]
    dev = DevicesEvent(num_devices=4, mesh_shape=(4,), line=1)
    tps = TflopsPerStepEvent(total_tflops=50.0, weight_pct=None, attention_pct=None, line=2)
    out = compute_metrics([[dev, tps, *evs]], ctx(gpus_per_node=4))
    assert out.metrics["training.tokens_per_sec_per_gpu"].value == pytest.approx(8192 / 4 / 2.0)
    assert out.metrics["training.tflops_per_sec_per_gpu"].value == pytest.approx(25.0)


def test_missing_rates_are_not_produced() -> None:
    evs = [StepEvent(step=s, loss=5.0, line=s + 10, seconds=2.0) for s in range(12)]
    out = compute_metrics([evs], ctx())
    assert out.metrics["training.tokens_per_sec_per_gpu"].absent == "not_produced"
    assert out.metrics["training.step_time_seconds"].value == pytest.approx(2.0)


def test_nan_final_loss_is_non_finite_not_the_last_finite_value() -> None:
    evs = steps(10)
    evs[-1] = StepEvent(step=9, loss=math.nan, line=500, seconds=2.0, tokens_per_device=1.0)
    out = compute_metrics([evs], ctx())
    fl = out.metrics["training.final_loss"]
    assert fl.value is None and fl.absent == "non_finite" and fl.reason.startswith("nan")
    assert fl.text == "nan"
    assert out.metrics["training.loss_decreased"].value == 0.0
    assert out.metrics["training.loss_curve_slope"].absent == "non_finite"


def test_loss_decreased_and_final_loss() -> None:
    out = compute_metrics([steps(10)], ctx())
    assert out.metrics["training.final_loss"].value == pytest.approx(10.0 - 0.9)
    assert out.metrics["training.loss_decreased"].value == 1.0
    up = [StepEvent(step=s, loss=1.0 + s, line=s, seconds=1.0) for s in range(10)]
    assert compute_metrics([up], ctx()).metrics["training.loss_decreased"].value == 0.0


def test_eval_loss_feature_off_not_produced_and_value() -> None:
    evs = steps(10)
    assert compute_metrics([evs], ctx()).metrics["training.eval_loss"].absent == "feature_off"
    assert (
        compute_metrics([evs], ctx(eval_configured=True)).metrics["training.eval_loss"].absent
        == "not_produced"
    )
    ev = [
        *evs,
        EvalEvent(step=5, loss=7.5, dialect=EvalDialect.CURRENT, line=999),
        EvalEvent(step=9, loss=7.25, dialect=EvalDialect.CURRENT, line=1000),
    ]
    assert compute_metrics([ev], ctx(eval_configured=True)).metrics["training.eval_loss"].value == 7.25


def test_convergence_auto_uses_eval_when_eval_ran() -> None:
    evs = steps(10, secs=2.0)  # losses 10.0, 9.9, ... 9.1
    conv = Convergence(target_value=9.55)
    out = compute_metrics([evs], ctx(convergence=conv))
    assert out.metrics["training.steps_to_target"].value == 5
    assert out.metrics["training.time_to_target_seconds"].value == pytest.approx(12.0)
    with_eval = [*evs, EvalEvent(step=8, loss=9.5, dialect=EvalDialect.CURRENT, line=999)]
    out = compute_metrics([with_eval], ctx(convergence=conv))
    assert out.metrics["training.steps_to_target"].value == 8
    never = compute_metrics([evs], ctx(convergence=Convergence(target_value=1.0)))
    assert never.metrics["training.steps_to_target"].absent == "not_produced"
    assert "never reached target 1.0" in never.metrics["training.steps_to_target"].reason
    off = compute_metrics([evs], ctx())
    assert off.metrics["training.steps_to_target"].absent == "feature_off"


def test_scaling_efficiency_and_mfu() -> None:
    evs = steps(12, tok=3000.0, tfl=653.7)
    out = compute_metrics(
        [evs, evs],
        ctx(
            num_nodes=2,
            scaling_baseline=ScalingBaseline(tokens_per_sec_total=25000.0),
            gpu_name="mi300x",
            precision="bf16",
        ),
    )
    total = out.metrics["training.tokens_per_sec_total"].value
    assert total == pytest.approx(2 * 8 * 3000.0)
    assert out.metrics["training.scaling_efficiency_pct"].value == pytest.approx(48000 / 50000 * 100)
    assert out.metrics["training.mfu_pct"].value == pytest.approx(50.0, rel=1e-3)
    off = compute_metrics([evs], ctx(gpu_name="cpu"))
    assert off.metrics["training.mfu_pct"].absent == "feature_off"
    assert off.metrics["training.scaling_efficiency_pct"].absent == "feature_off"


def test_peak_table() -> None:
    assert peak_tflops("MI300X", "bf16") == 1307.4
    assert peak_tflops("mi3xx", "fp8") == 2614.9
    assert peak_tflops("mi355x", "bf16") == 2516.6  # 256 CUs x 2.4 GHz x 4096 bf16 FLOP/clock
    assert peak_tflops("mi350x", "fp8") == 4613.7  # the same chip at 2.2 GHz
    assert peak_tflops("h200", "bf16") == 989.4
    assert peak_tflops("B200", "fp8") == 4500.0
    assert peak_tflops("a100", "bf16") == 312.0
    assert peak_tflops("cpu", "bf16") is None
    # TPUs as JAX's backend header names them and as Cloud names them
    assert peak_tflops("PJRT C API TFRT TPU v6 lite Built on May 28 2025", "bf16") == 918.0
    assert peak_tflops("v6e-256", "bf16") == 918.0
    assert peak_tflops("TPU v5 lite", "bf16") == 197.0
    assert peak_tflops("v5litepod-16", "bf16") == 197.0
    assert peak_tflops("TPU v5", "bf16") == 459.0  # JAX's device_kind of a v5p
    assert peak_tflops("v5p-128", "bf16") == 459.0
    assert peak_tflops("TPU v4", "bf16") == 275.0
    assert peak_tflops("TPU v6 lite", "fp8") is None  # no fp8 on these chips
    assert peak_tflops("deepseek-v4", "bf16") is None  # a model name is no TPU


def test_device_named_by_the_log_header_wins_for_a_tpu() -> None:
    tpu = [SystemInfoEvent("backend", "PJRT C API TFRT TPU v6 lite Built on May 28 2025", 3)]
    assert device_peak("cpu", "bf16", tpu) == DevicePeak("TPU v6e", 918.0)
    gpu = [SystemInfoEvent("backend", "cuda 12030", 3)]
    assert device_peak("h100", "bf16", gpu) == DevicePeak("h100", 989.4)
    assert device_peak("h100", "bf16") == DevicePeak("h100", 989.4)


def test_loss_curve_sampling_and_slope() -> None:
    """Every 10th step, the first and the last; the slope of a straight line is its slope; one sampled
    point (or one distinct step) has none."""
    evs = [StepEvent(step=s, loss=10.0 - s * 0.5, line=s + 1, seconds=2.0) for s in range(30)]
    out = compute_metrics([evs], ctx(loss_curve=LossCurve()))
    assert [s for s, _ in out.loss_curve_points] == [0, 10, 20, 29]
    assert out.metrics["training.loss_curve_slope"].value == pytest.approx(-0.5)
    one = compute_metrics([evs[:1]], ctx()).metrics["training.loss_curve_slope"]
    assert one.value is None and one.reason.startswith("1 sampled loss point(s)")
    twice = [StepEvent(step=1, loss=1.0, line=1), StepEvent(step=1, loss=2.0, line=2)]
    assert compute_metrics([twice], ctx()).metrics["training.loss_curve_slope"].value is None


def test_checkpoint_io_slowest_node() -> None:
    a = [
        CheckpointEvent(action=CheckpointAction.SAVE_DONE, line=3, step=5, seconds=1.5),
        CheckpointEvent(action=CheckpointAction.RESTORE_DONE, line=4, seconds=0.7),
    ]
    b = [
        CheckpointEvent(action=CheckpointAction.SAVE_BLOCKING_DONE, line=3, step=5, seconds=2.5),
        CheckpointEvent(action=CheckpointAction.RESTORE_DONE, line=4, seconds=0.9),
    ]
    out = compute_metrics([a + steps(10), b + steps(10)], ctx(num_nodes=2))
    assert out.metrics["training.checkpoint_save_seconds"].value == 2.5
    assert out.metrics["training.checkpoint_load_seconds"].value == 0.9
    none = compute_metrics([steps(10)], ctx(checkpointing=True))
    assert none.metrics["training.checkpoint_save_seconds"].absent == "not_produced"
    assert none.metrics["training.checkpoint_load_seconds"].absent == "feature_off"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.001, 100.0), st.floats(1.0, 1e6)),
        min_size=3 + MIN_CLEAN_STEPS,
        max_size=60,
    )
)
def test_throughput_is_the_harmonic_window_figure(rows: list[tuple[float, float]]) -> None:
    """Tokens/s is window tokens over window time (a seconds-weighted mean of the rates), so it lies
    between the lowest and highest step rate; TFLOP/s and step time come from the same window."""
    evs = [
        StepEvent(
            step=s, loss=1.0, line=s + 1, seconds=sec, tokens_per_device=rate, tflops_per_device=rate / 1e3
        )
        for s, (sec, rate) in enumerate(rows)
    ]
    out = compute_metrics([evs], ctx())
    # the window is the steps after warm-up minus the stalls the stall rule found and the disturbed edges
    # the steady-state rule found (judge.steady), each with its reason
    report = out.node_windows[0].stalls
    assert report is not None and report.median_seconds is not None
    stalled = {x.step for x in report.stalls if x.source == "seconds"}
    excluded = out.node_windows[0].excluded
    edges = {s for s, why in excluded.items() if why.startswith("disturbed edge: ")}
    assert out.window_steps == [s for s in range(3, len(rows)) if s not in stalled | edges]
    assert all(excluded[s].startswith("stall: ") for s in stalled)
    m = report.median_seconds
    lo, hi = band(m, report.spread_seconds)
    assert all(not (lo <= rows[s][0] <= hi) for s in edges)
    window = [rows[s] for s in out.window_steps]
    tok = out.metrics["training.tokens_per_sec_per_gpu"].value
    if len(window) < MIN_CLEAN_STEPS:
        assert tok is None and out.window_status == "inconclusive"
        return
    assert tok is not None
    assert tok == pytest.approx(sum(s * r for s, r in window) / sum(s for s, _ in window))
    rates = [r for _, r in window]
    assert min(rates) * (1 - 1e-9) <= tok <= max(rates) * (1 + 1e-9)
    tfl = out.metrics["training.tflops_per_sec_per_gpu"].value
    assert tfl == pytest.approx(tok / 1e3)
    assert out.metrics["training.step_time_seconds"].value == pytest.approx(
        sum(s for s, _ in window) / len(window)
    )


def test_stall_metrics_and_their_absence() -> None:
    secs = [0.1] * 20
    secs[12] = 5.1  # 5 s lost at step 12
    evs = [
        StepEvent(step=s, loss=1.0, line=s + 1, seconds=x, tokens_per_device=100.0, tflops_per_device=1.0)
        for s, x in enumerate(secs)
    ]
    out = compute_metrics([evs], ctx())
    m = out.metrics
    assert m["training.stall_count"].value == 1
    assert m["training.stall_seconds"].value == pytest.approx(5.0)
    assert m["training.longest_stall_seconds"].value == pytest.approx(5.0)
    # 17 judged steps of 0.1 s steady time over 16 x 0.1 + 5.1 s of wall time
    assert m["training.goodput_pct"].value == pytest.approx(100 * 17 * 0.1 / (16 * 0.1 + 5.1))
    assert 12 not in out.window_steps and out.node_windows[0].excluded[12].startswith("stall: 5.1 s")
    assert out.stalls is not None and [s.step for _, s in out.stalls.stalls] == [12]
    # too few steps after warm-up: no baseline, so nothing is claimed either way
    short = compute_metrics([evs[:5]], ctx()).metrics
    for k in ("stall_count", "stall_seconds", "longest_stall_seconds", "goodput_pct"):
        assert short[f"training.{k}"].value is None and short[f"training.{k}"].absent == "inconclusive"
