"""What a node reached through srun side steps costs (SlurmTransport, Docker on Slurm nodes).

    python benchmarks/slurm_side_steps.py [--repeat 10] [--bridge auto|socat|python3]

Needs the two-node Slurm cluster (``.ci/slurm.sh up``) and the test dockerd (``.ci/infra.sh up``). It
requests a one-node allocation (``--oversubscribe``), measures on it, and releases it:

1. a side command (``true``): one srun step, start to exit;
2. write_file / read_file of 1 MiB through the step's stdin / stdout;
3. the Docker API through the forwarded socket: the first call of a connection (a new side step and
   bridge), a call on the pooled connection, and a ``docker exec`` round trip (its own connection).

Prints medians (and the slowest) in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiodocker
from _runner_infra import infra
from _slurm_infra import slurm

from cvs_tui.core.runner.slurm.client import release_allocation, request_allocation
from cvs_tui.core.runner.slurm.transport import Bridge, SlurmTransport


async def _times(n: int, fn: Callable[[], Awaitable[object]]) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        await fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def _line(what: str, ms: list[float]) -> None:
    print(f"{what:<46} median {statistics.median(ms):8.1f} ms   max {max(ms):8.1f} ms   (n={len(ms)})")


async def main(repeat: int, bridge: Bridge) -> None:
    client = slurm().client()
    alloc = await request_allocation(client, ["-N", "1", "--oversubscribe", "-J", "cvs-bench-side"], 120)
    t = SlurmTransport(client, alloc.job_id, alloc.nodes[0], bridge=bridge)
    data = os.urandom(1 << 20)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "f.bin")
            _line("side command `true`", await _times(repeat, lambda: t.run("true", 60)))
            _line("write_file 1 MiB", await _times(repeat, lambda: t.write_file(path, data)))
            _line("read_file 1 MiB", await _times(repeat, lambda: t.read_file(path)))

        sock = await t.forward_unix_socket(infra().remote_docker_sock)

        async def first_call() -> None:
            d = aiodocker.Docker(url=f"unix://{sock}")
            try:
                await d.version()
            finally:
                await d.close()

        _line(f"Docker API, first call of a connection ({t.bridge})", await _times(repeat, first_call))
        d = aiodocker.Docker(url=f"unix://{sock}")
        name = f"cvs-bench-{os.getpid()}"
        try:
            await d.version()
            _line("Docker API, pooled connection (version)", await _times(repeat, d.version))
            c = await d.containers.run({"Image": infra().image, "Cmd": ["sleep", "300"]}, name=name)

            async def exec_true() -> None:
                ex = await c.exec(["true"])
                async with ex.start(detach=False) as s:
                    while await s.read_out() is not None:
                        pass

            _line("docker exec round trip (own connection)", await _times(repeat, exec_true))
        finally:
            try:
                await d.containers.container(name).delete(force=True)
            except aiodocker.DockerError:
                pass
            await d.close()
    finally:
        await t.close()
        await release_allocation(client, alloc)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--bridge", choices=["auto", "socat", "python3"], default="auto")
    a = ap.parse_args()
    asyncio.run(main(a.repeat, a.bridge))
