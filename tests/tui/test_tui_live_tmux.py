"""The real `cvs-tui CONFIG` in a real terminal (tmux): the live view, and leaving it mid-run.

Two local ranks run the stand-in trainer (`tests/suite_fixtures/standin_trainer.sh`; this test is about
the front-end's hand-over, not training). Quitting asks whether to stop the run or detach: stop tears
everything down (exit 130, no trainer left); detach lets the run finish, its progress lines in
the run folder's console.log (exit 0).
"""

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

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "suite_fixtures"
BIN = Path(sys.executable).parent / "cvs-tui"
SWEEP = "BS=1,PRECISION=BF16,SL=128"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]


def _config(tmp: Path) -> Path:
    node = tmp / "node"
    (node / "bin").mkdir(parents=True)
    shutil.copy(FIX / "standin_trainer.sh", node / "bin" / "standin_trainer.sh")
    cfg = json.loads((FIX / "standin_distributed.json").read_text())
    cfg["paths"]["shared_fs"] = str(node)
    cfg["container"]["runtime"] = {"name": "host", "args": {}}
    cfg["container"]["env"]["CVS_STANDIN_STEP_SLEEP"] = "0.15"
    cfg["train_params"]["maxtext_config"]["steps"] = 80
    cfg["sweeps"][SWEEP]["steps"] = 80
    cfg["smoke"]["enabled"] = False
    cfg["threshold_json"] = str(FIX / "standin_distributed_threshold.json")
    path = tmp / "live.json"
    path.write_text(json.dumps(cfg))
    return path


def _pane(session: str) -> str:
    return subprocess.run(
        ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True, check=False
    ).stdout


def _wait(session: str, text: str, timeout: float = 60) -> str:
    end = time.time() + timeout
    screen = ""
    while time.time() < end:
        screen = _pane(session)
        if text in screen:
            return screen
        time.sleep(0.3)
    raise AssertionError(f"{text!r} never appeared; screen:\n{screen}")


def _start(tmp: Path) -> tuple[str, Path, Path]:
    config = _config(tmp)
    out = tmp / "run"
    rc_file = tmp / "rc"
    session = f"cvs-live-{uuid.uuid4().hex[:8]}"
    cmd = f"{BIN} {config} --nodes localhost,localhost --out {out} --no-mouse; echo $? > {rc_file}; sleep 30"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "48", cmd], check=True)
    return session, out, rc_file


def _rc(rc_file: Path, timeout: float = 90) -> int:
    end = time.time() + timeout
    while time.time() < end:
        if rc_file.exists() and rc_file.read_text().strip():
            return int(rc_file.read_text())
        time.sleep(0.3)
    raise AssertionError("cvs-tui did not exit")


def _trainers(marker: str) -> list[str]:
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if marker in line and "ps -eo" not in line]


def test_stop_from_the_live_view_tears_down(tmp_path: Path) -> None:
    session, out, rc_file = _start(tmp_path)
    try:
        _wait(session, "completed step", 60)  # the node log pane is streaming
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        _wait(session, "Detach", 10)
        subprocess.run(["tmux", "send-keys", "-t", session, "s"], check=True)
        assert _rc(rc_file) == 130
        assert _trainers(str(tmp_path / "node" / "bin")) == []
        results = json.loads((out / "results.json").read_text())
        assert {s["name"]: s["state"] for s in results["stages"]}["interrupted"] == "failed"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)


def test_detach_lets_the_run_finish_headless(tmp_path: Path) -> None:
    session, out, rc_file = _start(tmp_path)
    try:
        _wait(session, "completed step", 60)
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        _wait(session, "Detach", 10)
        subprocess.run(["tmux", "send-keys", "-t", session, "d"], check=True)
        assert _rc(rc_file) == 0
        screen = _pane(session)
        assert "suite PASSED" in screen or "report:" in screen
        # the terminal gets one line saying so and the verdict line; the progress goes to the run folder
        after = screen[screen.index("detached; the run goes on") :]
        assert str((out / "console.log").resolve()) in after.replace("\n", "")
        assert "completed step" not in after and "run BS=" not in after, after
        assert "suite PASSED" in (out / "console.log").read_text()
        results = json.loads((out / "results.json").read_text())
        (run,) = [r for r in results["runs"] if r["key"] == SWEEP]
        assert run["status"] == "PASS" and run["nodes"][1]["last_step"] == 79
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)


def test_leaving_attach_mid_run_is_a_detach_not_a_failure(tmp_path: Path) -> None:
    """`attach` of a run another process is executing, then q: one line saying the run goes on, exit 3
    (no verdict), not "not a pass" with exit 1; the run itself finishes and passes."""
    from test_tui_tmux import Tmux

    config = _config(tmp_path)
    cfg = json.loads(config.read_text())
    cfg["container"]["env"]["CVS_STANDIN_STEP_SLEEP"] = "0.5"  # still running when the view is left
    config.write_text(json.dumps(cfg))
    out = tmp_path / "run"
    with (tmp_path / "run.out").open("w") as fh:
        runner = subprocess.Popen(
            [str(BIN), str(config), "--nodes", "localhost,localhost", "--out", str(out), "--no-ui"],
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    tmux = Tmux()
    try:
        end = time.time() + 60
        while not (out / "events.jsonl").exists() and time.time() < end:
            time.sleep(0.3)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TMUX")}
        cmd = f"{BIN} attach {out} --no-mouse; echo EXITED=$?; sleep 60"
        subprocess.run(
            [
                "tmux",
                "-L",
                tmux.socket,
                "new-session",
                "-d",
                "-x",
                "120",
                "-y",
                "40",
                "-s",
                tmux.session,
                cmd,
            ],
            check=True,
            env={**env, "TERM": "xterm-256color"},
        )
        tmux.wait_for("completed step", 60)
        tmux.run("send-keys", "-t", tmux.session, "q")
        screen = tmux.wait_for("EXITED=3", 20)
        assert "detached; the run goes on" in screen and "not a pass" not in screen, screen
        assert runner.wait(timeout=120) == 0
    finally:
        tmux.run("kill-server")
        if runner.poll() is None:
            runner.terminate()
            runner.wait(timeout=30)
