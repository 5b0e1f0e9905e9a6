"""One rank's log bytes into events: raw lines for the log panes, parsed events, the watchdog's state.

Shared by every source that feeds bytes as they arrive: a live run (:mod:`.execute`, the launcher's
stream) and follow mode (:mod:`cvs_tui.core.sources.follow`, files or stdin it did not launch), so both
publish the same events from the same bytes. Copying the bytes into the run folder stays with the
caller (what a failed write means differs). Memory per rank stays bounded: the judge's step records go
to a step table (``judge.table.StepCollector``: columns in memory up to a size, then in files), an
unfinished line is kept up to ``RECORD_CAP`` bytes (the rest of it is dropped and counted, as the parser
does), and benign warning hits past ``WARNINGS_KEPT`` are counted, not kept (the judge only counts them)
nor published.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cvs_tui.core.events import (
    ErrorHit,
    LogEvent,
    LogLinesEvent,
    NodeLogEvent,
    NodeState,
    NonFiniteAbortEvent,
    RunEvent,
    Severity,
    StepEvent,
    StepKind,
)
from cvs_tui.core.parse import NodeLogParser
from cvs_tui.core.parse.endings import Ending
from cvs_tui.core.parse.records import RECORD_CAP
from cvs_tui.core.watch import judging
from cvs_tui.core.watch.sections import STEP_LINE, Section, line_section
from cvs_tui.core.watch.watchdog import NodeWatch

if TYPE_CHECKING:
    from cvs_tui.core.judge.table import StepCollector

LINES_BATCH = 200  # raw lines per LogLinesEvent at most
WARNINGS_KEPT = 1000  # benign warning hits kept per rank for the judge; the rest are only counted

# (run, rank, state, detail): publishes a NodeStatusEvent
NodeStatus = Callable[[str, int, NodeState, str], None]
# (rank, train step, its logged seconds, when): a train step arrived (node health attributes kernel
# lines to steps; the live stall gates read its time)
TrainStep = Callable[[int, int, float | None, float], None]


@dataclass
class RankLog:
    """One rank's log as it arrives: the copy in the run folder, the parser, what it parsed."""

    watch: NodeWatch
    local_log: Path
    parser: NodeLogParser
    # what the judge judges (warnings capped): the step records as columns, in memory up to a size and
    # then in files, and the other events, so a long run holds a few bytes a step, not its events
    steps: StepCollector = field(default_factory=judging.step_collector)
    # False where the judge reads the copy on disk instead (follow mode): nothing is kept per step
    keep_steps: bool = True
    lines: int = 0
    partial: bytes = b""  # the unfinished last line, at most RECORD_CAP bytes of it
    cut: int = 0  # bytes of the unfinished line dropped past RECORD_CAP
    warnings: int = 0  # warning hits seen
    dropped_warnings: int = 0  # warning hits past WARNINGS_KEPT (counted, not kept)
    ending: Ending | None = None  # how the scheduler ended this rank's task (Slurm), read after the run


def feed_rank(
    r: RankLog,
    run: str,
    chunk: bytes,
    *,
    now: float,
    emit: Callable[[RunEvent], None],
    node_status: NodeStatus,
    on_train_step: TrainStep | None = None,
) -> list[str]:
    """Publish ``chunk``'s complete lines and parsed events; update the rank's watch. Returns the lines."""
    w = r.watch
    lines = split_lines(r, chunk)
    for i in range(0, len(lines), LINES_BATCH):
        batch = tuple(lines[i : i + LINES_BATCH])
        emit(LogLinesEvent(run=run, node=w.rank, first_line=r.lines + i + 1, lines=batch))
    r.lines += len(lines)
    w.on_lines(lines, r.lines)
    track_sections(w, lines, now)
    judged: list[LogEvent] = []
    append = judged.append
    for ev in r.parser.feed(chunk):
        if isinstance(ev, StepEvent):  # nearly every event: first, without the checks below
            append(ev)
            emit(NodeLogEvent(run=run, node=w.rank, event=ev))
            w.on_step(ev, now)
            if on_train_step is not None and ev.kind is StepKind.TRAIN:
                on_train_step(w.rank, ev.step, ev.seconds, now)
            if w.state is not NodeState.TRAINING and w.first_fatal_at is None:
                w.state = NodeState.TRAINING
                node_status(run, w.rank, NodeState.TRAINING, "")
            continue
        if isinstance(ev, ErrorHit) and ev.severity is not Severity.FATAL:
            r.warnings += 1
            if r.warnings > WARNINGS_KEPT:
                r.dropped_warnings += 1
                continue
        append(ev)
        emit(NodeLogEvent(run=run, node=w.rank, event=ev))
        if (
            isinstance(ev, NonFiniteAbortEvent)
            or (isinstance(ev, ErrorHit) and ev.severity is Severity.FATAL)
        ) and w.first_fatal_at is None:
            w.on_fatal(ev.line, now)
            w.state = NodeState.FAILED
            node_status(run, w.rank, NodeState.FAILED, f"fatal at line {ev.line}")
    if r.keep_steps:
        r.steps.add(judged)
    return lines


def _section_hit(line: str) -> tuple[Section | None, bool] | None:
    """(section, opens) of a section line, (None, False) for a step line (it ends any section)."""
    return (None, False) if STEP_LINE in line else line_section(line)


def track_sections(w: NodeWatch, lines: list[str], now: float) -> None:
    """What the chunk leaves the rank doing (:mod:`.sections`), read from its last step or section line
    backwards: a chunk nearly always ends with a step line, so one line is looked at. (Raw lines: the
    parser emits a record only when the next one starts, and a save's line is the last before it.)"""
    for i in range(len(lines) - 1, -1, -1):
        hit = _section_hit(lines[i])
        if hit is None:
            continue
        kind, opens = hit
        if kind is None or not opens:
            if kind is None or w.section is kind:
                w.end_section(now)
            return
        if w.section is kind and any((h := _section_hit(ln)) is not None and not h[1] for ln in lines[:i]):
            w.end_section(now)  # that one ended in this chunk: this announcement is a new one
        w.on_section(kind, True, now)
        return


def finish_rank(r: RankLog, run: str, emit: Callable[[RunEvent], None]) -> None:
    """The parser's last events (an unfinished last record), published and kept for the judge."""
    last = r.parser.finish()
    for ev in last:
        emit(NodeLogEvent(run=run, node=r.watch.rank, event=ev))
    if r.keep_steps:
        r.steps.add(last)


def append_bytes(path: Path, data: bytes) -> None:
    """Append ``data`` to ``path`` (the run folder's copy of a node log), every byte before it returns.

    The file is opened for each chunk, not held: a run holds an SSH connection per node already, and a
    descriptor per node more would reach a 1024-file limit at some 500 nodes. ``os.open`` costs half of
    ``Path.open``'s buffered file object."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def split_lines(r: RankLog, chunk: bytes) -> list[str]:
    """The complete lines ``chunk`` finishes, each at most RECORD_CAP bytes (the rest is dropped and said
    so); the unfinished tail is kept in ``r.partial``, capped the same way."""
    first = chunk.find(b"\n")
    if first < 0:
        room = RECORD_CAP - len(r.partial)
        r.partial += chunk[: max(room, 0)]
        r.cut += len(chunk) - max(min(room, len(chunk)), 0)
        return []
    room = max(RECORD_CAP - len(r.partial), 0)
    head, r.cut = r.partial + chunk[:first][:room], r.cut + max(first - room, 0)
    raw = [_capped(head, r.cut)]
    last = chunk.rfind(b"\n")
    if last > first:
        raw += [_capped(ln[:RECORD_CAP], len(ln) - RECORD_CAP) for ln in chunk[first + 1 : last].split(b"\n")]
    tail = chunk[last + 1 :]
    r.partial, r.cut = tail[:RECORD_CAP], max(len(tail) - RECORD_CAP, 0)
    return [b.decode("utf-8", "replace") for b in raw]


def _capped(line: bytes, cut: int) -> bytes:
    """A line as shown, with how much of it was dropped (a line longer than RECORD_CAP)."""
    return line + f" [... {cut} more bytes not shown]".encode() if cut > 0 else line
