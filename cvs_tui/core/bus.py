"""The event bus: the runner publishes, front-ends subscribe, and the run folder keeps a copy.

Every published event goes to each subscriber's queue and, except raw log lines (the node logs on disk
already hold them), to ``events.jsonl`` in the run folder, where `cvs-tui attach` reads it back.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, Any

from cvs_tui.core.events import LogLinesEvent, RunEvent, event_to_dict


class EventBus:
    def __init__(self, events_path: Path | None = None) -> None:
        self._queues: list[asyncio.Queue[Any]] = []  # RunEvents, then the _END sentinel
        self._fh: IO[str] | None = None
        if events_path is not None:
            events_path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = events_path.open("a", encoding="utf-8")
        self._closed = False

    def publish(self, ev: RunEvent) -> None:
        if self._closed:
            return
        for q in self._queues:
            q.put_nowait(ev)
        if self._fh is not None and not isinstance(ev, LogLinesEvent):
            self._fh.write(json.dumps(event_to_dict(ev), default=str, allow_nan=True) + "\n")
            self._fh.flush()

    def subscribe(self) -> AsyncIterator[RunEvent]:
        """Every event published from now on, until :meth:`close`."""
        q: asyncio.Queue[Any] = asyncio.Queue()
        self._queues.append(q)
        return self._drain(q)

    async def _drain(self, q: asyncio.Queue[Any]) -> AsyncIterator[RunEvent]:
        while True:
            ev = await q.get()
            if ev is _END:
                return
            yield ev

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for q in self._queues:
            q.put_nowait(_END)
        if self._fh is not None:
            self._fh.close()
            self._fh = None


_END = object()
