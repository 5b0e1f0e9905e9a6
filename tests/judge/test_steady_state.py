"""Steady state under asynchronous dispatch (``judge.steady``, docs/metrics.md): two TPU v6e runs of the
same speed whose time moved between neighbouring steps read the same, live and in ``analyze``, and
``compare`` says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _analysis_samples import write_config
from _judge_events import compute_metrics
from hypothesis import given, settings
from hypothesis import strategies as st

from cvs_tui.core import compare as cmp
from cvs_tui.core.compare.model import MetricDelta
from cvs_tui.core.judge.metrics import RunContext
from cvs_tui.core.judge.steady import (
    CONTEXT,
    band,
    steady_drops,
    step_rates,
    window_drops,
    window_drops_chunked,
)
from cvs_tui.core.sources.offline import parse_log_file

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "async_dispatch"
KEY = "BS=2,PRECISION=BF16,SL=128"
TFLOPS_PER_STEP = 13.6  # the logs' "Per train step" line
V6E_PEAK = 918.0


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[cmp.RunInput, cmp.RunInput]:
    def bf16(doc: dict[str, Any]) -> None:  # the logs' runs computed in bf16 (the shipped CPU config: fp32)
        doc["train_params"]["maxtext_config"]["dtype"] = "bfloat16"

    cfg = str(write_config(tmp_path_factory.mktemp("cfg"), steps=10, runs=[KEY], mutate=bf16))
    a = cmp.load_input(str(FIX / "run_a.log"), config=cfg, side="base")
    b = cmp.load_input(str(FIX / "run_b.log"), config=cfg, side="candidate")
    return a, b


def _metric(inp: cmp.RunInput, name: str) -> float:
    m = next(m for m in inp.results.runs[0].metrics if m.name == name)
    assert m.value is not None, (name, m.reason)
    return m.value


def test_both_runs_read_as_their_real_speed(pair: tuple[cmp.RunInput, cmp.RunInput]) -> None:
    for inp in pair:
        step = _metric(inp, "training.step_time_seconds")
        assert step == pytest.approx(0.15, rel=0.03)
        tflops = _metric(inp, "training.tflops_per_sec_per_gpu")
        assert 88.0 <= tflops <= 93.0
        assert tflops == pytest.approx(TFLOPS_PER_STEP / step, rel=1e-4)  # the lines print 3 decimals
        # the log's header names a TPU v6e: MFU against its 918 TFLOP/s, whatever the config's gpu_name
        assert _metric(inp, "training.mfu_pct") == pytest.approx(100.0 * tflops / V6E_PEAK)


def test_the_window_says_why_each_step_is_out(pair: tuple[cmp.RunInput, cmp.RunInput]) -> None:
    a, b = ({e.step: e.reason for e in inp.results.runs[0].window.excluded} for inp in pair)
    assert a[3].startswith("disturbed edge: 0.411 s") and a[6].startswith("disturbed edge: 0.295 s")
    assert a[7].startswith("stall: ")
    assert b[3].startswith("impossible: 1700 TFLOP/s/device in 0.008 s is above the TPU v6e peak of 918")
    assert b[7].startswith("impossible: 2267 TFLOP/s/device")
    assert b[6].startswith("stall: ")
    for inp in pair:
        assert inp.results.runs[0].window.steps == [4, 5, 8, 9]


def test_the_live_judge_reads_the_same(pair: tuple[cmp.RunInput, cmp.RunInput]) -> None:
    """compute_metrics over every event (a live run) gives analyze's figures (the chunked judge)."""
    for name, inp in zip(("run_a", "run_b"), pair, strict=True):
        events, _ = parse_log_file(FIX / f"{name}.log", None)
        live = compute_metrics([events], RunContext(num_nodes=1, gpus_per_node=32, gpu_name="cpu"))
        assert live.window_steps == inp.results.runs[0].window.steps
        for k in ("training.step_time_seconds", "training.tflops_per_sec_per_gpu", "training.mfu_pct"):
            assert live.metrics[k].value == pytest.approx(_metric(inp, k)), k


def test_compare_says_the_same_speed_and_not_comparable(pair: tuple[cmp.RunInput, cmp.RunInput]) -> None:
    rep = cmp.compare([pair[0]], [pair[1]], min_steps=4)
    rc = rep.runs[0]
    assert rc.verdict == cmp.NOT_COMPARABLE and "JAX differs" in rc.banner[0]
    rows = {m.metric: m for m in rc.metrics}
    tok = rows["tokens_per_sec_per_device"]
    assert tok.base is not None and tok.candidate is not None
    assert abs(tok.candidate / tok.base - 1.0) <= 0.05
    assert "the same speed" in cmp.headline_reason(rc)
    big = cmp.biggest_change(rc)
    assert big is not None and abs(big.delta_pct or 0.0) < 5.0


def _row(metric: str, base: float, cand: float, verdict: cmp.Verdict = cmp.NO_CHANGE) -> MetricDelta:
    return MetricDelta(
        metric,
        metric,
        "",
        "higher",
        base,
        cand,
        cand - base,
        (cand - base) / base * 100,
        None,
        None,
        "",
        verdict,
    )


def test_a_rate_the_median_contradicts_is_never_the_headline() -> None:
    from cvs_tui.core.compare.judge import flag_contradictions

    rows = [
        _row("step_time_p50_ms", 150.0, 160.0),  # 6 % slower by the median
        _row("tokens_per_sec_per_device", 100.0, 250.0, cmp.IMPROVED),  # +150 %: the other way
        _row("tflops_per_sec_per_device", 90.0, 85.0, cmp.REGRESSED),  # agrees with the median: stands
    ]
    flag_contradictions(rows, 2.0)
    assert rows[1].contradicted_by and rows[1].verdict == cmp.INCONCLUSIVE
    assert "contradicted by step_time_p50_ms" in rows[1].reason
    assert not rows[2].contradicted_by and rows[2].verdict == cmp.REGRESSED
    rc = cmp.RunComparison("k", cmp.INCONCLUSIVE, True, [], [], rows, None, [], [], 1, 1)  # type: ignore[arg-type]
    big = cmp.biggest_change(rc)
    assert (big is not None and big.metric == "step_time_p50_ms") or big is rows[2]
    # a rate change the median does not see (a heavier tail at the same median) is no contradiction
    tail = [
        _row("step_time_p50_ms", 150.0, 150.5),
        _row("tokens_per_sec_per_device", 100.0, 80.0, cmp.REGRESSED),
    ]
    flag_contradictions(tail, 2.0)
    assert not tail[1].contradicted_by and tail[1].verdict == cmp.REGRESSED


# ---------------------------------------------------------------------------------------------------------
# the rule on its own
# ---------------------------------------------------------------------------------------------------------
A = np.array([11.203, 1.517, 0.034, 0.411, 0.153, 0.147, 0.295, 22.686, 0.152, 0.147])
B = np.array([11.171, 2.572, 0.413, 0.008, 0.149, 0.147, 18.433, 0.006, 0.147, 0.147])


def _window(sec: np.ndarray, stall: int) -> np.ndarray:
    w = np.ones(len(sec), np.bool_)
    w[:3] = False  # warm-up
    w[stall] = False
    return w


def test_the_issue_pair_keeps_the_same_steps() -> None:
    for sec, stall, median in ((A, 7, 0.153), (B, 6, 0.147)):
        rates = TFLOPS_PER_STEP / sec
        d = steady_drops(sec, _window(sec, stall), rates, median, 0.0, V6E_PEAK)
        keep = _window(sec, stall) & ~d.impossible & ~d.edge
        assert np.flatnonzero(keep).tolist() == [4, 5, 8, 9]
        assert sec[keep].mean() == pytest.approx(0.15, rel=0.03)
    # without a known peak the band alone takes B's fast edges
    d = steady_drops(B, _window(B, 6), TFLOPS_PER_STEP / B, 0.147, 0.0, None)
    assert not d.impossible.any() and np.flatnonzero(d.edge).tolist() == [3, 7]


def test_time_moved_inside_a_stretch_stays_summed() -> None:
    """A fast step and the slow one that took its time, both inside a stretch, are both kept: the sum is
    right. Only where a stretch meets a dropped step is an out-of-band step dropped."""
    sec = np.array([1.0, 0.15, 0.15, 0.05, 0.25, 0.15, 0.15, 0.15])
    win = np.ones(len(sec), np.bool_)
    win[0] = False
    d = steady_drops(sec, win, np.full(len(sec), np.nan), 0.15, 0.0, None)
    assert not d.edge.any() and not d.impossible.any()
    # the same move next to the dropped step: both ends of it are dropped (depth 2), the rest kept
    sec2 = np.array([1.0, 0.05, 0.25, 0.15, 0.15, 0.15])
    d2 = steady_drops(
        sec2, np.array([False, True, True, True, True, True]), np.full(6, np.nan), 0.15, 0.0, None
    )
    assert np.flatnonzero(d2.edge).tolist() == [1, 2]


def test_a_noisy_node_keeps_what_its_jitter_explains() -> None:
    lo, hi = band(0.1, 0.05)  # 3 robust sigmas (0.15) beyond the ratio band
    assert lo < 0 and hi == pytest.approx(0.25)
    assert band(0.1, 0.001) == pytest.approx((0.08, 0.125))  # the ratio floor: 1/1.25..1.25 x


def test_step_rates_prefer_the_step_line() -> None:
    sec = np.array([0.1, 0.2])
    r = step_rates(sec, np.array([50.0, np.nan]), np.array([True, False]), 10.0)
    assert r.tolist() == [50.0, 50.0]
    assert np.isnan(step_rates(sec, np.zeros(2), np.zeros(2, np.bool_), None)).all()


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.001, 5.0), st.booleans(), st.floats(1.0, 2000.0)), min_size=0, max_size=40
    ),
    st.integers(1, 9),
    st.floats(0.01, 1.0),
    st.one_of(st.none(), st.floats(0.0, 0.5)),
)
def test_chunks_give_the_whole_answer(
    rows: list[tuple[float, bool, float]], chunk: int, median: float, spread: float | None
) -> None:
    """window_drops_chunked over chunks of any size is window_drops over the whole (the column-file judge
    reads a chunk at a time with CONTEXT records each side)."""
    assert CONTEXT >= 2
    steps = np.arange(len(rows), dtype=np.int64)
    sec = np.array([r[0] for r in rows], np.float64)
    win = np.array([r[1] for r in rows], np.bool_)
    rates = np.array([r[2] for r in rows], np.float64)
    whole = window_drops(steps, sec, win, rates, median, spread, 900.0, "dev")
    parts = [
        (steps[i : i + chunk], sec[i : i + chunk], win[i : i + chunk], rates[i : i + chunk])
        for i in range(0, len(rows), chunk)
    ]
    assert window_drops_chunked(parts, median, spread, 900.0, "dev") == whole
