"""Helpers for the node-health tests: write into the real kernel log, collect findings, sudo access."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from cvs_tui.core.health import kmsg
from cvs_tui.core.health.kmsg import KernelLogFollower
from cvs_tui.core.health.model import HealthFinding

SUDOERS = Path("/etc/sudoers.d/cvs-tui-health-test")


def present_pci() -> str:
    """A PCI address this machine has (the test nodes share its kernel and /sys)."""
    devices = sorted(p.name for p in Path("/sys/bus/pci/devices").glob("*:*:*.*"))
    return devices[0] if devices else "0000:00:00.0"


# an AMD GPU reset on a device the node has (a line on a device it lacks is only a warning)
RESET = f"amdgpu {present_pci()}: amdgpu: GPU reset begin! {{tag}}"


@pytest.fixture
def trust_injected(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test double for a GPU driver this machine lacks. The follower only trusts records the kernel
    logged (facility 0); lines a test writes into /dev/kmsg get facility 1 (user) from the kernel, so
    for the duration of one test facility 1 is trusted too. Tests without it show such lines are ignored.
    """
    monkeypatch.setattr(kmsg, "TRUSTED_FACILITIES", frozenset({0, 1}))


def can_write_kmsg() -> bool:
    return os.geteuid() == 0 and os.access("/dev/kmsg", os.W_OK)


needs_kmsg_writer = pytest.mark.skipif(
    not can_write_kmsg(), reason="writing test lines into the kernel log needs root and a writable /dev/kmsg"
)


def nonce() -> str:
    return f"cvs-test-{uuid.uuid4().hex[:10]}"


def inject(message: str, level: int = 3) -> float:
    """Write one record into the real kernel log (own open: /dev/kmsg rate-limits per open file)."""
    with open("/dev/kmsg", "w") as f:
        f.write(f"<{level}>{message}\n")
    return time.time()


class Collector:
    """Runs a follower's ``findings()`` in the background and hands out the ones carrying a nonce."""

    def __init__(self, follower: KernelLogFollower) -> None:
        self.follower = follower
        self.found: list[HealthFinding] = []
        self.arrived: dict[int, float] = {}  # seq -> time.time() when the finding was yielded
        self._new = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        async for f in self.follower.findings():
            self.found.append(f)
            if f.seq is not None:
                self.arrived[f.seq] = time.time()
            self._new.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def with_nonce(self, tag: str) -> list[HealthFinding]:
        return [f for f in self.found if tag in f.line]

    async def wait_for(self, tag: str, count: int = 1, timeout: float = 10.0) -> list[HealthFinding]:
        deadline = time.monotonic() + timeout
        while len(self.with_nonce(tag)) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no finding with {tag} after {timeout} s: {self.found[-3:]}")
            self._new.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new.wait(), left)
            if self._task is not None and self._task.done() and self._task.exception():
                raise self._task.exception()  # type: ignore[misc]
        return self.with_nonce(tag)

    async def stop(self) -> None:
        self.follower.stop()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._task, 10)


@contextlib.asynccontextmanager
async def collecting(follower: KernelLogFollower) -> AsyncIterator[Collector]:
    c = Collector(follower)
    c.start()
    try:
        yield c
    finally:
        await c.stop()


@contextlib.contextmanager
def sudo_kmsg_rule(user: str) -> Iterator[None]:
    """Let ``user`` run exactly the two kernel-log commands with ``sudo -n`` (what infra must set up).

    Skips when this machine has no sudo; the rule is removed afterwards unless it was already there.
    """
    if shutil.which("sudo") is None or os.geteuid() != 0:
        pytest.skip("sudo -n path needs the sudo package and root to install a sudoers rule")
    cat, dd = shutil.which("cat") or "/usr/bin/cat", shutil.which("dd") or "/usr/bin/dd"
    probe = f"{dd} if=/dev/kmsg iflag=nonblock bs=65536 status=none"
    rule = f"{user} ALL=(root) NOPASSWD: {cat} /dev/kmsg, {probe}\n"
    # one file per user: a rule for one node user never grants (or hides) another's access
    rule_file = SUDOERS.with_name(f"{SUDOERS.name}-{user}")
    existed = rule_file.exists()
    if not existed:
        tmp = rule_file.with_suffix(".tmp")
        tmp.write_text(rule)
        tmp.chmod(0o440)
        subprocess.run(["visudo", "-cf", str(tmp)], check=True, capture_output=True)
        tmp.rename(rule_file)
    try:
        yield
    finally:
        if not existed:
            rule_file.unlink(missing_ok=True)
