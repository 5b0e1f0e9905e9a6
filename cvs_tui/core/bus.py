"""The event bus: the runner publishes, front-ends subscribe, and the run folder keeps a copy.

Every published event goes to each subscriber's queue and, except raw log lines (the node logs on disk
already hold them), to ``events.jsonl`` in the run folder, where `cvs-tui attach` reads it back.

Publishing never raises: when ``events.jsonl`` cannot be written (a full disk), the bus stops writing
it, keeps delivering to subscribers and says why in :attr:`EventBus.write_error`; the suite then stops
the run as failed. Size: about 350 bytes per logged step per node (every parsed event is one line),
plus the node states and verdicts; benign warning hits past a cap per node are counted, not published
(see ``runner/execute.py``), so a log that repeats one warning does not grow it without bound.

Writes are batched: the parsed log events (the bulk, one per step per node) are buffered and written
at most ``FLUSH_S`` seconds later, in one write; every other event (stage, node state, run end,
verdict) is written at once, with whatever was buffered before it, so the file keeps publish order
and a stage's end is on disk when it is published. :meth:`EventBus.close` writes the rest.
"""

from __future__ import annotations

import asyncio
import errno
import json
from collections.abc import AsyncIterator
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import IO, Any

from cvs_tui.core.events import LogLinesEvent, NodeLogEvent, RunEvent
from cvs_tui.core.textsafe import mask_secrets

FLUSH_S = 0.2  # the most a buffered log event waits before it is written to events.jsonl
_BUFFER = 1 << 20  # bytes of events.jsonl held between writes at most


class EventBus:
    def __init__(self, events_path: Path | None = None) -> None:
        self._queues: list[asyncio.Queue[Any]] = []  # RunEvents, then the _END sentinel
        self._fh: IO[str] | None = None
        if events_path is not None:
            events_path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = events_path.open("a", encoding="utf-8", buffering=_BUFFER)
        self._closed = False
        self._flush_due = False  # a timed flush is scheduled
        self.write_error: str | None = None  # why events.jsonl is no longer written (None: it is)

    def publish(self, ev: RunEvent) -> None:
        if self._closed:
            return
        for q in self._queues:
            q.put_nowait(ev)
        if self._fh is not None and not isinstance(ev, LogLinesEvent):
            try:
                # a secret a node printed is masked (audit #11)
                self._fh.write(mask_secrets(_ENCODER.encode(plain_event(ev))) + "\n")
                if not isinstance(ev, NodeLogEvent):
                    self._fh.flush()
                elif not self._flush_due:
                    self._schedule_flush()
            except OSError as exc:
                self._failed(exc)

    def flush(self) -> None:
        """Writes what is buffered now (never raises; a failure is recorded in write_error)."""
        self._flush_due = False
        if self._fh is not None:
            try:
                self._fh.flush()
            except OSError as exc:
                self._failed(exc)

    def _schedule_flush(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()  # no loop to come back: write it now
            return
        self._flush_due = True
        loop.call_later(FLUSH_S, self.flush)

    def _failed(self, exc: OSError) -> None:
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
        self.flush()  # the buffered log events; a failure here is recorded like any other
        self._drop_file()


_END = object()
_ENCODER = json.JSONEncoder(default=str, allow_nan=True)  # json.dumps builds one per call with options
_SCALARS = frozenset({str, int, float, bool, type(None)})
_KINDS: dict[type, tuple[str, ...] | str] = {}  # type -> its dataclass field names, "list", "dict", "leaf"


def plain_event(ev: RunEvent) -> dict[str, Any]:
    """``events.event_to_dict(ev)`` without its deep copies: the same JSON, several times faster."""
    d: dict[str, Any] = _plain(ev)
    d["type"] = type(ev).__name__
    return d


def _kind(v: Any) -> tuple[str, ...] | str:
    if is_dataclass(v) and not isinstance(v, type):
        k: tuple[str, ...] | str = tuple(f.name for f in fields(v))
    elif isinstance(v, list | tuple):
        k = "list"
    elif isinstance(v, dict):
        k = "dict"
    else:
        k = "leaf"  # enums (their value in JSON), anything else as default=str writes it
    _KINDS[type(v)] = k
    return k


def _plain(v: Any) -> Any:
    if type(v) in _SCALARS:
        return v
    k = _KINDS.get(type(v))
    if k is None:
        k = _kind(v)
    if isinstance(k, tuple):
        d = {}
        for name in k:
            x = getattr(v, name)
            d[name] = x if type(x) in _SCALARS else _plain(x)
        return d
    if k == "list":
        return [_plain(x) for x in v]
    if k == "dict":
        return {key: _plain(x) for key, x in v.items()}
    return v
