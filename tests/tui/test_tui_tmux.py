"""The real `cvs-tui attach` binary in a real terminal (tmux): it follows a run folder being written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from cvs_tui.core.event_codec import event_to_dict
from cvs_tui.core.events import (
    NodeLogEvent,
    RunEndEvent,
    RunOutcome,
    RunStartEvent,
    StageEvent,
    StageState,
    StepEvent,
    SuiteEndEvent,
    VerdictEvent,
)

BIN = Path(sys.executable).parent / "cvs-tui"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux"),
]


def _append(path: Path, *events: object) -> None:
    with path.open("a") as fh:
        for ev in events:
            fh.write(json.dumps(event_to_dict(ev)) + "\n")


class Tmux:
    def __init__(self) -> None:
        self.socket = f"cvs-tui-test-{uuid.uuid4().hex[:8]}"
        self.session = "attach"

    def run(self, *args: str) -> str:
        out = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=False)
        return out.stdout

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", self.session)

    def wait_for(self, text: str, timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} not on screen after {timeout}s:\n{screen}")

    def alive(self) -> bool:
        return (
            subprocess.run(
                ["tmux", "-L", self.socket, "has-session", "-t", self.session],
                capture_output=True,
                check=False,
            ).returncode
            == 0
        )


def test_attach_follows_a_run_folder_in_tmux(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    logs = tmp_path / "logs" / "DEMO"
    logs.mkdir(parents=True)
    _append(
        events, StageEvent("preflight", StageState.PASSED), RunStartEvent("DEMO", 20, ("host-a", "host-b"))
    )
    (logs / "node0.log").write_text("booting node zero\n")
    (logs / "node1.log").write_text("booting node one\n")
    tmux = Tmux()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMUX")}
    cmd = f"{BIN} attach {tmp_path}; echo EXITED=$?; sleep 30"
    subprocess.run(
        ["tmux", "-L", tmux.socket, "new-session", "-d", "-x", "160", "-y", "48", "-s", tmux.session, cmd],
        check=True,
        env={**env, "TERM": "xterm-256color"},
    )
    try:
        tmux.wait_for("booting node zero")
        screen = tmux.wait_for("host-b")
        assert "preflight" in screen and "DEMO" in screen
        # The other process goes on writing: new lines and steps show up.
        with (logs / "node0.log").open("a") as fh:
            fh.write("completed step: 3, loss: 4.250\n")
        _append(events, NodeLogEvent("DEMO", 0, StepEvent(3, 4.25, 2, seconds=0.5)))
        tmux.wait_for("completed step: 3")
        tmux.wait_for("4/20")  # step index 3 logged: 4 steps completed
        tmux.run("send-keys", "-t", tmux.session, "a")  # merged view, node prefixes
        tmux.wait_for("[n01] booting node one")
        tmux.run("send-keys", "-t", tmux.session, "?")
        tmux.wait_for("command palette")
        tmux.run("send-keys", "-t", tmux.session, "Escape")
        _append(
            events, RunEndEvent("DEMO", RunOutcome.COMPLETE), SuiteEndEvent(True, report_path="r/report.html")
        )
        tmux.wait_for("suite PASSED")
        tmux.run("send-keys", "-t", tmux.session, "q")  # a finished run: leaves at once
        tmux.wait_for("EXITED=0")
    finally:
        tmux.run("kill-server")


def attach_at_80x24(folder: Path) -> Tmux:
    """`cvs-tui attach FOLDER` in a new 80x24 tmux session (it prints EXITED=rc when it ends)."""
    tmux = Tmux()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMUX")}
    cmd = f"{BIN} attach {folder}; echo EXITED=$?; sleep 30"
    subprocess.run(
        ["tmux", "-L", tmux.socket, "new-session", "-d", "-x", "80", "-y", "24", "-s", tmux.session, cmd],
        check=True,
        env={**env, "TERM": "xterm-256color"},
    )
    return tmux


def test_attach_at_80x24_shows_the_verdict_and_key_columns(tmp_path: Path) -> None:
    """The smallest common terminal: the status line with the verdict stays, as do lag and errors."""
    events = tmp_path / "events.jsonl"
    logs = tmp_path / "logs" / "BS=2,PRECISION=BF16,SL=128"
    logs.mkdir(parents=True)
    key = "BS=2,PRECISION=BF16,SL=128"
    _append(
        events,
        StageEvent("preflight", StageState.PASSED),
        StageEvent("tokenizer", StageState.SKIPPED, "every run uses synthetic data, nothing to fetch"),
        RunStartEvent(key, 12, ("localhost",)),
        NodeLogEvent(key, 0, StepEvent(11, 7.32, 1, seconds=0.5)),
        RunEndEvent(key, RunOutcome.COMPLETE),
        SuiteEndEvent(True, report_path="r/report.html"),
    )
    (logs / "node0.log").write_text("completed step: 11, loss: 7.320\n")
    tmux = attach_at_80x24(tmp_path)
    try:
        screen = tmux.wait_for("suite PASSED")
        status = next(line for line in screen.splitlines() if "suite PASSED" in line)
        assert f"run {key} step 12/12" in status  # completed steps: index 11 + 1
        for column in ("status", "health", "steps", "lag", "errors"):
            assert column in screen, screen
        assert f"✔ {key}" in screen  # the run once, outcome glyph first
        assert "run:" not in screen
        tmux.run("send-keys", "-t", tmux.session, "q")
        tmux.wait_for("EXITED=0")
    finally:
        tmux.run("kill-server")


def test_every_screen_reads_at_80x24(tmp_path: Path) -> None:
    """Verdicts, errors, health and help at 80x24 in a real terminal: the verdicts' notes are given under
    the table in whole words (never one letter a row), the help box closes inside the screen, and the
    dashboard's footer offers Quit and Health."""
    events = tmp_path / "events.jsonl"
    (tmp_path / "logs" / "BS2").mkdir(parents=True)
    note = "inconclusive: only 2 clean step(s) in the steady-state window, at least 5 needed"
    _append(
        events,
        StageEvent("preflight", StageState.PASSED),
        RunStartEvent("BS2", 12, ("localhost",)),
        NodeLogEvent("BS2", 0, StepEvent(11, 7.32, 1, seconds=0.5)),
        VerdictEvent("BS2", "training.tokens_per_sec_per_device", "N/A", ">= 10", None, "tok/s", note),
        VerdictEvent("BS2", "training.step_time_p50", "N/A", "record", None, "s", note),
        VerdictEvent("BS2", "training.final_loss", "PASS", "<= 11", 7.32, ""),
        RunEndEvent("BS2", RunOutcome.COMPLETE),
        SuiteEndEvent(False, report_path="r/report.html"),
    )
    (tmp_path / "logs" / "BS2" / "node0.log").write_text("completed step: 11, loss: 7.320\n")
    tmux = attach_at_80x24(tmp_path)
    try:
        screen = tmux.wait_for("suite FAILED")
        footer = screen.rstrip().splitlines()[-1]
        assert "Quit" in footer and "Health" in footer, footer
        tmux.run("send-keys", "-t", tmux.session, "v")
        screen = tmux.wait_for("only 2 clean")
        assert "training.tokens_per_sec_per_device and 1 more:" in screen, screen
        for line in screen.splitlines():
            assert len(line.rstrip()) <= 80
        for key, text in (("e", "error-pattern"), ("H", "kernel")):
            tmux.run("send-keys", "-t", tmux.session, key)
            tmux.wait_for(text)
        tmux.run("send-keys", "-t", tmux.session, "?")
        screen = tmux.wait_for("Keys")
        top = next(line for line in screen.splitlines() if "Keys" in line)
        assert top.rstrip().endswith("╮"), top  # the box's right edge is on screen
    finally:
        tmux.run("kill-server")
