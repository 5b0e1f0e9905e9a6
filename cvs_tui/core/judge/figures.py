"""A node's own window figures from its step table, a chunk at a time: its step time (the window steps'
seconds summed, their median), and the files of its window steps' figures (seconds, tokens, FLOPs) the
run judge reads to combine the nodes (``judge.digest_merge``). A window step's figures are those of the
last train record of its step number (the record itself in a rising log)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cvs_tui.core.judge import spill
from cvs_tui.core.judge.metrics import NodeStats
from cvs_tui.core.judge.order_stats import percentile
from cvs_tui.core.judge.series import thin_indexes
from cvs_tui.core.judge.spill import ColumnFiles
from cvs_tui.core.judge.stream import StreamLog, chunk_sum, last_train_records
from cvs_tui.core.judge.table import SPILL_COLUMNS
from cvs_tui.core.judge.window import StreamWindow, Survey, window_mask

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

# a node's window figures as the run judge reads them: one file each (judge.spill), window order
WINDOW_COLUMNS = {
    "steps": "i8",
    "sec": "f8",
    "tok": "f8",
    "tok_ok": "?",
    "tw": "f8",
    "tw_ok": "?",
    "fl": "f8",
    "fl_ok": "?",
}


def write_window(folder: Path, columns: dict[str, npt.NDArray[np.generic]] | None = None) -> ColumnFiles:
    """The window figures' files in ``folder`` (appended to by the caller when ``columns`` is None)."""
    files = ColumnFiles(folder, WINDOW_COLUMNS)
    for k, v in (columns or {}).items():
        files.append(k, v)
    return files


@dataclass(slots=True)
class StreamFigures:
    stats: NodeStats
    seconds: float  # the window steps' seconds summed
    count: int  # window steps
    thinned: list[int]  # the window steps as series.thin lists them at the cap
    ascending: bool  # the window steps rise (in the order of their first records)


def stream_figures(
    log: StreamLog, sv: Survey, w: StreamWindow, rank: int, arrays: Path, cap: int
) -> StreamFigures:
    """The node's own window figures (rates left to the run judge, which needs every node), its window
    figures' files (``arrays``, write_window) and the window's step list bounded at ``cap``."""
    import numpy as np

    out = write_window(arrays)
    count, prev, rising = 0, None, True
    seen = log.seen()
    try:
        for _, c in log.chunks(*SPILL_COLUMNS):
            r = window_mask(log, seen, c, w.keys)
            f = last_train_records(log, c, r)
            raw, timed = f["seconds"], f["has_seconds"]
            secs = np.where(timed, raw, 0.0) + 0.0  # no seconds: 0.0 (and -0.0 is 0.0)
            with np.errstate(invalid="ignore", over="ignore"):
                tok_v, fl_v = f["tokens"], f["tflops"]
                tok_ok = f["has_tokens"] & timed & np.isfinite(tok_v)
                fl_ok = f["has_tflops"] & timed & np.isfinite(fl_v)
                tok = np.where(tok_ok, tok_v * raw, math.nan)
                fl = np.where(fl_ok, fl_v * raw, math.nan)
            steps = c["step"][r]
            cols = {"steps": steps, "sec": secs, "tok": tok, "tok_ok": tok_ok}
            cols |= {"tw": f["weights"], "tw_ok": f["has_weights"], "fl": fl, "fl_ok": fl_ok}
            for name, v in cols.items():
                out.append(name, v)
            count += len(steps)
            if len(steps):
                rising = (
                    rising and (prev is None or int(steps[0]) > prev) and bool((np.diff(steps) > 0).all())
                )
                prev = int(steps[-1])

        def window(name: str) -> Iterator[npt.NDArray[Any]]:
            for _, c in out.chunks([name], size=spill.CHUNK):
                yield c[name]

        t = chunk_sum(x.tolist() for x in window("sec"))
        ok = bool(count) and t > 0
        p50 = 1000.0 * percentile(lambda: window("sec"), count, 50) if ok else None
        idx = np.asarray(thin_indexes(count, cap), dtype=np.int64)
        thinned: list[int] = out.take("steps", idx).tolist()
    finally:
        out.close()
    logged, last = sv.train, sv.last_train
    if log.index is not None:  # train steps by number, not records
        have = np.flatnonzero(log.index.last_train >= 0)
        logged, last = len(have), (int(have[-1]) + log.index.lo if len(have) else None)
    stats = NodeStats(
        rank=rank,
        steps_logged=logged,
        last_step=last,
        window_steps=count,
        step_time_p50_ms=p50,
        step_time_mean_ms=1000.0 * t / count if ok else None,
        tokens_per_sec_per_device=None,
        tflops_per_sec_per_device=None,
    )
    return StreamFigures(stats, t, count, thinned, rising)


__all__ = ["WINDOW_COLUMNS", "StreamFigures", "stream_figures", "write_window"]
