"""Detection latency and resume cost of node-log following over SSH.

    python benchmarks/detection_latency.py [--lines 200] [--big-gib 1] [--repeat 15]

Needs the test infrastructure (``.ci/infra.sh up``; reads ``$CVS_TEST_ROOT/env``, default
``/tmp/cvs-ci/env``). The loopback nodes share this machine's filesystem and clock, so a line is
appended to the node's file here and its arrival is timed where the tailer hands over the chunk.

1. Latency: ~200 lines appended one at a time (random gaps of 5-50 ms) to a file on node 127.0.0.2;
   a :class:`LogTailer` reads it over SSH. Each line carries its write time; the figure is arrival
   minus write, p50/p95/max, for ``follow`` (``tail -F``) and for ``poll`` (0.1 s interval).
   Upstream CVS sleeps 60 s before its first poll and then polls every 60 s: 60-120 s.
2. Cost of one poll / one resume with a log already on the node, for a 1 kB and a 1 GiB file: a read
   of the last 100 bytes at the saved offset (``read_file``), and a fresh ``tail -c +N -F`` stream
   from that offset until its first chunk (what a resume after a disconnect does). Both must not grow
   with the file's size. For contrast, upstream's line-cursor poll (``tail -n +K``, which reads the
   whole file to count lines) is timed on the same files.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shlex
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _runner_infra import load_infra

from cvs_tui.core.runner.nodes.ssh import SSHTransport
from cvs_tui.core.runner.nodes.tail import LogTailer, follow_command


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def ms(x: float) -> str:
    return f"{x * 1000:8.2f} ms"


async def latency(t: SSHTransport, path: str, lines: int, mode: str) -> list[float]:
    Path(path).write_bytes(b"")
    tailer = LogTailer(t, path, mode=mode, poll_interval=0.1)  # type: ignore[arg-type]
    got: list[float] = []
    buf = b""

    async def reader() -> None:
        nonlocal buf
        async for chunk in tailer.chunks():
            now = time.monotonic()
            buf += chunk
            *complete, buf = buf.split(b"\n")
            for line in complete:
                got.append(now - float(line.split()[1]))
            if len(got) >= lines:
                tailer.stop()

    task = asyncio.create_task(reader())
    await asyncio.sleep(0.5)  # the stream is open before the first line
    with open(path, "ab", buffering=0) as f:
        for i in range(lines):
            f.write(f"line {time.monotonic():.6f} completed step: {i}, seconds: 0.5, loss: 3.0\n".encode())
            await asyncio.sleep(random.uniform(0.005, 0.05))
    await asyncio.wait_for(task, 30)
    return got


async def timed(fn, repeat: int) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        await fn()
        out.append(time.perf_counter() - t0)
    return out


async def resume_cost(t: SSHTransport, path: str, repeat: int) -> dict[str, list[float]]:
    size = os.path.getsize(path)
    offset = size - 100

    async def poll() -> None:
        data = await t.read_file(path, offset, 1 << 20)
        assert len(data) == 100

    async def resume() -> None:
        proc = await t.start_process(follow_command(path, offset))
        try:
            data = await proc.read()
            assert data
        finally:
            await proc.close()

    async def line_cursor() -> None:
        # upstream: `tail -n +{cursor+1} log` with a line cursor; it must scan to find line K
        r = await t.run(f"tail -n +{max(1, size // 100)} {shlex.quote(path)} | tail -c 100 >/dev/null", 300)
        assert r.rc == 0

    return {
        "poll (read_file at offset)": await timed(poll, repeat),
        "resume (tail -c +N -F, first chunk)": await timed(resume, repeat),
        "upstream line cursor (tail -n +K)": await timed(line_cursor, max(3, repeat // 5)),
    }


def make_file(path: str, size: int) -> None:
    line = (
        b"I1130 12:00:00.000000 1 metric_logger.py:265] completed step: 1, seconds: 0.5, loss: 3.0 "
        + b"x" * 10
    )
    line = line[:99] + b"\n"  # 100-byte lines
    block = line * (1 << 14)
    with open(path, "wb") as f:
        left = size
        while left > 0:
            n = min(left, len(block))
            f.write(block[:n])
            left -= n


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=200)
    ap.add_argument("--big-gib", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    infra = load_infra()
    if infra is None:
        print("test infrastructure not up: run `bash .ci/infra.sh up` first", file=sys.stderr)
        return 2
    node = infra.nodes[0]
    d = f"{infra.scratch}/bench-{uuid.uuid4().hex[:8]}"
    os.makedirs(d)
    t = SSHTransport(
        node, port=infra.port, user=infra.user, key_file=infra.key, known_hosts=infra.known_hosts
    )
    try:
        await t.connect()
        print(
            f"node {node}:{infra.port} over SSH (OpenSSH sshd, asyncssh client), {args.lines} lines per mode"
        )
        print(f"{'mode':<28}{'p50':>12}{'p95':>12}{'max':>12}")
        for mode in ("follow", "poll"):
            lat = await latency(t, f"{d}/{mode}.log", args.lines, mode)
            label = "follow (tail -F)" if mode == "follow" else "poll (every 0.1 s)"
            print(f"{label:<28}{ms(statistics.median(lat))}{ms(pct(lat, 95))}{ms(max(lat))}")
        print()
        sizes = {"1 kB": 1000, f"{args.big_gib:g} GiB": int(args.big_gib * (1 << 30))}
        print(
            f"cost of one poll / resume near the end of an existing log ({args.repeat} repeats, median / p95)"
        )
        print(f"{'operation':<40}" + "".join(f"{k:>26}" for k in sizes))
        results: dict[str, dict[str, list[float]]] = {}
        for label, size in sizes.items():
            path = f"{d}/big-{size}.log"
            make_file(path, size)
            results[label] = await resume_cost(t, path, args.repeat)
            os.unlink(path)
        for op in next(iter(results.values())):
            cells = "".join(
                f"{ms(statistics.median(results[k][op])) + ' / ' + ms(pct(results[k][op], 95)).strip():>26}"
                for k in sizes
            )
            print(f"{op:<40}{cells}")
    finally:
        await t.close()
        shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
