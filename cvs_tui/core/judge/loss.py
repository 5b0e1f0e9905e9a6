"""The metrics of what the run learned: final loss, eval loss, convergence and the loss curve's slope.

The rules the node judge (``judge.node``) reads a node's losses with, as if it were the run's
reference node (the first node with train steps; SPMD losses are global); each writes its metrics on the
sheet.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from itertools import chain
from operator import mul
from typing import TYPE_CHECKING, Any

from cvs_tui.core.config.blocks import TargetMetric
from cvs_tui.core.events import EvalDialect, EvalEvent
from cvs_tui.core.judge import spill
from cvs_tui.core.judge.series import decimated_from
from cvs_tui.core.judge.spill import ColumnFiles
from cvs_tui.core.judge.stream import FIGURE_COLUMNS, StreamLog, chunk_sum, each_chunk, last_train_records
from cvs_tui.core.judge.table import TRAIN

if TYPE_CHECKING:
    from cvs_tui.core.judge.metrics import RunInputs, Sheet
    from cvs_tui.core.judge.window import Survey


def nonfinite_text(x: float) -> str:
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


# why every loss metric is N/A when step lines were logged without a loss (a harness or a README cut it off):
# no loss is no evidence of a NaN, nor of a run that logged no step
NO_LOSS_LOGGED = "the log has no loss on its step lines"


def put_final_loss(last_step: int, last: float, first_finite: float | None, sheet: Sheet) -> None:
    """The final loss (the last step's) and whether it is below the first finite one."""
    put = sheet.put
    if not math.isfinite(last):
        put("training.final_loss", None, "non_finite", f"{nonfinite_text(last)} at step {last_step}")
        put("training.loss_decreased", 0.0)
    else:
        put("training.final_loss", last)
        put("training.loss_decreased", 1.0 if first_finite is not None and last < first_finite else 0.0)


def eval_section(run: RunInputs, sheet: Sheet) -> list[EvalEvent]:
    """The eval loss; returns the completed evals (running ones only when nothing else was logged)."""
    if run.ref is not None:
        evals = [e for e in run.node_events[run.ref] if isinstance(e, EvalEvent)]
    else:
        evals = [e for evs in run.node_events for e in evs if isinstance(e, EvalEvent)]
    final_evals = [e for e in evals if e.dialect is not EvalDialect.RUNNING] or evals
    if final_evals:
        ev_last = final_evals[-1]
        if math.isfinite(ev_last.loss):
            sheet.put("training.eval_loss", ev_last.loss)
        else:
            sheet.put("training.eval_loss", None, "non_finite", f"{nonfinite_text(ev_last.loss)} eval loss")
    elif run.ctx.eval_configured:
        sheet.put(
            "training.eval_loss", None, "not_produced", "eval is configured but no eval result was logged"
        )
    else:
        sheet.put("training.eval_loss", None, "feature_off", "eval not configured (eval_interval <= 0)")
    return final_evals


CONVERGENCE_KEYS = ("training.steps_to_target", "training.time_to_target_seconds")


def convergence_source(run: RunInputs, final_evals: list[EvalEvent], sheet: Sheet) -> bool | None:
    """Whether convergence is judged on the eval loss (True) or the training loss (False); None when
    it is off (its rows are then put as such)."""
    conv = run.ctx.convergence
    if conv.target_value <= 0:
        for k in CONVERGENCE_KEYS:
            sheet.put(k, None, "feature_off", "convergence.target_value <= 0")
        return None
    return conv.target_metric is TargetMetric.EVAL_LOSS or (
        conv.target_metric is TargetMetric.AUTO and bool(final_evals)
    )


# ---- over a node's step table, a chunk at a time
CURVE = {"steps": "i8", "loss": "f8"}


def stream_losses(
    own: RunInputs, log: StreamLog, sv: Survey, sheet: Sheet
) -> tuple[ColumnFiles, ColumnFiles]:
    """The loss metrics of the node as the reference node: final loss, eval loss, convergence and the
    sampled loss curve's slope over every step number ascending with the loss of its last record
    (:meth:`StreamLog.by_step`); returns the sampled curve and its finite points, in scratch files."""
    import numpy as np

    put = sheet.put
    sampled = log.scratch("sampled", CURVE)
    finite_pts = log.scratch("finite", CURVE)
    with_loss = log.by_step_count() if sv.train else 0
    if not with_loss:
        why = NO_LOSS_LOGGED if sv.train else "no step line with a loss was logged"
        put("training.final_loss", None, "not_produced", why)
        put("training.loss_decreased", None, "not_produced", why)
    else:
        first_finite: float | None = None
        last_step, last = 0, math.nan
        for st, ls in log.by_step():
            fin = np.flatnonzero(np.isfinite(ls))
            if first_finite is None and len(fin):
                first_finite = float(ls[fin[0]])
            last_step, last = int(st[-1]), float(ls[-1])
        put_final_loss(last_step, last, first_finite, sheet)
    _convergence(own, log, sv, with_loss, eval_section(own, sheet), sheet)
    if with_loss:
        lc = own.ctx.loss_curve
        every = lc.sample_every if lc.sample_every > 0 else 1
        miles = np.asarray(lc.milestone_steps, dtype=np.int64)
        lo, n = 0, with_loss
        for st, ls in log.by_step():
            keep = (st % every == 0) | np.isin(st, miles)
            if lo == 0:
                keep[0] = True  # the first and the last step are always sampled
            if lo + len(st) == n:
                keep[-1] = True
            lo += len(st)
            sampled.append("steps", st[keep])
            sampled.append("loss", ls[keep])
            fin = keep & np.isfinite(ls)
            finite_pts.append("steps", st[fin])
            finite_pts.append("loss", ls[fin])
    _curve_slope(own, sampled, bool(sv.train), sheet)
    return sampled, finite_pts


def _convergence(
    own: RunInputs, log: StreamLog, sv: Survey, with_loss: int, final_evals: list[EvalEvent], sheet: Sheet
) -> None:
    """Steps and time to the convergence target, on the eval loss or the training loss (by step, as
    stream_losses reads it, ``with_loss`` the steps it yields); the time is the seconds of the train steps
    up to it, each step once, in the order the steps first appear."""
    import numpy as np

    target = own.ctx.convergence.target_value
    use_eval = convergence_source(own, final_evals, sheet)
    if use_eval is None:
        return
    src = "eval loss" if use_eval else "training loss"
    hit: int | None = None
    best: float | None = None
    if use_eval:
        pairs = [(e.step, e.loss) for e in final_evals]
        hit = next((s for s, v in pairs if math.isfinite(v) and v <= target), None)
        fin = [v for _, v in pairs if math.isfinite(v)]
        best = min(fin) if fin else None
    elif sv.train and not with_loss:
        for k in CONVERGENCE_KEYS:
            sheet.put(k, None, "not_produced", f"{src}: {NO_LOSS_LOGGED}")
        return
    elif sv.train:
        for st, ls in log.by_step():
            with np.errstate(invalid="ignore"):
                hits = np.flatnonzero(np.isfinite(ls) & (ls <= target))
            if len(hits):
                hit = int(st[hits[0]])
                break
        if hit is None:
            mins = [min(x) for _, ls in log.by_step() if (x := ls[np.isfinite(ls)].tolist())]
            best = min(mins) if mins else None
    if hit is None:
        text = f"best {best:.4f}" if best is not None else "no finite value"
        for k in CONVERGENCE_KEYS:
            sheet.put(k, None, "not_produced", f"{src} never reached target {target} ({text})")
        return
    sheet.put("training.steps_to_target", float(hit))

    seen = log.seen()

    def secs() -> Iterator[list[float]]:
        for _, c in log.chunks("step", "kind", *FIGURE_COLUMNS):
            r = log.firsts(seen, c["step"], c["kind"] == TRAIN) & (c["step"] <= hit)
            f = last_train_records(log, c, r)
            yield (np.where(f["has_seconds"], f["seconds"], 0.0) + 0.0).tolist()

    sheet.put("training.time_to_target_seconds", chunk_sum(secs()))


def _curve_slope(own: RunInputs, sampled: ColumnFiles, trained: bool, sheet: Sheet) -> None:
    """loss.loss_curve_section's metric over the sampled points in ``sampled`` (``trained``: train steps
    were logged, with or without a loss)."""
    import numpy as np

    n = len(sampled)
    if trained and not n:
        sheet.put("training.loss_curve_slope", None, "not_produced", NO_LOSS_LOGGED)
        return
    for _, c in sampled.chunks(["steps", "loss"], size=spill.CHUNK):
        bad = np.flatnonzero(~np.isfinite(c["loss"]))
        if len(bad):
            v, s = float(c["loss"][bad[0]]), int(c["steps"][bad[0]])
            sheet.put(
                "training.loss_curve_slope", None, "non_finite", f"{nonfinite_text(v)} loss at step {s}"
            )
            return

    def lists(name: str) -> Iterator[list[Any]]:
        for c in each_chunk(sampled, name):
            yield c[name].tolist()

    slope: float | None = None
    if n >= 2:  # loss.ols_slope's sums: the int ones exact in any grouping, the float ones in one sum
        sx = sum(sum(x) for x in lists("steps"))
        sxx = sum(sum(map(mul, x, x)) for x in lists("steps"))
        sy: float = sum(chain.from_iterable(lists("loss")))
        pairs = zip(lists("steps"), lists("loss"), strict=True)
        sxy: float = sum(chain.from_iterable(map(mul, x, y) for x, y in pairs))
        den = n * sxx - sx * sx
        slope = None if den == 0 else (n * sxy - sx * sy) / den
    if slope is None:
        reason = f"{n} sampled loss point(s); a slope needs 2 or more distinct steps"
        sheet.put("training.loss_curve_slope", None, "not_produced", reason)
    else:
        sheet.put("training.loss_curve_slope", slope)


def bounded_points(files: ColumnFiles, cap: int) -> list[tuple[int, float]]:
    """series.curve_points of the points in ``files``."""
    import numpy as np

    n = len(files)
    if n <= cap:
        idx = np.arange(n, dtype=np.int64)
    else:
        idx = np.asarray(
            decimated_from(
                n, lambda lo, hi: (files.read("loss", lo, hi), np.full(min(hi, n) - lo, -np.inf), None), cap
            ),
            dtype=np.int64,
        )
    return list(zip(files.take("steps", idx).tolist(), files.take("loss", idx).tolist(), strict=True))


def finite_losses(log: StreamLog) -> dict[int, float]:
    """Every finite loss by step (digest's ``losses`` when the series are bounded)."""
    import numpy as np

    out: dict[int, float] = {}
    for _, c in log.chunks("step", "loss"):
        fin = np.isfinite(c["loss"])
        out.update(zip(c["step"][fin].tolist(), c["loss"][fin].tolist(), strict=True))
    return out


__all__ = [
    "CURVE",
    "NO_LOSS_LOGGED",
    "bounded_points",
    "eval_section",
    "finite_losses",
    "nonfinite_text",
    "put_final_loss",
    "stream_losses",
]
