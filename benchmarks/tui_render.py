"""TUI render benchmark: N nodes x R lines/s for D seconds into the real app (headless), printing figures.

Measures key-to-screen latency (a key event posted to the app until its effect, the node cursor moving,
has been handled and the screen repainted after it), the CPU
used by the process while the stream runs, idle CPU with the finished run on screen, and memory: RSS
sampled every ``--rss-every`` seconds, so a long run shows whether it stays flat once the per-node ring
buffers are full (older lines stay on disk and are read back when the user scrolls up).

    .venv/bin/python benchmarks/tui_render.py                      # 256 nodes x 20 lines/s, 120 s
    .venv/bin/python benchmarks/tui_render.py --nodes 64 --rate 50 --seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import time
from collections.abc import AsyncIterator

from textual import events

from cvs_tui.core.events import (
    LogLinesEvent,
    NodeLogEvent,
    RunEndEvent,
    RunEvent,
    RunOutcome,
    RunStartEvent,
    StepEvent,
    SuiteEndEvent,
)
from cvs_tui.tui.app import CvsApp
from cvs_tui.tui.widgets.node_table import NodeTable

TICK = 0.1  # the stream delivers one batch per node every TICK seconds, as the runner batches lines


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def rss_mib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def stream(nodes: int, rate: int, seconds: float, done: asyncio.Event) -> AsyncIterator[RunEvent]:
    yield RunStartEvent("BENCH", 1_000_000, tuple(f"gpu-node-{i:02d}" for i in range(nodes)), at=time.time())
    per_tick = max(1, round(rate * TICK))
    next_line = [1] * nodes
    step = 0
    start = time.monotonic()
    tick = 0
    while time.monotonic() - start < seconds:
        tick += 1
        for node in range(nodes):
            first = next_line[node]
            lines = tuple(
                f"I1130 07:29:46.{first + k:06d} 1397821569 metric_logger.py:265] completed step: {step}, "
                f"seconds: 0.118, TFLOP/s/device: 0.009, Tokens/s/device: 2165.143, "
                f"loss: {10 - step * 1e-4:.3f}"
                for k in range(per_tick)
            )
            next_line[node] += per_tick
            yield LogLinesEvent("BENCH", node, first, lines)
            yield NodeLogEvent(
                "BENCH",
                node,
                StepEvent(step, 10 - step * 1e-4, first, seconds=0.118, tokens_per_device=2165.0),
            )
        step += 1
        await asyncio.sleep(max(0.0, start + tick * TICK - time.monotonic()))
    yield RunEndEvent("BENCH", RunOutcome.COMPLETE, at=time.time())
    yield SuiteEndEvent(True, at=time.time())
    done.set()


async def main(args: argparse.Namespace) -> None:
    done = asyncio.Event()
    app = CvsApp(stream(args.nodes, args.rate, args.seconds, done), title="bench")
    latencies: list[float] = []
    rss: list[tuple[float, float]] = []  # (seconds since start, RSS MiB)
    async with app.run_test(size=(160, 48)) as pilot:
        cpu0, t0 = cpu_seconds(), time.monotonic()
        rss.append((0.0, rss_mib()))
        table = app.dashboard.query_one(NodeTable)
        i = 0
        while not done.is_set():
            await asyncio.sleep(args.key_interval)
            key = "down" if (i // 8) % 2 == 0 else "up"
            before = table.cursor
            loop = asyncio.get_running_loop()
            k0 = time.perf_counter()
            app.post_message(events.Key(key, None))
            while table.cursor == before and time.perf_counter() - k0 < 5:
                await asyncio.sleep(0.0005)
            painted = loop.create_future()
            app.call_after_refresh(lambda f=painted: f.done() or f.set_result(None))
            await painted
            latencies.append(time.perf_counter() - k0)
            i += 1
            if time.monotonic() - t0 >= rss[-1][0] + args.rss_every:
                rss.append((time.monotonic() - t0, rss_mib()))
        busy_cpu = (cpu_seconds() - cpu0) / (time.monotonic() - t0)
        await pilot.pause(0.5)
        rss_end = rss_mib()
        cpu1, t1 = cpu_seconds(), time.monotonic()
        await asyncio.sleep(args.idle_seconds)
        idle_cpu = (cpu_seconds() - cpu1) / (time.monotonic() - t1)
        lines = sum(nv.lines.next_line - 1 for nv in app.view.runs["BENCH"].nodes.values())
    lat = sorted(latencies)
    wanted = args.nodes * args.rate * args.seconds
    print(
        f"stream: {args.nodes} nodes x {args.rate} lines/s for {args.seconds:.0f} s = {lines} lines"
        f" ({lines / wanted * 100:.0f} % of the {wanted:.0f} asked for; below 100 % the app fell behind"
        " or the machine was busy)"
    )
    print(
        f"key-to-screen latency over {len(lat)} presses: p50 {statistics.median(lat) * 1e3:.1f} ms, "
        f"p95 {lat[int(len(lat) * 0.95) - 1] * 1e3:.1f} ms, max {lat[-1] * 1e3:.1f} ms"
    )
    print(f"CPU while streaming (whole process, incl. the generator): {busy_cpu * 100:.1f} % of a core")
    idle_s = args.idle_seconds
    print(f"idle CPU with the finished run on screen ({idle_s:.0f} s): {idle_cpu * 100:.2f} % of a core")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"memory: RSS {rss_end:.0f} MiB at the end; peak {peak:.0f} MiB")
    print("RSS over time: " + ", ".join(f"{t:.0f}s {m:.0f}" for t, m in rss) + " MiB")
    half = [m for t, m in rss if t >= args.seconds / 2]
    if len(half) >= 2:
        print(f"RSS change over the second half: {half[-1] - half[0]:+.0f} MiB")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--rate", type=int, default=20, help="lines per second per node")
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--rss-every", type=float, default=10.0, help="seconds between RSS samples")
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--key-interval", type=float, default=0.5, help="seconds between key presses")
    asyncio.run(main(ap.parse_args()))
