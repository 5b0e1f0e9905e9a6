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
from pathlib import Path
from typing import TYPE_CHECKING

from cvs_tui.core.events import LogEvent, StepEvent, StepKind
from cvs_tui.core.judge.spill import ColumnFiles

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

TRAIN, RAMPUP, PROFILER = 0, 1, 2  # the ``kind`` codes
KINDS = (StepKind.TRAIN, StepKind.RAMPUP, StepKind.PROFILER)
# (field, array type code): the optional ones are float columns with NaN for None and a mask
_INTS = ("step", "line")
_FLOATS = ("loss",)
_OPTIONAL = ("seconds", "tflops_per_device", "tokens_per_device", "total_weights", "timestamp")
# the same columns in files (judge.spill), by StepColumns field name; ``has_*``: the field was logged
SPILL_COLUMNS = {
    "step": "i8",
    "line": "i8",
    "loss": "f8",
    "kind": "i1",
    "seconds": "f8",
    "has_seconds": "?",
    "tflops": "f8",
    "has_tflops": "?",
    "tokens": "f8",
    "has_tokens": "?",
    "weights": "f8",
    "has_weights": "?",
    "timestamp": "f8",
}
_SPILL_OPTIONAL = ("seconds", "tflops", "tokens", "weights", "timestamp")  # _OPTIONAL's columns


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
        return _slim(self.others, self.kept)


def _slim(others: list[tuple[int, LogEvent]], kept: list[tuple[int, StepEvent]]) -> list[LogEvent]:
    keyed: list[tuple[int, int, LogEvent]] = [(pos, 0, e) for pos, e in others]
    keyed += [(i, 1, e) for i, e in dict(kept).items()]
    keyed.sort(key=lambda k: (k[0], k[1]))
    return [e for _, _, e in keyed]


@dataclass(slots=True)
class Spilled:
    """What :class:`StepCollector` kept of one node log with its columns in files (``spill``):
    ``ascending`` when every step record's number is higher than the one before (every real log; the
    judge then reads the files a chunk at a time, ``judge.column_stream``)."""

    files: ColumnFiles
    others: list[tuple[int, LogEvent]]
    kept: list[tuple[int, StepEvent]]
    ascending: bool

    def slim_events(self) -> list[LogEvent]:
        return _slim(self.others, self.kept)

    def load(self) -> Collected:
        """The columns read into memory (a log whose step numbers repeat or go back is judged so)."""
        import numpy as np

        f = self.files
        cols = StepColumns(**{k: f.load(k) for k in SPILL_COLUMNS})
        cols.loss = np.array(cols.loss)  # writable: the metrics file may refine it
        return Collected(cols, self.others, self.kept)


def _event_index(others: list[int], j: int) -> int:
    """The index in its batch of step record ``j`` of the batch, ``others`` the other events' indexes."""
    i = j
    for o in others:  # ascending: each other event at or before it moves it one on
        if o > i:
            break
        i += 1
    return i


class StepCollector:
    """Feed it a node log's events in order (``add``), then take the columns (``finish``). The fields are
    read off the step events by the byte scanner (``step_columns`` of the C module or of its twin
    ``_pyscan``); ``native`` as for ``NodeLogParser``."""

    def __init__(self, native: bool | None = None, spill: Path | None = None) -> None:
        from cvs_tui.core.parse import accel

        self._scan = accel.select(native).step_columns
        self._files = ColumnFiles(spill, SPILL_COLUMNS) if spill is not None else None
        self._ascending = True
        self._last = 0
        self._ints = {f: array("q") for f in _INTS}
        self._floats = {f: array("d") for f in (*_FLOATS, *_OPTIONAL)}
        self._has = {f: bytearray() for f in _OPTIONAL[:-1]}  # timestamp: NaN is None
        self._kind = bytearray()
        self._n = 0
        self.others: list[tuple[int, LogEvent]] = []
        self._sourced: tuple[int, StepEvent] | None = None
        self._top: tuple[int, StepEvent] | None = None

    def _step(self, batch: list[LogEvent], others: list[int], j: int) -> tuple[int, StepEvent]:
        e = batch[_event_index(others, j)]
        assert isinstance(e, StepEvent)
        return self._n + j, e

    def add(self, events: Sequence[LogEvent]) -> None:
        import numpy as np

        batch = events if isinstance(events, list) else list(events)
        cols, others, sourced = self._scan(batch, KINDS)
        # k other events come before event i: i - k step records
        self.others.extend((self._n + i - k, batch[i]) for k, i in enumerate(others))
        m = len(cols[0]) // 8
        if not m:
            return
        nums = np.frombuffer(cols[0], dtype=np.int64)
        if self._ascending:
            rises = (self._n == 0 or int(nums[0]) > self._last) and bool((np.diff(nums) > 0).all())
            self._ascending = rises
            self._last = int(nums[-1])
        if self._files is not None:
            put = self._files.append
            for k, name in enumerate(("step", "line", "loss", "kind")):
                put(name, cols[k])
            for k, name in enumerate(_SPILL_OPTIONAL):
                put(name, cols[4 + 2 * k])
                if name != "timestamp":
                    put("has_" + name, cols[5 + 2 * k])
        else:
            self._keep(cols)
        if self._sourced is None and sourced >= 0:
            self._sourced = self._step(batch, others, sourced)
        top = int(np.argmax(nums))  # the first of the highest
        if self._top is None or int(nums[top]) > self._top[1].step:
            self._top = self._step(batch, others, top)
        self._n += m

    def _keep(self, cols: tuple[bytes, ...]) -> None:
        self._ints["step"].frombytes(cols[0])
        self._ints["line"].frombytes(cols[1])
        self._floats["loss"].frombytes(cols[2])
        self._kind += cols[3]
        for k, f in enumerate(_OPTIONAL):
            self._floats[f].frombytes(cols[4 + 2 * k])
            if f in self._has:
                self._has[f] += cols[5 + 2 * k]

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
        return Collected(cols, self.others, self._kept())

    def _kept(self) -> list[tuple[int, StepEvent]]:
        kept = [k for k in (self._sourced, self._top) if k is not None]
        kept.sort(key=lambda k: k[0])
        return kept

    @property
    def files(self) -> ColumnFiles:
        """The column files (``spill``)."""
        if self._files is None:
            raise ValueError("this collector keeps its columns in memory")
        return self._files

    def spilled(self) -> Spilled:
        """The result when the columns went to files (``spill``)."""
        if self._files is None:
            raise ValueError("this collector keeps its columns in memory: use finish()")
        return Spilled(self._files, self.others, self._kept(), self._ascending)


_SUM_CHUNK = 1 << 16


def exact_sum(xs: npt.NDArray[np.float64]) -> float:
    """``sum(xs.tolist())`` (the live judge's ``sum`` of a list of floats, the same float on every Python
    version) without the list: one ``sum`` over the values a chunk at a time, so the temporary Python
    floats stay bounded whatever the length."""
    from itertools import chain

    chunks = (xs[i : i + _SUM_CHUNK].tolist() for i in range(0, len(xs), _SUM_CHUNK))
    total: float = sum(chain.from_iterable(chunks))
    return total


def collect(events: Iterable[LogEvent]) -> Collected:
    """The columns of a node's events held in memory."""
    c = StepCollector()
    c.add(list(events))
    return c.finish()


__all__ = [
    "KINDS",
    "PROFILER",
    "RAMPUP",
    "SPILL_COLUMNS",
    "TRAIN",
    "Collected",
    "Spilled",
    "StepCollector",
    "StepColumns",
    "collect",
    "exact_sum",
]
