"""The set-up scripts' shared library (scripts/setup-lib.sh), run by real bash.

Installer output goes to the log, not the screen; a long step prints heartbeat lines that say how
long it has run and what it waits on; a failing step shows the tail of its own output and the log's
path, and its exit status comes back.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "scripts" / "setup-lib.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def run_bash(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail\nsource {LIB}\n{script}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "CVS_SETUP_BEAT_S": "1"},
    )


def test_quiet_step_logs_output_and_beats(tmp_path: Path) -> None:
    proc = run_bash(
        'cvs_setup_step "$PWD/s.log" cvs_setup_hint_log '
        "bash -c 'echo noisy-installer-line; sleep 3; echo last-line'",
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "noisy-installer-line\nlast-line\n" in (tmp_path / "s.log").read_text()
    lines = proc.stderr.splitlines()
    assert lines, "a 3 s step with a 1 s beat printed no heartbeat"
    # only heartbeat lines reach the screen; each quotes the log's last line as what it waits on
    assert all(ln.startswith("cvs-tui set-up       ... ") for ln in lines), lines
    assert "s: noisy-installer-line" in lines[0]


def test_failing_step_shows_its_tail_and_the_log(tmp_path: Path) -> None:
    (tmp_path / "s.log").write_text("earlier step output\n")
    proc = run_bash(
        "rc=0\n"
        "cvs_setup_step \"$PWD/s.log\" cvs_setup_hint_log bash -c 'echo why-it-failed; exit 7' || rc=$?\n"
        'echo "rc=$rc"',
        tmp_path,
    )
    assert "rc=7" in proc.stdout
    assert "failed (exit 7)" in proc.stderr
    assert "| why-it-failed" in proc.stderr
    assert "earlier step output" not in proc.stderr  # only this step's lines
    assert "full output: s.log" in proc.stderr


def test_verbose_step_shows_installer_output(tmp_path: Path) -> None:
    proc = run_bash(
        'CVS_TUI_SETUP_VERBOSE=1 cvs_setup_step "$PWD/s.log" cvs_setup_hint_log echo shown-line',
        tmp_path,
    )
    assert proc.returncode == 0
    assert "shown-line" in proc.stderr
    assert "shown-line" in (tmp_path / "s.log").read_text()


def test_pip_hint_names_the_silent_install(tmp_path: Path) -> None:
    (tmp_path / "p.log").write_text(
        "Installing collected packages: a, b, c\n"
        "WARNING: Location 'file:///x/simple/c/' is ignored: it is neither a file nor a directory.\n"
    )
    proc = run_bash('CVS_SETUP_DOING="installing x" cvs_setup_hint_pip "$PWD/p.log"', tmp_path)
    assert proc.stdout.startswith("installing x: pip: installing 3 packages")


def test_setup_maxtext_rejects_unknown_option() -> None:
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup-maxtext.sh"), "--bogus"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "unknown option --bogus" in proc.stderr


@pytest.mark.parametrize(
    ("text", "width", "want"),
    [
        (
            "  | 85 s  uv: compiling ~12k installed .py files to bytecode (the longest step; silent)",
            79,
            "  | 85 s  uv: compiling ~12k installed .py files to bytecode",
        ),
        (
            "  / 3 s  installing cvs-tui[test]: pip: Downloading mypy-1.13.0-cp311-manylinux.whl",
            40,
            "  / 3 s  installing cvs-tui[test]:…",
        ),
        ("  - 1 s  short", 79, "  - 1 s  short"),
    ],
)
def test_the_progress_line_fits_without_ending_mid_phrase(
    tmp_path: Path, text: str, width: int, want: str
) -> None:
    """On a terminal the heartbeat is one redrawn line of the terminal's width: an aside in brackets
    goes whole, then whole words with an ellipsis, never "(the longest step;"."""
    proc = run_bash(f'cvs_setup_fit "{text}" {width}', tmp_path)
    assert proc.stdout == want, proc.stdout
    assert len(proc.stdout) <= width
