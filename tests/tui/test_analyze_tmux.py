"""`cvs-tui analyze` with its screen in a real terminal (tmux): the app first, the reports drawn meanwhile.

The reports are written by a forked child while the app is on screen; the summary is printed when the
user leaves the app, and a child that failed to write them makes the command fail (never a silent PASS).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from test_tui_tmux import Tmux

BIN = Path(sys.executable).parent / "cvs-tui"
ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs/local/cpu_jaxmaxtext_tiny-llama_single.json"
LOG = ROOT / "tests/fixtures/maxtext/single_20steps.log"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux"),
]


def _start(tmux: Tmux, out: Path) -> None:
    mx = os.environ.get("CVS_TUI_MAXTEXT_PYTHON") or str(ROOT / ".venv-maxtext/bin/python")
    cmd = (
        f"CVS_TUI_MAXTEXT_PYTHON={mx} {BIN} analyze {CONFIG} --logs {LOG} --run SMOKE --out {out}; "
        "echo EXITED=$?; sleep 60"
    )
    tmux.run("new-session", "-d", "-x", "160", "-y", "48", "-s", tmux.session, cmd)


def test_analyze_shows_the_app_then_prints_the_summary_with_every_report_written(tmp_path: Path) -> None:
    out = tmp_path / "out"
    tmux = Tmux()
    try:
        _start(tmux, out)
        tmux.wait_for("suite PASSED")
        tmux.run("send-keys", "-t", tmux.session, "q")
        screen = tmux.wait_for("EXITED=0")
        assert "PASS  overall" in screen
        for name in ("results.json", "report.html", "junit.xml", "summary.md"):
            assert (out / name).stat().st_size > 0, name
        assert "<svg" in (out / "report.html").read_text()  # the charts were drawn by the child
        assert not (out / "error.log").exists()
    finally:
        tmux.run("kill-server")


def test_a_report_the_child_cannot_write_fails_the_command_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "report.html").mkdir(parents=True)  # a folder where the report must go
    tmux = Tmux()
    try:
        _start(tmux, out)
        tmux.wait_for("suite PASSED")
        tmux.run("send-keys", "-t", tmux.session, "q")
        screen = tmux.wait_for("EXITED=2")
        assert f"cvs-tui: error: reports: writing them into {out} failed" in screen.replace("\n", "")
        assert "Traceback" not in screen
        assert "IsADirectoryError" in (out / "error.log").read_text()
    finally:
        tmux.run("kill-server")


def test_detaching_from_follow_hands_the_progress_to_console_log(tmp_path: Path) -> None:
    """`analyze --follow` in a terminal, then q and d: one line says following goes on, the terminal gets
    no progress lines, they go to OUT/console.log, and the verdict line still comes at the end."""
    lines = LOG.read_text().splitlines(keepends=True)
    log = tmp_path / "n0.log"
    log.write_text("".join(lines[:36]))
    out = tmp_path / "out"
    mx = os.environ.get("CVS_TUI_MAXTEXT_PYTHON") or str(ROOT / ".venv-maxtext/bin/python")
    tmux = Tmux()
    cmd = (
        f"CVS_TUI_MAXTEXT_PYTHON={mx} {BIN} analyze {CONFIG} --follow --logs {log} --run SMOKE "
        f"--out {out} --idle-exit 15 --no-history; echo EXITED=$?; sleep 60"
    )
    tmux.run("new-session", "-d", "-x", "160", "-y", "48", "-s", tmux.session, cmd)
    try:
        tmux.wait_for("completed step", 30)
        tmux.run("send-keys", "-t", tmux.session, "q")
        tmux.wait_for("Detach", 10)
        tmux.run("send-keys", "-t", tmux.session, "d")
        tmux.wait_for("detached; following goes on", 10)
        with log.open("a") as fh:
            fh.write("".join(lines[36:]))
        screen = tmux.wait_for("EXITED=", 60)
        after = screen[screen.index("detached; following goes on") :]
        assert "completed step" not in after and "step 20/" not in after, after
        assert "suite PASSED" in after or "suite FAILED" in after, after
        text = (out / "console.log").read_text()
        assert "suite PASSED" in text or "suite FAILED" in text, text
    finally:
        tmux.run("kill-server")
