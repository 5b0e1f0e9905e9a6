"""Audit 3 FF21 (after the follow stops): the copy of a stream with no line break at all (gigabytes of
NULs on stdin) is judged in linear time and bounded memory. The line clock keeps only the start of an
unfinished line (its header holds its time), as the parser does, so it no longer grows the line, copying
it on every chunk, until the copy ends."""

from __future__ import annotations

from pathlib import Path

from cvs_tui.core.judge.clock import ClockBuilder
from cvs_tui.core.parse.records import RECORD_CAP

FIXTURE = Path(__file__).parents[1] / "fixtures" / "maxtext" / "single_20steps.log"


def _clock(chunks: list[bytes]) -> tuple[list[int], list[float]]:
    c = ClockBuilder()
    for chunk in chunks:
        c.feed(chunk)
        assert len(c._carry) <= RECORD_CAP  # what is held of an unfinished line stays bounded
    done = c.finish()
    return list(done.lines), list(done.times)


def test_ff21_a_copy_with_no_line_break_holds_a_bounded_carry() -> None:
    lines, _ = _clock([b"\x00" * (1 << 20)] * 64)
    assert lines == []


def test_ff21_a_giant_line_keeps_every_other_line_time() -> None:
    """A 5 MB line in the middle of a real log: every line after it keeps its number and its time."""
    text = FIXTURE.read_bytes()
    head, tail = text[: len(text) // 2], text[len(text) // 2 :]
    giant = head + b"\x00" * (5 << 20) + tail
    step = 1 << 20
    chunked = _clock([giant[i : i + step] for i in range(0, len(giant), step)])
    assert chunked[0]  # the log's timed lines are there
    # the same log with the giant run cut to its first bytes: the same line numbers and times
    short = head + b"\x00" * 10 + tail
    assert chunked == _clock([short])
