"""The run-folder reader behind `cvs-tui attach`: event decoding, tailing a folder being written, handover."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

from cvs_tui.core.errors import UserError
from cvs_tui.core.event_codec import event_from_dict, event_to_dict
from cvs_tui.core.events import (
    CheckpointAction,
    CheckpointEvent,
    DevicesEvent,
    ErrorHit,
    EvalDialect,
    EvalEvent,
    LogLinesEvent,
    NodeLogEvent,
    NodeState,
    NodeStatusEvent,
    RunEndEvent,
    RunOutcome,
    RunStartEvent,
    Severity,
    StageEvent,
    StageState,
    StepEvent,
    StepKind,
    SuiteEndEvent,
    VerdictEvent,
)
from cvs_tui.core.feed import EventFeed
from cvs_tui.core.run_folder import RunFolder
from cvs_tui.core.sources.attach import follow_run_folder

SAMPLES = [
    StageEvent("smoke", StageState.RUNNING, "", 1.5),
    RunStartEvent("BS8 SL2k", 100, ("a", "b"), 2.0),
    NodeStatusEvent("BS8 SL2k", 1, "b", NodeState.HUNG, "no progress", 3.0),
    NodeLogEvent(
        "r",
        0,
        StepEvent(4, 2.5, 17, StepKind.TRAIN, 0.4, 10.0, 512.0, 8.0, None, {"lm_loss": 2.4}, 9.0, "x.py:1"),
    ),
    NodeLogEvent("r", 1, StepEvent(5, math.inf, 18, StepKind.RAMPUP)),
    NodeLogEvent("r", 0, ErrorHit("nccl", Severity.FATAL, "NCCL error", 40, "builtin")),
    NodeLogEvent("r", 0, DevicesEvent(8, (1, 8), 3)),
    NodeLogEvent("r", 0, EvalEvent(10, 2.0, EvalDialect.CURRENT, 50, 7.4)),
    NodeLogEvent("r", 0, CheckpointEvent(CheckpointAction.SAVE_DONE, 60, 10, 1.25, "orbax-new", "/ck")),
    LogLinesEvent("r", 0, 7, ("one", "two")),
    RunEndEvent("r", RunOutcome.FAILED, "fatal", 0, 4.0),
    VerdictEvent("r", "training.final_loss", "FAIL", "<= 2", None, "", "missing"),
    SuiteEndEvent(False, "results.json", "report.html", 5.0),
]


@pytest.mark.parametrize("ev", SAMPLES, ids=lambda e: type(e).__name__)
def test_event_round_trips_through_json(ev: object) -> None:
    back = event_from_dict(json.loads(json.dumps(event_to_dict(ev))))
    assert repr(back) == repr(ev)  # repr: nan/inf compare by text
    assert type(back) is type(ev)


def test_at02_field_types_are_resolved_once_per_event_class(monkeypatch: pytest.MonkeyPatch) -> None:
    """AT02 (L12): decoding many step events resolves each class's annotations once, not per event
    (re-evaluating them on every line made attach of 1 M step events take minutes)."""
    import typing

    from cvs_tui.core import event_codec

    event_codec._field_hints.cache_clear()
    calls: list[object] = []
    real = typing.get_type_hints

    def counting(obj: object, *args: object, **kwargs: object) -> dict[str, object]:
        calls.append(obj)
        return real(obj, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(typing, "get_type_hints", counting)
    ev = NodeLogEvent("r", 0, StepEvent(5, 2.5, 18, StepKind.TRAIN, 0.4, 10.0, 512.0))
    line = json.dumps(event_to_dict(ev))
    decoded = [event_from_dict(json.loads(line)) for _ in range(500)]
    assert all(d == ev for d in decoded)
    assert len(calls) <= 2  # NodeLogEvent and StepEvent, once each


def test_unknown_event_type_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown event type"):
        event_from_dict({"type": "Nope"})


def test_missing_folder_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"events\.jsonl"):
        follow_run_folder(tmp_path).__anext__().send(None)


def _append(path: Path, text: str | bytes) -> None:
    with path.open("ab") as fh:
        fh.write(text.encode() if isinstance(text, str) else text)


def _jsonl(*events: object) -> str:
    return "".join(json.dumps(event_to_dict(e)) + "\n" for e in events)


async def test_follows_a_folder_being_written(tmp_path: Path) -> None:
    """Events and log lines written in pieces (half lines included) arrive once each, in order."""
    events = tmp_path / "events.jsonl"
    logs = tmp_path / "logs" / "BS8_SL2k"
    logs.mkdir(parents=True)
    events.write_text(_jsonl(RunStartEvent("BS8 SL2k", 10, ("h0", "h1"))))
    received: list[object] = []

    async def writer() -> None:
        await asyncio.sleep(0.05)
        _append(logs / "node0.log", "line 1\nline 2\nhalf")
        _append(logs / "node1.log", "other 1\n")
        line = _jsonl(NodeStatusEvent("BS8 SL2k", 0, "h0", NodeState.TRAINING))
        _append(events, line[:10])  # a partly written JSON line must wait for its end
        await asyncio.sleep(0.05)
        _append(events, line[10:])
        _append(logs / "node0.log", " done\nline 4\n")
        await asyncio.sleep(0.05)
        _append(events, _jsonl(RunEndEvent("BS8 SL2k", RunOutcome.COMPLETE), SuiteEndEvent(True)))

    task = asyncio.create_task(writer())
    async for ev in follow_run_folder(tmp_path, poll_seconds=0.01):
        received.append(ev)
    await task
    kinds = [type(e).__name__ for e in received]
    assert kinds[0] == "RunStartEvent" and kinds[-1] == "SuiteEndEvent"
    assert "NodeStatusEvent" in kinds
    lines = {0: [], 1: []}  # type: dict[int, list[tuple[int, str]]]
    for e in received:
        if isinstance(e, LogLinesEvent):
            lines[e.node] += [(e.first_line + i, t) for i, t in enumerate(e.lines)]
    assert lines[0] == [(1, "line 1"), (2, "line 2"), (3, "half done"), (4, "line 4")]
    assert lines[1] == [(1, "other 1")]


async def test_no_follow_reads_what_is_there_and_stops(tmp_path: Path) -> None:
    (tmp_path / "events.jsonl").write_text(
        _jsonl(StageEvent("preflight", StageState.RUNNING)) + "{broken json\n"
    )
    got = [ev async for ev in follow_run_folder(tmp_path, follow=False)]
    assert got == [StageEvent("preflight", StageState.RUNNING)]


async def test_long_log_is_joined_near_its_end_with_true_line_numbers(tmp_path: Path, monkeypatch) -> None:
    import cvs_tui.core.sources.attach as src

    monkeypatch.setattr(src, "TAIL_START_BYTES", 1000)
    (tmp_path / "logs" / "R").mkdir(parents=True)
    (tmp_path / "logs" / "R" / "node0.log").write_text("".join(f"line {i}\n" for i in range(1, 1001)))
    (tmp_path / "events.jsonl").write_text(_jsonl(RunStartEvent("R", 1, ("h",)), SuiteEndEvent(True)))
    got = [e for e in [ev async for ev in follow_run_folder(tmp_path)] if isinstance(e, LogLinesEvent)]
    assert got[-1].lines[-1] == "line 1000"
    first = got[0]
    assert first.lines[0] == f"line {first.first_line}" and first.first_line > 800


def test_plan_info(tmp_path: Path) -> None:
    (tmp_path / "plan.json").write_text(
        json.dumps({"mode": "distributed", "nodes": ["a", "b"], "gpu_name": "MI300X"})
    )
    assert RunFolder(tmp_path).plan_info() == {"mode": "distributed (2 nodes)", "gpu": "MI300X"}
    assert RunFolder(tmp_path / "missing").plan_info() == {}


async def test_feed_survives_a_cancelled_reader() -> None:
    """A detach cancels the TUI's reader mid-wait; the console then gets every remaining event."""
    queue: asyncio.Queue[int] = asyncio.Queue()

    async def source():  # an async generator would be closed by a cancellation inside anext()
        while (item := await queue.get()) >= 0:
            yield StageEvent(f"s{item}", StageState.RUNNING)

    feed = EventFeed(source())
    reader = asyncio.create_task(anext(feed))
    await asyncio.sleep(0.01)
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    for i in (1, 2):
        queue.put_nowait(i)
    queue.put_nowait(-1)
    assert [e.stage async for e in feed] == ["s1", "s2"]
