"""Real MaxText logs (tests/fixtures/maxtext, made by its regen.sh on the CPU) read end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from cvs_tui.core.events import (
    CheckpointAction,
    CheckpointEvent,
    DevicesEvent,
    ErrorHit,
    EvalDialect,
    EvalEvent,
    EvalStartEvent,
    NonFiniteAbortEvent,
    ParamsEvent,
    Severity,
    StepEvent,
    SystemInfoEvent,
    TflopsPerStepEvent,
)
from cvs_tui.core.parse import NodeLogParser, parse_log_bytes, parse_metrics_file

FIX = Path(__file__).parents[1] / "fixtures" / "maxtext"
A = CheckpointAction


def parse(name: str, *, flat: bool = False) -> list:
    data = (FIX / name).read_bytes()
    return parse_log_bytes(data.replace(b"\n", b" ") if flat else data)


def of(evs: list, kind: type) -> list:
    return [e for e in evs if isinstance(e, kind)]


def fatal(evs: list) -> list[ErrorHit]:
    return [e for e in of(evs, ErrorHit) if e.severity is Severity.FATAL]


@pytest.mark.parametrize("flat", [False, True], ids=["log", "flattened"])
def test_single_run_twenty_steps(flat: bool) -> None:
    evs = parse("single_20steps.log", flat=flat)
    steps = of(evs, StepEvent)
    assert [s.step for s in steps] == list(range(20))
    assert [s.loss for s in steps][:4] == [7.501, 7.501, 7.486, 7.456]
    assert steps[-1].loss == 7.188
    assert all(s.source == "metric_logger.py:265" and s.total_weights == 256 for s in steps)
    assert all(s.extras["lm_loss"] == s.loss for s in steps)
    if not flat:
        lines = (FIX / "single_20steps.log").read_text().split("\n")
        assert all(f"completed step: {s.step}," in lines[s.line - 1] for s in steps)
    assert {(e.key, e.value) for e in of(evs, SystemInfoEvent)} == {
        ("jax", "0.12.0.1"),
        ("jaxlib", "0.12.0.1"),
        ("backend", "cpu"),
    }
    assert of(evs, DevicesEvent)[0].num_devices == 1
    assert of(evs, ParamsEvent)[0].billions == 0.001
    tf = of(evs, TflopsPerStepEvent)
    assert [(t.weight_pct, t.attention_pct) for t in tf] == [(95.24, 4.76)]
    assert fatal(evs) == []
    assert [e.action for e in of(evs, CheckpointEvent)] == [A.DISABLED, A.NO_CHECKPOINT]


def test_checkpoint_phase_one_saves_at_zero_and_five() -> None:
    evs = parse("ckpt_phase1.log")
    assert [s.step for s in of(evs, StepEvent)] == [0, 1, 2, 3, 4, 5]
    ck = of(evs, CheckpointEvent)
    done = [(e.step, e.dialect) for e in ck if e.action is A.SAVE_DONE]
    assert done == [(0, "orbax-new"), (0, "maxtext"), (5, "orbax-new"), (5, "maxtext")]
    timed = [e for e in ck if e.action is A.SAVE_DONE and e.seconds is not None]
    assert all(0 < e.seconds < 60 for e in timed)
    blocking = [(e.step, e.dialect) for e in ck if e.action is A.SAVE_BLOCKING_DONE]
    assert blocking == [(0, "orbax-new"), (0, "standard_logger"), (5, "orbax-new"), (5, "standard_logger")]
    assert [e.step for e in ck if e.action is A.SAVE_SKIPPED] == [5]  # the final save finds step 5 saved
    assert [e.action for e in ck if e.action in (A.RESTORE_START, A.RESTORE_DONE)] == []
    assert ck[0].action is A.NO_CHECKPOINT
    assert fatal(evs) == []


def test_checkpoint_phase_two_restores_five_and_resumes_at_six() -> None:
    evs = parse("ckpt_phase2.log")
    ck = of(evs, CheckpointEvent)
    restores = [(e.action, e.step, e.dialect) for e in ck if e.action in (A.RESTORE_START, A.RESTORE_DONE)]
    assert restores == [
        (A.RESTORE_START, 5, "maxtext"),
        (A.RESTORE_DONE, None, "orbax-metrics"),  # /jax/orbax/read/worker/io/requested (per host)
        (A.RESTORE_DONE, None, "orbax-metrics"),  # .../worker/io/raw
        (A.RESTORE_DONE, None, "orbax-metrics"),  # /jax/checkpoint/read/gbytes_per_sec (global)
        (A.RESTORE_DONE, 5, "orbax-new"),
        (A.RESTORE_DONE, 5, "standard_logger"),
    ]
    assert all(e.seconds is not None and e.seconds > 0 for e in ck if e.action is A.RESTORE_DONE)
    steps = of(evs, StepEvent)
    assert [s.step for s in steps] == [6, 7, 8, 9, 10, 11]
    first_step_line = steps[0].line
    assert all(e.line < first_step_line for e in ck if e.action is A.RESTORE_DONE)
    assert sorted({e.step for e in ck if e.action is A.SAVE_DONE}) == [10, 11]
    assert fatal(evs) == []


def test_resumed_losses_match_the_uninterrupted_reference() -> None:
    ref = {s.step: s.loss for s in of(parse("ckpt_reference.log"), StepEvent)}
    phase1 = {s.step: s.loss for s in of(parse("ckpt_phase1.log"), StepEvent)}
    phase2 = {s.step: s.loss for s in of(parse("ckpt_phase2.log"), StepEvent)}
    assert sorted(ref) == list(range(12))
    assert phase1 == {k: ref[k] for k in range(6)}
    assert phase2 == {k: ref[k] for k in range(6, 12)}
    assert phase2[6] == 7.367 and phase2[11] == 7.32


@pytest.mark.parametrize("flat", [False, True], ids=["log", "flattened"])
def test_nan_run_aborts(flat: bool) -> None:
    evs = parse("nan_lr1e6.log", flat=flat)
    steps = of(evs, StepEvent)
    assert [s.step for s in steps] == [0, 1, 2, 3]
    assert math.isnan(steps[-1].loss) and steps[2].loss == 6.931
    assert [a.value for a in of(evs, NonFiniteAbortEvent)] == ["nan"]
    assert [(h.name, h.origin) for h in fatal(evs)] == [
        ("non-finite loss", "always"),
        ("nan/inf abort", "always"),
    ]
    exit_codes = json.loads((FIX / "exit_codes.json").read_text())
    assert exit_codes["nan_lr1e6.log"] != 0


def test_two_process_run_each_node_has_all_steps() -> None:
    for name in ("twoproc_node0.log", "twoproc_node1.log"):
        evs = parse(name)
        steps = of(evs, StepEvent)
        assert [s.step for s in steps] == list(range(20)), name
        assert steps[0].total_weights == 512
        assert fatal(evs) == []
    losses0 = [s.loss for s in of(parse("twoproc_node0.log"), StepEvent)]
    losses1 = [s.loss for s in of(parse("twoproc_node1.log"), StepEvent)]
    assert losses0 == losses1  # one global loss, printed by both processes


def test_eval_run() -> None:
    evs = parse("eval_run.log")
    assert [e.step for e in of(evs, EvalStartEvent)] == [0, 5, 10]
    current = [(e.step, e.loss) for e in of(evs, EvalEvent) if e.dialect is EvalDialect.CURRENT]
    assert current == [(0, 7.501), (5, 7.367), (10, 7.32)]
    assert len([e for e in of(evs, EvalEvent) if e.dialect is EvalDialect.RUNNING]) == 6
    assert fatal(evs) == []


def test_bad_config_key_is_fatal() -> None:
    evs = parse("bad_key.log")
    assert of(evs, StepEvent) == []
    names = {h.name for h in fatal(evs)}
    assert {"maxtext config error", "python traceback"} <= names
    # the traceback names its exception line and stands on it (the header is line 14), as does the
    # exception's own hit: one incident
    tb = next(h for h in fatal(evs) if h.name == "python traceback")
    assert tb.line == 42 and tb.text.startswith("ValueError: 'not_a_maxtext_key' not in")
    exc = next(h for h in fatal(evs) if h.name == "AssertionError")
    assert exc.line == 42 and exc.text.startswith("ValueError: 'not_a_maxtext_key' not in")
    assert json.loads((FIX / "exit_codes.json").read_text())["bad_key.log"] == 1


def test_benign_lines_in_real_logs_are_not_fatal() -> None:
    # W-level deprecation notices, the TPU/proxy backend probes and the TensorBoard NaN notice
    for name in ("ckpt_phase1.log", "single_20steps.log", "twoproc_node0.log"):
        assert fatal(parse(name)) == [], name
    # the NaN run's W-level `NaN or Inf found in input tensor.` lines are not hits of their own
    nan_lines = {h.line for h in fatal(parse("nan_lr1e6.log"))}
    assert nan_lines == {36, 44}


def test_one_byte_chunks_of_a_real_log() -> None:
    data = (FIX / "ckpt_phase2.log").read_bytes()
    parser = NodeLogParser()
    out = []
    for i in range(len(data)):
        out += parser.feed(data[i : i + 1])
    out += parser.finish()
    assert out == parse_log_bytes(data)
    assert parser.lines_seen == data.count(b"\n")


def test_metrics_file_full_precision_and_bare_nan() -> None:
    steps = parse_metrics_file(FIX / "single_20steps.metrics.jsonl")
    assert [s.step for s in steps] == list(range(20))
    log_losses = [s.loss for s in of(parse("single_20steps.log"), StepEvent)]
    assert all(round(m.loss, 3) == pytest.approx(lg) for m, lg in zip(steps, log_losses, strict=True))
    assert steps[0].loss == pytest.approx(7.501341819763184)
    assert steps[0].step_time_seconds is not None and "learning/perplexity" in steps[0].values
    nan = parse_metrics_file(FIX / "nan_lr1e6.metrics.jsonl")
    assert [s.step for s in nan] == [0, 1, 2, 3]
    assert math.isnan(nan[-1].loss)
    evals = parse_metrics_file(FIX / "eval_run.metrics.jsonl")
    assert [s.step for s in evals] == [10, 11]  # eval records (eval batch index as `step`) are left out


def test_metrics_file_skips_junk_lines(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_text(
        '{"step": 1.0, "learning/loss": NaN, "perf/step_time_seconds": 0.5, "run_name": "r"}\n'
        "not json\n[1, 2]\n"
        '{"step": "x", "learning/loss": 1}\n{"learning/loss": 1}\n'
        '{"step": 2, "learning/loss": 3.5, "flag": true}\n'
    )
    steps = parse_metrics_file(p)
    assert [(s.step, s.line) for s in steps] == [(1, 1), (2, 6)]
    assert math.isnan(steps[0].loss) and steps[0].step_time_seconds == 0.5
    assert steps[1].values == {"learning/loss": 3.5}
    with pytest.raises(OSError):
        parse_metrics_file(tmp_path / "missing.jsonl")
