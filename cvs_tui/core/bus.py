"""The event bus: the runner publishes, front-ends subscribe, and the run folder keeps a copy.

Every published event goes to each subscriber's queue and, except raw log lines (the node logs on disk
already hold them), to ``events.jsonl`` in the run folder, where `cvs-tui attach` reads it back.

Publishing never raises: when ``events.jsonl`` cannot be written (a full disk), the bus stops writing
it, keeps delivering to subscribers and says why in :attr:`EventBus.write_error`; the suite then stops
the run as failed. Size: about 350 bytes per logged step per node (every parsed event is one line),
plus the node states and verdicts; benign warning hits past a cap per node are counted, not published
(see ``runner/execute.py``), so a log that repeats one warning does not grow it without bound.

Encoding is the bus's main cost per line at hundreds of nodes: the parsed step of a log line (nearly
every event) has its own encoder, :func:`encode_event`'s fast path, which writes exactly the text the
general one writes (tests/watch_sources/test_bus.py checks every event type) in a third of the time.

Writes are batched: the parsed log events (the bulk, one per step per node) are buffered and written
at most ``FLUSH_S`` seconds later, in one write; every other event (stage, node state, run end,
verdict) is written at once, with whatever was buffered before it, so the file keeps publish order
and a stage's end is on disk when it is published. :meth:`EventBus.close` writes the rest.
"""

from __future__ import annotations

import asyncio
import errno
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import fields, is_dataclass
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import IO, Any

from cvs_tui.core.events import LogLinesEvent, NodeLogEvent, RunEvent, StepEvent
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
                self._fh.write(mask_secrets(encode_event(ev)) + "\n")
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

    def backlog(self) -> int:
        """Events the slowest subscriber has not read yet (a publisher that can wait waits past a bound)."""
        return max((q.qsize() for q in self._queues), default=0)

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


def encode_event(ev: RunEvent) -> str:
    """The events.jsonl line of ``ev`` (no newline): ``json.dumps(event_to_dict(ev), default=str,
    allow_nan=True)``, the parsed steps of log lines by a fast path that writes the same text (in C
    where the extension is built, ``core/_eventjson.c``, else :func:`_encode_step`)."""
    if type(ev) is NodeLogEvent and type(ev.event) is StepEvent:
        if _native_step is not None and type(ev.run) is str and type(ev.node) is int:
            head = _HEADS.get((ev.run, ev.node))
            if head is None:
                head = _head(ev.run, ev.node)
            line = _native_step(head, ev.event)
            if line is not None:
                return line
        else:
            try:
                return _encode_step(ev, ev.event)
            except _NotFlat:
                pass
        # a value of another type than the parser makes: the general encoder decides
    return _ENCODER.encode(plain_event(ev))


def _head(run: str, node: int) -> str:
    """The start of a node's step lines, up to the step number (kept for the run's nodes)."""
    head = f'{{"run": {_str(run)}, "node": {_int_repr(node)}, "event": {{"step": '
    if len(_HEADS) < 65536:
        _HEADS[(run, node)] = head
    return head


class _NotFlat(Exception):
    """A value the fast path does not write (it leaves the event to the general encoder)."""


_str: Any = encode_basestring_ascii  # the JSON encoder's own string writer (ensure_ascii)
_float_repr, _int_repr = float.__repr__, int.__repr__
_HEADS: dict[tuple[str, int], str] = {}  # (run, node) -> the start of its step lines
try:
    from cvs_tui.core import _eventjson

    _eventjson.configure(encode_basestring_ascii)
    _native_step: Callable[[str, StepEvent], str | None] | None = _eventjson.encode_step
except ImportError:  # a checkout without the built extension: the Python fast path
    _native_step = None


def _num(x: object) -> str:
    """A float, int or None as the JSON encoder writes it (allow_nan: NaN, Infinity, -Infinity)."""
    if type(x) is float:
        if x - x == 0.0:  # finite
            return _float_repr(x)
        return "NaN" if x != x else ("Infinity" if x > 0 else "-Infinity")
    if x is None:
        return "null"
    if type(x) is int:  # exactly int: a bool (true/false) is the general encoder's
        return _int_repr(x)
    raise _NotFlat


def _text(x: object) -> str:
    if type(x) is str or isinstance(x, str):  # str, or a StrEnum (the encoder writes its value)
        return _str(x)
    if x is None:
        return "null"
    raise _NotFlat


def _extras(extras: object) -> str:
    if type(extras) is not dict:
        raise _NotFlat
    if not extras:
        return "{}"
    parts = []
    for k, v in extras.items():
        if type(k) is not str:
            raise _NotFlat
        parts.append(f"{_str(k)}: {_num(v)}")
    return "{" + ", ".join(parts) + "}"


def _encode_step(ev: NodeLogEvent, e: StepEvent) -> str:
    # the field order of NodeLogEvent, StepEvent (a changed dataclass fails tests/watch_sources/test_bus.py)
    return (
        f'{{"run": {_text(ev.run)}, "node": {_num(ev.node)}, "event": {{"step": {_num(e.step)}, '
        f'"loss": {_num(e.loss)}, "line": {_num(e.line)}, "kind": {_text(e.kind)}, '
        f'"seconds": {_num(e.seconds)}, "tflops_per_device": {_num(e.tflops_per_device)}, '
        f'"tokens_per_device": {_num(e.tokens_per_device)}, "total_weights": {_num(e.total_weights)}, '
        f'"live_slices": {_num(e.live_slices)}, "extras": {_extras(e.extras)}, '
        f'"timestamp": {_num(e.timestamp)}, "source": {_text(e.source)}}}, "type": "NodeLogEvent"}}'
    )


def plain_event(ev: RunEvent) -> dict[str, Any]:
    """``event_codec.event_to_dict(ev)`` without its deep copies: the same JSON, several times faster."""
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
