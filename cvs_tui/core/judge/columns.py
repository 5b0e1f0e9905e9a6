"""A node's step records as columns: what ``analyze`` holds of a long log while it digests it.

A parsed step line is a :class:`~cvs_tui.core.events.StepEvent` of about 400 bytes; the judge reads nine
of its fields. :class:`StepCollector` takes the parser's events a chunk at a time and keeps those fields
in typed arrays (70 bytes a step record), the other events (checkpoints, evals, errors, ...) as they
are with the number of step records before each, and the two step events the run's outcome and
environment read whole. :class:`StepColumns` is the result, read with numpy.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING

from cvs_tui.core.events import LogEvent, StepEvent, StepKind

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

TRAIN, RAMPUP, PROFILER = 0, 1, 2  # the ``kind`` codes
KINDS = (StepKind.TRAIN, StepKind.RAMPUP, StepKind.PROFILER)
_CODE = {k: i for i, k in enumerate(KINDS)}
# (field, array type code): the optional ones are float columns with NaN for None and a mask
_INTS = ("step", "line")
_FLOATS = ("loss",)
_OPTIONAL = ("seconds", "tflops_per_device", "tokens_per_device", "total_weights", "timestamp")


@dataclass(slots=True)
class StepColumns:
    """Every step record of a node log, in log order (index = record). Optional fields: NaN where the
    record has none, and ``has_*`` tells None from a logged NaN."""

    step: npt.NDArray[np.int64]
    line: npt.NDArray[np.int64]
    loss: npt.NDArray[np.float64]
    kind: npt.NDArray[np.int8]
    seconds: npt.NDArray[np.float64]
    has_seconds: npt.NDArray[np.bool_]
    tflops: npt.NDArray[np.float64]
    has_tflops: npt.NDArray[np.bool_]
    tokens: npt.NDArray[np.float64]
    has_tokens: npt.NDArray[np.bool_]
    weights: npt.NDArray[np.float64]
    has_weights: npt.NDArray[np.bool_]
    timestamp: npt.NDArray[np.float64]  # NaN: None

    def __len__(self) -> int:
        return len(self.step)

    def event(self, i: int) -> StepEvent:
        """Record ``i`` as a StepEvent with the fields the judge reads (not its extras or source)."""

        def opt(col: npt.NDArray[np.float64], has: npt.NDArray[np.bool_]) -> float | None:
            return float(col[i]) if has[i] else None

        ts = float(self.timestamp[i])
        return StepEvent(
            step=int(self.step[i]),
            loss=float(self.loss[i]),
            line=int(self.line[i]),
            kind=KINDS[int(self.kind[i])],
            seconds=opt(self.seconds, self.has_seconds),
            tflops_per_device=opt(self.tflops, self.has_tflops),
            tokens_per_device=opt(self.tokens, self.has_tokens),
            total_weights=opt(self.weights, self.has_weights),
            timestamp=None if ts != ts else ts,
        )


@dataclass(slots=True)
class Collected:
    """What :class:`StepCollector` kept of one node log."""

    columns: StepColumns
    others: list[tuple[int, LogEvent]]  # (step records before it, event): every event but step lines
    kept: list[tuple[int, StepEvent]]  # (record, event): the first sourced one and the first highest

    def slim_events(self) -> list[LogEvent]:
        """The events without their step lines but ``kept``, in log order (see digest.slim_events)."""
        keyed: list[tuple[int, int, LogEvent]] = [(pos, 0, e) for pos, e in self.others]
        keyed += [(i, 1, e) for i, e in dict(self.kept).items()]
        keyed.sort(key=lambda k: (k[0], k[1]))
        return [e for _, _, e in keyed]


class StepCollector:
    """Feed it a node log's events in order (``add``), then take the columns (``finish``)."""

    def __init__(self) -> None:
        self._ints = {f: array("q") for f in _INTS}
        self._floats = {f: array("d") for f in (*_FLOATS, *_OPTIONAL)}
        self._has = {f: bytearray() for f in _OPTIONAL}
        self._kind = bytearray()
        self._n = 0
        self.others: list[tuple[int, LogEvent]] = []
        self._sourced: tuple[int, StepEvent] | None = None
        self._top: tuple[int, StepEvent] | None = None

    def add(self, events: Sequence[LogEvent]) -> None:
        import numpy as np

        steps = [e for e in events if type(e) is StepEvent]
        if len(steps) != len(events):
            seen = 0
            for e in events:
                if type(e) is StepEvent:
                    seen += 1
                else:
                    self.others.append((self._n + seen, e))
        if not steps:
            return
        nums = list(map(attrgetter("step"), steps))
        self._ints["step"].extend(nums)
        self._ints["line"].extend(map(attrgetter("line"), steps))
        for f in _FLOATS:
            self._floats[f].extend(map(attrgetter(f), steps))
        for f in _OPTIONAL:
            raw = list(map(attrgetter(f), steps))
            col = np.array(raw, dtype=np.float64)  # None -> NaN
            has = np.ones(len(raw), dtype=np.bool_)
            gaps = np.flatnonzero(np.isnan(col))
            if len(gaps):
                has[gaps] = [raw[i] is not None for i in gaps.tolist()]
            self._floats[f].frombytes(col.tobytes())
            self._has[f] += has.tobytes()
        self._kind += bytes(map(_CODE.__getitem__, map(attrgetter("kind"), steps)))
        if self._sourced is None:
            i = next((i for i, e in enumerate(steps) if e.source), None)
            if i is not None:
                self._sourced = (self._n + i, steps[i])
        top = nums.index(max(nums))  # the first of the highest
        if self._top is None or steps[top].step > self._top[1].step:
            self._top = (self._n + top, steps[top])
        self._n += len(steps)

    def finish(self) -> Collected:
        import numpy as np

        def f64(name: str) -> npt.NDArray[np.float64]:
            a = self._floats[name]
            return np.frombuffer(a, dtype=np.float64) if len(a) else np.zeros(0, np.float64)

        def i64(name: str) -> npt.NDArray[np.int64]:
            a = self._ints[name]
            return np.frombuffer(a, dtype=np.int64) if len(a) else np.zeros(0, np.int64)

        def has(name: str) -> npt.NDArray[np.bool_]:
            return np.frombuffer(self._has[name], dtype=np.bool_)

        cols = StepColumns(
            step=i64("step"),
            line=i64("line"),
            loss=f64("loss"),  # a view of the collector's array: writable (the metrics file may refine it)
            kind=np.frombuffer(self._kind, dtype=np.int8),
            seconds=f64("seconds"),
            has_seconds=has("seconds"),
            tflops=f64("tflops_per_device"),
            has_tflops=has("tflops_per_device"),
            tokens=f64("tokens_per_device"),
            has_tokens=has("tokens_per_device"),
            weights=f64("total_weights"),
            has_weights=has("total_weights"),
            timestamp=f64("timestamp"),
        )
        kept = [k for k in (self._sourced, self._top) if k is not None]
        kept.sort(key=lambda k: k[0])
        return Collected(cols, self.others, kept)


def collect(events: Iterable[LogEvent]) -> Collected:
    """The columns of a node's events held in memory."""
    c = StepCollector()
    c.add(list(events))
    return c.finish()


__all__ = ["KINDS", "PROFILER", "RAMPUP", "TRAIN", "Collected", "StepCollector", "StepColumns", "collect"]
