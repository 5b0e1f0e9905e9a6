"""The C scanner (``cvs_tui.core.parse._native``) changes nothing: differential tests against pure Python.

``NodeLogParser(native=True)`` must give exactly the events of ``NodeLogParser(native=False)`` (the
reference implementation) for any bytes in any chunking: the same events from every ``feed`` and
``finish`` call (compared by ``repr``, so NaN equals NaN, ``-0.0`` differs from ``0.0`` and the order of
``extras`` counts), the same ``lines_seen`` and ``truncated_bytes``, and no swallowed internal error on
either side. This file proves it on

* every real log under ``tests/fixtures/`` (as written, flattened, CRLF), in several chunkings, with the
  default and with custom ``error_patterns``, and on a generated benchmark log;
* hypothesis-built logs: fragments of real MaxText lines with mutations at the regexes' edges (digit runs
  and value lengths at their caps, nan/inf spellings, every header form, F-level lines, NUL bytes, invalid
  UTF-8, records past ``RECORD_CAP``, CR/CRLF), in random chunkings;
* the C functions directly: ``find_headers`` against its twin in ``_pyscan``, ``LiteralScanner``
  against ``literals.LiteralFinder`` (case folding, overlapping literals, non-ASCII bytes),
  ``record_lines`` against ``bytes.count``, and the parser's two other C passes, ``scan_steps`` and
  ``fatal_records``, against their Python references in ``parser`` (every ``float()`` spelling, values
  and digit runs at the regex caps, ``early``/``skip``, a record cut anywhere as ``RECORD_CAP`` cuts it);
* several native parsers fed in turn (the C module's caches are shared).

Without the C module every test that needs it is skipped, except ``test_native_scanner_is_built``,
which fails unless ``CVS_TUI_ALLOW_PURE_PARSER=1``. The generators still run then, against the pure path
alone (chunking invariance, no internal errors).
``CVS_TUI_FUZZ_SCALE=N`` multiplies the hypothesis example counts for a long fuzzing session.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import os
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cvs_tui.core.parse import RECORD_CAP, NodeLogParser, _pyscan
from cvs_tui.core.parse import dialects as d
from cvs_tui.core.parse.signatures import compile_signatures

try:
    _native: ModuleType | None = importlib.import_module("cvs_tui.core.parse._native")
    NATIVE_IMPORT_ERROR: str | None = None
except ImportError as exc:  # not built (no C compiler at install time)
    _native = None
    NATIVE_IMPORT_ERROR = f"{type(exc).__name__}: {exc}"

HAVE_NATIVE = _native is not None
needs_native = pytest.mark.skipif(not HAVE_NATIVE, reason="cvs_tui.core.parse._native is not built")

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FIXTURE_LOGS = sorted(FIXTURES.rglob("*.log"))

# error_patterns for the custom-pattern runs: a plain phrase, a pattern whose literal is a single
# character (searched fully), one without any literal, one with capitals, one with non-ASCII bytes
# (which must not be case-folded) and one that does not compile (skipped).
CUSTOM_PATTERNS: dict[str, str] = {
    "oom": "out of memory",
    "mine": "x+y",
    "slow": r"\d{3}ms\b",
    "caps": "CUDA_ERROR_[A-Z]+|NCCL WARN",
    "accent": "échec|ÉCHEC",
    "broken": "(unclosed",
}
PATTERN_SETS: list[dict[str, str] | None] = [None, CUSTOM_PATTERNS]


# CVS_TUI_FUZZ_SCALE=N multiplies every example count below, for a long fuzzing session.
FUZZ_SCALE = max(1, int(os.environ.get("CVS_TUI_FUZZ_SCALE", "1") or 1))


def hypo(examples: int) -> settings:
    return settings(
        max_examples=examples * FUZZ_SCALE,
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )


# ---------------------------------------------------------------------------------------------------------
# Running both paths and comparing
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    """What one parser produced: the events of each feed/finish call (as reprs) and its counters."""

    calls: list[list[str]]
    lines_seen: int
    truncated_bytes: int
    internal_errors: int

    def events(self) -> list[str]:
        return [ev for call in self.calls for ev in call]


def run_parser(
    data: bytes, cuts: Sequence[int], patterns: dict[str, str] | None = None, *, native: bool
) -> Run:
    """Feed ``data`` split at ``cuts`` (any order, out-of-range values ignored), then finish."""
    parser = NodeLogParser(patterns, native=native)
    assert parser.native is native
    calls: list[list[str]] = []
    prev = 0
    for c in sorted({c for c in cuts if 0 < c < len(data)}):
        calls.append([repr(ev) for ev in parser.feed(data[prev:c])])
        prev = c
    calls.append([repr(ev) for ev in parser.feed(data[prev:])])
    calls.append([repr(ev) for ev in parser.finish()])
    return Run(calls, parser.lines_seen, parser.truncated_bytes, parser.internal_errors)


def assert_same(pure: Run, native: Run, what: str = "") -> None:
    """The native run equals the pure one; on a mismatch, say where it starts."""
    assert pure.internal_errors == 0, f"{what}: the pure parser swallowed an internal error"
    assert native.internal_errors == 0, f"{what}: the native parser swallowed an internal error"
    if pure.calls != native.calls:
        for i, (a, b) in enumerate(zip(pure.calls, native.calls, strict=False)):
            if a == b:
                continue
            for j, (ea, eb) in enumerate(zip(a, b, strict=False)):
                if ea != eb:
                    pytest.fail(f"{what}: call {i}, event {j} differs:\n  pure:   {ea}\n  native: {eb}")
            pytest.fail(
                f"{what}: call {i} gives {len(a)} events (pure) vs {len(b)} (native); "
                f"extra: {(a[len(b) :] or b[len(a) :])[:3]}"
            )
        pytest.fail(f"{what}: {len(pure.calls)} calls (pure) vs {len(native.calls)} (native)")
    assert (native.lines_seen, native.truncated_bytes) == (pure.lines_seen, pure.truncated_bytes), what


def check(
    data: bytes, cuts: Sequence[int] = (), patterns: dict[str, str] | None = None, what: str = ""
) -> Run:
    """Native vs pure on one input and chunking. Without the C module, the pure path is checked against
    itself fed whole (chunking must not matter), so the generators still exercise something."""
    pure = run_parser(data, cuts, patterns, native=False)
    assert pure.internal_errors == 0, f"{what}: the pure parser swallowed an internal error"
    if HAVE_NATIVE:
        assert_same(pure, run_parser(data, cuts, patterns, native=True), what)
    elif cuts:
        whole = run_parser(data, (), patterns, native=False)
        assert pure.events() == whole.events(), f"{what}: pure events depend on the chunking"
        assert pure.lines_seen == whole.lines_seen  # (truncated_bytes depends on the chunking)
    return pure


def every(n: int, size: int) -> list[int]:
    return list(range(n, size, n))


def random_cuts(size: int, seed: int | str, mean: int = 3000) -> list[int]:
    """Chunk boundaries with sizes spread from 1 byte to a few times ``mean`` (fixed seed)."""
    rng = random.Random(seed)
    cuts: list[int] = []
    pos = 0
    while True:
        pos += max(1, int(rng.expovariate(1 / mean)) if rng.random() < 0.8 else rng.randrange(1, 16))
        if pos >= size:
            return cuts
        cuts.append(pos)


def variants(data: bytes) -> dict[str, bytes]:
    return {
        "log": data,
        "flat": data.replace(b"\n", b" "),
        "crlf": data.replace(b"\n", b"\r\n"),
    }


# ---------------------------------------------------------------------------------------------------------
# The C module is there, and the switch works
# ---------------------------------------------------------------------------------------------------------
def test_native_scanner_is_built() -> None:
    if NATIVE_IMPORT_ERROR is not None:
        if os.environ.get("CVS_TUI_ALLOW_PURE_PARSER") == "1":
            pytest.skip("the C scanner is not built; CVS_TUI_ALLOW_PURE_PARSER=1 allows the pure parser")
        pytest.fail(
            "the C scanner cvs_tui.core.parse._native was not built (it needs a C compiler; "
            f"`pip install -e .` builds it): {NATIVE_IMPORT_ERROR}. "
            "Set CVS_TUI_ALLOW_PURE_PARSER=1 to accept the pure-Python parser."
        )
    assert NodeLogParser(native=True).native is True
    assert NodeLogParser().native is (os.environ.get("CVS_TUI_PURE_PARSER") != "1")


def test_native_switch() -> None:
    assert NodeLogParser(native=False).native is False
    assert NodeLogParser(CUSTOM_PATTERNS, native=False).native is False
    if HAVE_NATIVE:
        assert NodeLogParser(CUSTOM_PATTERNS, native=True).native is True
    else:
        assert NodeLogParser().native is False
        with pytest.raises(RuntimeError):
            NodeLogParser(native=True)


def test_pure_parser_environment_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CVS_TUI_PURE_PARSER", "1")
    assert NodeLogParser().native is False
    if HAVE_NATIVE:
        assert NodeLogParser(native=True).native is True
    monkeypatch.delenv("CVS_TUI_PURE_PARSER")
    assert NodeLogParser().native is HAVE_NATIVE


# ---------------------------------------------------------------------------------------------------------
# Real logs
# ---------------------------------------------------------------------------------------------------------
def test_fixture_logs_are_there() -> None:
    names = {p.name for p in FIXTURE_LOGS}
    assert {"single_20steps.log", "nan_lr1e6.log", "ckpt_phase1.log"} <= names, names


@pytest.mark.parametrize("variant", ["log", "flat", "crlf"])
@pytest.mark.parametrize("path", FIXTURE_LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_log(path: Path, variant: str) -> None:
    data = variants(path.read_bytes())[variant]
    name = f"{path.name} ({variant})"
    whole = check(data, (), None, f"{name} whole")
    if path.parent.name != "privacy":  # the privacy corpus holds cluster logs, not training logs
        assert whole.events(), "a real log gives events"
    check(data, every(7, len(data)), None, f"{name} in 7-byte chunks")
    check(data, every(4096, len(data)), None, f"{name} in 4 KiB chunks")
    check(data, random_cuts(len(data), path.name), None, f"{name} in random chunks")
    check(data, random_cuts(len(data), path.name + "s", mean=40), None, f"{name} in small random chunks")


@pytest.mark.parametrize("variant", ["log", "flat", "crlf"])
def test_small_fixture_byte_by_byte(variant: str) -> None:
    path = min(FIXTURE_LOGS, key=lambda p: p.stat().st_size)
    data = variants(path.read_bytes())[variant]
    check(data, range(1, len(data)), None, f"{path.name} ({variant}) byte by byte")


@pytest.mark.parametrize("path", FIXTURE_LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_log_custom_patterns(path: Path) -> None:
    data = path.read_bytes()
    for variant, blob in variants(data).items():
        check(blob, (), CUSTOM_PATTERNS, f"{path.name} ({variant}) custom patterns")
    check(data, random_cuts(len(data), path.name, mean=500), CUSTOM_PATTERNS, f"{path.name} custom, chunked")
    # the custom signatures fire on text that holds them
    extra = (
        b"I1130 06:52:51.026531 1 x.py:1] ran OUT OF MEMORY xxy 123ms CUDA_ERROR_LAUNCH \xc3\x89CHEC\n"
        b"W1130 06:52:51.026531 1 x.py:2] \xc3\xa9chec and \xc3\xa9CHEC nccl warn\n"
    )
    check(data + extra, every(4096, len(data) + len(extra)), CUSTOM_PATTERNS, f"{path.name} + custom hits")


@cache
def bench_module() -> ModuleType:
    path = ROOT / "benchmarks" / "parse_throughput.py"
    spec = importlib.util.spec_from_file_location("_cvs_bench_parse_throughput", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("flat", [False, True], ids=["log", "flat"])
def test_generated_benchmark_log(tmp_path: Path, flat: bool) -> None:
    path = tmp_path / "node.log"
    bench_module().generate(path, 1, flat=flat)
    data = path.read_bytes()
    what = f"benchmark log ({'flat' if flat else 'log'})"
    whole = check(data, (), None, what + " whole")
    assert len(whole.events()) > 1000
    check(data, every(64 * 1024, len(data)), None, what + " in 64 KiB chunks")
    check(data, random_cuts(len(data), 11, mean=20_000), None, what + " in random chunks")
    if not flat:
        crlf = data.replace(b"\n", b"\r\n")
        check(crlf, random_cuts(len(crlf), 12, mean=50_000), CUSTOM_PATTERNS, what + " CRLF, custom")


# ---------------------------------------------------------------------------------------------------------
# Generated logs: fragments of real lines, mutated at the regexes' edges
# ---------------------------------------------------------------------------------------------------------
ABSL = b"I1130 06:52:51.026531 139791635864448 "
STEP_TAIL = (
    b"completed step: 5, seconds: 0.153, live slice count: 2, TFLOP/s/device: 92.5, "
    b"Tokens/s/device: 13901.2, total_weights: 65536, loss: 7.125, lm_loss: 7.125, perplexity: 1243.3"
)
SHORT_STEP = b"completed step: 6, seconds: 0.3, total_weights: 128, loss: 7.0"
PYLOG = [
    lvl + b":2024-01-01 10:00:00,123:train.py:12: "
    for lvl in (b"INFO", b"WARNING", b"ERROR", b"CRITICAL", b"DEBUG")
]
TFXLA = [
    b"2024-11-30 10:00:00.123456: " + lvl + b" external/xla/foo.cc:12] " for lvl in (b"I", b"W", b"E", b"F")
]
HEADERS: list[bytes] = [
    ABSL + b"train.py:12] ",
    b"W1130 06:52:51.026531 1 x2num.py:13] ",
    b"E0000 00:00:1776581480.935398      10 cuda_dnn.cc:8579] ",
    b"F1130 06:52:51.026531 1 coordination_service_agent.cc:12] ",
    b"F1130 6:52:51.0 1 a.cc:1] ",
    *PYLOG,
    *TFXLA,
    b"2024-11-30 10:00:00.1234: F external/xla/foo.cc:12] ",
    b"2024-11-30 10:00:00.123456789: I a.cc:1] ",
    b"XPK Start: ",
    b"XPK End: ",
    b"EXIT_CODE=",
    b"EXIT_CODE=-",
    b"EXIT_CODE=1",
    b"Traceback (most recent call last):",
    b"Per train step",
    b"Per prefill step",
]
SYNTH_LINES: list[bytes] = [
    *(h + STEP_TAIL for h in HEADERS[:12]),
    *(h + SHORT_STEP for h in (ABSL + b"metric_logger.py:265] ", PYLOG[0], TFXLA[0], b"")),
    ABSL + b"metric_logger.py:265] [Rampup Batch Size Phase], " + SHORT_STEP,
    ABSL + b"metric_logger.py:265] [Rampup Batch Size Phase] " + SHORT_STEP,
    ABSL + b"metric_logger.py:270] completed profiler activation/deactivation step: 7, total_weights: 256, "
    b"loss: 6.9, lm_loss: 6.9",
    b"Per train step:\n Total TFLOPs: 13.59 \n split as 93.93% learnable weight flops and 6.07% "
    b"attention flops",
    b"Per train step:\n Total TFLOPs: nan",
    ABSL + b"max_utils.py:780] \nMemstats: After params initialized:",
    ABSL + b"max_utils.py:788] \tUsing (GB) 0.43 / 31.25 (1.376000%) on TPU_26(process=7,(2,6,0,0))",
    ABSL + b"max_utils.py:837] System Information: Jax Backend: PJRT C API\nTFRT TPU v5",
    ABSL + b"metric_logger.py:302] Completed eval after train step 7, loss=2.345, perplexity=10.433",
    ABSL + b"standard_logger.py:34] {'step': 7, 'event_type': 'save', 'directory': '/o/ck', "
    b"'checkpoint_manager_blocking_duration_secs': 1.0345}",
    ABSL + b"metric_logger.py:349] Aborting training due to NaN loss.",
    b'Traceback (most recent call last):\n  File "train.py", line 1, in <module>\nValueError: boom',
    b"F1130 06:52:51.026531 1 coordination_service_agent.cc:12] Terminating process because the JAX "
    b"distributed service detected fatal errors.",
    b"2024-11-30 10:00:00.123456: F external/xla/foo.cc:12] Check failed: out of memory xxy",
    b"2024-11-30 10:00:00.123456: E external/local_xla/xla/stream_executor/cuda/cuda_platform.cc:51] failed "
    b"call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)",
    b"INFO:2026-04-19 06:51:49,547:jax._src.distributed:140: Starting JAX distributed service on [::]:8482",
    b"ERROR:2024-01-01 10:00:00,123:train.py:12: NCCL ERROR Segmentation fault 123ms CUDA_ERROR_X",
    b"XPK Start: Sat Apr 18 18:23:50 UTC 2026",
    b"XPK End: Sat Apr 18 18:25:50 UTC 2026",
    b"EXIT_CODE=1",
    b"EXIT_CODE=-9 EXIT_CODE=0",
    # judged per physical line: unheadered error and benign lines folded into a record
    ABSL + b"x.py:1] note\nnode-3:4117:4117 [0] NCCL ERROR unhandled system error\n"
    b"rsmi_dev_gpu_metrics_info_get failed",
    b"node-3:1:1 [0] NCCL ERROR while rsmi_dev_gpu_metrics_info_get failed",
    b"E0000 00:00:1776581480.935398 10 cuda_platform.cc:51] failed call to cuInit\nHIP error: hipErrorX\r"
    b"Could not determine PCIe bandwidth",
    # step-line vintages: fields left out (2023 `TFLOP/s`, 2024 without tokens or weights), inserted
    # (an MFU %, lr, grad_norm), repeated, not numbers, no loss at all
    b"completed step: 3, seconds: 0.771, TFLOP/s/device: 178.149, loss: 322.881",
    b"completed step: 1, seconds: 8.693, TFLOP/s: 1.731, loss: 9.206",
    b"completed step: 9, seconds: 1.341, TFLOP/s/device: 257.929, Tokens/s/device: 36653.244, loss: 0.000",
    b" 8: completed step: 71, seconds: 30.309, TFLOP/s/device: 207.973, MFU: 8.32%, Tokens/s/device: 8.1, "
    b"total_weights: 9, loss: 3.5",
    ABSL + b"metric_logger.py:226] completed step: 2, seconds: 10.228, TFLOP/s/device: 350.869, "
    b"Tokens/s/device: 19222.175, total_weights: 1572864, loss: 12.980, lm_loss: 12.980, "
    b"perplexity: 433463.719, moe_lb_loss: 0.000, lr: 3.000e-04, grad_norm: 1.234e+01",
    b"completed step: 4, seconds: 0.2, loss: 1.0, loss: 2.0, MFU: x%, MFU: 5%, live slice count: 3, "
    b"Samples/s/device: 0.0854, %: 1",
    b"completed step: 4, seconds: 0.2, live slice count: x, loss: 1.0",
    b"completed step: 5, seconds: 0.2, TFLOP/s/device: 1.0",
    b"completed step: 5, seconds: 0.2, total_weights: x, loss: 1.0",
    # non-finite rates, header-less steps, restore timing
    b"completed step: 3, seconds: 0.1, TFLOP/s/device: nan, Tokens/s/device: inf, total_weights: 8, "
    b"loss: 7.0",
    ABSL + b"metric_logger.py:265] " + STEP_TAIL.replace(b"92.5", b"-inf"),
    ABSL + b"checkpointer.py:323] Restoring checkpoint from /o/ck/5.",
    ABSL + b"async_io_engine.py:127] [process=0] /jax/checkpoint/read/gbytes_per_sec: 110.191 MiB/s "
    b"(total size: 9.0 MiB) (time elapsed: 0.0817 s) (global)",
    ABSL + b"jax_array_handlers.py:273] [process=0] /jax/orbax/read/worker/io/requested throughput: "
    b"144.617 MiB/s (total gbytes: 9.0 MiB) (time elapsed: 0.06 s) (per-host)",
]
# Inserted anywhere: header and anchor starts, whitespace the regexes and C may disagree on, bad UTF-8.
TOKENS: list[bytes] = [
    *HEADERS,
    b"completed step: ",
    b", loss: nan",
    b", TFLOP/s/device: nan",
    b", TFLOP/s: ",
    b", MFU: 8.32%",
    b", live slice count: ",
    b", loss: ",
    b"NCCL ERROR ",
    b"rsmi_dev_gpu_metrics_info_get failed",
    b"/jax/orbax/read/",
    b"[Rampup Batch Size Phase], ",
    b"[Rampup Batch Size Phase] ",
    b"Memstats: x:",
    b"USING (gb) ",
    b"Using (GB) 1 / 2 (3%) on d",
    b"EVAL",
    b"Segmentation fault",
    b"Out Of Memory",
    b"failed call to cuInit",
    b"Fatal Python error:",
    b"\x00",
    b"\x00\x00\x00",
    b"\xff",
    b"\xc3",
    b"\xe2\x98",
    b"\xc3\x89CHEC",
    b"\n",
    b"\r",
    b"\r\n",
    b"\t",
    b"\x0b",
    b"\x0c",
    b"\x1c",
    b"\x85",
    b"\xa0",
    b" ",
    b": ",
    b"] ",
    b":",
    b",",
]
SEPARATORS = [b"\n", b"\n", b"\n", b"\n", b"\r\n", b"\r", b" ", b"", b"\t", b"\x0b", b"\x0c", b"\x00"]
VALUES: list[bytes] = [
    b"nan",
    b"NaN",
    b"-nan",
    b"inf",
    b"-inf",
    b"+inf",
    b"Infinity",
    b"-Infinity",
    b"INF",
    b"1_000",
    b"1e5",
    b"1E-5",
    b".5",
    b"5.",
    b"+3",
    b"-0.0",
    b"0",
    b"1e999",
    b"0x10",
    b"1e",
    b"\xd9\xa1",
    b"1" * 63,
    b"1" * 64,
    b"1" * 65,
    b"1." + b"5" * 62,
    b"9" * 400,
]
DIGIT_LENGTHS = [1, 2, 3, 6, 8, 9, 10, 11, 12, 13, 19, 20, 21, 25]
SOURCE_LENGTHS = [1, 198, 199, 200, 201, 202]
LONG_DELTAS = [-1, 0, 1, 799, 800, 1599, 1600, 1601, 3000]
# (no "x": the custom pattern "x+y" is quadratic on a long run of x, in either path)
FILLERS = [b"q", b" ", b"ab ", b"y\n", b"z\r\n"]


def _shape(line: bytes) -> bytes:
    return re.sub(rb"\d+", b"0", line)


@cache
def fragments() -> tuple[bytes, ...]:
    """Distinct line shapes from the fixture logs and the benchmark generator, plus synthetic lines."""
    seen: dict[bytes, bytes] = {}
    for path in FIXTURE_LOGS:
        for line in path.read_bytes().split(b"\n"):
            if line:
                seen.setdefault(_shape(line), line)
    bench = bench_module()
    for text in itertools.islice(bench._log_lines(random.Random(7)), 3000):
        line = text.encode()
        seen.setdefault(_shape(line), line)
    return (*seen.values(), *SYNTH_LINES)


def _pick_match(draw: st.DrawFn, regex: bytes, line: bytes) -> re.Match[bytes] | None:
    found = list(re.finditer(regex, line))
    return draw(st.sampled_from(found)) if found else None


def _mutate(draw: st.DrawFn, line: bytes) -> bytes:
    kind = draw(st.integers(0, 12))
    if kind == 0 and line:  # delete a byte
        i = draw(st.integers(0, len(line) - 1))
        return line[:i] + line[i + 1 :]
    if kind == 1:  # insert a token or any byte
        i = draw(st.integers(0, len(line)))
        tok = draw(st.sampled_from(TOKENS) | st.binary(min_size=1, max_size=2))
        return line[:i] + tok + line[i:]
    if kind == 2 and line:  # replace a byte
        i = draw(st.integers(0, len(line) - 1))
        return line[:i] + draw(st.sampled_from(TOKENS) | st.binary(min_size=1, max_size=1)) + line[i + 1 :]
    if kind == 3:  # a digit run at a regex cap
        m = _pick_match(draw, rb"\d+", line)
        if m is not None:
            n = draw(st.sampled_from(DIGIT_LENGTHS))
            digits = draw(st.text("0123456789", min_size=n, max_size=n)).encode()
            return line[: m.start()] + digits + line[m.end() :]
    if kind == 4:  # a value spelled oddly or at its length cap
        m = _pick_match(draw, rb"(?<=: )[^,\s]+|(?<==)[^,\s]+", line)
        if m is not None:
            return line[: m.start()] + draw(st.sampled_from(VALUES)) + line[m.end() :]
    if kind == 5:  # a run of spaces of 1..22
        m = _pick_match(draw, rb" +", line)
        if m is not None:
            return line[: m.start()] + b" " * draw(st.integers(1, 22)) + line[m.end() :]
    if kind == 6:  # a source file name at its length cap
        # anchored at a run's start: unanchored, every byte of a long run starts a scan of the rest (quadratic
        # on the longest fixture lines: minutes for one example in CI); the matches are the same
        m = _pick_match(draw, rb"(?<![^\s:\]])[^\s:\]]+(?=:\d+[\]:])", line)
        if m is not None:
            n = draw(st.sampled_from(SOURCE_LENGTHS))
            return line[: m.start()] + (b"s" * n)[: max(1, n - 3)] + b".py"[: n - 1] + line[m.end() :]
    if kind == 7:  # the rampup prefix
        i = line.find(b"completed step")
        if i != -1:
            return line[:i] + draw(st.sampled_from(d.RAMPUP_TAG)) + line[i:]
    if kind == 8:  # a header in front
        return draw(st.sampled_from(HEADERS)) + line
    if kind == 9 and line:  # cut short
        return line[: draw(st.integers(0, len(line) - 1))]
    if kind == 10:  # a level letter swapped (F makes it fatal)
        m = _pick_match(draw, rb"(?<![^\s])[IWEFD](?=\d{4} )|(?<=: )[IWEF](?= )", line)
        if m is not None:
            return (
                line[: m.start()]
                + draw(st.sampled_from([b"F", b"E", b"I", b"W", b"f", b"X"]))
                + line[m.end() :]
            )
    if kind == 11 and draw(st.integers(0, 3)) == 0:  # a record longer than RECORD_CAP
        i = draw(st.integers(0, len(line)))
        fill = draw(st.sampled_from(FILLERS))
        n = (RECORD_CAP + draw(st.sampled_from(LONG_DELTAS))) // len(fill) + 1
        return line[:i] + fill * n + line[i:]
    if kind == 12:  # the line twice (two records or one, depending on the separator)
        return line + draw(st.sampled_from([b" ", b"", b"\n", b"\t"])) + line
    return line


# Step lines built field by field: every optional group present or not, numbers in every spelling
# float() takes or rejects, field lengths at the regex caps, extras keys that collide.
STEP_HEADS: list[bytes] = [
    ABSL + b"metric_logger.py:265] ",
    b"I1130 06:52:51.026531 1 metric_logger.py:265] ",
    b"W1130 06:52:51.1 1 m\xffl.py:265] ",
    b"I1130 06:52:51.026531 1 " + b"s" * 197 + b".py:1] ",
    b"I1130 06:52:51.026531 1 dir/sub/x.py:1] blah ",
    b"I1130 06:52:51.026531 1 x.py:1]  ",
    PYLOG[0],
    PYLOG[1],
    TFXLA[0],
    TFXLA[3],
    b"",
    b"I1234 foo] ",
    b"W9999 a b] ",
    b"F0000 ] ",
]
STEP_PREFIXES = [b"", b"", b"[Rampup Batch Size Phase], ", b"[Rampup Batch Size Phase] ", b"[Rampup ", b"x "]
EXTRA_KEYS = [
    b"lm_loss",
    b"perplexity",
    b"moe_lb_loss",
    b"Lm_Loss",
    b"k" * 63,
    b"k" * 64,
    b"k" * 65,
    b"a1",
    b"",
]


@st.composite
def numbers(draw: st.DrawFn) -> bytes:
    """Decimal numbers: signs, long mantissas, exponents near the double range's ends, underscores."""
    digits = st.text("0123456789", max_size=24)
    out = draw(st.sampled_from(["", "-", "+"])) + draw(digits)
    if draw(st.booleans()):
        out += "." + draw(digits)
    if draw(st.booleans()):
        out += draw(st.sampled_from("eE")) + draw(st.sampled_from(["", "-", "+"]))
        out += draw(
            st.sampled_from(["", "0", "22", "23", "308", "309", "324", "325", "400", "0001"]) | digits
        )
    if draw(st.integers(0, 9)) == 0 and out:  # an underscore between digits (float() allows it)
        i = draw(st.integers(0, len(out)))
        out = out[:i] + "_" + out[i:]
    return out.encode()


VALID_VALUES = [b"nan", b"NaN", b"inf", b"-inf", b"Infinity", b"-Infinity", b"1_000", b"1e5", b".5", b"+3"]
VALID_VALUES += [
    b"-0.0",
    b"1e999",
    b"1e-400",
    b"1" * 64,
    b"0.1" + b"0" * 61,
    b"4.9e-324",
    b"1.7976931348623157e308",
]


def step_values(*, valid: bool) -> st.SearchStrategy[bytes]:
    """Numbers float() takes (making steps whose values and NaN/inf flags are compared), and, unless
    ``valid``, anything that may stand in a value's place."""
    formatted = st.tuples(st.floats(), st.integers(0, 25), st.sampled_from("efgr")).map(
        lambda t: (repr(t[0]) if t[2] == "r" else f"{t[0]:.{t[1]}{t[2]}}").encode()
    )
    plain = st.floats(-1e6, 1e6).map(lambda f: f"{f:.3f}".encode())
    good = st.one_of(plain, formatted, formatted, st.sampled_from(VALID_VALUES))
    if valid:
        return good
    return st.one_of(good, good, st.sampled_from(VALUES), numbers(), st.binary(min_size=1, max_size=6))


@st.composite
def step_lines(draw: st.DrawFn) -> bytes:
    wild = draw(st.booleans())  # else every field is valid, so the line makes a step
    value = step_values(valid=not wild)
    n = draw(st.sampled_from(DIGIT_LENGTHS if wild else [1, 2, 6, 11, 12]))
    parts = [
        draw(st.sampled_from(STEP_HEADS)),
        draw(st.sampled_from(STEP_PREFIXES)),
        b"completed step: ",
        draw(st.text("0123456789", min_size=n, max_size=n)).encode(),
        b", seconds: ",
        draw(value),
    ]
    if draw(st.booleans()):
        counts = [b"1", b"0", b"12345678", b"123456789"] + ([b"1" * 10] if wild else [])
        parts += [b", live slice count: ", draw(st.sampled_from(counts))]
    if draw(st.booleans()):
        parts += [b", TFLOP/s/device: ", draw(value), b", Tokens/s/device: ", draw(value)]
    parts += [b", total_weights: ", draw(value)]
    if draw(st.integers(0, 3)):  # a line may be cut before its loss (a README, a harness)
        parts += [b", loss: ", draw(value)]
    for _ in range(draw(st.integers(0, 4))):
        key = draw(st.sampled_from(EXTRA_KEYS) | st.text("ab_", min_size=1, max_size=3).map(str.encode))
        parts += [b", ", key, b": ", draw(value)]
    line = b"".join(parts)
    if wild and draw(st.integers(0, 2)) == 0:
        line = _mutate(draw, line)
    return line


@st.composite
def logs(draw: st.DrawFn, max_lines: int = 14) -> bytes:
    out = bytearray()
    if draw(st.booleans()):
        out += draw(st.sampled_from([b"", b" ", b"\n", b"\x00", b"junk ", b"I1234 foo] ", b"F1130 x] "]))
    for _ in range(draw(st.integers(0, max_lines))):
        if draw(st.booleans()):
            line = draw(step_lines())
        else:
            line = draw(st.sampled_from(fragments()))
            for _ in range(draw(st.integers(0, 3))):
                line = _mutate(draw, line)
        out += line
        out += draw(st.sampled_from(SEPARATORS))
    return bytes(out)


@st.composite
def chunkings(draw: st.DrawFn, size: int) -> list[int]:
    mode = draw(st.integers(0, 9))
    if mode == 0 and size <= 3000:
        return list(range(1, size))
    if mode == 1 and size <= 40_000:
        return every(draw(st.integers(2, 13)), size)
    cuts = draw(st.lists(st.integers(0, 1 << 20), max_size=30))
    return [c % (size + 1) for c in cuts]


@hypo(500)
@given(st.data())
def test_generated_logs(data: st.DataObject) -> None:
    log = data.draw(logs(), label="log")
    cuts = data.draw(chunkings(len(log)), label="cuts")
    patterns = data.draw(st.sampled_from(PATTERN_SETS), label="patterns")
    check(log, cuts, patterns, "generated log")


@hypo(80)
@given(st.data())
def test_generated_logs_flattened_and_crlf(data: st.DataObject) -> None:
    log = data.draw(logs(max_lines=25), label="log")
    for name, blob in variants(log).items():
        if name != "log":
            check(
                blob, data.draw(chunkings(len(blob)), label=f"cuts {name}"), None, f"generated log ({name})"
            )


@hypo(100)
@given(st.binary(max_size=2000), st.lists(st.integers(0, 2000), max_size=12))
def test_arbitrary_bytes(blob: bytes, cuts: list[int]) -> None:
    check(blob, cuts, None, "arbitrary bytes")


@pytest.mark.parametrize(
    "blob",
    [
        b"",
        b"\n",
        b"\r",
        b"\x00",
        b" ",
        b"I",
        b"EXIT_CODE=1",
        b" EXIT_CODE=1",
        b"x EXIT_CODE=1 EXIT_CODE=2",
        b"Traceback (most recent call last): Traceback (most recent call last):",
        ABSL + b"metric_logger.py:265] " + SHORT_STEP,
        ABSL + b"metric_logger.py:265] " + SHORT_STEP + b"\n",
        (ABSL + b"x.py:1] " + SHORT_STEP + b"\n") * 3,
        (ABSL + b"x.py:1] " + SHORT_STEP.replace(b"7.0", b"nan") + b"\r\n") * 2,
        ABSL + b"x.py:1] " + b"x" * (RECORD_CAP + 5000) + b" " + SHORT_STEP + b"\n" + ABSL + b"y.py:2] done",
        ABSL + b"x.py:1] " + b"y\n" * (RECORD_CAP // 2 + 900) + ABSL + b"y.py:2] " + SHORT_STEP,
        ABSL[:-1] + b"\x0b" + b"x.py:1] " + SHORT_STEP,
        b"a\x0b" + ABSL + b"x.py:1] " + SHORT_STEP + b"\x0cEXIT_CODE=3\tXPK End: x",
        b"a\x1c" + ABSL + b"x.py:1] a\x85" + ABSL + b"x.py:1] a\xa0" + ABSL + b"x.py:1] ",
        b"\x00" + ABSL + b"x.py:1] \x00" + SHORT_STEP + b"\x00",
    ],
    ids=lambda b: repr(b[:40]),
)
def test_edge_inputs(blob: bytes) -> None:
    for name, variant in variants(blob).items():
        for cuts in (
            (),
            range(1, min(len(variant), 3000)),
            every(7, len(variant)),
            every(4096, len(variant)),
        ):
            check(variant, cuts, None, f"{blob[:40]!r} ({name})")


# ---------------------------------------------------------------------------------------------------------
# The C primitives, directly
# ---------------------------------------------------------------------------------------------------------
def _normalise(blob: bytes) -> bytes:
    return blob.replace(b"\r", b" ").replace(b"\n", b" ")


def headers_py(norm: bytes, pos: int) -> list[int]:
    found: list[int] = _pyscan.find_headers(norm, pos)
    assert all(p > 0 for p in found), found
    assert found == sorted(set(found)), found
    return found


def _check_headers(norm: bytes, positions: Sequence[int]) -> None:
    for pos in positions:
        want = headers_py(norm, pos)
        if _native is not None:
            got = _native.find_headers(norm, pos)
            assert got == want, f"find_headers(norm, {pos}) of {norm[:200]!r}...: native {got}, pure {want}"


@pytest.mark.parametrize("path", FIXTURE_LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_find_headers_on_fixtures(path: Path) -> None:
    norm = _normalise(path.read_bytes())
    rng = random.Random(path.name)
    _check_headers(norm, [1, 2, *(rng.randrange(1, len(norm)) for _ in range(40)), len(norm), len(norm) + 1])


@hypo(400)
@given(st.data())
def test_find_headers(data: st.DataObject) -> None:
    norm = _normalise(data.draw(logs(max_lines=8), label="log"))
    positions = data.draw(st.lists(st.integers(1, max(1, len(norm))), min_size=1, max_size=6), label="pos")
    _check_headers(norm, [1, *positions])


def _check_literals(literals: list[bytes], text: bytes, starts: list[int], end: int) -> None:
    pure = _pyscan.LiteralScanner(literals)
    want = pure.find(text, starts, end)
    assert pure.find(text.lower(), starts, end) == want  # the literals are folded, the text is folded
    if _native is not None:
        scanner = _native.LiteralScanner(literals)
        assert scanner.literals == pure.literals
        got = scanner.find(text, starts, end)
        assert got == want, (
            f"LiteralScanner({pure.literals!r}).find({text!r}, {starts}, {end}): native {got}, pure {want}"
        )
        assert scanner.find(text, starts, end) == want  # the scanner keeps no state between calls


_LIT_ALPHABET = [b"a", b"b", b"c", b" ", b"\x00", b"\xc9", b"\xe9", b"@", b"[", b"`", b"{", b"z"]
_TEXT_ALPHABET = [*_LIT_ALPHABET, b"A", b"B", b"C", b"Z", b"\n"]


@st.composite
def record_starts(draw: st.DrawFn, end: int) -> list[int]:
    inner = draw(st.lists(st.integers(1, max(1, end - 1)), max_size=8)) if end > 1 else []
    return [0, *sorted({p for p in inner if 0 < p < end}), end]


@hypo(500)
@given(st.data())
def test_literal_scanner(data: st.DataObject) -> None:
    literal = st.lists(st.sampled_from(_LIT_ALPHABET), min_size=1, max_size=4).map(b"".join)
    fixed = data.draw(
        st.lists(st.sampled_from([b"ab", b"b", b"abc", b"bc", b"a", b"aa", b"\xc9"])), label="fixed"
    )
    literals = fixed + data.draw(st.lists(literal, max_size=8), label="literals")
    text = data.draw(
        st.lists(st.sampled_from(_TEXT_ALPHABET), min_size=1, max_size=120).map(b"".join), label="text"
    )
    end = data.draw(st.integers(1, len(text)), label="end")
    starts = data.draw(record_starts(end), label="starts")
    _check_literals(literals, text, starts, end)


def parser_literals(patterns: dict[str, str] | None) -> list[bytes]:
    """The literals a parser looks for: line-kind anchors, then the signatures' necessary literals."""
    out = [anchor for anchors, _ in d.RULES for anchor in anchors]
    for sig in compile_signatures(patterns):
        out.extend(sig.literals or ())
    return out


@pytest.mark.parametrize("patterns", PATTERN_SETS, ids=["default", "custom"])
def test_literal_scanner_on_fixtures(patterns: dict[str, str] | None) -> None:
    literals = parser_literals(patterns)
    for path in FIXTURE_LOGS:
        norm = _normalise(path.read_bytes())
        mixed = norm.upper() + norm.swapcase()  # case must not matter
        for text in (norm, mixed):
            heads = headers_py(text, 1)
            _check_literals(literals, text, [0, *heads, len(text)], len(text))
            if len(heads) > 2:  # a batch ending before the text does
                _check_literals(literals, text, [0, *heads[:-1]], heads[-2] + 7)


@hypo(150)
@given(st.data())
def test_literal_scanner_on_generated_logs(data: st.DataObject) -> None:
    norm = _normalise(data.draw(logs(max_lines=10), label="log"))
    if not norm:
        return
    if data.draw(st.booleans(), label="swapcase"):
        norm = norm.swapcase()
    heads = [p for p in headers_py(norm, 1) if p < len(norm)]
    end = data.draw(st.sampled_from([len(norm), *heads]), label="end")
    starts = [0, *(p for p in heads if p < end), end]
    _check_literals(parser_literals(data.draw(st.sampled_from(PATTERN_SETS))), norm, starts, end)


def lines_py(orig: bytes, starts: list[int], line0: int) -> list[int]:
    want = [line0 + orig.count(b"\n", 0, s) for s in starts]
    assert _pyscan.record_lines(orig, starts, line0) == want
    return want


@needs_native
@hypo(300)
@given(st.data())
def test_record_lines(data: st.DataObject) -> None:
    assert _native is not None
    orig = data.draw(
        st.lists(st.sampled_from([b"a", b"\n", b"\r", b" ", b"\r\n", b"\x00", b"\n\n"]), max_size=200).map(
            b"".join
        ),
        label="orig",
    )
    inner = data.draw(st.lists(st.integers(1, max(1, len(orig))), max_size=10), label="starts")
    starts = [0, *sorted({p for p in inner if 0 < p <= len(orig)})]
    line0 = data.draw(st.integers(1, 1 << 40) | st.integers(1, 10), label="line0")
    assert _native.record_lines(orig, starts, line0) == lines_py(orig, starts, line0)


@needs_native
@pytest.mark.parametrize("path", FIXTURE_LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_record_lines_on_fixtures(path: Path) -> None:
    assert _native is not None
    orig = path.read_bytes()
    starts = [0, *headers_py(_normalise(orig), 1)]
    for line0 in (1, 17, 2**31 + 5):
        assert _native.record_lines(orig, starts, line0) == lines_py(orig, starts, line0)
    crlf = orig.replace(b"\n", b"\r\n")
    starts = [0, *headers_py(_normalise(crlf), 1)]
    assert _native.record_lines(crlf, starts, 1) == lines_py(crlf, starts, 1)


# ---------------------------------------------------------------------------------------------------------
# The step pass and the F-level pass of one buffer
# ---------------------------------------------------------------------------------------------------------
def _check_buffer(buf: bytes, starts: list[int], end: int, early: int, skip: frozenset[int]) -> None:
    lines = [1 + 3 * k for k in range(len(starts) - 1)]
    want_steps = _pyscan.scan_steps(buf, starts, lines, end, early, skip)
    want_fatal = _pyscan.fatal_records(buf, starts, end, skip)
    if _native is None:
        return
    got_steps = _native.scan_steps(buf, starts, lines, end, early, skip)
    where = f"buffer {buf[:300]!r}..., starts {starts[:20]}, end {end}, early {early}, skip {sorted(skip)}"
    assert repr(tuple(got_steps)) == repr(tuple(want_steps)), f"scan_steps differs on {where}"
    got_fatal = _native.fatal_records(buf, starts, end, skip)
    assert got_fatal == want_fatal, f"fatal_records: native {got_fatal}, pure {want_fatal} on {where}"


@hypo(500)
@given(st.data())
def test_step_and_fatal_passes(data: st.DataObject) -> None:
    norm = _normalise(data.draw(logs(max_lines=10), label="log"))
    if not norm:
        return
    if data.draw(st.integers(0, 3), label="cut") == 0:  # one record cut anywhere (a record over the cap)
        k = data.draw(st.integers(1, len(norm)), label="k")
        buf, starts = norm[:k], [0, k]
    else:
        heads = [p for p in headers_py(norm, 1) if p < len(norm)]
        end = data.draw(st.sampled_from([len(norm), *heads]), label="end")
        buf, starts = norm, [0, *(p for p in heads if p < end), end]
    early = data.draw(st.sampled_from([0, 0, starts[1]]) | st.integers(0, starts[1]), label="early")
    n = len(starts) - 1
    skip = frozenset(data.draw(st.lists(st.integers(0, n - 1), max_size=3), label="skip"))
    _check_buffer(buf, starts, starts[-1], early, skip)


@pytest.mark.parametrize("path", FIXTURE_LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_step_and_fatal_passes_on_fixtures(path: Path) -> None:
    norm = _normalise(path.read_bytes())
    starts = [0, *headers_py(norm, 1), len(norm)]
    _check_buffer(norm, starts, len(norm), 0, frozenset())
    _check_buffer(norm, starts, len(norm), 0, frozenset(range(0, len(starts), 3)))


def test_step_line_across_the_record_cap() -> None:
    """A step line cut anywhere by RECORD_CAP (a long record's first RECORD_CAP bytes are parsed alone)."""
    head = ABSL + b"x.py:1] "
    step = b"completed step: 123456, seconds: 0.153, TFLOP/s/device: 92.5, Tokens/s/device: 13901.2, " + (
        b"total_weights: 65536, loss: 7.125, lm_loss: 7.125, perplexity: 1243.3"
    )
    tail = b"\n" + ABSL + b"y.py:2] " + SHORT_STEP + b"\n"
    for off in range(0, len(step) + 2):
        pad = RECORD_CAP - len(head) - 1 - off
        data = head + b"q" * pad + b" " + step + tail
        check(data, (), None, f"step cut at {off}")
        if off % 16 == 0:
            check(data, random_cuts(len(data), off, mean=9000), None, f"step cut at {off}, chunked")


@needs_native
def test_native_parsers_fed_in_turn() -> None:
    """One parser per log, fed 1000 bytes each in turn: nothing leaks between them through the C module."""
    logs_ = [variants(p.read_bytes())[v] for p in FIXTURE_LOGS[:8] for v in ("log", "flat")]
    parsers = [NodeLogParser(CUSTOM_PATTERNS if k % 3 == 0 else None, native=True) for k in range(len(logs_))]
    got: list[list[list[str]]] = [[] for _ in logs_]
    for pos in range(0, max(map(len, logs_)) + 1000, 1000):
        for k, (data, parser) in enumerate(zip(logs_, parsers, strict=True)):
            if pos < len(data):
                got[k].append([repr(ev) for ev in parser.feed(data[pos : pos + 1000])])
    for k, (data, parser) in enumerate(zip(logs_, parsers, strict=True)):
        got[k].append([repr(ev) for ev in parser.finish()])
        want = run_parser(data, every(1000, len(data)), CUSTOM_PATTERNS if k % 3 == 0 else None, native=False)
        assert got[k] == want.calls, f"log {k}"
        assert parser.internal_errors == 0


@pytest.mark.parametrize(
    ("text", "starts", "end"),
    [
        (b"a", [0, 1], 1),
        (b"", [0, 0], 0),
        (b"abc", [0, 3], 3),
        (b"\x00" * 9, [0, 4, 9], 9),
        (b"ab", [0, 1], 1),
    ],
)
def test_degenerate_buffers(text: bytes, starts: list[int], end: int) -> None:
    """Empty and tiny buffers: the C functions answer what Python answers (and do not crash)."""
    for pos in (1, 2, len(text) + 1, len(text) + 100):
        _check_headers(text, [pos])
    _check_literals([b"a", b"ab", b"\x00"], text, starts, end)
    _check_literals([], text, starts, end)
    _check_buffer(text, starts, end, 0, frozenset())
    if _native is not None:
        assert _native.record_lines(text, starts[:-1], 5) == lines_py(text, starts[:-1], 5)


def test_every_form_cut_at_every_byte() -> None:
    """Headers, F-level headers and step lines cut short at each byte, at each alignment of the buffer
    (the C scanners read several bytes at a time and must stop at the buffer's end)."""
    steps = [
        STEP_TAIL,
        SHORT_STEP,
        b"[Rampup Batch Size Phase], " + SHORT_STEP + b", lm_loss: 1" + b"2" * 70,
        b"completed step: 1, seconds: " + b"9" * 64 + b", total_weights: 1, loss: " + b"8" * 70,
    ]
    forms = [*HEADERS, *(h + s for h in (HEADERS[0], HEADERS[3], TFXLA[3], b"") for s in steps)]
    for form in forms:
        for align in (0, 1, 7, 15, 16, 17, 31):
            for cut in range(len(form) + 1):
                buf = b"a" * align + b" " + form[:cut]
                _check_headers(buf, [1, max(1, align)])
                if cut:
                    s = align + 1
                    _check_buffer(buf, [0, s, len(buf)], len(buf), 0, frozenset())
                    _check_buffer(buf[s:], [0, cut], cut, 0, frozenset())


@hypo(1000)
@given(st.lists(step_values(valid=False) | numbers(), min_size=1, max_size=20))
def test_step_values_read_like_float(values: list[bytes]) -> None:
    """Every value spelling in every field of a step line: C reads it as float()/int() do, or drops it."""
    lines = [
        b"completed step: %b, seconds: %b, total_weights: %b, loss: %b, k: %b"
        % (str(k).encode(), v, values[k - 1], v, values[-k])
        for k, v in enumerate(values, start=1)
    ]
    buf = b" ".join([ABSL + b"x.py:1]", *lines]) + b"\n"  # a complete record ends in whitespace
    _check_buffer(buf, [0, len(buf)], len(buf), 0, frozenset())
    assert _pyscan.scan_steps(buf, [0, len(buf)], [1], len(buf), 0, frozenset())[0] or not all(
        _is_float(v) for v in values
    )


def _is_float(raw: bytes) -> bool:
    try:
        float(raw)
    except ValueError:
        return False
    return b"," not in raw and not re.search(rb"\s", raw) and 0 < len(raw) <= 64
