"""A node's step records as columns: what ``analyze`` holds of a long log while it digests it.

A parsed step line is a :class:`~cvs_tui.core.events.StepEvent` of about 400 bytes; the judge reads nine
of its fields. :class:`StepCollector` takes the parser's events a chunk at a time and keeps those fields
as columns (70 bytes a step record; in memory up to ``KEEP_IN_MEMORY`` records, then in files,
``judge.spill``), the other events (checkpoints, evals, errors, ...) as they are with the number of step
records before each, and the two step events the run's outcome and environment read whole.
:class:`StepTable` is the result, read a chunk at a time (``judge.stream.StreamLog``); :class:`StepColumns`
turns the records a rule names back into StepEvents (the node record's bounded series).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cvs_tui.core.events import (
    CheckpointAction,
    CheckpointEvent,
    DevicesEvent,
    LogEvent,
    MemoryEstimateEvent,
    ParamsEvent,
    StepEvent,
    StepKind,
    SystemInfoEvent,
    TflopsPerStepEvent,
)
from cvs_tui.core.judge.spill import ColumnFiles

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

TRAIN, RAMPUP, PROFILER = 0, 1, 2  # the ``kind`` codes
KINDS = (StepKind.TRAIN, StepKind.RAMPUP, StepKind.PROFILER)
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
    "has_loss": "?",
}
# the optional fields' columns, in the scanner's order: NaN for None and a ``has_*`` mask (timestamp: NaN;
# the loss's mask comes last)
_SPILL_OPTIONAL = ("seconds", "tflops", "tokens", "weights", "timestamp")


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
    has_loss: npt.NDArray[np.bool_]  # False: the step line has no loss (``loss`` is NaN there)

    def __len__(self) -> int:
        return len(self.step)

    def event(self, i: int) -> StepEvent:
        """Record ``i`` as a StepEvent with the fields the judge reads (not its extras or source)."""

        def opt(col: npt.NDArray[np.float64], has: npt.NDArray[np.bool_]) -> float | None:
            return float(col[i]) if has[i] else None

        ts = float(self.timestamp[i])
        return StepEvent(
            step=int(self.step[i]),
            loss=opt(self.loss, self.has_loss),
            line=int(self.line[i]),
            kind=KINDS[int(self.kind[i])],
            seconds=opt(self.seconds, self.has_seconds),
            tflops_per_device=opt(self.tflops, self.has_tflops),
            tokens_per_device=opt(self.tokens, self.has_tokens),
            total_weights=opt(self.weights, self.has_weights),
            timestamp=None if ts != ts else ts,
        )


def _slim(others: list[tuple[int, LogEvent]], kept: list[tuple[int, StepEvent]]) -> list[LogEvent]:
    keyed: list[tuple[int, int, LogEvent]] = [(pos, 0, e) for pos, e in others]
    keyed += [(i, 1, e) for i, e in dict(kept).items()]
    keyed.sort(key=lambda k: (k[0], k[1]))
    return [e for _, _, e in keyed]


@dataclass(slots=True)
class StepTable:
    """One node log's step records as columns (``files``: in memory up to a size, then in files, see
    ``spill``), its other events with the number of step records before each, and the step events kept
    whole. ``ascending`` when every step record's number is higher than the one before (every real log:
    the judge reads a step by its first or last record without a :class:`StepIndex`)."""

    files: ColumnFiles
    others: list[tuple[int, LogEvent]]
    kept: list[tuple[int, StepEvent]]
    ascending: bool

    def slim_events(self) -> list[LogEvent]:
        return _slim(self.others, self.kept)


def _event_index(others: list[int], j: int) -> int:
    """The index in its batch of step record ``j`` of the batch, ``others`` the other events' indexes."""
    i = j
    for o in others:  # ascending: each other event at or before it moves it one on
        if o > i:
            break
        i += 1
    return i


# step records a collector holds in memory before its columns move to files (about 70 bytes each)
KEEP_IN_MEMORY = 1 << 14

# Start-up facts a restarted process logs again, the same each time; the judge reads only the first of
# each (the environment, the device count, TFLOPs per step, the backend), so a repeat of one already
# kept is dropped: a log that restarts at step 0 a hundred thousand times holds each fact once (audit 3
# L18, RB01: 925 MB against 185 MB for as long a log without restarts).
_FACTS = (SystemInfoEvent, DevicesEvent, ParamsEvent, MemoryEstimateEvent, TflopsPerStepEvent)
_STATE_ACTIONS = (CheckpointAction.DISABLED, CheckpointAction.NO_CHECKPOINT)


def fact_key(e: LogEvent) -> tuple[Any, ...] | None:
    """What a start-up fact says (its line left out), or None for an event that is no such fact."""
    if isinstance(e, _FACTS) or (isinstance(e, CheckpointEvent) and e.action in _STATE_ACTIONS):
        return (type(e), *(getattr(e, f) for f in type(e).__slots__ if f != "line"))
    return None


class StepCollector:
    """Feed it a node log's events in order (``add``), then take the step table (``table``). The fields are
    read off the step events by the byte scanner (``step_columns`` of the C module or of its twin
    ``_pyscan``); ``native`` as for ``NodeLogParser``. The columns are held in memory up to ``keep``
    records (default KEEP_IN_MEMORY), then in files in ``spill`` (None: a new temporary folder, removed
    by :meth:`discard`).
    ``refine``: full-precision train losses by step (MaxText's metrics file): a train record's finite loss
    takes it where the two agree to the log's 3 decimals (:func:`refined_losses`), batch by batch."""

    def __init__(
        self,
        native: bool | None = None,
        spill: Path | None = None,
        keep: int | None = None,
        refine: Mapping[int, float] | None = None,
    ) -> None:
        import tempfile
        import uuid

        from cvs_tui.core.parse import accel

        self._scan = accel.select(native).step_columns
        self._own = spill is None
        folder = spill or Path(tempfile.gettempdir()) / f"cvs-tui-steps-{uuid.uuid4().hex}"
        self._files = ColumnFiles(folder, SPILL_COLUMNS, keep=KEEP_IN_MEMORY if keep is None else keep)
        self._ascending = True
        self._last = 0
        self._n = 0
        self.others: list[tuple[int, LogEvent]] = []
        self._facts: set[tuple[Any, ...]] = set()
        self._sourced: tuple[int, StepEvent] | None = None
        self._top: tuple[int, StepEvent] | None = None
        self._refine = None
        if refine:
            import numpy as np

            keys = np.fromiter(refine, np.int64, len(refine))
            order = np.argsort(keys)
            self._refine = (keys[order], np.fromiter(refine.values(), np.float64, len(refine))[order])

    def _step(self, batch: list[LogEvent], others: list[int], j: int) -> tuple[int, StepEvent]:
        e = batch[_event_index(others, j)]
        assert isinstance(e, StepEvent)
        return self._n + j, e

    def add(self, events: Sequence[LogEvent]) -> None:
        import numpy as np

        batch = events if isinstance(events, list) else list(events)
        cols, others, sourced = self._scan(batch, KINDS)
        # k other events come before event i: i - k step records; a repeated start-up fact is dropped
        for k, i in enumerate(others):
            e = batch[i]
            key = fact_key(e)
            if key is not None:
                if key in self._facts:
                    continue
                self._facts.add(key)
            self.others.append((self._n + i - k, e))
        m = len(cols[0]) // 8
        if not m:
            return
        nums = np.frombuffer(cols[0], dtype=np.int64)
        if self._ascending:
            rises = (self._n == 0 or int(nums[0]) > self._last) and bool((np.diff(nums) > 0).all())
            self._ascending = rises
            self._last = int(nums[-1])
        put = self._files.append
        if self._refine is not None:
            loss = refined_losses(
                nums, np.frombuffer(cols[3], np.int8), np.frombuffer(cols[2]), *self._refine
            )
            cols = (cols[0], cols[1], loss.tobytes(), *cols[3:])
        for k, name in enumerate(("step", "line", "loss", "kind")):
            put(name, cols[k])
        for k, name in enumerate(_SPILL_OPTIONAL):
            put(name, cols[4 + 2 * k])
            if name != "timestamp":
                put("has_" + name, cols[5 + 2 * k])
        put("has_loss", cols[-1])  # the scanner's last column
        if self._sourced is None and sourced >= 0:
            self._sourced = self._step(batch, others, sourced)
        top = int(np.argmax(nums))  # the first of the highest
        if self._top is None or int(nums[top]) > self._top[1].step:
            self._top = self._step(batch, others, top)
        self._n += m

    def _kept(self) -> list[tuple[int, StepEvent]]:
        kept = [k for k in (self._sourced, self._top) if k is not None]
        kept.sort(key=lambda k: k[0])
        if self._refine is not None:
            kept = [(i, self._refined(e)) for i, e in kept]
        return kept

    def _refined(self, e: StepEvent) -> StepEvent:
        import dataclasses

        import numpy as np

        assert self._refine is not None
        if e.loss is None:
            return e
        one = refined_losses(
            np.array([e.step], np.int64),
            np.array([KINDS.index(e.kind)], np.int8),
            np.array([e.loss], np.float64),
            *self._refine,
        )
        x = float(one[0])
        return e if x == e.loss or (x != x and e.loss != e.loss) else dataclasses.replace(e, loss=x)

    @property
    def files(self) -> ColumnFiles:
        """The step columns."""
        return self._files

    def table(self) -> StepTable:
        """What was collected so far."""
        return StepTable(self._files, self.others, self._kept(), self._ascending)

    def discard(self) -> None:
        """Close the columns; remove their folder when the collector made it."""
        import shutil

        self._files.close()
        if self._own and self._files.folder is not None:
            shutil.rmtree(self._files.folder, ignore_errors=True)


# a 3-decimal log loss and the full-precision value agree within half a unit of the last digit
PRINTED_HALF_UNIT = 5e-4 + 1e-9


def refined_losses(
    step: npt.NDArray[np.int64],
    kind: npt.NDArray[np.int8],
    loss: npt.NDArray[np.float64],
    keys: npt.NDArray[np.int64],
    vals: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """The records' losses, a train record's finite loss replaced by the full-precision one of its step
    (``keys`` ascending, ``vals`` theirs) where the two agree within PRINTED_HALF_UNIT; a step whose
    values disagree keeps the logged loss (the files are not of the same run). NaN/Inf stay as logged."""
    import numpy as np

    if not len(keys) or not len(step):
        return loss
    at = np.minimum(np.searchsorted(keys, step), len(keys) - 1)
    exact = vals[at]
    with np.errstate(invalid="ignore"):
        swap = (
            (kind == TRAIN)
            & np.isfinite(loss)
            & (keys[at] == step)
            & (np.abs(exact - loss) <= PRINTED_HALF_UNIT)
        )
    return np.where(swap, exact, loss)


__all__ = [
    "KEEP_IN_MEMORY",
    "KINDS",
    "PRINTED_HALF_UNIT",
    "PROFILER",
    "RAMPUP",
    "SPILL_COLUMNS",
    "TRAIN",
    "StepCollector",
    "StepColumns",
    "StepTable",
    "refined_losses",
]
