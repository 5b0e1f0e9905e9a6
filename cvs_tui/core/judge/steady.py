"""Steady state under asynchronous dispatch: which window steps may be timed (docs/metrics.md, "Steady
state under asynchronous dispatch").

JAX dispatches step S+1 before step S has run, and MaxText logs a step's ``seconds`` as host time
between two dispatches. So time moves between neighbouring steps: the sum over a stretch of consecutive
steps is right, a single step is not. Inside a stretch the moves cancel (the fast step and the slow one
that took its time are both summed). At a stretch's edge they do not: the step beside a stall, a warm-up
step or a checkpoint interval may have taken part of that step's time (too slow) or given it its own
(too fast, even faster than the chip can compute). The rule, per node, over the timed train records in
log order (the first record of each step number):

* **Impossible.** A window step whose TFLOP/s/device (the step line's, else the log's TFLOPs per step
  over its seconds) is above the device's peak for the run's precision did not compute in that time:
  it is dropped and never averaged into anything.
* **Disturbed edge.** A window step within ``EDGE_DEPTH`` steps of a dropped record (warm-up, a
  checkpoint, eval, profiler or rampup interval, a stall, an impossible step), with every step between
  them also outside the band, is dropped when its seconds lie outside the band ``[m - max(m / 5, 3 s),
  m + max(m / 4, 3 s)]``: ``m`` the node's median step seconds and ``s`` 1.4826 x their MAD (the stall
  baseline's), so at least ``m / STEADY_BAND .. m x STEADY_BAND`` and ``STEADY_MAD_K`` robust sigmas.
  An edge inside the band stays, and so does every interior step, fast or slow: its partner is in the
  same sum.

What is left is timed as before: window time over window steps, tokens and FLOPs over that time. The
rule reads each record's neighbours up to ``EDGE_DEPTH + 1`` away, so it runs a chunk at a time with
that much context (:func:`window_drops_chunked`): the window (``window.stream_window``) calls it once,
after the stall rule, over the node's step table, for live runs, ``analyze``, follow mode and replay.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cvs_tui.core.judge.stalls import LINE_LAG

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

# A step beside a dropped one is disturbed when its seconds are outside the node's steady band: at least
# a fifth less or a quarter more than the median (jitter on a GPU or TPU is a few percent, so this floor
# is several times it; the stall rule takes what is beyond 3x), and at least STEADY_MAD_K robust sigmas
# away (a noisy node, a loaded CPU, keeps the steps its own jitter explains: 3 sigmas leave 0.3 % of
# clean normal steps out). A wider floor kept the dispatch queue's settling after the warm-up: a TPU
# v5p step at 0.69 x a median its other steps hold to 0.1 % (tests/fixtures/world/maxtext).
STEADY_BAND = 1.25
STEADY_MAD_K = 3.0
# How far time moves: as far as a step line lags its step.
EDGE_DEPTH = LINE_LAG
CONTEXT = EDGE_DEPTH + 1  # records each side one decision reads


@dataclass(frozen=True, slots=True)
class SteadyDrops:
    """Per record (the input's order): dropped as impossible, dropped as a disturbed edge."""

    impossible: npt.NDArray[np.bool_]
    edge: npt.NDArray[np.bool_]


def step_rates(
    seconds: npt.NDArray[np.float64],
    logged: npt.NDArray[np.float64],
    has_logged: npt.NDArray[np.bool_],
    tflops_per_step: float | None,
) -> npt.NDArray[np.float64]:
    """Each step's TFLOP/s/device: the step line's when it carries one, else the log's TFLOPs per step over
    the step's seconds; NaN when neither is known."""
    import numpy as np

    with np.errstate(divide="ignore", invalid="ignore"):
        derived = (
            np.full(len(seconds), np.nan)
            if tflops_per_step is None
            else tflops_per_step / np.asarray(seconds)
        )
    ok = np.asarray(has_logged) & np.isfinite(logged)
    return np.where(ok, logged, derived)


def _shift(a: npt.NDArray[np.bool_], k: int) -> npt.NDArray[np.bool_]:
    """``out[i] = a[i - k]`` (k may be negative); False where that is outside ``a``."""
    import numpy as np

    out = np.zeros(len(a), np.bool_)
    if k >= 0:
        out[k:] = a[: len(a) - k] if k < len(a) else out[:0]
    else:
        out[:k] = a[-k:] if -k < len(a) else out[:0]
    return out


def band(median: float, spread: float | None) -> tuple[float, float]:
    """The steady band (low, high) of step seconds around the node's median (see the module docstring)."""
    k = STEADY_MAD_K * (spread or 0.0)
    return median - max(median * (1.0 - 1.0 / STEADY_BAND), k), median + max(median * (STEADY_BAND - 1.0), k)


def steady_drops(
    seconds: npt.NDArray[np.float64],
    in_window: npt.NDArray[np.bool_],
    rates: npt.NDArray[np.float64],
    median: float | None,
    spread: float | None,
    peak: float | None,
) -> SteadyDrops:
    """The rule of the module docstring over one node's timed records (log order): ``in_window`` the
    records the window keeps so far, ``rates`` their TFLOP/s/device (``step_rates``), ``median`` and
    ``spread`` the node's median step seconds and 1.4826 x their MAD (median None: no band test),
    ``peak`` the device's peak TFLOP/s (None: unknown, no step is impossible). Records beyond the arrays
    count as absent, not as dropped."""
    import numpy as np

    sec = np.asarray(seconds, dtype=np.float64)
    win = np.asarray(in_window, dtype=np.bool_)
    impossible = np.zeros(len(sec), np.bool_)
    if peak is not None:
        with np.errstate(invalid="ignore"):
            impossible = win & (np.asarray(rates) > peak)
    edge = np.zeros(len(sec), np.bool_)
    if median is not None and median > 0:
        trusted = win & ~impossible
        disturbed = ~trusted
        lo, hi = band(median, spread)
        with np.errstate(invalid="ignore"):
            bad = trusted & ((sec > hi) | (sec < lo))
        for side in (1, -1):  # from a dropped record before the step, then after it
            run = np.ones(len(sec), np.bool_)
            for k in range(1, EDGE_DEPTH + 1):
                run &= _shift(bad, side * (k - 1))  # the k steps from this one towards the dropped one
                edge |= run & _shift(disturbed, side * k)
    return SteadyDrops(impossible, edge)


Chunk = tuple[
    "npt.NDArray[np.int64]", "npt.NDArray[np.float64]", "npt.NDArray[np.bool_]", "npt.NDArray[np.float64]"
]


def window_drops_chunked(
    chunks: Iterable[Chunk], median: float | None, spread: float | None, peak: float | None, device: str
) -> dict[int, str]:
    """:func:`window_drops` of the concatenation of ``chunks`` (each ``(steps, seconds, in_window,
    rates)``, log order), holding one chunk and ``2 x CONTEXT`` records besides."""
    import numpy as np

    held: list[npt.NDArray[Any]] = [
        np.zeros(0, np.int64),
        np.zeros(0),
        np.zeros(0, np.bool_),
        np.zeros(0),
    ]
    lead = 0  # records at the front of ``held`` already decided (kept as left context)
    out: dict[int, str] = {}

    def decide(upto: int | None) -> None:
        steps, sec, win, rate = held
        d = steady_drops(sec, win, rate, median, spread, peak)
        part = SteadyDrops(d.impossible[lead:upto], d.edge[lead:upto])
        out.update(
            drop_reasons(
                steps[lead:upto], sec[lead:upto], rate[lead:upto], part, median, spread, peak, device
            )
        )

    for chunk in chunks:
        held = [np.concatenate((h, np.asarray(x))) for h, x in zip(held, chunk, strict=True)]
        ready = len(held[0]) - CONTEXT  # records whose right context is in hand
        if ready <= lead:
            continue
        decide(ready)
        keep = ready - CONTEXT if ready > CONTEXT else 0
        held = [h[keep:] for h in held]
        lead = ready - keep
    if len(held[0]) > lead:
        decide(None)
    return out


def drop_reasons(
    steps: npt.NDArray[np.int64],
    seconds: npt.NDArray[np.float64],
    rates: npt.NDArray[np.float64],
    drops: SteadyDrops,
    median: float | None,
    spread: float | None,
    peak: float | None,
    device: str,
) -> dict[int, str]:
    """{step: why} for the dropped records, as the window lists them."""
    out: dict[int, str] = {}
    lo, hi = band(median, spread) if median is not None else (0.0, 0.0)
    for i in drops.impossible.nonzero()[0].tolist():
        out[int(steps[i])] = (
            f"impossible: {float(rates[i]):.0f} TFLOP/s/device in {float(seconds[i]):.3g} s is above the "
            f"{device} peak of {peak:g} (asynchronous dispatch moved its time to a neighbouring step)"
        )
    for i in drops.edge.nonzero()[0].tolist():
        out.setdefault(
            int(steps[i]),
            f"disturbed edge: {float(seconds[i]):.3g} s beside a dropped step is outside the steady band "
            f"{max(lo, 0.0):.3g}..{hi:.3g} s around the median {median or 0.0:.3g} s (time moves between "
            "neighbouring steps)",
        )
    return out


def window_drops(
    steps: npt.NDArray[np.int64],
    seconds: npt.NDArray[np.float64],
    in_window: npt.NDArray[np.bool_],
    rates: npt.NDArray[np.float64],
    median: float | None,
    spread: float | None,
    peak: float | None,
    device: str,
) -> dict[int, str]:
    """{step: why} of the window steps the rule drops, over one node's whole timed records."""
    d = steady_drops(seconds, in_window, rates, median, spread, peak)
    return drop_reasons(steps, seconds, rates, d, median, spread, peak, device)


__all__ = [
    "CONTEXT",
    "EDGE_DEPTH",
    "STEADY_BAND",
    "STEADY_MAD_K",
    "SteadyDrops",
    "band",
    "drop_reasons",
    "steady_drops",
    "step_rates",
    "window_drops",
    "window_drops_chunked",
]
