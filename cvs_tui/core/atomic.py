"""One way to write an output file: a temp file in the same folder, fsync, then ``os.replace``.

A reader never sees half a file, and a crash or power loss after the call leaves the new content, not an
empty file (audit #25: only results.json was synced). Used for results.json, plan.json, the reports and
the compare outputs.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path


def _umask_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


# mkstemp makes 0600; results and reports are meant to be shared like any file the user writes
FILE_MODE = _umask_mode()


def write_atomic(dest: str | os.PathLike[str], data: str | bytes, *, mode: int = FILE_MODE) -> Path:
    """Write ``data`` (text is UTF-8) to ``dest`` atomically and durably; the parent folder must exist.
    The temp file is removed on any error, which is re-raised (an ``OSError`` such as ENOSPC)."""
    path = Path(dest)
    if path.is_dir():  # os.replace would name the temp file in its error
        raise IsADirectoryError(errno.EISDIR, "is a folder; give a file name", str(path))
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable; some file systems refuse to open a folder for this: that is fine."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


__all__ = ["FILE_MODE", "write_atomic"]
