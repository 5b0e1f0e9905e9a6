"""Reports rendered from the results model alone: report.html, junit.xml and summary.md."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from cvs_tui.core.atomic import FILE_MODE, write_atomic
from cvs_tui.core.results import Results

if TYPE_CHECKING:
    from cvs_tui.core.history.trend import Trend

REPORT_FILES = {"html": "report.html", "junit": "junit.xml", "md": "summary.md"}


def write_reports(
    results: Results, out_dir: str | os.PathLike[str], trend: Trend | None = None
) -> dict[str, Path]:
    """Render and write every report into ``out_dir``; returns {"html"|"junit"|"md": path}. ``trend``:
    the runs against their history (report.html's headline, summary.md's regressions)."""
    from cvs_tui.core.report.html import render_html
    from cvs_tui.core.report.junit import render_junit
    from cvs_tui.core.report.markdown import render_markdown

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rendered = {
        "html": render_html(results, trend),
        "junit": render_junit(results),
        "md": render_markdown(results, trend),
    }
    paths = {}
    for kind, text in rendered.items():
        p = out / REPORT_FILES[kind]
        write_atomic(p, text, mode=FILE_MODE)
        paths[kind] = p
    return paths


__all__ = ["REPORT_FILES", "write_reports"]
