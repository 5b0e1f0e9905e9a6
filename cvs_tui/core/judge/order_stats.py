"""Exact order statistics (the k-th smallest value) of floats read a chunk at a time.

Medians and percentiles of a long log's step times must be the same floats a sort gives, without holding
every value: each float is mapped to a 64-bit key in the same order, and passes narrow the key 16 bits at
a time with a 65,536-bin count of the values still in play, until few enough are left to gather and sort.
Memory: the counts, one chunk and at most COLLECT gathered values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

Chunks = Callable[[], Iterable["npt.NDArray[np.float64]"]]  # a fresh pass over the values each call

_BITS = 16
_BINS = 1 << _BITS
_SIGN = 1 << 63


def _keys(xs: npt.NDArray[np.float64]) -> npt.NDArray[np.uint64]:
    """Unsigned keys in float order (-0.0 and 0.0 as one, NaN after +inf, as numpy sorts)."""
    import numpy as np

    x = np.where(xs == 0.0, 0.0, xs)  # -0.0 sorts with 0.0
    bits = np.ascontiguousarray(x, dtype=np.float64).view(np.uint64)
    neg = (bits & np.uint64(_SIGN)) != 0
    keys = np.where(neg, ~bits, bits | np.uint64(_SIGN))
    return np.where(np.isnan(xs), np.uint64(0xFFFFFFFFFFFFFFFF), keys)


COLLECT = 1 << 17  # values still in play that one more pass gathers and sorts (1 MiB)


def kth_smallest(chunks: Chunks, ks: Sequence[int]) -> list[float]:
    """The ``k``-th smallest value (0-based, as ``sorted(values)[k]``) for each of ``ks``; NaN keys sort
    last. Each pass narrows every wanted rank's key by 16 bits (ranks that share their high bits share a
    count), until at most COLLECT values are left in play: the next pass gathers and sorts them. Raises
    IndexError when a ``k`` is out of range."""
    import numpy as np

    # per wanted rank: [the fixed high bits of its key, how many are fixed, its rank among the values
    # with those bits, how many values have them (-1: not yet counted)]
    state = {k: [0, 0, k, -1] for k in ks}
    found: dict[int, float] = {}
    while len(found) < len(state):
        groups: dict[tuple[int, int], list[int]] = {}
        for k, (prefix, fixed, _, _) in state.items():
            if k not in found:
                groups.setdefault((prefix, fixed), []).append(k)
        gather = {g for g, members in groups.items() if 0 <= state[members[0]][3] <= COLLECT or g[1] == 64}
        counts = {g: np.zeros(_BINS, np.int64) for g in groups if g not in gather}
        taken: dict[tuple[int, int], list[npt.NDArray[np.float64]]] = {g: [] for g in gather}
        for xs in chunks():
            keys = _keys(xs)
            for g in groups:
                prefix, fixed = g
                hit = (
                    None
                    if not fixed
                    else (keys >> np.uint64(64 - fixed)) == np.uint64(prefix >> (64 - fixed))
                )
                if g in gather:
                    taken[g].append(xs if hit is None else xs[hit])
                    continue
                sel = keys if hit is None else keys[hit]
                digits = ((sel >> np.uint64(64 - fixed - _BITS)) & np.uint64(_BINS - 1)).astype(np.int64)
                counts[g] += np.bincount(digits, minlength=_BINS)
        for g, members in groups.items():
            if g in gather:
                vals = np.sort(np.concatenate(taken[g])) if taken[g] else np.zeros(0)
                for k in members:
                    r = state[k][2]
                    if not 0 <= r < len(vals):
                        raise IndexError(f"rank {k} is out of range")
                    found[k] = float(vals[r])
                continue
            cum = np.cumsum(counts[g])
            for k in members:
                st = state[k]
                if not 0 <= st[2] < int(cum[-1]):
                    raise IndexError(f"rank {k} is out of range")
                digit = int(np.searchsorted(cum, st[2], "right"))
                below = int(cum[digit - 1]) if digit else 0
                st[0] |= digit << (64 - st[1] - _BITS)
                st[1] += _BITS
                st[2] -= below
                st[3] = int(cum[digit]) - below
    return [found[k] for k in ks]


def median(chunks: Chunks, n: int) -> float:
    """statistics.median of the ``n`` values: the middle one, or the mean of the middle two."""
    i = n // 2
    if n % 2:
        return kth_smallest(chunks, [i])[0]
    a, b = kth_smallest(chunks, [i - 1, i])
    return (a + b) / 2


def percentile(chunks: Chunks, n: int, q: float) -> float:
    """The linear-interpolation percentile (numpy's default) of ``n`` finite values read a chunk at a
    time."""
    if n == 1:
        return kth_smallest(chunks, [0])[0]
    rank = q / 100.0 * (n - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, n - 1)
    a, b = kth_smallest(chunks, [lo, hi])
    return a + (b - a) * (rank - lo)


__all__ = [
    "kth_smallest",
    "median",
    "percentile",
]
