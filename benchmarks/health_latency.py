"""Detection latency of the node-health kernel-log follower: from writing a line into the real kernel
log (/dev/kmsg, as root) to the matched finding coming out of ``KernelLogFollower.findings()``.

Local (root reads /dev/kmsg itself) and, when the test infrastructure is up and sudo is installed,
over SSH to the test nodes with ``health.kernel_log: sudo`` (a temporary sudoers rule for the node
user, as tests/_health_kmsg.py installs it). Prints median / p95 / max in milliseconds.

    CVS_TEST_ROOT=/tmp/cvs-ci .venv/bin/python benchmarks/health_latency.py [--n 30]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _health_kmsg import can_write_kmsg, collecting, inject, nonce, sudo_kmsg_rule
from _runner_infra import INFRA, ssh

from cvs_tui.core.health.kmsg import Access, KernelLogFollower
from cvs_tui.core.runner.transport import LocalTransport, Transport


async def measure(transport: Transport, access: Access, n: int) -> list[float]:
    f = KernelLogFollower(transport, node=0, access=access)
    if not await f.start():
        raise SystemExit(f"{transport.name}: {f.health.reason}")
    out = []
    async with collecting(f) as c:
        for _ in range(n):
            tag = nonce()
            written = inject(f"amdgpu 0000:08:00.0: amdgpu: GPU reset begin! {tag}")
            (hit,) = await c.wait_for(tag)
            out.append((c.arrived[hit.seq] - written) * 1000)
            await asyncio.sleep(0.05)
    return out


def report(name: str, ms: list[float]) -> None:
    ms = sorted(ms)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    print(
        f"{name:<28} n={len(ms):<3} median {statistics.median(ms):7.2f} ms"
        f"   p95 {p95:7.2f} ms   max {ms[-1]:7.2f} ms"
    )


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=30)
    n = ap.parse_args().n
    if not can_write_kmsg():
        raise SystemExit("needs root and a writable /dev/kmsg")
    report("local (root, cat /dev/kmsg)", await measure(LocalTransport(), "plain", n))
    if INFRA is None:
        print("ssh: skipped (test infrastructure not up)")
        return
    with sudo_kmsg_rule(INFRA.user):
        t = ssh()
        try:
            started = time.perf_counter()
            ms = await measure(t, "sudo", n)
            report(f"ssh {INFRA.nodes[0]} (sudo -n)", ms)
            print(f"(ssh run incl. connect + probe: {time.perf_counter() - started:.1f} s)")
        finally:
            await t.close()


if __name__ == "__main__":
    asyncio.run(main())
