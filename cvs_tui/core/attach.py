"""Read a run folder back into run events: ``events.jsonl`` decoded, node logs tailed as raw lines.

This is how ``cvs-tui attach`` follows a run another process is executing: it only reads the folder
(never writes, never signals), so opening and closing a view cannot disturb the run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import re
import types
import typing
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cvs_tui.core import events as ev_mod
from cvs_tui.core.errors import UserError
from cvs_tui.core.events import LogLinesEvent, RunEndEvent, RunEvent, RunStartEvent, SuiteEndEvent

POLL_SECONDS = 0.25
TAIL_START_BYTES = 4 * 1024 * 1024  # on attach, a long log is read from this far before its end
MAX_LINES_PER_EVENT = 2000
READ_CHUNK = 1024 * 1024

_RUN_EVENT_TYPES: dict[str, type] = {t.__name__: t for t in typing.get_args(ev_mod.RunEvent)}
_LOG_EVENT_TYPES: dict[str, type] = {t.__name__: t for t in typing.get_args(ev_mod.LogEvent)}
# Nested log events in events.jsonl may lack their own ``type`` tag; their field names identify them.
_LOG_EVENT_BY_FIELDS: dict[frozenset[str], type] = {
    frozenset(f.name for f in dataclasses.fields(t)): t for t in _LOG_EVENT_TYPES.values()
}


class EventDecodeError(ValueError):
    pass


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
        args = typing.get_args(hint)
        inner = args[0] if args else Any
        return tuple(_convert(v, inner) for v in value)
    if origin is dict or hint in (Any, str, int, bool):
        return value
    if hint is float:
        return float(value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    return value


def _build(cls: type, data: dict[str, Any]) -> Any:
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            kwargs[f.name] = _convert(data[f.name], hints[f.name])
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


def run_slug(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", key).strip("_")


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
class _FolderState:
    offset: int = 0
    partial: bytes = b""
    tails: dict[tuple[str, int], _LogTail] = field(default_factory=dict)
    lines_in_events: set[tuple[str, int]] = field(default_factory=set)
    ended_runs: set[str] = field(default_factory=set)
    suite_ended: bool = False


def check_run_dir(run_dir: Path) -> Path:
    """The events file of a run folder, or a UserError saying what is wrong."""
    if not run_dir.is_dir():
        raise UserError([f"{run_dir}: not a directory; give the run folder (the one holding events.jsonl)"])
    events = run_dir / "events.jsonl"
    if not events.is_file():
        raise UserError(
            [f"{events}: not found; is {run_dir} a cvs-tui run folder (made by a run or analyze --out)?"]
        )
    return events


def _read_events(path: Path, state: _FolderState) -> list[RunEvent]:
    with path.open("rb") as fh:
        fh.seek(state.offset)
        data = fh.read()
    state.offset += len(data)
    data = state.partial + data
    cut = data.rfind(b"\n")
    if cut < 0:
        state.partial = data
        return []
    state.partial = data[cut + 1 :]
    out: list[RunEvent] = []
    for raw in data[:cut].split(b"\n"):
        if not raw.strip():
            continue
        try:
            out.append(event_from_dict(json.loads(raw)))
        except (json.JSONDecodeError, EventDecodeError):
            # A line this version does not understand (newer writer) is skipped, not fatal.
            continue
    return out


async def follow_run_folder(
    run_dir: Path, *, follow: bool = True, poll_seconds: float = POLL_SECONDS
) -> AsyncIterator[RunEvent]:
    """Events of a run folder, then its new events and node-log lines as they are written.

    Ends after the suite's end event (and a last read of the logs), or at the end of what is there when
    ``follow`` is false.
    """
    events_path = check_run_dir(run_dir)
    state = _FolderState()
    slugs = plan_slugs(run_dir)
    while True:
        new_events = await asyncio.to_thread(_read_events, events_path, state)
        for ev in new_events:
            if isinstance(ev, LogLinesEvent):
                state.lines_in_events.add((ev.run, ev.node))
            elif isinstance(ev, RunStartEvent):
                for rank in range(len(ev.nodes)):
                    key = (ev.run, rank)
                    if key not in state.tails:
                        slug = slugs.get(ev.run) or run_slug(ev.run)
                        path = run_dir / "logs" / slug / f"node{rank}.log"
                        state.tails[key] = _LogTail(path, ev.run, rank)
            elif isinstance(ev, RunEndEvent):
                state.ended_runs.add(ev.run)
            elif isinstance(ev, SuiteEndEvent):
                state.suite_ended = True
            yield ev
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


def _load_plan(run_dir: Path) -> dict[str, Any]:
    try:
        plan = json.loads((run_dir / "plan.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return plan if isinstance(plan, dict) else {}


def plan_slugs(run_dir: Path) -> dict[str, str]:
    """Run key -> log directory name, as the run's plan.json lists them."""
    runs = _load_plan(run_dir).get("runs")
    if not isinstance(runs, list):
        return {}
    return {
        str(r["key"]): str(r["slug"])
        for r in runs
        if isinstance(r, dict) and isinstance(r.get("key"), str) and isinstance(r.get("slug"), str)
    }


def read_plan_info(run_dir: Path) -> dict[str, str]:
    """Header fields (config, model, mode, gpu) from the run folder's plan.json, when there is one."""
    plan = _load_plan(run_dir)
    info: dict[str, str] = {}
    if isinstance(plan.get("config_path"), str):
        info["config"] = Path(plan["config_path"]).name
    if isinstance(plan.get("model_label"), str) and plan["model_label"]:
        info["model"] = plan["model_label"]
    if isinstance(plan.get("mode"), str):
        nodes = plan.get("nodes")
        count = f" ({len(nodes)} nodes)" if isinstance(nodes, list) and nodes else ""
        info["mode"] = plan["mode"] + count
    if isinstance(plan.get("gpu_name"), str) and plan["gpu_name"]:
        per_node = plan.get("gpus_per_node")
        info["gpu"] = plan["gpu_name"] + (f" x{per_node}" if isinstance(per_node, int) else "")
    return info
