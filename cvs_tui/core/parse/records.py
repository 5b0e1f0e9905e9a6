"""Incremental record splitting for node logs, flattened or not.

A *record* starts at a header (absl/glog, TF/XLA C++, python logging, `XPK Start/End:`, `EXIT_CODE=`,
`Per train step`, `Traceback (most recent call last):`, a step line printed without a log header) that
starts the stream or follows whitespace,
and runs to the next one; bare continuation lines belong to the record above them. Because a header
only needs whitespace before it, a log whose newlines were turned into spaces splits into the same
records. The splitter hands out *batches*: the complete records seen so far, in a normalised copy of
the bytes (``\\n`` and ``\\r`` -> space, same length), the bytes as received (where the physical
lines are) and the 1-based line where each record starts.

Memory stays bounded: only the last, unfinished record is carried between feeds, and a record longer
than ``RECORD_CAP`` keeps its first ``RECORD_CAP`` bytes (what the dialects see) plus a short tail in
which the next header may begin; the bytes in between are counted and dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from cvs_tui.core.parse.dialects import HEADER_MAX

RECORD_CAP = 64 * 1024
_TAIL = 2 * HEADER_MAX


@dataclass(slots=True)
class Batch:
    """Complete records: ``buf[starts[i]:starts[i+1]]`` is record i (``starts[-1] == end``)."""

    buf: bytes  # normalised bytes; only buf[:end] belongs to the batch
    starts: list[int]
    end: int
    lines: list[int]  # 1-based line of each record start (len(starts) - 1 entries)
    orig: bytes  # the same bytes as received (same length and positions as buf)


def _normalise(data: bytes) -> bytes:
    if b"\r" in data:
        data = data.replace(b"\r", b" ")
    return data.replace(b"\n", b" ")


class RecordSplitter:
    """``scanner``: the byte scanner module, ``_native`` or ``_pyscan`` (see ``accel``)."""

    def __init__(self, scanner: ModuleType) -> None:
        self.scanner = scanner
        self._headers = scanner.find_headers
        self._orig = b""  # the unfinished record as received (for line counting)
        self._norm = b""  # the same, normalised
        self._line0 = 1  # line of self._orig[0]
        self._drop_nl = 0  # newlines in bytes dropped from the unfinished record (after RECORD_CAP)
        self._dropped = False
        self._scanned = 0  # headers were looked for up to here in self._norm
        self.truncated_bytes = 0
        self.newlines = 0
        self.total_bytes = 0
        self._last_byte = 10

    def feed(self, data: bytes) -> Batch | None:
        if not data:
            return None
        self.newlines += data.count(b"\n")
        self.total_bytes += len(data)
        self._last_byte = data[-1]
        orig = self._orig + data
        norm = self._norm + _normalise(data)
        found = self._headers(norm, max(1, self._scanned - HEADER_MAX))
        self._scanned = len(norm)
        if not found:
            self._keep(orig, norm)
            return None
        last = found[-1]
        lines = self._lines(orig, [0, *found])
        # carry the unfinished record
        self._line0 = lines.pop()
        batch = Batch(norm, [0, *found], last, lines, orig)
        self._drop_nl = 0
        self._dropped = False
        self._scanned = len(norm) - last
        self._keep(orig[last:], norm[last:])
        return batch

    def finish(self) -> Batch | None:
        """Flush the unfinished record (the end of the stream ends it)."""
        if not self._norm:
            return None
        orig, norm = self._orig, self._norm
        first, self._line0 = self._lines(orig, [0, len(orig)])
        batch = Batch(norm, [0, len(norm)], len(norm), [first], orig)
        self._orig = self._norm = b""
        self._drop_nl = 0
        self._dropped = False
        self._scanned = 0
        return batch

    @property
    def pending(self) -> tuple[bytes, bytes]:
        """(normalised, as received) bytes of the unfinished record."""
        return self._norm, self._orig

    @property
    def pending_line(self) -> int:
        return self._line0

    @property
    def lines_seen(self) -> int:
        return self.newlines + (0 if self._last_byte == 10 or not self.total_bytes else 1)

    # -----------------------------------------------------------------------------------------------------
    def _lines(self, orig: bytes, positions: list[int]) -> list[int]:
        """The line of each position (ascending) in the unfinished record followed by the new bytes."""
        if not self._dropped:
            return self.scanner.record_lines(orig, positions, self._line0)
        out: list[int] = []
        line = self._line0
        prev = 0
        for s in positions:
            line += orig.count(b"\n", prev, s)
            if self._dropped and prev <= RECORD_CAP < s:
                line += self._drop_nl
            out.append(line)
            prev = s
        return out

    def _keep(self, orig: bytes, norm: bytes) -> None:
        """Carry the unfinished record, dropping its middle once it outgrows the cap."""
        if len(norm) > RECORD_CAP + 2 * _TAIL:
            cut_to = len(norm) - _TAIL
            self._drop_nl += orig.count(b"\n", RECORD_CAP, cut_to)
            self.truncated_bytes += cut_to - RECORD_CAP
            self._dropped = True
            orig = orig[:RECORD_CAP] + orig[cut_to:]
            norm = norm[:RECORD_CAP] + norm[cut_to:]
            self._scanned = len(norm)
        self._orig, self._norm = orig, norm
