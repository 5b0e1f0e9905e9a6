"""The line clock read by the C scanner (``_native.clock_lines``) is the clock of the pure-Python reference.

``judge.clock.ClockBuilder`` (what ``analyze`` feeds the chunks it parses, and ``line_clock`` the whole text
at once) runs ``clock_lines`` of the byte scanner; ``_pyscan.clock_lines`` (the regex ``HEADER_TIME`` and
``clock_groups``) over the whole text in one piece is the reference. These tests hold the C scanner and
the pure-Python one, fed in any chunking, equal to it, bit for bit (times compared by ``repr``), on every
real log under ``tests/fixtures`` (as written, without its last newline, CRLF, in several chunkings) and
on hypothesis-built logs of header forms at their edges: absl's zero date, TF/XLA and python-logging
dates (commas, fraction lengths), impossible dates, a New Year crossing, headers in the middle of a line,
runs of spaces, digits and source names at their caps, CR and NUL bytes.
"""

from __future__ import annotations

import importlib.util
import os
from array import array
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cvs_tui.core.judge.clock import ClockBuilder, line_clock
from cvs_tui.core.parse import _pyscan

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HAVE_NATIVE = importlib.util.find_spec("cvs_tui.core.parse._native") is not None
needs_native = pytest.mark.skipif(not HAVE_NATIVE, reason="cvs_tui.core.parse._native is not built")
SCALE = int(os.environ.get("CVS_TUI_FUZZ_SCALE", "1"))


def _clock(data: bytes, sizes: list[int], native: bool) -> list[tuple[int, str]]:
    """The clock of ``data`` fed in pieces of ``sizes`` (cycled), as (line, repr(time)) pairs."""
    b = ClockBuilder(native)
    i = k = 0
    while i < len(data):
        n = max(1, sizes[k % len(sizes)])
        b.feed(data[i : i + n])
        i, k = i + n, k + 1
    c = b.finish()
    assert list(c.lines) == sorted(set(c.lines))
    return [(line, repr(t)) for line, t in zip(c.lines, c.times, strict=True)]


def _reference(data: bytes) -> list[tuple[int, str]]:
    """The pure-Python scanner over the whole text in one piece."""
    c = line_clock(data, native=False)
    return [(line, repr(t)) for line, t in zip(c.lines, c.times, strict=True)]


def _same(data: bytes, sizes: list[int]) -> None:
    ref = _reference(data)
    assert _clock(data, sizes, native=False) == ref
    if HAVE_NATIVE:
        assert _clock(data, sizes, native=True) == ref


@pytest.mark.parametrize("log", sorted(FIXTURES.rglob("*.log")), ids=lambda p: p.name)
def test_every_fixture(log: Path) -> None:
    data = log.read_bytes()
    for variant in (data, data.rstrip(b"\n"), data.replace(b"\n", b"\r\n")):
        for sizes in ([1 << 20], [4096], [1, 7, 300]):
            _same(variant, sizes)


ABSL = b"I1130 06:52:51.215730 139799 train.py:265] step\n"
EDGES = [
    ABSL,
    b"E0000 00:00:1745000000.123456  1234 cuda_dnn.cc:8310] zero date\n" + ABSL,  # zero date: left out
    b"2026-04-18 18:24:14.732938: E external/xla/x.cc:1] tf\n" + ABSL,  # absl takes the TF year
    b"INFO:2026-04-19 06:51:49,547:jax._src.x:1: pylog\n",
    b"WARNING:2026-04-19 06:51:49:no millis\nDEBUG:2026-04-19 06:51:49,54:two digits\n",
    b"CRITICAL:2026-04-19 06:51:49,5470:four digits\nERROR:2026-02-29 00:00:00,000:common year\n",
    b"I1231 23:59:59.999999 1 a.py:1] old\nI0101 00:00:00.000001 1 a.py:1] new year\n",  # New Year
    b"2025-12-31 23:00:00: I x\nI1231 23:59:59 1 a.py:1] x\nI0101 00:00:01 1 a.py:1] y\n",
    b"text I1130 06:52:51.215730 139799 train.py:265] mid-line\n",  # mid-line: not read
    b"I1130 06:52:51.215730 139799 train.py:265] a I1130 06:52:52.0 1 b.py:1] b\n",
    b"I1130 06:52:51.1234567891 1 a.py:1] ten fraction digits\nI1130 06:52:51. 1 a.py:1] no digits\n",
    b"I1130 06:52:51" + b" " * 20 + b"1 a.py:1] 20 spaces\nI1130 06:52:51" + b" " * 21 + b"1 a.py:1] 21\n",
    b"I1130 06:52:51 " + b"9" * 20 + b" a.py:1] pid 20\nI1130 06:52:51 " + b"9" * 21 + b" a.py:1] 21\n",
    b"I1130 06:52:51 1 " + b"s" * 200 + b":1] src 200\nI1130 06:52:51 1 " + b"s" * 201 + b":1] 201\n",
    b"I1130 06:52:51 1 a.py:" + b"1" * 10 + b"] \nI1130 06:52:51 1 a.py:" + b"1" * 11 + b"] \n",
    b"I1332 06:52:51 1 a.py:1] month 13\nI0230 06:52:51 1 a.py:1] feb 30\nI0229 24:00:00 1 a.py:1] h24\n",
    b"I0229 06:52:60 1 a.py:1] second 60\nI0229 06:52:59 1 a.py:1] leap 2000\n",
    b"0000-01-01 00:00:00: I year 0\nI0101 00:00:00 1 a.py:1] absl in year 0\n",
    b"9999-12-31 23:59:59.5: F year 9999\nI1231 23:59:59 1 a.py:1] x\nI0101 00:00:00 1 a.py:1] 10000\n",
    b"2026-04-18 18:24:14.732938:  E two spaces\n2026-04-18 18:24:14.732938: X level\n",
    b"2026-04-18 18:24:14.: I dot\n2026-04-18 18:24:14.0123456789: I ten\n2026-04-18 18:24:14: I none\n",
    b"I1130 06:52:51.215730 139799 train.py:265] crlf\r\n\r\nW1130 06:52:52 1 a b.py:1] space in src\n",
    b"I1130 06:52:51.2 1 a\x00.py:1] nul\n\x00I1130 06:52:51.2 1 a.py:1] \n\xffI1130 06:52:51 1 a.py:1] x",
    b"\n\n\nI1130 06:52:51 1 a.py:1] late\nI1130 06:52:5",  # a cut last line
    b"",
]


@pytest.mark.parametrize("data", EDGES, ids=range(len(EDGES)))
def test_edges(data: bytes) -> None:
    for sizes in ([1 << 20], [1], [2, 3, 5]):
        _same(data, sizes)


def test_edges_are_read_as_stated() -> None:
    """A few of the edges pinned by value, so the reference itself cannot drift unnoticed."""
    assert _reference(EDGES[1]) == _reference(b"\n" + ABSL)  # the zero date is left out
    ny = dict(line_clock(EDGES[6]))
    assert ny[2] - ny[1] == pytest.approx(2e-6, abs=1e-6)  # 2000-12-31 -> 2001-01-01
    assert line_clock(EDGES[8]) == {}
    assert list(line_clock(EDGES[11])) == [1] and list(line_clock(EDGES[12])) == [1]
    assert list(line_clock(EDGES[13])) == [1] and list(line_clock(EDGES[14])) == [1]
    assert list(line_clock(EDGES[16])) == [2]
    assert list(line_clock(EDGES[18])) == [1, 2]  # year 10000 does not read


@needs_native
def test_native_state_carries_between_calls() -> None:
    """``clock_lines`` continues from the state and line count it is given, like its twin."""
    from cvs_tui.core.parse import _native

    data = EDGES[7] + EDGES[6]
    for native in (_native.clock_lines, _pyscan.clock_lines):
        cut = data.index(b"\n", 30) + 1
        a1, t1, n1, s1 = native(data, cut, 0, _pyscan.CLOCK_START)
        a2, t2, n2, s2 = native(data[cut:], len(data) - cut, n1, s1)
        whole = native(data, len(data), 0, _pyscan.CLOCK_START)
        assert (a1 + a2, t1 + t2, n1 + n2) == whole[:3]
        assert repr(s2) == repr(whole[3])
        assert list(array("q", a1 + a2)) == sorted(line_clock(data))


_HEAD = st.sampled_from(
    [
        b"I1130 06:52:51",
        b"E0000 00:00:17",
        b"F1231 23:59:59",
        b"W0101 00:00:00",
        b"I0229 12:00:00",
        b"I1301 00:00:00",
        b"2026-04-18 18:24:14",
        b"2025-12-31 23:59:59",
        b"2023-02-29 00:00:00",
        b"INFO:2026-04-19 06:51:49",
        b"ERROR:2026-01-01 00:00:00",
        b"DEBUG:2024-02-29 00:00:00",
        b"CRITICAL:1999-12-31 23:59:60",
    ]
)
_FRAC = st.sampled_from(
    [b"", b".", b".5", b".123456", b".123456789", b".1234567890", b",547", b",54", b",5470"]
)
_TAIL = st.sampled_from(
    [b" 1 a.py:1] x", b": I x", b": E x", b":x", b"  139799 train.py:265] ", b" 1 a b:1] ", b"] ", b""]
)
_JUNK = st.sampled_from([b"", b" ", b"\r", b"\x00", b"text ", b"\xff", b"I", b"2026-"])


@st.composite
def _logs(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(st.tuples(_JUNK, _HEAD, _FRAC, _TAIL, _JUNK), max_size=12))
    ends = draw(
        st.lists(st.sampled_from([b"\n", b"\r\n", b"\n\n"]), min_size=len(lines), max_size=len(lines))
    )
    return b"".join(j + h + f + t + k + e for (j, h, f, t, k), e in zip(lines, ends, strict=True))


@settings(max_examples=400 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_logs(), st.lists(st.integers(1, 64), min_size=1, max_size=4))
def test_fuzzed_logs(data: bytes, sizes: list[int]) -> None:
    _same(data, sizes)
