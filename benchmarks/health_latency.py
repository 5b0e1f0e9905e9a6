"""Detection latency of node health: a kernel line written to /dev/kmsg until cvs-tui acts on it.

Two modes (both need root to write /dev/kmsg):

* ``follower`` (default): the kernel-log follower on this machine (LocalTransport, as root), N lines,
  each an amdgpu reset in its real format; prints the write -> finding latency (p50, p95, max).
* ``live``: the full path in a live two-node run over SSH on the loopback test nodes (needs the test
  infra, CVS_TEST_ROOT): runs tests/health/test_health_live.py's reset test, which prints kernel write ->
  node FAILED (the watchdog's fatal) and -> RunEndEvent FAILED (after fail_grace_s and stopping the
  other rank).

    python benchmarks/health_latency.py [follower|live] [-n 50]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from cvs_tui.core.health.kmsg import KernelLogFollower
from cvs_tui.core.runner.nodes.local import LocalTransport

LINE = "amdgpu 0000:08:00.0: amdgpu: GPU reset begin! {tag}"


async def follower(n: int) -> list[float]:
    f = KernelLogFollower(LocalTransport(name="local#0"), node=0, host="local")
    if not await f.start():
        raise SystemExit(f"cannot read the kernel log: {f.health.reason}")
    out: list[float] = []
    it = f.findings()
    for _ in range(n):
        tag = f"bench-{uuid.uuid4().hex[:8]}"
        with open("/dev/kmsg", "w") as k:
            k.write(f"<3>{LINE.format(tag=tag)}\n")
        written = time.time()
        while True:
            hit = await asyncio.wait_for(it.__anext__(), 10)
            if tag in hit.line:
                out.append(time.time() - written)
                break
    f.stop()
    await it.aclose()  # suspended at its last yield: closing ends the cat /dev/kmsg process cleanly
    await f.transport.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", nargs="?", default="follower", choices=("follower", "live"))
    ap.add_argument("-n", type=int, default=50)
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (writes /dev/kmsg)")
    if a.mode == "live":
        root = Path(__file__).resolve().parents[1]
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-s",
            "tests/health/test_health_live.py",
            "-k",
            "injected",
        ]
        r = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
        print(
            "\n".join(
                ln for ln in r.stdout.splitlines() if "latency" in ln or "passed" in ln or "failed" in ln
            )
        )
        raise SystemExit(r.returncode)
    lat = sorted(asyncio.run(follower(a.n)))
    ms = [x * 1000 for x in lat]
    p95 = ms[min(len(ms) - 1, int(0.95 * len(ms)))]
    print(
        f"kernel write -> finding (local follower, {len(ms)} lines): p50 {statistics.median(ms):.1f} ms, "
        f"p95 {p95:.1f} ms, max {ms[-1]:.1f} ms"
    )


if __name__ == "__main__":
    main()
