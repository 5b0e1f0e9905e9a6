"""Read a run folder back into run events: ``events.jsonl`` decoded, node logs tailed as raw lines.

This is how ``cvs-tui attach`` follows a run another process is executing: it only reads the folder
(never writes, never signals), so opening and closing a view cannot disturb the run. Where each file is,
and what a malformed plan.json means, is :class:`~cvs_tui.core.run_folder.RunFolder`'s business. A source
beside :mod:`cvs_tui.core.sources.replay` (a finished run) and the live bus.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from cvs_tui.core.event_codec import EventDecodeError, event_from_dict
from cvs_tui.core.events import LogLinesEvent, RunEndEvent, RunEvent, RunStartEvent, SuiteEndEvent
from cvs_tui.core.run_folder import RunFolder
from cvs_tui.core.slug import slugify

POLL_SECONDS = 0.25
TAIL_START_BYTES = 4 * 1024 * 1024  # on attach, a long log is read from this far before its end
MAX_LINES_PER_EVENT = 2000
READ_CHUNK = 1024 * 1024


@dataclass
class _LogTail:
    path: Path
    run: str
    node: int
    offset: int | None = None  # None until the first read decides where to start
    next_line: int = 1
    partial: bytes = b""


def _count_newlines(path: Path, end: int) -> int:
    count = 0
    with path.open("rb") as fh:
        left = end
        while left > 0:
            chunk = fh.read(min(READ_CHUNK, left))
            if not chunk:
                break
            count += chunk.count(b"\n")
            left -= len(chunk)
    return count


def _read_tail(tail: _LogTail, *, final: bool) -> list[LogLinesEvent]:
    """New complete lines of one node log since the last read (blocking; run in a thread)."""
    try:
        size = tail.path.stat().st_size
    except FileNotFoundError:
        return []
    if tail.offset is None:
        start = 0
        if size > TAIL_START_BYTES:
            # Joining a long run: show the recent part, numbered as in the file.
            start = size - TAIL_START_BYTES
            with tail.path.open("rb") as fh:
                fh.seek(start)
                start += fh.read(READ_CHUNK).find(b"\n") + 1
            tail.next_line = _count_newlines(tail.path, start) + 1
        tail.offset = start
    if size < tail.offset:  # truncated or replaced: start over
        tail.offset, tail.next_line, tail.partial = 0, 1, b""
    out: list[LogLinesEvent] = []
    with tail.path.open("rb") as fh:
        fh.seek(tail.offset)
        while True:
            data = fh.read(READ_CHUNK)
            if not data:
                break
            tail.offset += len(data)
            data = tail.partial + data
            cut = data.rfind(b"\n")
            if cut < 0:
                tail.partial = data
                continue
            tail.partial = data[cut + 1 :]
            lines = data[:cut].decode("utf-8", errors="replace").split("\n")
            for i in range(0, len(lines), MAX_LINES_PER_EVENT):
                chunk = tuple(line.rstrip("\r") for line in lines[i : i + MAX_LINES_PER_EVENT])
                out.append(LogLinesEvent(tail.run, tail.node, tail.next_line, chunk))
                tail.next_line += len(chunk)
    if final and tail.partial:
        text = tail.partial.decode("utf-8", errors="replace").rstrip("\r")
        out.append(LogLinesEvent(tail.run, tail.node, tail.next_line, (text,)))
        tail.next_line += 1
        tail.partial = b""
    return out


@dataclass
class FollowStats:
    """What a follow skipped: lines of events.jsonl that are not an event this version reads."""

    skipped_lines: int = 0


@dataclass
class _FolderState:
    offset: int = 0
    partial: bytes = b""
    tails: dict[tuple[str, int], _LogTail] = field(default_factory=dict)
    lines_in_events: set[tuple[str, int]] = field(default_factory=set)
    ended_runs: set[str] = field(default_factory=set)
    suite_ended: bool = False
    more: bool = False  # the last read stopped at READ_CAP: events.jsonl holds more already
    stats: FollowStats = field(default_factory=FollowStats)


PARTIAL_CAP = 64 << 20  # an unfinished line held at most
READ_CAP = 4 << 20  # bytes of events.jsonl read and decoded at a time (it read the whole rest: L12)


def _read_events(path: Path, state: _FolderState) -> list[RunEvent]:
    with path.open("rb") as fh:
        fh.seek(state.offset)
        data = fh.read(READ_CAP)
    state.more = len(data) == READ_CAP
    state.offset += len(data)
    data = state.partial + data
    cut = data.rfind(b"\n")
    if cut < 0:
        # one line past PARTIAL_CAP is no event this version writes: dropped, not held (its rest fails
        # to decode and is skipped too)
        state.partial = data if len(data) <= PARTIAL_CAP else b""
        state.stats.skipped_lines += len(data) > PARTIAL_CAP
        return []
    state.partial = data[cut + 1 :]
    out: list[RunEvent] = []
    for raw in data[:cut].split(b"\n"):
        if not raw.strip():
            continue
        try:
            out.append(event_from_dict(json.loads(raw)))
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError, EventDecodeError):
            # A line this version does not understand (newer writer, a bad enum or type, invalid UTF-8,
            # deep nesting) is skipped and counted, not fatal (audit #18).
            state.stats.skipped_lines += 1
            continue
    return out


async def follow_run_folder(
    run_dir: Path,
    *,
    follow: bool = True,
    poll_seconds: float = POLL_SECONDS,
    stats: FollowStats | None = None,
) -> AsyncIterator[RunEvent]:
    """Events of a run folder, then its new events and node-log lines as they are written.

    Ends after the suite's end event (and a last read of the logs), or at the end of what is there when
    ``follow`` is false.
    """
    folder = RunFolder(run_dir)
    events_path = folder.require_events()
    state = _FolderState(stats=stats if stats is not None else FollowStats())
    slugs = folder.slugs()
    while True:
        new_events = await asyncio.to_thread(_read_events, events_path, state)
        for ev in new_events:
            if isinstance(ev, LogLinesEvent):
                state.lines_in_events.add((ev.run, ev.node))
            elif isinstance(ev, RunStartEvent):
                for rank in range(len(ev.nodes)):
                    key = (ev.run, rank)
                    if key not in state.tails:
                        try:
                            path = folder.node_log(slugs.get(ev.run) or slugify(ev.run), rank)
                        except ValueError:  # a run key with no letter or digit names no log folder
                            continue
                        state.tails[key] = _LogTail(path, ev.run, rank)
            elif isinstance(ev, RunEndEvent):
                state.ended_runs.add(ev.run)
            elif isinstance(ev, SuiteEndEvent):
                state.suite_ended = True
            yield ev
        if state.more and not state.suite_ended:
            continue  # the rest of events.jsonl first, a piece at a time (its log tails after)
        done = state.suite_ended or not follow
        for key, tail in list(state.tails.items()):
            if key in state.lines_in_events:
                continue
            final = done or tail.run in state.ended_runs
            for lines_ev in await asyncio.to_thread(_read_tail, tail, final=final):
                yield lines_ev
            if tail.run in state.ended_runs and not done:
                # Its log is complete once the run ended and was read to the end.
                del state.tails[key]
        if done:
            return
        await asyncio.sleep(poll_seconds)
