"""`cvs-tui analyze CONFIG --follow` as a user runs it, in a child process: a real pipe on stdin fed in
chunks by another process, and a followed file that is rotated mid-follow; bad input; the console's
stall lines. (Rotation and truncation of
one file are covered byte by byte in tests/watch_sources/test_follow.py.)"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from _analysis_samples import FIXTURES, write_config
from rich.console import Console

from cvs_tui.cli.console import ConsoleView
from cvs_tui.cli.main import main
from cvs_tui.core.config.loader import load_config
from cvs_tui.core.events import NodeState, NodeStatusEvent, RunStartEvent
from cvs_tui.core.results import load_results
from cvs_tui.core.sources.offline import analyze_paths

RUN = "BS=2,PRECISION=BF16,SL=128"
CLI = [sys.executable, "-m", "cvs_tui"]
# a writer that sends a file to stdout in small chunks, flushing each, as `kubectl logs -f` would
WRITER = (
    "import sys, time\n"
    "data = open(sys.argv[1], 'rb').read()\n"
    "import os\n"
    "while len(sys.argv) > 3 and not os.path.exists(sys.argv[3]): time.sleep(0.05)\n"
    "time.sleep(float(sys.argv[2]))\n"
    "for i in range(0, len(data), 700):\n"
    "    sys.stdout.buffer.write(data[i:i + 700]); sys.stdout.flush(); time.sleep(0.01)\n"
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("CVS_TUI_PUBLIC", None)
    env["COLUMNS"] = "200"
    return env


def _verdicts(path: Path) -> list[tuple[str, str, float | None]]:
    return [(v.metric, v.status, v.actual) for r in load_results(path).runs for v in r.verdicts]


def _wait(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_stdin_real_pipe_headless_console_and_results(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, steps=20, runs=[RUN])
    out = tmp_path / "out"
    log = FIXTURES / "nan_lr1e6.log"
    # nothing for 1.5 s after following began, then the log: past a 0.5 s allowance the node is shown
    # stalled first
    started = out / "events.jsonl"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(log), "1.5", str(started)], stdout=subprocess.PIPE
    )
    assert writer.stdout is not None
    cmd = [*CLI, "analyze", str(cfg), "--follow", "--logs", "-", "--no-ui", "--out", str(out)]
    cmd += ["--compile-allowance", "0.5"]
    proc = subprocess.run(
        cmd, stdin=writer.stdout, capture_output=True, text=True, timeout=120, env=_env(), cwd=tmp_path
    )
    writer.stdout.close()
    assert writer.wait(10) == 0
    printed = proc.stdout
    assert proc.returncode == 1, printed + proc.stderr  # analyze's exit code: the run failed
    # the live console: the run, the fatal hit as it arrived, the root cause, then analyze's summary
    assert f"run {RUN}: 1 node(s), 20 steps" in printed
    assert re.search(r"node 0 \(stdin\) stalled: no progress for \d+ s waiting for the first step", printed)
    assert re.search(r"! .* node 0 line \d+ fatal", printed), printed
    assert "(root cause: node 0)" in printed
    assert printed.count("suite FAILED") == 1  # one summary: the console's suite line
    assert "stage follow failed: every stream ended" in printed
    for name in ("results.json", "report.html", "junit.xml", "summary.md"):
        assert f"{out / name}" in printed and (out / name).is_file()
    # the copy is the piped bytes; the results are analyze's on the same log
    assert (out / "logs" / "BS_2_PRECISION_BF16_SL_128" / "node0.log").read_bytes() == log.read_bytes()
    res = load_results(out / "results.json")
    run = res.runs[0]
    assert run.outcome == "failed" and run.root_cause_node == 0 and "nan" in run.reason.lower()
    direct = analyze_paths(load_config(cfg), [log], RUN)
    assert _verdicts(out / "results.json") == [
        (v.metric, v.status, v.actual) for v in direct.runs[0].verdicts
    ]
    # the run folder reads back: a later analyze of it gives the same verdicts
    again = subprocess.run(
        [*CLI, "analyze", str(cfg), "--logs", str(out), "--out", str(tmp_path / "again"), "--no-ui"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
    )
    assert again.returncode == 1, again.stdout + again.stderr
    assert _verdicts(tmp_path / "again" / "results.json") == _verdicts(out / "results.json")


def test_rotated_file_is_followed_without_loss_or_duplication(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, steps=20, runs=[RUN])
    out = tmp_path / "out"
    src = (FIXTURES / "single_20steps.log").read_bytes()
    # four parts at line ends: A and B go to the first file, C and D to the one that replaces it
    cuts = [0]
    for frac in (0.3, 0.5, 0.75):
        cuts.append(src.index(b"\n", int(len(src) * frac)) + 1)
    cuts.append(len(src))
    a, b, c, d = (src[cuts[i] : cuts[i + 1]] for i in range(4))
    followed = tmp_path / "pod.log"
    followed.write_bytes(a)
    copy = out / "logs" / "BS_2_PRECISION_BF16_SL_128" / "node0.log"
    cmd = [*CLI, "analyze", str(cfg), "--follow", "--logs", str(followed), "--no-ui", "--out", str(out)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=tmp_path
    )
    try:
        _wait(lambda: copy.is_file() and copy.read_bytes() == a, "the first part in the copy")
        with followed.open("ab") as fh:
            fh.write(b)  # written just before logrotate's rename: must not be lost
        followed.rename(tmp_path / "pod.log.1")  # rotation: the path now names a new file
        followed.write_bytes(c)
        _wait(lambda: copy.read_bytes().endswith(c), "the new file's first part")
        with followed.open("ab") as fh:
            fh.write(d)
        _wait(lambda: len(copy.read_bytes()) >= len(src), "the whole log")
        time.sleep(0.3)  # a duplicate (the new file read again) would show up by now
        proc.send_signal(signal.SIGTERM)  # the user stops following (Ctrl-C / SIGTERM headless)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stdout + stderr
    assert copy.read_bytes() == src  # no line lost, none duplicated
    assert "stage follow passed: stopped" in stdout and stdout.count("suite PASSED") == 1
    res = load_results(out / "results.json")
    assert res.passed and res.runs[0].window.steps == list(range(3, 20))
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    steps = [
        e["event"]["step"]
        for e in events
        if e["type"] == "NodeLogEvent" and e["event"].get("kind") == "train" and "loss" in e["event"]
    ]
    assert sorted(set(steps)) == list(range(20)) and len(steps) == len(set(steps))


def test_bad_follow_input_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path, steps=20, runs=[RUN])
    cases = [
        (["--logs", "-"], "standard input is read only with --follow"),
        (["--follow", "--logs", str(tmp_path)], "is a folder"),
        (["--follow", "--logs", "-", "-"], "only once"),
        (["--follow", "--logs", "-", "--hang-min", "0"], "--hang-min: 0 must be"),
    ]
    for extra, message in cases:
        assert main(["analyze", str(cfg), *extra, "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
    (tmp_path / "used" / "logs").mkdir(parents=True)
    log = tmp_path / "n0.log"
    assert main(["analyze", str(cfg), "--follow", "--logs", str(log), "--out", str(tmp_path / "used")]) == 2
    assert "already holds a run" in capsys.readouterr().err
    # a log that cannot be opened (its folder is a file) is refused before following starts: one line, exit 2
    (tmp_path / "plain").write_text("x")
    bad = [str(log), str(tmp_path / "plain" / "n1.log")]
    assert (
        main(["analyze", str(cfg), "--follow", "--no-ui", "--logs", *bad, "--out", str(tmp_path / "o2")]) == 2
    )
    err = capsys.readouterr().err
    assert "cannot read" in err and "Not a directory" in err and "Traceback" not in err, err


def test_console_prints_a_stall_once_then_again_after_progress() -> None:
    buf = io.StringIO()
    cv = ConsoleView(Console(file=buf, width=200))
    cv.handle(RunStartEvent(run=RUN, total_steps=20, nodes=("n0.log",)))
    for n in (31, 36, 41):
        cv.handle(NodeStatusEvent(RUN, 0, "n0.log", NodeState.STALLED, f"no progress for {n} s"))
    cv.handle(NodeStatusEvent(RUN, 0, "n0.log", NodeState.TRAINING))
    cv.handle(NodeStatusEvent(RUN, 0, "n0.log", NodeState.STALLED, "no progress for 90 s"))
    printed = buf.getvalue()
    assert printed.count("stalled") == 2, printed
    assert "no progress for 31 s" in printed and "no progress for 90 s" in printed
    assert "36 s" not in printed


def test_following_ends_after_the_exit_line_waits_for_a_missing_file_and_prints_one_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """F6: a log that does not exist yet shows as waiting for it; once every log wrote its exit line
    (EXIT_CODE=N) following ends by itself and judges; the console's suite line is the one summary, with
    the following's own duration."""
    import threading

    cfg = write_config(tmp_path, steps=20, runs=["BS=2,PRECISION=BF16,SL=128"])
    log = tmp_path / "n0.log"
    lines = (FIXTURES / "single_20steps.log").read_bytes().splitlines(keepends=True)

    def writer() -> None:
        time.sleep(1.5)
        for line in lines:
            with log.open("ab") as fh:
                fh.write(line)
            time.sleep(0.002)
        with log.open("ab") as fh:
            fh.write(b"EXIT_CODE=0\n")

    t = threading.Thread(target=writer)
    t.start()
    t0 = time.monotonic()
    code = main(
        ["analyze", str(cfg), "--follow", "--logs", str(log), "--no-ui", "--out", str(tmp_path / "o")]
    )
    took = time.monotonic() - t0
    t.join()
    out = capsys.readouterr().out
    assert code == 0, out
    assert took < 60  # ended by itself, not by a stop
    assert out.count("suite PASSED") == 1 and "PASS  overall" not in out
    events = [json.loads(x) for x in (tmp_path / "o" / "events.jsonl").read_text().splitlines()]
    first = next(e for e in events if e["type"] == "NodeStatusEvent")
    assert first["state"] == "waiting" and "waiting for" in first["detail"]
    stages = {s.name: s for s in load_results(tmp_path / "o" / "results.json").stages}
    follow = stages["follow"]
    assert "exit line" in follow.detail and (follow.ended_at or 0) - (follow.started_at or 0) >= 1.0


def test_idle_exit_ends_following_a_log_that_stops(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path, steps=20, runs=["BS=2,PRECISION=BF16,SL=128"])
    log = tmp_path / "n0.log"
    log.write_bytes((FIXTURES / "single_20steps.log").read_bytes())  # no exit line: it could still grow
    code = main(
        [
            "analyze",
            str(cfg),
            "--follow",
            "--logs",
            str(log),
            "--no-ui",
            "--idle-exit",
            "1",
            "--out",
            str(tmp_path / "o"),
        ]
    )
    assert code == 0, capsys.readouterr().out
    stages = {s.name: s for s in load_results(tmp_path / "o" / "results.json").stages}
    assert "--idle-exit" in stages["follow"].detail
    assert (
        main(["analyze", str(cfg), "--logs", str(log), "--idle-exit", "1", "--out", str(tmp_path / "p")]) == 2
    )
