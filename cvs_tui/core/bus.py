"""The event bus: the runner publishes, front-ends subscribe, and the run folder keeps a copy.

Every published event goes to each subscriber's queue and, except raw log lines (the node logs on disk
already hold them), to ``events.jsonl`` in the run folder, where `cvs-tui attach` reads it back.

Publishing never raises: when ``events.jsonl`` cannot be written (a full disk), the bus stops writing
it, keeps delivering to subscribers and says why in :attr:`EventBus.write_error`; the suite then stops
the run as failed. Size: about 350 bytes per logged step per node (every parsed event is one line),
plus the node states and verdicts; benign warning hits past a cap per node are counted, not published
(see ``runner/execute.py``), so a log that repeats one warning does not grow it without bound.
"""

from __future__ import annotations

import asyncio
import errno
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, Any

from cvs_tui.core.events import LogLinesEvent, RunEvent, event_to_dict
from cvs_tui.core.textsafe import mask_secrets


class EventBus:
    def __init__(self, events_path: Path | None = None) -> None:
        self._queues: list[asyncio.Queue[Any]] = []  # RunEvents, then the _END sentinel
        self._fh: IO[str] | None = None
        if events_path is not None:
            events_path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = events_path.open("a", encoding="utf-8")
        self._closed = False
        self.write_error: str | None = None  # why events.jsonl is no longer written (None: it is)

    def publish(self, ev: RunEvent) -> None:
        if self._closed:
            return
        for q in self._queues:
            q.put_nowait(ev)
        if self._fh is not None and not isinstance(ev, LogLinesEvent):
            try:
                line = json.dumps(event_to_dict(ev), default=str, allow_nan=True)
                self._fh.write(mask_secrets(line) + "\n")  # a secret a node printed (audit #11)
                self._fh.flush()
            except OSError as exc:
                full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
                self.write_error = f"events.jsonl: {'disk full' if full else exc.strerror or exc}"
                self._drop_file()

    def _drop_file(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            try:
                fh.close()
            except OSError:
                pass  # its buffer could not be flushed either: the write error is recorded already

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
        self._drop_file()


_END = object()
