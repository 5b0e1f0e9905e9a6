"""The event bus's events.jsonl: the same JSON as ``event_to_dict``, log events batched, nothing lost."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

from cvs_tui.core import bus as bus_mod
from cvs_tui.core.bus import EventBus, plain_event
from cvs_tui.core.events import (
    ErrorHit,
    NodeLogEvent,
    NodeState,
    NodeStatusEvent,
    RunEvent,
    RunStartEvent,
    Severity,
    StageEvent,
    StageState,
    StepEvent,
    event_to_dict,
)

EVENTS: list[RunEvent] = [
    NodeLogEvent(
        run="r", node=3, event=StepEvent(step=7, loss=math.nan, line=12, seconds=0.5, extras={"lm_loss": 2.5})
    ),
    NodeLogEvent(
        run="r",
        node=0,
        event=ErrorHit(name="oom", severity=Severity.FATAL, text="x", line=9, origin="builtin"),
    ),
    NodeStatusEvent(run="r", node=1, host="h1", state=NodeState.TRAINING, detail="", at=1.5),
    RunStartEvent(run="r", total_steps=10, nodes=("a", "b"), at=2.0),
    StageEvent(stage="train", state=StageState.PASSED, detail="ok", at=3.0),
]


def _dump(d: object) -> str:
    return json.dumps(d, default=str, allow_nan=True)


def test_plain_event_writes_the_same_json_as_event_to_dict() -> None:
    for ev in EVENTS:
        assert _dump(plain_event(ev)) == _dump(event_to_dict(ev)), ev


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_log_events_wait_for_the_timer_other_events_are_written_at_once(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"

    async def main() -> None:
        bus = EventBus(path)
        bus.publish(EVENTS[0])
        bus.publish(EVENTS[1])
        assert _lines(path) == []  # buffered: log events are written in batches
        await asyncio.sleep(bus_mod.FLUSH_S + 0.2)
        assert len(_lines(path)) == 2  # the timer wrote them
        bus.publish(EVENTS[0])
        bus.publish(EVENTS[2])  # a node state: written at once, with the log event before it, in order
        assert [json.loads(x)["type"] for x in _lines(path)[2:]] == ["NodeLogEvent", "NodeStatusEvent"]
        bus.publish(EVENTS[0])
        bus.close()  # the rest is written at close
        assert len(_lines(path)) == 5
        assert bus.write_error is None

    asyncio.run(main())


def test_without_a_loop_every_event_is_written_at_once(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    bus = EventBus(path)
    for ev in EVENTS:
        bus.publish(ev)
    assert [json.loads(x) for x in _lines(path)] == [json.loads(_dump(event_to_dict(e))) for e in EVENTS]
    bus.close()
