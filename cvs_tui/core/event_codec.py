"""The JSON form of the events (:mod:`cvs_tui.core.events`): :func:`event_to_dict` writes it (events.jsonl;
``core.bus`` has a faster twin of it), :func:`event_from_dict` reads it back (``cvs-tui attach``)."""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from typing import Any

from cvs_tui.core.events import LogEvent, RunEvent


def event_to_dict(ev: Any) -> dict[str, Any]:
    """Plain-JSON form of any event (enums as their values), tagged with its type name."""
    from dataclasses import asdict

    d = asdict(ev)
    d["type"] = type(ev).__name__
    return d


_RUN_EVENT_TYPES: dict[str, type] = {t.__name__: t for t in typing.get_args(RunEvent)}
_LOG_EVENT_TYPES: dict[str, type] = {t.__name__: t for t in typing.get_args(LogEvent)}
# Nested log events in events.jsonl may lack their own ``type`` tag; their field names identify them.
_LOG_EVENT_BY_FIELDS: dict[frozenset[str], type] = {
    frozenset(f.name for f in dataclasses.fields(t)): t for t in _LOG_EVENT_TYPES.values()
}


class EventDecodeError(ValueError):
    """A line of events.jsonl that does not decode to an event of this version."""


def _convert(value: Any, hint: Any) -> Any:
    """Turn a JSON value back into the annotated field type (enums, tuples, nested log events)."""
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if all(a in _LOG_EVENT_TYPES.values() for a in args):
            return log_event_from_dict(value)
        for arg in args:
            try:
                return _convert(value, arg)
            except (TypeError, ValueError):
                continue
        return value
    if origin is tuple:
        items = typing.get_args(hint)
        inner = items[0] if items else Any
        return tuple(_convert(v, inner) for v in value)
    if origin is dict or hint in (Any, str, int, bool):
        return value
    if hint is float:
        return float(value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint) and isinstance(value, dict):
        return _build(hint, value)  # GpuSample inside GpuTelemetryEvent
    return value


@functools.cache
def _field_hints(cls: type) -> tuple[tuple[str, Any], ...]:
    """(name, type) of each field of an event class. Resolved once per class: get_type_hints evaluates
    every string annotation again on each call, which made decoding a step event cost ~0.2 ms (AT02)."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls))


def _build(cls: type, data: dict[str, Any]) -> Any:
    kwargs = {}
    for name, hint in _field_hints(cls):
        if name in data:
            kwargs[name] = _convert(data[name], hint)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise EventDecodeError(f"{cls.__name__}: {exc}") from exc


def log_event_from_dict(data: dict[str, Any]) -> Any:
    tag = data.get("type")
    cls = _LOG_EVENT_TYPES.get(tag) if isinstance(tag, str) else None
    if cls is None:
        cls = _LOG_EVENT_BY_FIELDS.get(frozenset(k for k in data if k != "type"))
    if cls is None:
        raise EventDecodeError(f"unknown log event with fields {sorted(data)}")
    return _build(cls, data)


def event_from_dict(data: dict[str, Any]) -> RunEvent:
    """The inverse of ``event_to_dict`` for run events (``type`` names the class)."""
    tag = data.get("type")
    cls = _RUN_EVENT_TYPES.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise EventDecodeError(f"unknown event type {tag!r}")
    return typing.cast(RunEvent, _build(cls, data))


__all__ = ["EventDecodeError", "event_from_dict", "event_to_dict", "log_event_from_dict"]
