"""Bounded, compact per-node history for the run state: numbered line buffers and thinned loss curves.

A live view of hundreds of nodes must not grow with the run. Lines: each node keeps its newest lines,
and all but the newest few of them are packed into zlib-compressed blocks (a block of log lines packs 4-5
times smaller than the same lines as Python strings); the full logs stay on disk in the run folder and the
log pane reads older lines back from there. Loss curves: a run's step -> loss series is thinned in place
once it holds too many points, each stretch keeping its lowest and highest loss so a spike stays visible.
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Iterable, Iterator
from functools import lru_cache

MAX_LINE_CHARS = 1000  # longer lines are cut for display; the log file keeps them whole
BLOCK_LINES = 128  # lines packed into one compressed block (at most this, and an eighth of the capacity)
_ZLEVEL = 1  # log lines are repetitive: level 1 already packs them ~4x, at a fraction of level 6's cost

Block = bytes | tuple[str, ...]  # zlib of the lines joined by newlines, or the lines as is (one held one)


def _seal(lines: list[str]) -> Block:
    joined = "\n".join(lines)
    if joined.count("\n") != len(lines) - 1:  # a line holds a newline itself: keep the block unpacked
        return tuple(lines)
    # surrogatepass: a line may hold lone surrogates (undecodable bytes); they round-trip unchanged
    return zlib.compress(joined.encode("utf-8", "surrogatepass"), _ZLEVEL)


@lru_cache(maxsize=32)
def _unpack(blob: bytes) -> tuple[str, ...]:
    # A few blocks stay unpacked: paging through one node's lines, or a window of them, unpacks each once.
    return tuple(zlib.decompress(blob).decode("utf-8", "surrogatepass").split("\n"))


def _lines_of(block: Block) -> tuple[str, ...]:
    return _unpack(block) if isinstance(block, bytes) else block


class LineBuffer:
    """A ring buffer of numbered lines: line ``n`` (1-based) is kept while it is among the ``maxlen``
    newest ones. The newest lines (fewer than a block) are plain strings; older ones compressed blocks."""

    __slots__ = ("_block", "_blocks", "_len", "_skip", "_tail", "maxlen", "next_line")

    def __init__(self, maxlen: int) -> None:
        self.maxlen = maxlen
        self._block = max(1, min(BLOCK_LINES, maxlen // 8))  # lines per sealed block
        self._blocks: deque[Block] = deque()  # sealed, oldest first, each exactly ``_block`` lines
        self._tail: list[str] = []  # the newest lines, fewer than ``_block``
        self._skip = 0  # lines at the start of the oldest block that are no longer held
        self._len = 0  # lines held
        self.next_line = 1  # number the next appended line gets

    @property
    def first_line(self) -> int:
        return self.next_line - self._len

    def __len__(self) -> int:
        return self._len

    def extend(self, first_line: int, lines: Iterable[str]) -> None:
        if first_line != self.next_line:
            # A gap or a restart (e.g. attach began mid-log): keep numbering honest rather than shift lines.
            self._blocks.clear()
            self._tail = []
            self._skip = self._len = 0
            self.next_line = first_line
        tail, size, n = self._tail, self._block, 0
        for text in lines:
            tail.append(text if len(text) <= MAX_LINE_CHARS else text[:MAX_LINE_CHARS] + " …")
            n += 1
            if len(tail) >= size:
                self._blocks.append(_seal(tail))
                self._tail = tail = []
        self.next_line += n
        self._len += n
        if self._len > self.maxlen:
            self._drop(self._len - self.maxlen)

    def _drop(self, count: int) -> None:
        """Forget the ``count`` oldest lines."""
        self._len -= count
        self._skip += count
        while self._blocks and self._skip >= self._block:
            self._blocks.popleft()
            self._skip -= self._block
        if not self._blocks and self._skip:
            del self._tail[: self._skip]
            self._skip = 0

    def _from(self, index: int) -> list[str]:
        """Held lines from the ``index``-th held one (0: the oldest) to the newest."""
        pos = index + self._skip  # position counted from the start of the oldest block
        first_block, offset = divmod(pos, self._block)
        out: list[str] = []
        for i in range(first_block, len(self._blocks)):
            lines = _lines_of(self._blocks[i])
            out.extend(lines[offset:] if offset else lines)
            offset = 0
        out.extend(self._tail[max(0, pos - len(self._blocks) * self._block) :])
        return out

    def since(self, line: int) -> tuple[int, list[str]]:
        """Lines numbered >= ``line`` still held, with the number of the first one returned."""
        start = max(line, self.first_line)
        skip = start - self.first_line
        if skip >= self._len:
            return start, []
        return start, self._from(skip)

    def get(self, line: int) -> str | None:
        idx = line - self.first_line
        if not 0 <= idx < self._len:
            return None
        block, offset = divmod(idx + self._skip, self._block)
        if block < len(self._blocks):
            return _lines_of(self._blocks[block])[offset]
        return self._tail[(idx + self._skip) - len(self._blocks) * self._block]

    def __iter__(self) -> Iterator[str]:
        return iter(self._from(0))


def thin_curve(curve: dict[int, float], keep: int) -> dict[int, float]:
    """``curve`` (step -> loss) with at most about ``keep // 2`` points: the steps are cut into equal
    stretches (a power of two steps wide, so thinning again lines up with the last time) and each
    stretch keeps only its lowest and its highest loss, so a spike survives; the first and the last point
    always stay. Resolution stays even along the whole run however often it is thinned."""
    if len(curve) <= 2:
        return dict(curve)
    steps = sorted(curve)
    first, span = steps[0], steps[-1] - steps[0] + 1
    width = 1
    while span > width * max(1, keep // 4):
        width *= 2
    stretches: dict[int, list[int]] = {}
    for s in steps:
        stretches.setdefault((s - first) // width, []).append(s)
    kept = {first, steps[-1]}
    for group in stretches.values():
        kept.add(min(group, key=curve.__getitem__))
        kept.add(max(group, key=curve.__getitem__))
    return {s: curve[s] for s in steps if s in kept}
