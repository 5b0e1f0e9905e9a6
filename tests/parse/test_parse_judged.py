"""Production-log cases, each on the C scanner and on its pure-Python twin (the same events either way).

* error hits judged per physical line: a benign line vetoes only on its own line, a hit names its line;
* a non-finite TFLOP/s or Tokens/s on a step line is a fatal hit naming that line;
* restore timing from orbax's read metrics and the older "Restoring checkpoint from" line;
* a number cut at the end of the stream is never read as a step (``loss: 7.`` is not 7.0);
* header-less step lines start their own records, so none is lost past the record cap.
"""

from __future__ import annotations

import pytest

from cvs_tui.core.events import CheckpointAction, CheckpointEvent, ErrorHit, LogEvent, Severity, StepEvent
from cvs_tui.core.parse import RECORD_CAP, NodeLogParser, accel

H = "I1130 06:52:51.026531 139791635864448 "
E = "E1130 06:52:51.026531 139791635864448 "
STEP = (
    "completed step: {n}, seconds: 0.05, TFLOP/s/device: {tf}, Tokens/s/device: {tok}, total_weights: 256, "
    "loss: {loss}"
)

PATHS = [
    pytest.param(False, id="python"),
    pytest.param(
        True, id="c", marks=pytest.mark.skipif(not accel.built(), reason="the C scanner is not built")
    ),
]


def parse(data: bytes, native: bool, cuts: list[int] | None = None) -> list[LogEvent]:
    """Events of ``data`` fed whole, or split at ``cuts``, then finished."""
    parser = NodeLogParser(native=native)
    out: list[LogEvent] = []
    prev = 0
    for c in cuts or []:
        out += parser.feed(data[prev:c])
        prev = c
    out += parser.feed(data[prev:]) + parser.finish()
    assert parser.internal_errors == 0
    return out


def fatal(evs: list[LogEvent]) -> list[tuple[str, int, str]]:
    return [(e.name, e.line, e.text) for e in evs if isinstance(e, ErrorHit) and e.severity is Severity.FATAL]


def steps(evs: list[LogEvent]) -> list[StepEvent]:
    return [e for e in evs if isinstance(e, StepEvent)]


# ---------------------------------------------------------------------------------------------------------
# 1. error hits, per physical line
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("native", PATHS)
def test_a_benign_unheadered_line_does_not_veto_an_error_on_another_line(native: bool) -> None:
    log = (
        H + "metric_logger.py:265] " + STEP.format(n=7, tf=90.1, tok=4597.2, loss=7.5) + "\n"
        "node-3:4117:4117 [0] NCCL ERROR unhandled system error\n"  # folded into the step's record
        "rsmi_dev_gpu_metrics_info_get failed\n"  # benign, on its own line
         + H + "x.py:2] next\n"
    ).encode()
    for evs in (parse(log, native), parse(log, native, list(range(1, len(log), 5)))):
        assert fatal(evs) == [("NCCL ERROR", 2, "node-3:4117:4117 [0] NCCL ERROR unhandled system error")]
        warn = [(e.name, e.line) for e in evs if isinstance(e, ErrorHit) and e.severity is Severity.WARNING]
        assert warn == [("rocm smi metrics", 3)]
    # benign text on the error's own line still vetoes it (a cuInit failure's "CUDA error" wording)
    same_line = (
        H + "x.py:1] ok\nnode-3:1:1 [0] NCCL ERROR while rsmi_dev_gpu_metrics_info_get failed\n"
    ).encode()
    assert fatal(parse(same_line, native)) == []


@pytest.mark.parametrize("native", PATHS)
def test_hip_and_print_lines_folded_into_a_record_are_judged_alone(native: bool) -> None:
    log = (
        (
            E + "cuda_platform.cc:51] failed call to cuInit: UNKNOWN ERROR (303)\n"  # benign, line 1
            "HIP error: hipErrorNoBinaryForGpu\n"  # unheadered, line 2
            "Could not determine PCIe bandwidth\n"  # benign, line 3
        ).encode()
    )
    assert fatal(parse(log, native)) == [("gpu fault", 2, "HIP error: hipErrorNoBinaryForGpu")]
    # the same three lines flattened are one physical line: the veto covers it, as before
    assert fatal(parse(log.replace(b"\n", b" "), native)) == []


@pytest.mark.parametrize("native", PATHS)
def test_each_hit_names_its_own_line_within_the_record(native: bool) -> None:
    log = (
        H + "x.py:1] start\n"
        'Traceback (most recent call last):\n  File "t.py", line 3\n'
        "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 12 bytes\n"
    ).encode()
    # the traceback and the hits inside it stand on its exception line (one incident), the traceback first
    assert fatal(parse(log, native)) == [
        ("python traceback", 4, "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 12 bytes"),
        ("resource", 4, "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 12 bytes"),
        ("out of memory", 4, "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 12 bytes"),
    ]
    crlf = parse(log.replace(b"\n", b"\r\n"), native)
    assert fatal(crlf) == fatal(parse(log, native))


# ---------------------------------------------------------------------------------------------------------
# 2. non-finite throughput
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("native", PATHS)
@pytest.mark.parametrize(("tf", "tok"), [("nan", "4597.2"), ("90.1", "inf"), ("-inf", "nan")])
def test_non_finite_throughput_on_a_step_line_is_fatal(native: bool, tf: str, tok: str) -> None:
    good = H + "metric_logger.py:265] " + STEP.format(n=1, tf=90.1, tok=4597.2, loss=7.5) + "\n"
    bad = STEP.format(n=2, tf=tf, tok=tok, loss=7.4)
    log = (good + "I1130 06:52:52.0 1 metric_logger.py:265] " + bad + "\n" + good).encode()
    evs = parse(log, native)
    assert [s.step for s in steps(evs)] == [1, 2, 1]  # the step is kept; the run fails on it
    assert fatal(evs) == [("non-finite throughput", 2, "I1130 06:52:52.0 1 metric_logger.py:265] " + bad)]
    hit = next(e for e in evs if isinstance(e, ErrorHit))
    assert hit.origin == "always"
    # a step printed without a header, live (line by line), gives the same hit
    bare = (good + bad + "\n").encode()
    assert fatal(parse(bare, native, [len(good), len(good) + 10])) == [("non-finite throughput", 2, bad)]


@pytest.mark.parametrize("native", PATHS)
def test_finite_throughput_and_steps_without_rates_are_not_hits(native: bool) -> None:
    log = (
        H
        + "metric_logger.py:265] "
        + STEP.format(n=1, tf="1e-5", tok="0.0", loss=7.5)
        + "\n"
        + H
        + "metric_logger.py:265] [Rampup Batch Size Phase], completed step: 2, seconds: 0.3, "
        "total_weights: 128, loss: 7.0\n"
    ).encode()
    evs = parse(log, native)
    assert len(steps(evs)) == 2 and fatal(evs) == []


# ---------------------------------------------------------------------------------------------------------
# 3. restore timing
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("native", PATHS)
def test_restore_timing_from_orbax_read_metrics_and_the_old_start_line(native: bool) -> None:
    a = CheckpointAction
    log = (
        H
        + "checkpointer.py:323] Restoring checkpoint from gs://b/run/checkpoints/5.\n"
        + H
        + "jax_array_handlers.py:273] [process=0] /jax/orbax/read/worker/io/requested throughput: "
        "144.617 MiB/s (total gbytes: 9.0 MiB) (time elapsed: 0.062285423278808594 s) (per-host)\n"
        + H
        + "async_io_engine.py:127] [process=0] /jax/checkpoint/read/gbytes_per_sec: 110.191 MiB/s "
        "(total size: 9.0 MiB) (time elapsed: 3.5e-05 s) (global)\n"
        + H
        + "x.py:9] [process=0] /jax/orbax/read/gbytes_per_sec: 43.240 MiB/s (total gbytes: 1.5 GiB) "
        "(time elapsed: 36.53 s) (per-host)\n"
        + H
        + "checkpointer.py:170] Finished restoring checkpoint from gs://b/run/checkpoints/5.\n"
    ).encode()
    got = [
        (e.action, e.step, e.seconds, e.dialect, e.path)
        for e in parse(log, native)
        if isinstance(e, CheckpointEvent)
    ]
    assert got == [
        (a.RESTORE_START, 5, None, "orbax", "gs://b/run/checkpoints/5"),
        (a.RESTORE_DONE, None, 0.062285423278808594, "orbax-metrics", None),
        (a.RESTORE_DONE, None, 3.5e-05, "orbax-metrics", None),
        (a.RESTORE_DONE, None, 36.53, "orbax-metrics", None),
    ]
    # the write side and prose are not restores
    other = (
        H + "async_io_engine.py:127] [process=0] /jax/orbax/write/gbytes_per_sec: 1.0 GiB/s "
        "(total size: 9.0 MiB) (time elapsed: 2.0 s) (global)\n"
        + H
        + "x.py:1] /jax/orbax/read/ was slow (time elapsed: 3.0 s)\n"
    ).encode()
    assert [e for e in parse(other, native) if isinstance(e, CheckpointEvent)] == []


# ---------------------------------------------------------------------------------------------------------
# 4. the end of the stream
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("native", PATHS)
def test_a_number_cut_at_the_end_of_the_stream_is_not_a_step(native: bool) -> None:
    head = "".join(
        H + "metric_logger.py:265] " + STEP.format(n=n, tf=90.1, tok=4597.2, loss=7.5) + ", lm_loss: 7.5\n"
        for n in range(3)
    )
    last = (
        H + "metric_logger.py:265] " + STEP.format(n=3, tf=90.1, tok=4597.2, loss=7.188) + ", lm_loss: 7.188"
    )
    for cut in ("loss: 7.", "loss: 7.1", "loss: 7.188", "lm_loss: 7", "lm_loss: 7.188"):
        data = (head + last[: last.index(cut) + len(cut)]).encode()
        for cuts in ([], [len(data) - 3], list(range(1, len(data), 97))):
            assert [s.step for s in steps(parse(data, native, cuts))] == [0, 1, 2], (cut, cuts)
    # with its line end (or any whitespace after it) the last step is complete
    for end in ("\n", " ", "\r\n"):
        data = (head + last + end).encode()
        got = steps(parse(data, native))
        assert [s.step for s in got] == [0, 1, 2, 3] and got[-1].loss == 7.188
    # a step whose last value ends the text but not the stream is read once the stream goes on
    parser = NodeLogParser(native=native)
    early = parser.feed((head + last).encode())
    late = parser.feed(b"\n") + parser.finish()
    assert [s.step for s in steps(early + late)] == [0, 1, 2, 3]


@pytest.mark.parametrize("native", PATHS)
def test_a_step_cut_by_the_record_cap_is_not_read(native: bool) -> None:
    head = (H + "x.py:1] ").encode()
    step = b"completed step: 4, seconds: 0.1, total_weights: 8, loss: 7.188"
    cut = len(step) - 2  # the cap falls inside "7.188": the first RECORD_CAP bytes hold "loss: 7.1"
    glue = b" n] "  # a message, not a header-less step line: the step stays in the long record
    data = head + b"q" * (RECORD_CAP - len(head) - len(glue) - cut) + glue + step + b"\n"
    data += (H + "y.py:2] z\n").encode()
    assert steps(parse(data, native)) == []


# ---------------------------------------------------------------------------------------------------------
# 5. header-less step lines
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("native", PATHS)
def test_three_thousand_headerless_step_lines_all_parse(native: bool) -> None:
    log = (H + "x.py:1] start\n").encode() + "".join(
        STEP.format(n=i, tf=0.02, tok=4597.2, loss=f"{7.5 - i * 5e-4:.3f}") + "\n" for i in range(3000)
    ).encode()
    assert len(log) > 3 * RECORD_CAP
    for cuts in ([], list(range(1, len(log), 4096))):
        got = steps(parse(log, native, cuts))
        assert [s.step for s in got] == list(range(3000))
        assert [s.line for s in got] == list(range(2, 3002))  # each at its own line
        assert got[-1].loss == pytest.approx(7.5 - 2999 * 5e-4, abs=1e-3)
    flat = steps(parse(log.replace(b"\n", b" "), native))
    assert [s.step for s in flat] == list(range(3000))


@pytest.mark.parametrize("native", PATHS)
def test_a_step_after_a_log_header_or_the_rampup_tag_stays_in_its_record(native: bool) -> None:
    log = (
        H + "metric_logger.py:265] " + STEP.format(n=1, tf=90.1, tok=4597.2, loss=7.5) + "\n"
        "INFO:2026-04-19 06:51:49,547:train.py:140: completed step: 2, seconds: 0.3, total_weights: 8, "
        "loss: 7.0\n"
        "[Rampup Batch Size Phase], completed step: 3, seconds: 0.3, total_weights: 8, loss: 6.9\n"
        "[Rampup Batch Size Phase] completed step: 4, seconds: 0.3, total_weights: 8, loss: 6.8\n"
    ).encode()
    got = steps(parse(log, native))
    assert [(s.step, s.line, s.kind.value, s.source) for s in got] == [
        (1, 1, "train", "metric_logger.py:265"),
        (2, 2, "train", "train.py:140"),
        (3, 3, "rampup", None),
        (4, 4, "rampup", None),
    ]
