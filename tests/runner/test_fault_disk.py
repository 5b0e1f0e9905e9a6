"""Fault injection, disk full: the run folder on the controller and a node's output folder, each a small
tmpfs filled mid-run. The run must end failed with the reason, keep every line written before the fault,
print no traceback and leave nothing running. Loopback sshd nodes; the trainer is a sh double
(tests/_fault_infra.py)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import subprocess
import time
from pathlib import Path

import pytest
from _fault_infra import fault_setup, left_running, no_traceback
from _runner_infra import infra, needs_infra
from rich.console import Console
from suite_fixtures.helpers import SLUG, Setup, fast_options, make_suite, remove_scratch_tree

from cvs_tui.cli.console import run_console

pytestmark = [*needs_infra, pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")]


@contextlib.contextmanager
def tmpfs(path: Path, size: str, owner: str | None = None):  # type: ignore[no-untyped-def]
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)], check=True)
    try:
        if owner:
            os.chown(path, *(int(x) for x in _ids(owner)))
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _ids(user: str) -> tuple[str, str]:
    import pwd

    pw = pwd.getpwnam(user)
    return str(pw.pw_uid), str(pw.pw_gid)


def fill(fs: Path) -> None:
    """Writes zeros until the file system is full."""
    subprocess.run(["dd", "if=/dev/zero", f"of={fs / 'fill'}", "bs=64k"], capture_output=True, check=False)


async def _run_with_console(s: Setup, on_step: int, fs: Path) -> tuple[bool, str]:
    """The suite in-process with the headless console into a buffer; ``fs`` is filled once node 0's
    copied log holds ``on_step`` steps."""
    suite = make_suite(s, fast_options(min_free_bytes=1 << 20, hang_min_s=5.0))
    buf = io.StringIO()
    console = asyncio.create_task(run_console(suite.bus.subscribe(), console=Console(file=buf, width=200)))
    task = asyncio.create_task(suite.run())
    copied = s.out / "logs" / SLUG / "node0.log"
    end = time.monotonic() + 60
    while not (copied.exists() and copied.read_bytes().count(b"completed step:") >= on_step):
        assert not task.done() and time.monotonic() < end, "the run never reached the fault"
        await asyncio.sleep(0.05)
    fill(fs)
    try:
        await asyncio.wait_for(task, 120)
    finally:
        suite.bus.close()
    await asyncio.wait_for(console, 10)
    return suite.results_passed(), buf.getvalue()


def test_disk_full_in_the_run_folder_fails_the_run_and_stops_the_trainers(tmp_path: Path) -> None:
    s = fault_setup(tmp_path, "header\nsteps 0 400\nexit 0\n", steps=400, env={"CVS_FAULT_SLEEP": "0.05"})
    try:
        with tmpfs(tmp_path / "fs", "8m") as fs:
            s.out = fs / "run"
            passed, out = asyncio.run(_run_with_console(s, 10, fs))
            assert not passed
            assert no_traceback(out), out
            assert "disk full" in out, out
            assert "suite FAILED" in out
            assert left_running(s) == []
            for rank in (0, 1):  # what reached the run folder is the node's log up to the fault
                copied = s.copied_log(rank).read_bytes()
                own = s.node_log(rank).read_bytes()
                assert own.startswith(copied) and copied.count(b"completed step:") >= 10 * (rank == 0)
    finally:
        remove_scratch_tree(s)


def test_disk_full_on_a_node_fails_the_run_and_keeps_what_it_logged(tmp_path: Path) -> None:
    fill_to = "$CVS_FAULT_FS/fill"
    body = f"header\nsteps 0 6\ndd if=/dev/zero of={fill_to} bs=64k 2>/dev/null\nsteps 6 12\nexit 0\n"
    s = fault_setup(tmp_path, body, steps=12)
    try:
        with tmpfs(s.root / "runs", "4m", owner=infra().user) as fs:
            cfg = s.config.read_text().replace('"CVS_STANDIN_MODE": "clean"', f'"CVS_FAULT_FS": "{fs}"')
            s.config.write_text(cfg)
            suite = make_suite(s, fast_options(min_free_bytes=1 << 20, hang_min_s=5.0))
            try:
                asyncio.run(suite.run())
            finally:
                suite.bus.close()
            assert not suite.results_passed()
            rec = s.run_record()
            assert rec["status"] == "FAIL" and rec["outcome"] != "complete", rec["reason"]
            for rank in (0, 1):
                own = s.node_log(rank).read_bytes()
                assert own.count(b"completed step:") >= 6
                assert s.copied_log(rank).read_bytes() == own
            assert left_running(s) == []
            assert s.stage("teardown")["state"] == "passed"
    finally:
        remove_scratch_tree(s)
