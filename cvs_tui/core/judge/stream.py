"""A node's step table read a chunk at a time (:class:`StreamLog`): what every rule over the table
(``window``, ``stalls``, ``figures``, ``loss``, ``series``) reads, so no rule holds a node's steps. A log
whose step numbers repeat or go back gets a :class:`StepIndex`, so the rules read a step by its first
record or its last as they do in a rising log; the line clock (``judge.clock``) gives each record's time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import chain
from typing import TYPE_CHECKING, Any

from cvs_tui.core.events import StepEvent
from cvs_tui.core.judge import spill
from cvs_tui.core.judge.clock import LineClock
from cvs_tui.core.judge.spill import ColumnFiles, SpilledClock
from cvs_tui.core.judge.table import SPILL_COLUMNS, TRAIN, StepColumns, StepTable

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

Clock = LineClock | SpilledClock | None


Arrays = dict[str, "npt.NDArray[Any]"]


def clock_times(
    clock: Clock, lines: npt.NDArray[np.int64], ts: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """The clock time of each record's line, else its own timestamp (NaN: none), for records in log order
    (their lines ascending)."""

    if clock is None:
        return ts
    return clock.lookup(lines, ts)


def chunk_sum(lists: Iterator[list[float]]) -> float:
    """``sum`` of the values of every list in turn: the float ``sum`` of them in one list gives."""
    total: float = sum(chain.from_iterable(lists))
    return total


def each_chunk(files: ColumnFiles, *names: str) -> Iterator[Arrays]:
    for _, c in files.chunks(names, size=spill.CHUNK):
        yield c


class StepIndex:
    """Where a table's step numbers repeat or go back: for each step number ``lo + k`` the record of its
    last train record, of its last record and of its last record with a loss (-1: none), so the rules read
    a step by its first record (the window, the stalls) or its last (the figures, the losses) as they do in
    a rising log. Held in memory: 24 bytes per step number of the log's range, plus a one-byte seen-map
    per pass."""

    def __init__(self, log: StreamLog) -> None:
        import numpy as np

        lo, hi = None, None
        for _, c in log.chunks("step"):
            if len(c["step"]):
                a, b = int(c["step"].min()), int(c["step"].max())
                lo, hi = a if lo is None else min(lo, a), b if hi is None else max(hi, b)
        self.lo = lo or 0
        n = 0 if hi is None else hi - self.lo + 1
        self.last_train = np.full(n, -1, np.int64)
        self.last_any = np.full(n, -1, np.int64)
        self.last_loss = np.full(n, -1, np.int64)  # the last record with a loss
        for g, c in log.chunks("step", "kind", "has_loss"):
            at = c["step"] - self.lo
            idx = np.arange(g, g + len(at), dtype=np.int64)
            np.maximum.at(self.last_any, at, idx)
            tr = c["kind"] == TRAIN
            np.maximum.at(self.last_train, at[tr], idx[tr])
            hl = c["has_loss"]
            np.maximum.at(self.last_loss, at[hl], idx[hl])

    def seen(self) -> npt.NDArray[np.uint8]:
        import numpy as np

        return np.zeros(len(self.last_any), np.uint8)

    def firsts(
        self, seen: npt.NDArray[np.uint8], step: npt.NDArray[np.int64], mask: npt.NDArray[np.bool_]
    ) -> npt.NDArray[np.bool_]:
        """``mask`` less the records whose step number an earlier record of ``mask`` had (``seen``: the
        step numbers met so far in this pass, updated)."""
        import numpy as np

        cand = np.flatnonzero(mask)
        at = step[cand] - self.lo
        _, first = np.unique(at, return_index=True)
        keep = cand[first[seen[at[first]] == 0]]
        seen[step[keep] - self.lo] = 1
        out = np.zeros(len(mask), np.bool_)
        out[keep] = True
        return out


class StreamLog:
    """One node log's step table and its clock, read a chunk of ``spill.CHUNK`` at a time."""

    def __init__(self, s: StepTable, clock: Clock) -> None:
        self.s, self.files, self.clock = s, s.files, clock
        self.n = len(s.files)
        self.index = None if s.ascending else StepIndex(self)

    def firsts(
        self, seen: npt.NDArray[np.uint8] | None, step: npt.NDArray[np.int64], mask: npt.NDArray[np.bool_]
    ) -> npt.NDArray[np.bool_]:
        """The first record of each step number among ``mask`` (every record of a rising log is)."""
        if self.index is None or seen is None:
            return mask
        return self.index.firsts(seen, step, mask)

    def seen(self) -> npt.NDArray[np.uint8] | None:
        return None if self.index is None else self.index.seen()

    def take_any(self, name: str, idx: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        """The values of column ``name`` at the records ``idx``, in any order."""
        import numpy as np

        order = np.argsort(idx, kind="stable")
        out = np.empty(len(idx), self.files.dtypes[name])
        out[order] = self.files.take(name, idx[order])
        return out

    def by_step(self) -> Iterator[tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]]:
        """Every step number ascending with the loss of its last record, a chunk at a time; a record
        without a loss (the line has none) is left out, so a step whose records all lack one is too."""
        import numpy as np

        if self.index is None:
            for _, c in self.chunks("step", "loss", "has_loss"):
                h = c["has_loss"]
                if h.all():
                    yield c["step"], c["loss"]
                elif h.any():  # never an empty chunk: the readers take its last value
                    yield c["step"][h], c["loss"][h]
            return
        ix = self.index
        last = ix.last_loss
        for a in range(0, len(last), spill.CHUNK):
            rec = last[a : a + spill.CHUNK]
            have = np.flatnonzero(rec >= 0)
            if len(have):
                yield have + a + ix.lo, self.take_any("loss", rec[have])

    def by_step_count(self) -> int:
        """The number of steps :meth:`by_step` yields."""
        if self.index is None:
            return sum(int(c["has_loss"].sum()) for _, c in self.chunks("has_loss"))
        return int((self.index.last_loss >= 0).sum())

    def chunks(self, *names: str) -> Iterator[tuple[int, Arrays]]:
        return self.files.chunks(names, size=spill.CHUNK)

    def events(self, idx: list[int]) -> list[StepEvent]:
        """The records ``idx`` (ascending) as StepColumns.event makes them."""
        import numpy as np

        at = np.asarray(idx, dtype=np.int64)
        cols = StepColumns(**{k: self.files.take(k, at) for k in SPILL_COLUMNS})
        return [cols.event(i) for i in range(len(idx))]

    def scratch(self, name: str, dtypes: Mapping[str, str]) -> ColumnFiles:
        """New column files next to the log's own (emptied first), for values a rule reads many times."""
        if self.files.folder is None:
            return ColumnFiles(None, dtypes)
        folder = self.files.folder.with_name(f"{self.files.folder.name}.{name}")
        if folder.exists():
            for f in folder.iterdir():
                f.unlink()
        return ColumnFiles(folder, dtypes)

    def step_at(self, i: int) -> int:
        return int(self.files.read("step", i, i + 1)[0])


FIGURE_COLUMNS = (
    "seconds",
    "has_seconds",
    "tokens",
    "has_tokens",
    "tflops",
    "has_tflops",
    "weights",
    "has_weights",
)


def last_train_records(log: StreamLog, c: Arrays, r: npt.NDArray[np.bool_]) -> Arrays:
    """The figures of the last train record of each window record's step (the record itself in a rising
    log): what the node's window figures read."""
    if log.index is None:
        return {k: c[k][r] for k in FIGURE_COLUMNS}
    rec = log.index.last_train[c["step"][r] - log.index.lo]
    return {k: log.take_any(k, rec) for k in FIGURE_COLUMNS}


__all__ = [
    "FIGURE_COLUMNS",
    "Arrays",
    "Clock",
    "StepIndex",
    "StreamLog",
    "chunk_sum",
    "clock_times",
    "each_chunk",
    "last_train_records",
]
