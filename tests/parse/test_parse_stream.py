"""Streaming behaviour: any chunking, flattened logs, hostile bytes, bounded memory."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cvs_tui.core.event_codec import event_to_dict
from cvs_tui.core.events import ErrorHit, StepEvent
from cvs_tui.core.parse import RECORD_CAP, NodeLogParser, parse_log_bytes
from cvs_tui.core.parse.parser import ERROR_TEXT_CAP

FIXTURES = Path(__file__).parents[1] / "fixtures" / "maxtext"
H = "I1130 06:52:51.026531 139791635864448 "

# A log holding every record form the parser knows, with continuation lines and noise.
CORPUS = (
    "[transformers] PyTorch was not found.\n[NO-OP] mldiagnostics: dependency missing; using stub.\n"
    "XPK Start: Sat Apr 18 18:23:50 UTC 2026\n"
    "INFO:2026-04-19 06:51:49,547:jax._src.distributed:140: Starting JAX distributed service on [::]:8482\n"
    "2026-04-18 18:24:14.732938: E external/local_xla/xla/stream_executor/cuda/cuda_platform.cc:51] failed "
    "call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n"
    "E0000 00:00:1776581480.935398      10 cuda_dnn.cc:8579] Unable to register cuDNN factory\n"
    + H
    + "max_utils.py:835] System Information: Jax Version: 0.9.2\n"
    + H
    + "max_utils.py:837] System Information: Jax Backend: PJRT C API\nTFRT TPU v5\n"
    + H
    + "maxtext_utils.py:2098] Num_devices: 4, shape (1, 1, 1, 4, 1, 1, 1, 1, 1, 1, 1, 1)\n"
    + H
    + "max_utils.py:823] [train] Total estimated memory size: 2.5 GB, estimated output size: 0.5 GB, "
    "estimated temp size: 1.5 GB, estimated argument size: 0.5 GB, Estimated host temp size: 0.1 GB.\n"
    + H
    + "metric_logger.py:425] number parameters: 1.104 billion\n"
    + H
    + "max_utils.py:780] \nMemstats: After params initialized:\n"
    + H
    + "max_utils.py:788] \tUsing (GB) 0.43 / 31.25 (1.376000%) on TPU_26(process=7,(2,6,0,0))\n"
    + "".join(
        H + f"metric_logger.py:265] completed step: {n}, seconds: 0.1{n}, TFLOP/s/device: 9{n}.5, "
        f"Tokens/s/device: 1000.{n}, total_weights: 256, loss: {8 - n / 10:.3f}, lm_loss: {8 - n / 10:.3f}, "
        f"perplexity: 1000.{n}\n"
        for n in range(6)
    )
    + H
    + "metric_logger.py:265] [Rampup Batch Size Phase], completed step: 6, seconds: 0.3, total_weights: "
    "128, loss: 7.0\n"
    + H
    + "metric_logger.py:270] completed profiler activation/deactivation step: 7, total_weights: 256, "
    "loss: 6.9\n"
    + H
    + "train.py:917] Starting eval after train step 7\n"
    + H
    + "metric_logger.py:302] Completed eval after train step 7, loss=2.345, perplexity=10.433, "
    "total_weights=512.0\n"
    + H
    + "checkpointing.py:1310] Waiting for step 7 to finish before checkpoint...\n"
    + H
    + "checkpoint_manager.py:1527] [process=0] Saving checkpoint at step 7\n"
    + H
    + "event_tracking.py:171] [process=0] [async] Finished blocking save in 1.02 seconds. Continuing "
    "save @ /o/ck/7.\n"
    + H
    + "standard_logger.py:34] {'step': 7, 'event_type': 'save', 'directory': '/o/ck', "
    "'checkpoint_manager_blocking_duration_secs': 1.0345}\n"
    + H
    + "async_checkpointer.py:3] Finished async_save (blocking + background). Time taken: 66.5s. "
    "directory=/o/ck/7\n"
    + H
    + "metric_logger.py:265] completed step: 8, seconds: 0.026, TFLOP/s/device: 0.041, Tokens/s/device: "
    "10.9, total_weights: 256, loss: nan, lm_loss: nan, perplexity: nan\n"
    "Per train step:\n Total TFLOPs: 13.59 \n"
    " split as 93.93% learnable weight flops and 6.07% attention flops\n"
    + H
    + "metric_logger.py:349] Aborting training due to NaN loss.\n"
    'Traceback (most recent call last):\n  File "train.py", line 1, in <module>\nValueError: boom\n'
    "F1130 06:52:51.026531 1 coordination_service_agent.cc:12] Terminating process because the JAX "
    "distributed service detected fatal errors.\n"
    "XPK End: Sat Apr 18 18:25:50 UTC 2026\nEXIT_CODE=1\n"
)


def same_but_lines(flat: list[Any], original: list[Any]) -> None:
    """A flattened log gives the original's events, without line numbers. Error hits are judged per
    physical line and carry the line that matched; flattening merges a record's lines into one, so a flat
    hit's text holds the original hit's text, and one record's hits may come in another order."""
    assert canon([e for e in flat if not isinstance(e, ErrorHit)], keep_lines=False) == canon(
        [e for e in original if not isinstance(e, ErrorHit)], keep_lines=False
    )
    flat_hits = [e for e in flat if isinstance(e, ErrorHit)]
    orig_hits = [e for e in original if isinstance(e, ErrorHit)]
    key = lambda h: (h.name, h.severity, h.origin)  # noqa: E731
    assert sorted(map(key, flat_hits)) == sorted(map(key, orig_hits))
    for h in orig_hits:  # (or the flat text, capped, ends before the line that matched)
        assert any(
            key(f) == key(h) and (h.text in f.text or len(f.text) == ERROR_TEXT_CAP) for f in flat_hits
        ), h


def canon(evs: list[Any], *, keep_lines: bool = True) -> list[dict[str, Any]]:
    """Comparable form of events: NaN equals NaN, and ``line`` may be blanked."""
    out = []
    for ev in evs:
        d = event_to_dict(ev)
        if not keep_lines:
            d["line"] = 0
        out.append({k: _num(v) for k, v in d.items()})
    return out


def _num(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    if isinstance(v, dict):
        return {k: _num(x) for k, x in v.items()}
    return v


def feed_in(
    data: bytes, cuts: list[int], patterns: dict[str, str] | None = None
) -> tuple[list[Any], NodeLogParser]:
    parser = NodeLogParser(patterns)
    out: list[Any] = []
    prev = 0
    for c in sorted(set(cuts)):
        out += parser.feed(data[prev:c])
        prev = c
    out += parser.feed(data[prev:])
    out += parser.finish()
    assert parser.internal_errors == 0  # nothing was swallowed by the never-raise guard
    return out, parser


def fixture_logs() -> list[Path]:
    return sorted(FIXTURES.glob("*.log"))


def test_corpus_yields_every_kind() -> None:
    kinds = {type(e).__name__ for e in parse_log_bytes(CORPUS.encode())}
    assert kinds == {
        "SystemInfoEvent",
        "DevicesEvent",
        "MemoryEstimateEvent",
        "ParamsEvent",
        "MemStatsEvent",
        "StepEvent",
        "EvalStartEvent",
        "EvalEvent",
        "CheckpointEvent",
        "TflopsPerStepEvent",
        "NonFiniteAbortEvent",
        "ErrorHit",
        "ExitCodeEvent",
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(min_value=0, max_value=len(CORPUS.encode())), max_size=40))
def test_random_chunking_gives_identical_events(cuts: list[int]) -> None:
    data = CORPUS.encode()
    whole = canon(parse_log_bytes(data))
    got, parser = feed_in(data, cuts)
    assert canon(got) == whole
    assert parser.lines_seen == data.count(b"\n")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(min_value=0, max_value=len(CORPUS.encode())), max_size=40))
def test_random_chunking_of_the_flattened_log(cuts: list[int]) -> None:
    flat = CORPUS.encode().replace(b"\n", b" ")
    assert canon(feed_in(flat, cuts)[0]) == canon(parse_log_bytes(flat))


def test_byte_by_byte_feeding() -> None:
    data = CORPUS.encode()
    assert canon(feed_in(data, list(range(len(data))))[0]) == canon(parse_log_bytes(data))


@pytest.mark.parametrize("path", fixture_logs(), ids=lambda p: p.name)
def test_flattened_fixture_matches_original_except_lines(path: Path) -> None:
    data = path.read_bytes()
    original = parse_log_bytes(data)
    flat = parse_log_bytes(data.replace(b"\n", b" "))
    assert original, "fixture produced no events"
    same_but_lines(flat, original)
    assert all(getattr(e, "line", 1) == 1 for e in flat)


@pytest.mark.parametrize("path", fixture_logs(), ids=lambda p: p.name)
def test_fixture_chunked_matches_whole(path: Path) -> None:
    data = path.read_bytes()
    rng = random.Random(path.name)
    cuts = [rng.randrange(len(data)) for _ in range(200)]
    assert canon(feed_in(data, cuts)[0]) == canon(parse_log_bytes(data))


def test_corpus_flattened_equivalence_and_line_numbers() -> None:
    data = CORPUS.encode()
    original = parse_log_bytes(data)
    same_but_lines(parse_log_bytes(data.replace(b"\n", b" ")), original)
    lines = data.decode().split("\n")
    for ev in original:  # every event points at the line where its record starts; a hit at its own line
        first = lines[ev.line - 1]
        if isinstance(ev, ErrorHit) and ev.name == "python traceback":
            # a traceback stands on its exception line and adds the frame that raised it
            assert ev.text.startswith(" ".join(first.split())), (ev, first)
        elif isinstance(ev, ErrorHit):
            assert " ".join(first.split()) == ev.text, (ev, first)
        else:
            assert first[:1] in {"I", "E", "F", "2", "P", "T", "X"}, (ev, first)
    steps = [e for e in original if isinstance(e, StepEvent)]
    assert lines[steps[0].line - 1].endswith(
        "completed step: 0, seconds: 0.10, TFLOP/s/device: 90.5, "
        "Tokens/s/device: 1000.0, total_weights: 256, loss: 8.000, "
        "lm_loss: 8.000, perplexity: 1000.0"
    )


def test_crlf_log_reads_like_lf() -> None:
    data = CORPUS.encode()
    assert canon(parse_log_bytes(data.replace(b"\n", b"\r\n"))) == canon(parse_log_bytes(data))


def test_invalid_utf8_becomes_replacement_characters() -> None:
    bad = b"\xff\xfe\xc3"
    data = (
        (H + "x.py:1] ").encode()
        + b" Traceback (most recent call last): "
        + bad
        + b"\n  bad \xe9\nKeyError: \xe9\n"
    )
    hit = next(e for e in parse_log_bytes(data) if isinstance(e, ErrorHit))
    assert "\ufffd" in hit.text
    # a multi-byte character split across chunks is still one character
    text = (H + "x.py:1] Fatal Python error: caf\u00e9 \u2603\n").encode()
    cut = text.index("\u2603".encode()) + 1
    hit2 = next(e for e in feed_in(text, [cut])[0] if isinstance(e, ErrorHit))
    assert "\u2603" in hit2.text


def test_binary_garbage_never_raises() -> None:
    rng = random.Random(3)
    garbage = bytes(rng.randrange(256) for _ in range(300_000))
    parser = NodeLogParser()
    for i in range(0, len(garbage), 4093):
        parser.feed(garbage[i : i + 4093])
    parser.finish()
    assert parser.internal_errors == 0
    # and the parser still works after it
    tail = (
        H + "metric_logger.py:265] completed step: 1, seconds: 1.0, total_weights: 2, loss: 3.0\n"
    ).encode()
    evs = parser.feed(b"\n" + tail) + parser.finish()
    assert [e.step for e in evs if isinstance(e, StepEvent)] == [1]


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=3000), st.lists(st.integers(min_value=0, max_value=3000), max_size=10))
def test_arbitrary_bytes_never_raise_and_chunking_is_invisible(data: bytes, cuts: list[int]) -> None:
    whole = canon(parse_log_bytes(data))
    assert canon(feed_in(data, [c for c in cuts if c <= len(data)])[0]) == whole


def test_ten_megabyte_line_is_capped_and_memory_stays_bounded() -> None:
    big = b"x" * (10 * 1024 * 1024)
    step = (
        H + "metric_logger.py:265] completed step: 2, seconds: 1.0, total_weights: 2, loss: 3.0\n"
    ).encode()
    head = (H + "x.py:1] Fatal Python error: huge line follows ").encode()
    data = head + big + b" segmentation fault at the end\n" + step
    parser = NodeLogParser()
    out = []
    biggest = 0
    for i in range(0, len(data), 256 * 1024):
        out += parser.feed(data[i : i + 256 * 1024])
        biggest = max(biggest, len(parser._split._norm))
    out += parser.finish()
    assert biggest <= RECORD_CAP + 4096  # only the capped record and a short tail are carried
    assert parser.truncated_bytes > len(big) - RECORD_CAP - 4096
    errors = [e for e in out if isinstance(e, ErrorHit)]
    # the record's head is parsed, its tail (with "segmentation fault") is not
    assert [(e.name, e.line) for e in errors] == [("python err", 1), ("fatal python error", 1)]
    assert len(errors[0].text) <= 2000
    steps = [e for e in out if isinstance(e, StepEvent)]
    assert [(s.step, s.line) for s in steps] == [(2, 2)]
    # same events when the whole thing arrives at once
    assert canon(parse_log_bytes(data)) == canon(out)


def test_long_record_cap_is_independent_of_chunking() -> None:
    # a step line past the cap inside one record (as a message, after `] `) is never seen, however it
    # arrives; a bare step line there starts its own record and is seen, however it arrives
    filler = b"y" * (RECORD_CAP + 10)
    for glue, want in ((b" note] ", []), (b"\n", [1])):
        data = (
            (H + "x.py:1] ").encode()
            + filler
            + glue
            + b"completed step: 1, seconds: 1.0, total_weights: 2, loss: 3.0\n"
        )
        data += (H + "x.py:2] done\n").encode()
        assert [e.step for e in parse_log_bytes(data) if isinstance(e, StepEvent)] == want
        rng = random.Random(5)
        for _ in range(5):
            cuts = [rng.randrange(len(data)) for _ in range(30)]
            assert canon(feed_in(data, cuts)[0]) == canon(parse_log_bytes(data))


def test_lines_seen_counts_a_trailing_partial_line() -> None:
    parser = NodeLogParser()
    parser.feed(b"a\nb\nc")
    assert parser.lines_seen == 3
    parser.feed(b"\n")
    assert parser.lines_seen == 3
    assert NodeLogParser().lines_seen == 0


def test_feed_accepts_bytearray_and_memoryview() -> None:
    data = CORPUS.encode()
    p = NodeLogParser()
    out = p.feed(bytearray(data[:500])) + p.feed(memoryview(data)[500:]) + p.finish()
    assert canon(out) == canon(parse_log_bytes(data))


@pytest.mark.parametrize("path", [None, *fixture_logs()], ids=lambda p: p.name if p else "corpus")
def test_the_pure_python_scanner_gives_the_same_events(path: Path | None) -> None:
    data = CORPUS.encode() if path is None else path.read_bytes()
    plain = NodeLogParser(native=False)
    assert not plain.native
    out = plain.feed(data) + plain.finish()
    assert canon(out) == canon(parse_log_bytes(data))


def test_a_complete_step_line_is_reported_before_the_next_record_arrives() -> None:
    step = H + "metric_logger.py:265] completed step: {}, seconds: 0.1, total_weights: 8, loss: {}\n"
    parser = NodeLogParser()
    first = parser.feed(step.format(0, "7.5").encode())
    assert [(e.step, e.line) for e in first if isinstance(e, StepEvent)] == [(0, 1)]
    # half a line: nothing yet; the rest: the step, once
    line = step.format(1, "nan").encode()
    assert parser.feed(line[:60]) == []
    second = parser.feed(line[60:])
    assert [(type(e).__name__, getattr(e, "step", None)) for e in second] == [("StepEvent", 1)]
    # the record's other events (the NaN hit) follow when the record is complete
    rest = parser.feed(step.format(2, "7.4").encode()) + parser.finish()
    assert [(type(e).__name__, e.line) for e in rest] == [("ErrorHit", 2), ("StepEvent", 3)]
    # a flattened log has no line ends, so its steps wait for the next record; same events in the end
    flat = NodeLogParser()
    assert flat.feed(step.format(0, "7.5").encode().replace(b"\n", b" ")) == []
