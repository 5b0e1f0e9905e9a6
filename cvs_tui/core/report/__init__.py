"""Reports rendered from the results model alone: report.html, junit.xml and summary.md."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from cvs_tui.core.results import FILE_MODE, Results

REPORT_FILES = {"html": "report.html", "junit": "junit.xml", "md": "summary.md"}


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, FILE_MODE)  # mkstemp makes 0600; a report is meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_reports(results: Results, out_dir: str | os.PathLike[str]) -> dict[str, Path]:
    """Render and write every report into ``out_dir``; returns {"html"|"junit"|"md": path}."""
    from cvs_tui.core.report.html import render_html
    from cvs_tui.core.report.junit import render_junit
    from cvs_tui.core.report.markdown import render_markdown

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rendered = {"html": render_html(results), "junit": render_junit(results), "md": render_markdown(results)}
    paths = {}
    for kind, text in rendered.items():
        p = out / REPORT_FILES[kind]
        _write_atomic(p, text)
        paths[kind] = p
    return paths


__all__ = ["REPORT_FILES", "write_reports"]
