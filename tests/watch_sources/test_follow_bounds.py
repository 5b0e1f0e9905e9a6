"""Audit 3 H2, M1, M2, M3, M6, L1, L2, L3: follow mode reads with bounded memory and never blocks where a
stop cannot reach it; devices that never end are refused; /dev/null or a closed stdin is one clear
outcome; named pipes (several at once, process substitution) are followed; an empty or never-created
node log fails the run; SIGHUP and a closed console still write the verdict."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from _analysis_samples import FIXTURES, write_config

from cvs_tui.cli.main import main
from cvs_tui.core.config.loader import load_config
from cvs_tui.core.errors import UserError
from cvs_tui.core.results import load_results
from cvs_tui.core.sources.follow import FollowSession
from cvs_tui.core.sources.offline import analyze_paths
from cvs_tui.core.watch.followers import POLL_CHUNKS, FileFollower, StreamFollower, followers_for

RUN = "BS=2,PRECISION=BF16,SL=128"
CLI = [sys.executable, "-m", "cvs_tui"]
DISTRIBUTED = FIXTURES.parents[2] / "configs" / "local" / "cpu_jaxmaxtext_tiny-llama_2proc_distributed.json"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("CVS_TUI_PUBLIC", None)
    env["COLUMNS"] = "200"
    return env


def _wait(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _follow(cfg: Path, out: Path, *logs: str, **kw: object) -> subprocess.Popen[str]:
    cmd = [*CLI, "analyze", str(cfg), "--follow", "--no-ui", "--logs", *logs, "--out", str(out)]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=out.parent, **kw
    )  # type: ignore[call-overload]


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_is_refused(device: str) -> None:
    """FF21/FF22 (H2): a device that never ends is refused before following starts, not read into memory."""
    with pytest.raises(UserError, match="device, which never ends"):
        followers_for([device])


def test_a_file_is_handed_out_as_it_is_read(tmp_path: Path) -> None:
    """RB02 (H2): the follower hands out the first chunks of a big file before reading the rest (it read
    the whole file into a list first: 4.5 GB for a 1 GB log)."""
    big = tmp_path / "big.log"
    big.write_bytes(b"x" * (8 << 20))

    async def first() -> tuple[int, int]:
        f = FileFollower(str(big), chunk_size=64 << 10)
        it = f.chunks()
        data = await anext(it)
        offset = f.offset
        f.stop()
        await it.aclose()
        return len(data), offset

    n, offset = asyncio.run(first())
    assert n == 64 << 10
    assert offset <= POLL_CHUNKS * (64 << 10)


def test_follow_keeps_no_parsed_step(tmp_path: Path) -> None:
    """RB09 (M6): follow mode judges the copies; it keeps no parsed step per rank while following."""
    cfg = write_config(tmp_path, steps=20, runs=[RUN])
    loaded = load_config(cfg)
    from cvs_tui.cli.follow import follow_plan

    log = tmp_path / "n0.log"
    log.write_bytes((FIXTURES / "single_20steps.log").read_bytes())
    plan = follow_plan(loaded, 1, tmp_path / "out")
    kept: list[int] = []

    async def go() -> None:
        f = FileFollower(str(log), poll_interval=0.02)
        session = FollowSession(plan, RUN, [f], tmp_path / "out", emit=lambda _e: None)
        orig = session._judge

        def judge(ranks, started):  # type: ignore[no-untyped-def]
            kept.extend(r.log.steps._n for r in ranks)  # step records the collector was given
            return orig(ranks, started)

        session._judge = judge  # type: ignore[method-assign]
        asyncio.get_running_loop().call_later(1.0, session.stop)
        await session.follow()

    asyncio.run(go())
    assert kept == [0]


def test_stdin_from_dev_null_is_an_empty_log(tmp_path: Path) -> None:
    """F02 (M2): stdin from /dev/null (cron, nohup, CI) is an empty log: judged at once, no traceback."""
    cfg = write_config(tmp_path, steps=20, runs=[RUN])
    with open(os.devnull, "rb") as null:
        proc = _follow(cfg, tmp_path / "out", "-", stdin=null)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, out + err
    assert "Traceback" not in err and "Exception in callback" not in err
    assert "log is empty" in out
    assert not load_results(tmp_path / "out" / "results.json").passed


def test_closed_stdin_is_one_line(tmp_path: Path) -> None:
    """F11 (L1): stdin closed (`<&-`) gives one line and exit 2, not an AttributeError traceback."""
    cfg = write_config(tmp_path, steps=20, runs=[RUN])
    cmd = " ".join(
        [*CLI, "analyze", str(cfg), "--follow", "--logs", "-", "--out", str(tmp_path / "o"), "<&-"]
    )
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=_env(), timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "standard input is closed" in proc.stderr and "Traceback" not in proc.stderr


def test_fifo_without_writer_ends_on_sigterm(tmp_path: Path) -> None:
    """FF08 (M3): a named pipe nobody writes to: SIGTERM ends following (it blocked in open() in a thread
    and only SIGKILL ended it); the empty log is judged as failed."""
    cfg = write_config(tmp_path, steps=20, runs=[RUN])
    fifo = tmp_path / "pf"
    os.mkfifo(fifo)
    proc = _follow(cfg, tmp_path / "out", str(fifo))
    try:
        _wait(lambda: (tmp_path / "out" / "events.jsonl").is_file(), "following to start")
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, out + err
    assert "Traceback" not in err


def test_fifos_and_process_substitution_several_at_once(tmp_path: Path) -> None:
    """FF09 (M3, L3): two pods' logs through process substitution (`<(cat pod0) <(cat pod1)`) are
    followed as streams and judged when both writers end (it said 'File or stream is not seekable')."""
    n0, n1 = FIXTURES / "twoproc_node0.log", FIXTURES / "twoproc_node1.log"
    out = tmp_path / "out"
    cmd = (
        f"{' '.join(CLI)} analyze {DISTRIBUTED} --follow --no-ui --logs <(cat {n0}) <(sleep 0.5; cat {n1}) "
        f"--out {out}"
    )
    env = {**_env(), "CVS_TUI_MAXTEXT_PYTHON": "/usr/bin/python3"}
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stage follow passed: every stream ended; PASS" in proc.stdout
    logs = sorted((out / "logs").rglob("node*.log"))
    assert [p.read_bytes() for p in logs] == [n0.read_bytes(), n1.read_bytes()]


def test_a_path_that_becomes_a_fifo_is_an_error_not_a_hang(tmp_path: Path) -> None:
    """FF07 (M3): a followed path replaced by a named pipe mid-follow: one line and exit 2 (a thread
    blocked in open() and SIGTERM was ignored)."""
    cfg = write_config(tmp_path, steps=20, runs=[RUN])
    log = tmp_path / "n0.log"
    log.write_bytes(b"")
    proc = _follow(cfg, tmp_path / "out", str(log))
    try:
        _wait(lambda: (tmp_path / "out" / "events.jsonl").is_file(), "following to start")
        log.unlink()
        os.mkfifo(log)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, out + err
    assert "named pipe" in err and "Traceback" not in err


def test_an_empty_node_log_fails_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """M1: a node whose log is empty is no evidence that the rank ran: analyze fails the run."""
    monkeypatch.setenv("CVS_TUI_MAXTEXT_PYTHON", "/usr/bin/python3")
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    res = analyze_paths(load_config(DISTRIBUTED), [FIXTURES / "twoproc_node0.log", empty])
    rec = res.runs[0]
    assert not res.passed and rec.status == "FAIL" and rec.root_cause_node == 1
    assert "node 1 log is empty" in rec.reason


def test_a_followed_file_that_never_appears_fails_the_run(tmp_path: Path) -> None:
    """FF27 (M1): two nodes followed, the second file never appears; SIGTERM: FAIL, not PASS."""
    n0 = tmp_path / "n0.log"
    n0.write_bytes((FIXTURES / "twoproc_node0.log").read_bytes())
    env = {**_env(), "CVS_TUI_MAXTEXT_PYTHON": "/usr/bin/python3"}
    out = tmp_path / "out"
    cmd = [
        *CLI,
        "analyze",
        str(DISTRIBUTED),
        "--follow",
        "--no-ui",
        "--logs",
        str(n0),
        str(tmp_path / "n1.log"),
    ]
    proc = subprocess.Popen(
        [*cmd, "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        copy = out / "logs" / "BS_2_PRECISION_BF16_SL_128" / "node0.log"
        _wait(lambda: copy.is_file() and copy.stat().st_size == n0.stat().st_size, "node 0's copy")
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, stdout + stderr
    assert "node 1 log is empty" in stdout
    assert not load_results(out / "results.json").passed


@pytest.mark.parametrize("how", ["SIGHUP", "closed-stdout"])
def test_hangup_or_a_closed_console_still_writes_the_verdict(tmp_path: Path, how: str) -> None:
    """F18/F21 (L2): SIGHUP (the terminal closed) and a console reader that went away (`| head -1`) end
    following and judge: results.json is written and the exit code is the verdict's (was 129/141, no
    results.json)."""
    cfg = write_config(tmp_path, steps=20, runs=[RUN])
    log = tmp_path / "n0.log"
    log.write_bytes((FIXTURES / "single_20steps.log").read_bytes())
    out = tmp_path / "out"
    cmd = [*CLI, "analyze", str(cfg), "--follow", "--no-ui", "--logs", str(log), "--out", str(out)]
    if how == "SIGHUP":
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
        copy = out / "logs" / "BS_2_PRECISION_BF16_SL_128" / "node0.log"
        _wait(lambda: copy.is_file() and copy.stat().st_size == log.stat().st_size, "the copy")
        proc.send_signal(signal.SIGHUP)
        stdout, stderr = proc.communicate(timeout=60)
        rc = proc.returncode
    else:
        line = " ".join(cmd) + " | head -1; exit ${PIPESTATUS[0]}"
        proc2 = subprocess.Popen(
            ["bash", "-c", line], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
        )
        copy = out / "logs" / "BS_2_PRECISION_BF16_SL_128" / "node0.log"
        _wait(lambda: copy.is_file() and copy.stat().st_size == log.stat().st_size, "the copy")
        time.sleep(0.5)
        follower = subprocess.run(
            ["pgrep", "-P", str(proc2.pid), "-f", "cvs_tui"], capture_output=True, text=True
        )
        for pid in follower.stdout.split():
            os.kill(int(pid), signal.SIGTERM)
        stdout, stderr = proc2.communicate(timeout=60)
        rc = proc2.returncode
    assert rc == 0, stdout + stderr
    assert "Traceback" not in stderr
    assert load_results(out / "results.json").passed


def test_stream_follower_on_a_fifo_path_reads_until_the_writer_ends(tmp_path: Path) -> None:
    """FF09 (L3): a FIFO given by path opens at once (no writer yet) and reads what a writer sends."""
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    (f,) = followers_for([str(fifo)])
    assert isinstance(f, StreamFollower)

    async def go() -> bytes:
        got: list[bytes] = []

        async def read() -> None:
            async for c in f.chunks():
                got.append(c)

        task = asyncio.create_task(read())
        await asyncio.sleep(0.2)
        fd = os.open(fifo, os.O_WRONLY)
        os.write(fd, b"line 1\nline 2\n")
        os.close(fd)
        await asyncio.wait_for(task, 10)
        return b"".join(got)

    assert asyncio.run(go()) == b"line 1\nline 2\n"


def test_follow_dev_zero_on_the_cli_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """FF21 (H2): `analyze --follow --logs /dev/zero` is refused with one line and exit 2."""
    cfg = write_config(tmp_path, steps=20, runs=[RUN])
    assert main(["analyze", str(cfg), "--follow", "--logs", "/dev/zero", "--out", str(tmp_path / "z")]) == 2
    err = capsys.readouterr().err
    assert "/dev/zero is a device" in err
    assert json.dumps(err).count("\\n") == 1


def test_attach_reads_events_a_piece_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """AT02 (L12): attach reads events.jsonl READ_CAP bytes at a time (it read the whole rest at once) and
    still yields every event, in order."""
    from cvs_tui.core.bus import EventBus
    from cvs_tui.core.events import StageEvent, StageState, SuiteEndEvent
    from cvs_tui.core.sources import attach

    out = tmp_path / "run"
    bus = EventBus(out / "events.jsonl")
    for i in range(60):
        bus.publish(StageEvent(stage=f"stage-{i}", state=StageState.PASSED, detail="x" * 40, at=float(i)))
    bus.publish(SuiteEndEvent(passed=True, results_path=None, report_path=None, at=60.0))
    bus.close()

    async def events() -> list[str]:
        return [type(ev).__name__ async for ev in attach.follow_run_folder(out, follow=False)]

    whole = asyncio.run(events())
    reads: list[int] = []
    orig = attach._read_events

    def spy(path: Path, state: attach._FolderState) -> list[object]:
        before = state.offset
        got = orig(path, state)
        reads.append(state.offset - before)
        return got  # type: ignore[return-value]

    monkeypatch.setattr(attach, "READ_CAP", 700)
    monkeypatch.setattr(attach, "_read_events", spy)
    assert asyncio.run(events()) == whole and "SuiteEndEvent" in whole
    assert len(reads) > 3 and max(reads) <= 700
