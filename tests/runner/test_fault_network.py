"""Fault injection, network: a node's sshd killed and restarted mid-run, and the network to a node
dropped (its address removed from `lo`) and restored. Each node here is a private OpenSSH sshd started
by the test on an address of its own, so killing it touches nothing shared. The run must end with the
right verdict, keep every line, and leave nothing running. The trainer is a sh double
(tests/_fault_infra.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _fault_infra import fault_setup, left_running
from _runner_infra import infra, needs_infra
from suite_fixtures.helpers import SLUG, Setup, fast_options, make_suite, remove_scratch_tree

pytestmark = [*needs_infra, pytest.mark.skipif(os.geteuid() != 0, reason="needs root (sshd, ip addr)")]

SSHD_PORT = 2222


class PrivateSshd:
    """One OpenSSH sshd on ``addr``, configured like the shared test nodes (.ci/infra.sh)."""

    def __init__(self, addr: str, folder: Path) -> None:
        self.addr, self.folder = addr, folder
        ssh = Path(infra().root) / "ssh"
        self.config = folder / "sshd_config"
        self.config.write_text(
            f"ListenAddress {addr}:{SSHD_PORT}\nHostKey {ssh / 'host_key'}\nPidFile {folder / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {ssh / 'authorized_keys'}\nStrictModes no\nPermitRootLogin no\n"
            "PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "UsePAM no\nAllowTcpForwarding yes\nMaxSessions 100\nMaxStartups 200:30:400\n"
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(self.config)])
        end = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection((self.addr, SSHD_PORT), 0.5):
                return
            assert time.monotonic() < end, "the private sshd did not start"
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL the daemon and every sshd process serving its connections, as a crash would."""
        assert self.proc is not None
        for pid in [self.proc.pid, *_descendants(self.proc.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill()


def _descendants(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True, check=True).stdout
    children: dict[int, list[int]] = {}
    for line in out.splitlines():
        p, pp = (int(x) for x in line.split())
        children.setdefault(pp, []).append(p)
    found, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            found.append(c)
            todo.append(c)
    return found


@contextlib.contextmanager
def private_node(s: Setup, addr: str, tmp_path: Path, *, on_lo: bool = False) -> Iterator[PrivateSshd]:
    """Node 1 of ``s`` becomes a private sshd on ``addr`` (added to `lo` first when ``on_lo``)."""
    if on_lo:
        subprocess.run(["ip", "addr", "add", f"{addr}/32", "dev", "lo"], check=True)
    d = tmp_path / f"sshd-{addr}"
    d.mkdir()
    sshd = PrivateSshd(addr, d)
    kh = d / "known_hosts"
    pub = (Path(infra().root) / "ssh" / "host_key.pub").read_text().split()
    kh.write_text(Path(infra().known_hosts).read_text() + f"[{addr}]:{SSHD_PORT} {pub[0]} {pub[1]}\n")
    cl = json.loads(s.cluster.read_text())
    cl["nodes"] = [infra().nodes[0], addr]
    cl["known_hosts"] = str(kh)
    s.cluster.write_text(json.dumps(cl))
    sshd.start()
    try:
        yield sshd
    finally:
        sshd.stop()
        if on_lo:
            subprocess.run(["ip", "addr", "del", f"{addr}/32", "dev", "lo"], check=False)


def _steps(path: Path) -> int:
    return path.read_bytes().count(b"completed step:") if path.exists() else 0


async def _run_with_fault(s: Setup, at_step: int, fault, restore, pause: float) -> bool:  # type: ignore[no-untyped-def]
    suite = make_suite(s, fast_options(compile_allowance_s=60.0, hang_min_s=30.0))
    task = asyncio.create_task(suite.run())
    try:
        end = time.monotonic() + 60
        while _steps(s.out / "logs" / SLUG / "node1.log") < at_step:
            assert not task.done() and time.monotonic() < end, "the run never reached the fault"
            await asyncio.sleep(0.05)
        fault()
        await asyncio.sleep(pause)
        restore()
        await asyncio.wait_for(task, 180)
    finally:
        suite.bus.close()
        if not task.done():
            task.cancel()
    return suite.results_passed()


BODY = "header\nsteps 0 60\nexit 0\n"


def test_sshd_killed_and_restarted_mid_run_loses_no_line(tmp_path: Path) -> None:
    s = fault_setup(tmp_path, BODY, steps=60, env={"CVS_FAULT_SLEEP": "0.1"})
    try:
        with private_node(s, "127.0.0.21", tmp_path) as sshd:
            passed = asyncio.run(_run_with_fault(s, 10, sshd.kill, sshd.start, 3.0))
        rec = s.run_record()
        assert passed and rec["outcome"] == "complete", rec["reason"]
        for rank in (0, 1):
            assert s.copied_log(rank).read_bytes() == s.node_log(rank).read_bytes()
            assert _steps(s.node_log(rank)) == 60
        assert left_running(s) == []
    finally:
        remove_scratch_tree(s)


def test_network_dropped_and_restored_mid_run_loses_no_line(tmp_path: Path) -> None:
    addr = "198.18.77.2"  # benchmarking range: not routed here once it is off `lo`
    s = fault_setup(tmp_path, BODY, steps=60, env={"CVS_FAULT_SLEEP": "0.1"})
    try:
        with private_node(s, addr, tmp_path, on_lo=True):

            def drop() -> None:
                subprocess.run(["ip", "addr", "del", f"{addr}/32", "dev", "lo"], check=True)

            def restore() -> None:
                subprocess.run(["ip", "addr", "add", f"{addr}/32", "dev", "lo"], check=True)

            passed = asyncio.run(_run_with_fault(s, 10, drop, restore, 5.0))
        rec = s.run_record()
        assert passed and rec["outcome"] == "complete", rec["reason"]
        for rank in (0, 1):
            assert s.copied_log(rank).read_bytes() == s.node_log(rank).read_bytes()
            assert _steps(s.node_log(rank)) == 60
        assert left_running(s) == []
    finally:
        remove_scratch_tree(s)


def test_a_node_that_stays_unreachable_is_not_reported_clean(tmp_path: Path) -> None:
    """The network to node 1 goes and stays gone: the run fails as node lost, and teardown must say it
    could not check node 1 (it is restored afterwards, and its trainer stopped by the test)."""
    addr = "198.18.77.3"
    s = fault_setup(tmp_path, BODY, steps=60, env={"CVS_FAULT_SLEEP": "0.2"})
    try:
        with private_node(s, addr, tmp_path, on_lo=True):
            opts = fast_options(compile_allowance_s=60.0, hang_min_s=60.0, connect_timeout_s=3.0)

            async def go() -> bool:
                suite = make_suite(s, opts)
                task = asyncio.create_task(suite.run())
                try:
                    end = time.monotonic() + 60
                    while _steps(s.out / "logs" / SLUG / "node1.log") < 5:
                        assert not task.done() and time.monotonic() < end
                        await asyncio.sleep(0.05)
                    subprocess.run(["ip", "addr", "del", f"{addr}/32", "dev", "lo"], check=True)
                    await asyncio.wait_for(task, 240)
                finally:
                    suite.bus.close()
                return suite.results_passed()

            try:
                passed = asyncio.run(go())
            finally:
                subprocess.run(["ip", "addr", "add", f"{addr}/32", "dev", "lo"], check=False)
            assert not passed
            rec = s.run_record()
            assert rec["status"] == "FAIL" and "node 1" in rec["reason"], rec["reason"]
            # named lost, in the transport's words, not hung: the hang budget (60 s) is longer than
            # the keepalives (5 s x 3) and lost_after_s (15 s) together
            assert rec["outcome"] == "failed" and f"node 1 ({addr}) lost: " in rec["reason"], rec["reason"]
            td = s.stage("teardown")
            assert td["state"] == "failed" and "node 1" in td["detail"], td
            copied, own = s.copied_log(1).read_bytes(), s.node_log(1).read_bytes()
            assert own.startswith(copied) and _steps_bytes(copied) >= 5
    finally:
        for line in left_running(s):  # node 1's trainer outlived a network cvs-tui could not reach
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split()[0]), signal.SIGKILL)
        remove_scratch_tree(s)


def _steps_bytes(data: bytes) -> int:
    return data.count(b"completed step:")
