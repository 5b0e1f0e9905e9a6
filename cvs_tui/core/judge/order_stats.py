"""Exact order statistics (the k-th smallest value) of floats read a chunk at a time.

Medians and percentiles of a long log's step times must be the same floats a sort gives, without holding
every value: each float is mapped to a 64-bit key in the same order, and four passes narrow the key 16
bits at a time with a 65,536-bin count of the values still in play. Memory: the counts and one chunk.
"""

from __future__ import annotations

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


def _value(key: int) -> float:
    import numpy as np

    bits = key ^ _SIGN if key & _SIGN else ~key & 0xFFFFFFFFFFFFFFFF
    return float(np.array([bits], dtype=np.uint64).view(np.float64)[0])


def kth_smallest(chunks: Chunks, ks: Sequence[int]) -> list[float]:
    """The ``k``-th smallest value (0-based, as ``sorted(values)[k]``) for each of ``ks``; NaN keys sort
    last. Raises IndexError when a ``k`` is out of range."""
    import numpy as np

    out: list[float] = []
    for k in ks:
        prefix, rank = 0, k
        for shift in range(64 - _BITS, -1, -_BITS):
            counts = np.zeros(_BINS, np.int64)
            top = shift + _BITS  # the bits above this digit are fixed to ``prefix``
            for xs in chunks():
                keys = _keys(xs)
                if top < 64:
                    keys = keys[(keys >> np.uint64(top)) == np.uint64(prefix >> top)]
                counts += np.bincount(
                    ((keys >> np.uint64(shift)) & np.uint64(_BINS - 1)).astype(np.int64), minlength=_BINS
                )
            cum = np.cumsum(counts)
            if rank < 0 or rank >= int(cum[-1]):
                raise IndexError(f"rank {k} of {int(cum[-1]) if shift == 64 - _BITS else 'fewer'} values")
            digit = int(np.searchsorted(cum, rank, "right"))
            rank -= int(cum[digit - 1]) if digit else 0
            prefix |= digit << shift
        out.append(_value(prefix))
    return out


def median(chunks: Chunks, n: int) -> float:
    """statistics.median of the ``n`` values: the middle one, or the mean of the middle two."""
    i = n // 2
    if n % 2:
        return kth_smallest(chunks, [i])[0]
    a, b = kth_smallest(chunks, [i - 1, i])
    return (a + b) / 2


__all__ = ["kth_smallest", "median"]
