"""Hand-written cases for every MaxText line kind the parser knows, each with a look-alike that must not
produce the event (the false positives upstream CVS's parser has)."""

from __future__ import annotations

import math

import pytest

from cvs_tui.core.events import (
    CheckpointAction,
    CheckpointEvent,
    DevicesEvent,
    EvalDialect,
    EvalEvent,
    EvalStartEvent,
    ExitCodeEvent,
    MemoryEstimateEvent,
    MemStatsEvent,
    NonFiniteAbortEvent,
    ParamsEvent,
    StepEvent,
    StepKind,
    SystemInfoEvent,
    TflopsPerStepEvent,
)
from cvs_tui.core.parse import parse_log_bytes

H = "I1130 06:52:51.026531 139791635864448 "


def events(text: str, kind: type | None = None) -> list:
    evs = parse_log_bytes(text.encode())
    return [e for e in evs if kind is None or isinstance(e, kind)]


def one(text: str, kind: type):
    found = events(text, kind)
    assert len(found) == 1, found
    return found[0]


# ---------------------------------------------------------------------------------------------------------
# steps
# ---------------------------------------------------------------------------------------------------------
def test_step_current_vintage_with_lm_loss_and_perplexity() -> None:
    ev = one(
        H + "metric_logger.py:265] completed step: 9, seconds: 0.147, TFLOP/s/device: 92.236, "
        "Tokens/s/device: 13902.749, total_weights: 65536, loss: 8.179, lm_loss: 8.179, "
        "perplexity: 3564.635\n",
        StepEvent,
    )
    assert ev == StepEvent(
        step=9,
        loss=8.179,
        line=1,
        kind=StepKind.TRAIN,
        seconds=0.147,
        tflops_per_device=92.236,
        tokens_per_device=13902.749,
        total_weights=65536.0,
        extras={"lm_loss": 8.179, "perplexity": 3564.635},
        timestamp=None,
        source="metric_logger.py:265",
    )


def test_step_older_vintage_ends_at_loss() -> None:
    ev = one(
        H + "metric_logger.py:196] completed step: 3, seconds: 1.0, TFLOP/s/device: 2.5, "
        "Tokens/s/device: 100.0, total_weights: 512, loss: 9.5\n",
        StepEvent,
    )
    assert (ev.step, ev.loss, ev.extras, ev.source) == (3, 9.5, {}, "metric_logger.py:196")


@pytest.mark.parametrize(
    ("tail", "extras"),
    [
        (", moe_lb_loss: 0.012345", {"moe_lb_loss": 0.012345}),
        (", main_model_loss: 7.1, mtp_loss: 0.3", {"main_model_loss": 7.1, "mtp_loss": 0.3}),
        (", lm_loss: 7.0, perplexity: 1096.633, indexer_loss: 0.0012345678", None),
    ],
)
def test_step_optional_suffixes(tail: str, extras: dict | None) -> None:
    ev = one(
        H + "metric_logger.py:265] completed step: 4, seconds: 0.5, TFLOP/s/device: 1.0, "
        f"Tokens/s/device: 2.0, total_weights: 8, loss: 7.0{tail}\n",
        StepEvent,
    )
    if extras is None:
        assert ev.extras["indexer_loss"] == pytest.approx(0.0012345678)
        assert set(ev.extras) == {"lm_loss", "perplexity", "indexer_loss"}
    else:
        assert ev.extras == extras


def test_rampup_step_has_comma_after_tag_and_no_rates() -> None:
    ev = one(
        H + "metric_logger.py:265] [Rampup Batch Size Phase], completed step: 2, seconds: 0.3, "
        "total_weights: 128, loss: 10.5\n",
        StepEvent,
    )
    assert (ev.kind, ev.step, ev.seconds, ev.tflops_per_device, ev.loss) == (
        StepKind.RAMPUP,
        2,
        0.3,
        None,
        10.5,
    )
    assert ev.source == "metric_logger.py:265"


def test_profiler_boundary_step_has_loss_only() -> None:
    ev = one(
        H + "metric_logger.py:270] completed profiler activation/deactivation step: 5, total_weights: 256, "
        "loss: 7.25\n",
        StepEvent,
    )
    assert (ev.kind, ev.step, ev.loss, ev.seconds, ev.total_weights) == (
        StepKind.PROFILER,
        5,
        7.25,
        None,
        256.0,
    )
    assert ev.source == "metric_logger.py:270"


def test_elastic_live_slice_count_sits_between_seconds_and_tflops() -> None:
    ev = one(
        H + "metric_logger.py:265] completed step: 11, seconds: 0.2, live slice count: 3, "
        "TFLOP/s/device: 50.5, Tokens/s/device: 900.0, total_weights: 64, loss: 6.5, lm_loss: 6.5, "
        "perplexity: 665.142\n",
        StepEvent,
    )
    assert (ev.live_slices, ev.tflops_per_device, ev.tokens_per_device) == (3, 50.5, 900.0)


@pytest.mark.parametrize("word", ["nan", "inf", "-inf"])
def test_non_finite_loss_is_kept_as_float(word: str) -> None:
    ev = one(
        H + "metric_logger.py:265] completed step: 3, seconds: 0.026, TFLOP/s/device: 0.041, "
        f"Tokens/s/device: 10032.921, total_weights: 256, loss: {word}, lm_loss: {word}, perplexity: nan\n",
        StepEvent,
    )
    assert not math.isfinite(ev.loss)
    assert math.isnan(ev.extras["perplexity"])


def test_step_header_timestamp_from_tf_and_python_logging_forms() -> None:
    tf = one(
        "2026-04-18 18:24:14.500000: I external/x/metric_logger.cc:10] completed step: 1, seconds: 1.0, "
        "total_weights: 2, loss: 3.0\n",
        StepEvent,
    )
    assert tf.source == "external/x/metric_logger.cc:10"
    assert tf.timestamp == pytest.approx(1776536654.5)
    py = one(
        "INFO:2026-04-19 06:51:49,547:maxtext.metric_logger:265: completed step: 1, seconds: 1.0, "
        "total_weights: 2, loss: 3.0\n",
        StepEvent,
    )
    assert py.source == "maxtext.metric_logger:265"
    assert py.timestamp == pytest.approx(1776581509.547)


def test_step_lines_need_their_exact_form() -> None:
    # a config dump and a prose mention are not steps
    text = (
        H
        + "pyconfig.py:591] Config param log_period: 100\n"
        + H
        + "train.py:1] the last completed step: unknown\n"
        + "completed step: 4, seconds: 0.1, total_weights: 8, loss: 7.0\n"  # bare, no header: still a step
    )
    steps = events(text, StepEvent)
    assert [s.step for s in steps] == [4]
    # a bare step line starts its own record (print-style MaxText logs hold thousands of them)
    assert (steps[0].line, steps[0].source) == (3, None)


def test_every_step_of_a_record_is_reported_once() -> None:
    text = "".join(
        H + f"metric_logger.py:265] completed step: {n}, seconds: 0.1, TFLOP/s/device: 1.0, "
        f"Tokens/s/device: 2.0, total_weights: 8, loss: {7 - n / 10:.3f}\n"
        for n in range(10)
    )
    steps = events(text, StepEvent)
    assert [s.step for s in steps] == list(range(10))
    assert [s.line for s in steps] == list(range(1, 11))


# ---------------------------------------------------------------------------------------------------------
# per-step FLOPs, system information, devices, parameters, memory
# ---------------------------------------------------------------------------------------------------------
def test_per_train_step_tflops_block() -> None:
    text = (
        H + "metric_logger.py:265] completed step: 9, seconds: 0.1, total_weights: 8, loss: 8.179\n"
        "Per train step:\n Total TFLOPs: 13.59 \n"
        " split as 93.93% learnable weight flops and 6.07% attention flops\n"
    )
    ev = one(text, TflopsPerStepEvent)
    assert ev == TflopsPerStepEvent(13.59, 93.93, 6.07, 2)
    assert one(text, StepEvent).loss == 8.179


def test_system_information_including_multi_line_backend() -> None:
    text = (
        H
        + "max_utils.py:835] System Information: Jax Version: 0.9.2\n"
        + H
        + "max_utils.py:836] System Information: Jaxlib Version: 0.9.2\n"
        + H
        + "max_utils.py:837] System Information: Jax Backend: PJRT C API\nTFRT TPU v5\n"
        + H
        + "max_utils.py:900] something else\n"
    )
    evs = events(text, SystemInfoEvent)
    assert [(e.key, e.value, e.line) for e in evs] == [
        ("jax", "0.9.2", 1),
        ("jaxlib", "0.9.2", 2),
        ("backend", "PJRT C API TFRT TPU v5", 3),
    ]


def test_devices_mesh_and_parameters() -> None:
    text = (
        H
        + "maxtext_utils.py:2098] Num_devices: 32, shape (1, 1, 1, 32, 1, 1, 1, 1, 1, 1, 1, 1, 1)\n"
        + H
        + "metric_logger.py:425] number parameters: 1.104 billion\n"
    )
    assert one(text, DevicesEvent) == DevicesEvent(32, (1, 1, 1, 32, 1, 1, 1, 1, 1, 1, 1, 1, 1), 1)
    assert one(text, ParamsEvent) == ParamsEvent(1.104, 2)


def test_memory_estimate_both_wordings() -> None:
    old = one(
        H + "max_utils.py:700] Total memory size: 1.5 GB, Output size: 0.4 GB, Temp size: 1.1 GB, "
        "Argument size: 0.4 GB, Host temp size: 0.0 GB.\n",
        MemoryEstimateEvent,
    )
    assert old == MemoryEstimateEvent(1.5, 0.4, 1.1, 0.4, 0.0, 1)
    new = one(
        H + "max_utils.py:823] [train] Total estimated memory size: 2.5 GB, estimated output size: 0.5 GB, "
        "estimated temp size: 1.5 GB, estimated argument size: 0.5 GB, Estimated host temp size: 0.1 GB.\n"
        + H
        + "max_utils.py:829] [train] Note that compiler could over-estimate the HBM usage.\n",
        MemoryEstimateEvent,
    )
    assert new == MemoryEstimateEvent(2.5, 0.5, 1.5, 0.5, 0.1, 1)


def test_memstats_label_then_one_record_per_device() -> None:
    text = (
        H
        + "max_utils.py:780] \nMemstats: After params initialized:\n"
        + H
        + "max_utils.py:788] \tUsing (GB) 0.43 / 31.25 (1.376000%) on TPU_26(process=7,(2,6,0,0))\n"
        + H
        + "max_utils.py:788] \tUsing (GB) 0.5 / 31.25 (1.6%) on TPU_27(process=7,(3,6,0,0))\n"
        + H
        + "max_utils.py:780] \nMemstats: After params initialized:\n"
        + H
        + "max_utils.py:788] \tMemstats unavailable, error: 'NoneType' object is not subscriptable\n"
    )
    evs = events(text, MemStatsEvent)
    assert evs == [
        MemStatsEvent("After params initialized", 0.43, 31.25, "TPU_26(process=7,(2,6,0,0))", 3),
        MemStatsEvent("After params initialized", 0.5, 31.25, "TPU_27(process=7,(3,6,0,0))", 4),
    ]


def test_memstats_labels_follow_log_order() -> None:
    text = (
        H
        + "max_utils.py:780] \nMemstats: After params initialized:\n"
        + H
        + "max_utils.py:788] \tUsing (GB) 1.0 / 16.0 (6.25%) on cuda:0\n"
        + H
        + "max_utils.py:780] \nMemstats: After step 5:\n"
        + H
        + "max_utils.py:788] \tUsing (GB) 2.0 / 16.0 (12.5%) on cuda:0\n"
        + H
        + "max_utils.py:780] Memstats: Before eval: Using (GB) 3.0 / 16.0 (18.75%) on cuda:0\n"
    )
    evs = events(text, MemStatsEvent)
    assert [(e.label, e.used_gb, e.line) for e in evs] == [
        ("After params initialized", 1.0, 3),
        ("After step 5", 2.0, 6),
        ("Before eval", 3.0, 7),
    ]


# ---------------------------------------------------------------------------------------------------------
# eval
# ---------------------------------------------------------------------------------------------------------
def test_eval_all_dialects_and_start() -> None:
    text = (
        H
        + "train.py:917] Starting eval after train step 9\n"
        + H
        + "metric_logger.py:328] Completed eval step: 3, seconds: 0.120, running loss=2.5, "
        "running perplexity=12.182, running total_weights=256.0\n"
        + H
        + "metric_logger.py:302] Completed eval after train step 9, loss=2.345, perplexity=10.433, "
        "total_weights=512.0, avg_z_loss=0.000\n"
        + H
        + "train.py:600] eval metrics after step: 19, loss=2.1, total_weights=512\n"
        + H
        + "train.py:600] eval metrics after step: 29, loss=2.0, perplexity=7.389, total_weights=512\n"
        + H
        + "train.py:500] average loss after step=39: eval_step_count=4, eval_loss=np.float32(1.9), "
        "total_weights=512\n"
    )
    assert one(text, EvalStartEvent) == EvalStartEvent(9, 1)
    assert events(text, EvalEvent) == [
        EvalEvent(3, 2.5, EvalDialect.RUNNING, 2, perplexity=12.182),
        EvalEvent(9, 2.345, EvalDialect.CURRENT, 3, perplexity=10.433),
        EvalEvent(19, 2.1, EvalDialect.MID, 4),
        EvalEvent(29, 2.0, EvalDialect.MID, 5, perplexity=7.389),
        EvalEvent(39, 1.9, EvalDialect.OLD, 6),
    ]


def test_eval_look_alikes_are_not_evals() -> None:
    # upstream reads the hostname's `-eval-` plus a training loss as an eval loss, and config params too
    text = (
        H + "train.py:10] Connecting to job-eval-7b1c-0.svc:8482 completed step: 1, seconds: 1.0, "
        "total_weights: 2, loss: 10.874\n"
        + H
        + "pyconfig.py:591] Config param eval_interval: 5 loss 3\n"
        + H
        + "pyconfig.py:591] Config param eval_steps: 10\n"
    )
    assert events(text, EvalEvent) == []
    assert events(text, EvalStartEvent) == []
    assert [s.loss for s in events(text, StepEvent)] == [10.874]


# ---------------------------------------------------------------------------------------------------------
# checkpoints
# ---------------------------------------------------------------------------------------------------------
def _ck(text: str) -> list[tuple]:
    return [(e.action, e.step, e.seconds, e.dialect) for e in events(text, CheckpointEvent)]


def test_checkpoint_orbax_new_dialect_and_maxtext_lines() -> None:
    A = CheckpointAction
    text = (
        H
        + "checkpointing.py:1310] Waiting for step 5 to finish before checkpoint...\n"
        + H
        + "checkpointing.py:1314] Waited 0.170 seconds for step 5 to finish before starting checkpointing.\n"
        + H
        + "checkpoint_manager.py:1527] [process=0] Saving checkpoint at step 5\n"
        + H
        + "checkpointing.py:596] Started an asynchronous checkpoint save for step 5\n"
        + H
        + "event_tracking.py:171] [process=7] [async] Finished blocking save in 1.02 seconds. "
        "Continuing save @ gs://b/run/checkpoints/5.\n"
        + H
        + "event_tracking.py:184] [process=7] [async] Finished save (blocking + background) in 47.5 seconds "
        "@ gs://b/run/checkpoints/5\n"
        + H
        + "checkpointing.py:598] Saved a checkpoint at step 5.\n"
        + H
        + "checkpointing.py:600] Checkpoint for step 5 already exists, skipping save.\n"
        + "W1130 06:52:51.026531 1 checkpoint_manager.py:900] Waiting for previous save to complete took "
        "22.738788 seconds. If this number is high, consider checkpointing less frequently.\n"
    )
    assert _ck(text) == [
        (A.SAVE_WAIT, 5, None, "maxtext"),
        (A.SAVE_WAIT, 5, 0.170, "maxtext"),
        (A.SAVE_START, 5, None, "orbax"),
        (A.SAVE_START, 5, None, "maxtext"),
        (A.SAVE_BLOCKING_DONE, 5, 1.02, "orbax-new"),
        (A.SAVE_DONE, 5, 47.5, "orbax-new"),
        (A.SAVE_DONE, 5, None, "maxtext"),
        (A.SAVE_SKIPPED, 5, None, "maxtext"),
        (A.WAIT_PREVIOUS, None, 22.738788, "orbax"),
    ]
    paths = [e.path for e in events(text, CheckpointEvent) if e.path]
    assert paths == ["gs://b/run/checkpoints/5", "gs://b/run/checkpoints/5"]


def test_checkpoint_orbax_old_dialect() -> None:
    A = CheckpointAction
    text = (
        H
        + "async_checkpointer.py:1] [process=0] Started async saving checkpoint to gs://b/ck/10.\n"
        + H
        + "async_checkpointer.py:2] Finished blocking save. Time taken: 1.697991s. Continuing background "
        "save to gs://b/ck/10.\n"
        + H
        + "async_checkpointer.py:3] Finished async_save (blocking + background). Time taken: 66.583805s. "
        "directory=gs://b/ck/10\n"
        + H
        + "checkpointer.py:4] Finished restoring checkpoint in 3.25 seconds from gs://b/ck/10.\n"
    )
    assert _ck(text) == [
        (A.SAVE_BLOCKING_DONE, 10, 1.697991, "orbax-old"),
        (A.SAVE_DONE, 10, 66.583805, "orbax-old"),
        (A.RESTORE_DONE, 10, 3.25, "orbax-old"),
    ]


def test_checkpoint_restore_side() -> None:
    A = CheckpointAction
    text = (
        H
        + "checkpointing.py:701] checkpoint manager exists so trying to load this run's existing checkpoint\n"
        + H
        + "checkpointing.py:705] restoring from this run's directory step 5\n"
        + H
        + "event_tracking.py:184] [process=0] [sync] Finished load in 0.08 seconds @ /o/ck/checkpoints/5\n"
        + H
        + "checkpointing.py:803] No existing checkpoints found, not restoring checkpoint.\n"
        + H
        + "checkpointing.py:540] Checkpointing disabled, not creating checkpoint manager.\n"
        + H
        + "checkpointing.py:810] Loading full state from path: gs://b/other/items\n"
    )
    assert _ck(text) == [
        (A.RESTORE_START, 5, None, "maxtext"),
        (A.RESTORE_DONE, 5, 0.08, "orbax-new"),
        (A.NO_CHECKPOINT, None, None, "maxtext"),
        (A.DISABLED, None, None, "maxtext"),
        (A.RESTORE_START, None, None, "maxtext"),
    ]


def test_standard_logger_dict_line() -> None:
    A = CheckpointAction
    text = (
        H + "standard_logger.py:34] {'step': 0, 'event_type': 'save', 'directory': 'gs://b/ck', "
        "'reached_preemption': False, 'synchronous': False, 'wait_for_prev_duration_secs': 0.0001, "
        "'checkpointer_blocking_duration_secs': 1.0241, "
        "'checkpoint_manager_blocking_duration_secs': 1.0345}\n"
        + H
        + "standard_logger.py:34] {'step': 5, 'event_type': 'restore', 'directory': '/o/ck', "
        "'checkpointer_start_time': 1796023736.18, 'checkpointer_duration_secs': 0.0932}\n"
        + H
        + "standard_logger.py:34] {'step': 6, 'event_type': 'save', 'directory': __import__('os')}\n"
    )
    evs = events(text, CheckpointEvent)
    assert [(e.action, e.step, e.seconds, e.dialect, e.path) for e in evs] == [
        (A.SAVE_BLOCKING_DONE, 0, 1.0345, "standard_logger", "gs://b/ck"),
        (A.RESTORE_DONE, 5, 0.0932, "standard_logger", "/o/ck"),
    ]


@pytest.mark.parametrize("digits", [400, 5000])
def test_standard_logger_duration_past_a_doubles_range_is_infinite_not_an_internal_error(digits: int) -> None:
    # found by the fuzz suite: float(int) overflowed (400 digits), int() refused (past 4300 digits)
    text = (
        H + "standard_logger.py:34] {'step': 5, 'event_type': 'restore', 'directory': '/o/ck', "
        f"'checkpointer_duration_secs': {'9' * digits}, 'checkpointer_start_time': 1.5}}\n"
    )
    (ev,) = events(text, CheckpointEvent)
    assert (ev.action, ev.step, ev.seconds) == (CheckpointAction.RESTORE_DONE, 5, math.inf)


def test_no_checkpoint_timing_invented_from_distant_words() -> None:
    # upstream's lazy `sav.*?checkpoint.*?took` spans the whole run and invents save/load times
    text = (
        H
        + "train.py:1] saving config before checkpointing setup\n"
        + H
        + "train.py:2] loading dataset for checkpoint-free run\n"
        + H
        + "train.py:3] compile took 12.5 seconds\n"
        + H
        + "x.py:4] /jax/orbax/read/nothing happened (time elapsed: 3.0 s)\n"
    )
    assert events(text, CheckpointEvent) == []


# ---------------------------------------------------------------------------------------------------------
# aborts and exit codes
# ---------------------------------------------------------------------------------------------------------
def test_nan_and_inf_abort_lines() -> None:
    assert one(H + "metric_logger.py:349] Aborting training due to NaN loss.\n", NonFiniteAbortEvent) == (
        NonFiniteAbortEvent("nan", 1)
    )
    assert (
        one(H + "metric_logger.py:349] Aborting training due to Inf loss.\n", NonFiniteAbortEvent).value
        == "inf"
    )
    assert events(H + "x.py:1] not aborting training due to a slow step\n", NonFiniteAbortEvent) == []


def test_xpk_wrapper_and_exit_code() -> None:
    text = (
        "XPK Start: Sat Apr 18 18:23:50 UTC 2026\n"
        + H
        + "metric_logger.py:265] completed step: 0, seconds: 1.0, total_weights: 2, loss: 3.0\n"
        "XPK End: Sat Apr 18 18:25:50 UTC 2026\nEXIT_CODE=0\n"
    )
    assert events(text, ExitCodeEvent) == [ExitCodeEvent(0, 4)]
    assert one(text, StepEvent).line == 2
    assert events("EXIT_CODE=137\n", ExitCodeEvent) == [ExitCodeEvent(137, 1)]
    assert events("MY_EXIT_CODE=3\n", ExitCodeEvent) == []
