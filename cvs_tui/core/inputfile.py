"""Reading a file a user gives us (a config, results.json, plan.json, a card) with its size checked first.

`report /dev/zero` read until MemoryError, and `report FIFO` waited forever for a writer (audit 3 M8,
RJ41): a JSON or YAML input is now opened without blocking, must be a regular file, and is refused past
a size no file of its kind reaches, before one byte of it is parsed.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MiB = 1 << 20
# the most each kind of input may hold: far past what cvs-tui writes (a 20 000-node results.json is
# some 60 MB), far below what would exhaust memory while parsing
RESULTS_MAX = 1024 * MiB
PLAN_MAX = 256 * MiB
CONFIG_MAX = 16 * MiB  # configs, cluster, threshold and deny-list files
CARD_MAX = 16 * MiB


class InputFileError(OSError):
    """The path is no regular file, or is larger than any file of its kind; the message says which (the
    caller adds what to pass instead)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "cannot read"


def read_bytes_capped(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes. FileNotFoundError and other
    OSErrors pass through; a FIFO, device, socket or oversized file is an InputFileError."""
    p = Path(path)
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block open()
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(21, "Is a directory", str(p))
        if not stat.S_ISREG(st.st_mode):
            raise InputFileError(f"{p} is not a regular file (a pipe or device?)")
        if st.st_size > limit:
            size, most = st.st_size / MiB, limit // MiB
            raise InputFileError(f"{p} holds {size:,.0f} MiB, more than a file of its kind ({most} MiB)")
        parts: list[bytes] = []
        left = limit + 1  # the file may grow while read: never past the limit
        while left > 0 and (chunk := os.read(fd, min(left, 8 * MiB))):
            parts.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(parts)
    if len(data) > limit:
        raise InputFileError(f"{p} grew past {limit // MiB} MiB while it was read")
    return data


def read_text_capped(path: str | os.PathLike[str], limit: int) -> str:
    """``read_bytes_capped`` decoded as UTF-8 (UnicodeDecodeError passes through)."""
    return read_bytes_capped(path, limit).decode("utf-8")
