"""The series for node-exporter's textfile collector: the exposition rewritten atomically every few seconds.

For batch jobs where nothing can scrape the process: node-exporter reads ``*.prom`` files from its
``--collector.textfile.directory`` on each of its own scrapes. Each write is a temp file in the same
folder, fsync, then a rename (``core/atomic.py``), so it never reads half a file. A write that fails
after the first one (a full disk) is reported once by the caller and retried on the next tick: the
validation run itself never depends on it.
"""

from __future__ import annotations

from pathlib import Path

from cvs_tui.core.atomic import write_atomic
from cvs_tui.core.errors import UserError
from cvs_tui.core.export.exposition import Exposition

TEXTFILE_SECONDS = 5.0  # how often the file is rewritten while the run goes on


def check_textfile_path(path: Path) -> None:
    """A path node-exporter reads and this process can write; raises UserError naming the option."""
    if path.suffix != ".prom":
        raise UserError(
            f"--metrics-textfile: {path} must end in .prom (node-exporter's textfile collector reads only "
            "*.prom files)"
        )
    if not path.parent.is_dir():
        raise UserError(f"--metrics-textfile: {path.parent} is not a folder; create it or pick another path")
    if path.is_dir():
        raise UserError(f"--metrics-textfile: {path} is a folder; give a file name ending in .prom")


def write_textfile(expo: Exposition, path: Path) -> None:
    """The text exposition into ``path``, atomically (raises OSError)."""
    write_atomic(path, expo.render())
