"""Error signatures: each fatal class next to a benign twin that must not fail a run."""

from __future__ import annotations

import pytest

from cvs_tui.core.events import ErrorHit, Severity
from cvs_tui.core.parse import DEFAULT_ERROR_PATTERNS, NodeLogParser, parse_log_bytes
from cvs_tui.core.parse.signatures import necessary_literals

H = "I1130 06:52:51.026531 139791635864448 "
E = "E1130 06:52:51.026531 139791635864448 "


def hits(text: str, patterns: dict[str, str] | None = None) -> list[ErrorHit]:
    return [e for e in parse_log_bytes(text.encode(), patterns) if isinstance(e, ErrorHit)]


def fatal(text: str, patterns: dict[str, str] | None = None) -> list[str]:
    return [h.name for h in hits(text, patterns) if h.severity is Severity.FATAL]


def warnings(text: str, patterns: dict[str, str] | None = None) -> list[str]:
    return [h.name for h in hits(text, patterns) if h.severity is Severity.WARNING]


@pytest.mark.parametrize(
    ("bad", "name", "twin"),
    [
        (
            E + "hip_platform.cc:51] failed call to hipInit: HIP_ERROR_NoDevice\n",
            "rocm Err",
            "2026-04-18 18:24:14.732938: E external/local_xla/xla/stream_executor/cuda/cuda_platform.cc:51] "
            "failed call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n",
        ),
        (
            E + "nccl.cc:1] NCCL ERROR in ncclGroupEnd: unhandled system error\n",
            "NCCL ERROR",
            H + "nccl.cc:1] NCCL version 2.21.5 initialised without errors\n",
        ),
        (
            "ValueError: 'not_a_maxtext_key' not in 'emb_dim'\n",
            "AssertionError",
            H + "x.py:1] checked ValueError handling paths: none taken\n",
        ),
        (
            "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 123456 bytes.\n",
            "resource",
            H + "x.py:1] RESOURCE usage is fine; no memory pressure\n",
        ),
        (
            "jax.errors.JaxRuntimeError: INTERNAL: Mosaic failed to compile\n",
            "jax runtime error",
            H + "x.py:1] JaxRuntimeError handlers registered\n",
        ),
        (
            "Memory access fault by GPU node-2 (Agent handle: 0x55d1) on address 0x7f00. "
            "Reason: Page not present.\n",
            "gpu fault",
            H + "x.py:1] GPU node-2 memory is healthy\n",
        ),
        (
            E + "coordination_service_agent.cc:1] Polled an error from coordination service "
            "(this can be an error from this or another task).\n",
            "coordination service",
            H + "coordination_service_agent.cc:1] Coordination agent has successfully connected.\n",
        ),
    ],
)
def test_default_pattern_and_benign_twin(bad: str, name: str, twin: str) -> None:
    assert name in fatal(bad)
    assert fatal(twin) == []


def test_cuinit_and_cuda_factory_lines_are_benign_warnings() -> None:
    text = (
        "2026-04-18 18:24:14.732938: E external/local_xla/xla/stream_executor/cuda/cuda_platform.cc:51] "
        "failed call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n"
        "E0000 00:00:1776581480.935398      10 cuda_dnn.cc:8579] Unable to register cuDNN factory: "
        "Attempting to register factory for plugin cuDNN when one has already been registered\n"
        "E0000 00:00:1776581480.935410      10 cuda_blas.cc:1407] Unable to register cuBLAS factory: ...\n"
    )
    assert fatal(text) == []
    assert [(h.name, h.line, h.origin) for h in hits(text)] == [
        ("cuInit failure", 1, "benign"),
        ("cuda factory registration", 2, "benign"),
        ("cuda factory registration", 3, "benign"),
    ]
    # even a config pattern that matches their wording does not make them fatal
    assert fatal(text, {"any error": r"error"}) == []


def test_stuck_thread_warning_is_never_fatal_but_termination_is() -> None:
    stuck = (
        E + "rendezvous.cc:31] This thread has been waiting for `first call to collective operation 0` for "
        "10 seconds and may be stuck. All 8 threads joined the rendezvous, "
        "however the leader has not marked the rendezvous as completed.\n"
        + E
        + "rendezvous.cc:36] This thread is unstuck now. This may have been a false-positive.\n"
    )
    assert fatal(stuck) == []
    assert warnings(stuck) == ["thread may be stuck", "thread unstuck"]
    term = (
        "F1130 06:52:51.026531 1 rendezvous.cc:40] Termination timeout for `collective 0` of 40 seconds "
        "exceeded. Exiting to ensure a consistent program state.\n"
    )
    assert set(fatal(term)) == {"collective termination timeout", "fatal log line"}


def test_always_on_signatures_apply_with_config_patterns() -> None:
    cfg = {"custom": r"my own failure"}
    cases = {
        "Traceback (most recent call last):\n  File \"x.py\", line 1\nKeyError: 'x'\n": "python traceback",
        "F1130 06:52:51.026531 1 coordination_service_agent.cc:12] Terminating process because the JAX "
        "distributed service detected fatal errors. UNAVAILABLE: RPC\n": "distributed service fatal",
        "Fatal Python error: Segmentation fault\n": "fatal python error",
        "bash: line 1:  4242 Segmentation fault      (core dumped) python3 train.py\n": "segmentation fault",
        H + "metric_logger.py:349] Aborting training due to NaN loss.\n": "nan/inf abort",
        E + "pyconfig.py:393] MAXTEXT CONFIG ERROR: 1 validation error\n": "maxtext config error",
    }
    for text, name in cases.items():
        assert name in fatal(text, cfg), text
        assert name in fatal(text), text


def test_glog_fatal_level_line() -> None:
    assert fatal("F1130 06:52:51.026531 1 some.cc:12] Check failed: x == y\n") == ["fatal log line"]
    assert fatal("2026-04-18 18:24:14.732938: F external/x.cc:51] Check failed\n") == ["fatal log line"]
    # an F inside text is not a level
    assert fatal(H + "x.py:1] TFLOP/s F1130-style tag\n") == []


def test_non_finite_loss_is_fatal_finite_is_not() -> None:
    line = (
        H + "metric_logger.py:265] completed step: 3, seconds: 0.026, TFLOP/s/device: 0.041, "
        "Tokens/s/device: 10032.921, total_weights: 256, loss: {}, lm_loss: 1.0\n"
    )
    assert fatal(line.format("nan")) == ["non-finite loss"]
    assert fatal(line.format("inf")) == ["non-finite loss"]
    assert fatal(line.format("7.368")) == []
    # the TensorBoard writer's W-level NaN notice alone is not a failure
    assert fatal("W1130 07:29:27.162329 1 x2num.py:13] NaN or Inf found in input tensor.\n") == []


def test_config_patterns_replace_the_defaults() -> None:
    text = "ValueError: bad value\n" + H + "x.py:1] my own failure here\n"
    assert fatal(text) == ["AssertionError"]
    assert fatal(text, {"custom": r"MY OWN failure"}) == ["custom"]  # re.I, and no default any more
    assert fatal(text, {}) == []  # an empty set disables the defaults


def test_bad_config_regex_is_skipped_without_crashing() -> None:
    parser = NodeLogParser({"broken": "(unclosed", "also bad": "*x", "fine": "boom"})
    evs = parser.feed(b"(unclosed *x boom\n") + parser.finish()
    assert [(e.name, e.origin) for e in evs if isinstance(e, ErrorHit)] == [("fine", "config")]


def test_each_signature_counts_once_per_record() -> None:
    text = (
        E
        + "nccl.cc:1] NCCL ERROR one\nNCCL ERROR two (continuation line)\n"
        + E
        + "nccl.cc:1] NCCL ERROR three\n"
    )
    got = hits(text)
    assert [(h.name, h.line) for h in got] == [("NCCL ERROR", 1), ("NCCL ERROR", 3)]
    assert got[0].text.endswith("NCCL ERROR one")  # the line that matched first, not the whole record


def test_pattern_without_usable_literal_still_applies() -> None:
    assert necessary_literals(rb"\d{3}\s\w+") is None
    text = H + "x.py:1] fine\n" + H + "x.py:1] code 503 xx\n" + H + "x.py:1] fine\n"
    assert [(h.name, h.line) for h in hits(text, {"digits": r"code \d{3}\s\w+ *$"})] == [("digits", 2)]
    assert [(h.name, h.line) for h in hits(text, {"digits": r"\d{3}\s\w+"})] == [
        ("digits", 1),  # the header's own digits: a pattern sees the whole record, as upstream sees a line
        ("digits", 2),
        ("digits", 3),
    ]


def test_necessary_literals_cover_alternations_and_groups() -> None:
    assert necessary_literals(rb"NCCL ERROR|NCCL timeout") == (b"nccl ",)  # the parser factors the prefix
    assert necessary_literals(rb"Segmentation fault|SIGSEGV") == (b"egmentation fault", b"igsegv")
    assert necessary_literals(rb"(?:Xla|Jax)RuntimeError: [A-Z_]+:") == (b"runtimeerror: ",)
    assert necessary_literals(rb"a|bc") is None  # too short to filter
    for name, pattern in DEFAULT_ERROR_PATTERNS.items():
        assert necessary_literals(pattern.encode()) is not None, name


def test_error_hit_carries_the_text_and_number_of_the_line_that_matched() -> None:
    text = H + "x.py:1] ok\n" + "Traceback (most recent call last):\n  File \"t.py\", line 3\nKeyError: 'k'\n"
    (hit,) = hits(text)
    # a traceback names its exception line and stands on it (a report's context shows the last frames)
    assert (hit.name, hit.line, hit.origin) == ("python traceback", 4, "always")
    assert hit.text == "KeyError: 'k'"
    # a hit on a continuation line of the record names that line, not the record's first; the hits of one
    # traceback stand on its exception line (one incident)
    text = (
        H + 'x.py:1] ok\nTraceback (most recent call last):\n  File "t.py", line 3, in f\nValueError: bad\n'
    )
    assert [(h.name, h.line, h.text) for h in hits(text)] == [
        ("python traceback", 4, "ValueError: bad (last frame: t.py:3 in f)"),
        ("AssertionError", 4, "ValueError: bad"),
    ]


def test_a_config_pattern_that_matches_empty_text_does_not_break_parsing() -> None:
    text = (
        H
        + "x.py:1] one\n"
        + H
        + "metric_logger.py:265] completed step: 1, seconds: 1.0, total_weights: 2, loss: 3.0\n"
    )
    evs = parse_log_bytes(text.encode(), {"anything": r"z*"})
    assert [type(e).__name__ for e in evs] == ["ErrorHit", "StepEvent", "ErrorHit"]


def test_a_hit_carries_the_status_code_its_record_spells_out_on_a_later_line() -> None:
    # the coordination service's message (gpu-recipes #2): the cause follows a blank line
    text = (
        f"{E}coordination_service.cc:612] Stopping coordination service as cluster registration failed.\n"
        "\n"
        "Original error: DEADLINE_EXCEEDED: Barrier timed out. Id: [Init]Wait_for_all_tasks_to_register::0.\n"
        f"{H}train.py:1] next record: UNAVAILABLE: not part of the hit above\n"
    )
    (hit,) = hits(text)
    assert hit.line == 1
    assert hit.text.endswith(
        "Original error: DEADLINE_EXCEEDED: Barrier timed out. Id: [Init]Wait_for_all_tasks_to_register::0."
    )
    assert "UNAVAILABLE" not in hit.text
    # a line that names its own status keeps just its text
    (own,) = hits(f"{E}x.cc:1] Polled an error from coordination service: UNAVAILABLE: gone\nDATA_LOSS: y\n")
    assert "DATA_LOSS" not in own.text
