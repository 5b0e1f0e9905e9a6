"""TUI render benchmark: N nodes x R lines/s into the real app (headless), printing figures.

Measures key-to-screen latency (a key event posted to the app until its effect, the node cursor moving,
has been handled and the screen repainted after it), the CPU used by the process while the stream runs,
idle CPU with the finished run on screen, and memory: RSS sampled every ``--rss-every`` seconds next to
the number of lines delivered, so a long run shows whether it stays flat once the per-node ring buffers
are full (older lines stay on disk and are read back when the user scrolls up).

Two ways to run it:

* live (default): ``--rate`` lines/s per node for ``--seconds``, one batch per node every 0.1 s as the
  runner delivers them, with one step event per batch. This is what key-to-screen and CPU are read from.
* compressed (``--lines-per-node N``): the same stream as fast as the app takes it, in batches of
  ``--batch`` lines per node, with one step event per ``--lines-per-step`` lines (2, as the live stream
  at 20 lines/s). What the app keeps depends on lines and steps per node, not on the clock, so
  ``--lines-per-node 36000`` holds what a 30-minute run at 20 lines/s holds (36 000 lines, 18 000 steps
  per node). It prints the RSS curve against lines and its slope once the ring buffers are full, in MiB
  per million lines; ``--tracemalloc`` adds the allocation sites that grew over that stretch.

    .venv/bin/python benchmarks/tui_render.py                      # 256 nodes x 20 lines/s, 120 s
    .venv/bin/python benchmarks/tui_render.py --nodes 64 --rate 50 --seconds 60
    .venv/bin/python benchmarks/tui_render.py --lines-per-node 36000   # a 30-minute run's memory
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import time
import tracemalloc
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from textual import events

from cvs_tui.core import state
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


@dataclass
class Progress:
    lines: int = 0  # delivered so far, all nodes
    done: asyncio.Event = field(default_factory=asyncio.Event)


def _line(n: int, step: int) -> str:
    return (
        f"I1130 07:29:46.{n % 1_000_000:06d} 1397821569 metric_logger.py:265] completed step: {step}, "
        f"seconds: 0.118, TFLOP/s/device: 0.009, Tokens/s/device: 2165.143, "
        f"loss: {10 - step * 1e-4:.3f}"
    )


async def stream(args: argparse.Namespace, progress: Progress) -> AsyncIterator[RunEvent]:
    nodes = args.nodes
    yield RunStartEvent("BENCH", 1_000_000, tuple(f"gpu-node-{i:02d}" for i in range(nodes)), at=time.time())
    compressed = args.lines_per_node > 0
    per_tick = args.batch if compressed else max(1, round(args.rate * TICK))
    per_step = args.lines_per_step if compressed else per_tick  # live: one step per batch
    next_line = [1] * nodes
    start = time.monotonic()
    tick = 0
    while (
        (next_line[0] - 1 < args.lines_per_node) if compressed else (time.monotonic() - start < args.seconds)
    ):
        tick += 1
        for node in range(nodes):
            first = next_line[node]
            lines = tuple(_line(first + k, (first + k - 1) // per_step) for k in range(per_tick))
            next_line[node] += per_tick
            yield LogLinesEvent("BENCH", node, first, lines)
            for n in range(first, first + per_tick):
                if n % per_step == 0:
                    step = n // per_step - 1
                    yield NodeLogEvent(
                        "BENCH",
                        node,
                        StepEvent(step, 10 - step * 1e-4, n, seconds=0.118, tokens_per_device=2165.0),
                    )
            progress.lines += per_tick
        # compressed: a yield to the loop per tick, as fast as the app folds them; live: on the clock
        await asyncio.sleep(0 if compressed else max(0.0, start + tick * TICK - time.monotonic()))
    yield RunEndEvent("BENCH", RunOutcome.COMPLETE, at=time.time())
    yield SuiteEndEvent(True, at=time.time())
    progress.done.set()


def slope_mib_per_mline(samples: list[tuple[float, int, float]], from_lines: int) -> float | None:
    """Least-squares slope of RSS against lines delivered, over the samples from ``from_lines`` on."""
    pts = [(lines / 1e6, mib) for _t, lines, mib in samples if lines >= from_lines]
    if len(pts) < 3:
        return None
    mx = statistics.fmean(x for x, _ in pts)
    my = statistics.fmean(y for _, y in pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else None


async def main(args: argparse.Namespace) -> None:
    progress = Progress()
    app = CvsApp(stream(args, progress), title="bench")
    latencies: list[float] = []
    samples: list[tuple[float, int, float]] = []  # (seconds since start, lines delivered, RSS MiB)
    full_at = args.nodes * state.NODE_BUFFER_LINES  # lines delivered when every ring buffer is full
    snap_full: tracemalloc.Snapshot | None = None
    async with app.run_test(size=(160, 48)) as pilot:
        cpu0, t0 = cpu_seconds(), time.monotonic()
        samples.append((0.0, 0, rss_mib()))
        table = app.dashboard.query_one(NodeTable)
        i = 0
        while not progress.done.is_set():
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
            if time.monotonic() - t0 >= samples[-1][0] + args.rss_every:
                samples.append((time.monotonic() - t0, progress.lines, rss_mib()))
                if args.progress:
                    print(
                        f"  {samples[-1][0]:.0f} s: {progress.lines:,} lines, RSS {samples[-1][2]:.0f} MiB",
                        flush=True,
                    )
            if args.tracemalloc and snap_full is None and progress.lines >= full_at * 1.2:
                snap_full = tracemalloc.take_snapshot()
        elapsed = time.monotonic() - t0
        busy_cpu = (cpu_seconds() - cpu0) / elapsed
        await pilot.pause(0.5)
        samples.append((time.monotonic() - t0, progress.lines, rss_mib()))
        snap_end = tracemalloc.take_snapshot() if snap_full is not None else None
        cpu1, t1 = cpu_seconds(), time.monotonic()
        await asyncio.sleep(args.idle_seconds)
        idle_cpu = (cpu_seconds() - cpu1) / (time.monotonic() - t1)
        lines = sum(nv.lines.next_line - 1 for nv in app.view.runs["BENCH"].nodes.values())
        held = sum(len(nv.lines) for nv in app.view.runs["BENCH"].nodes.values())
    report(args, latencies, samples, elapsed, busy_cpu, idle_cpu, lines, held, full_at)
    if snap_full is not None and snap_end is not None:
        print("(with --tracemalloc, RSS holds tracemalloc's own tables: read RSS from a run without it)")
        print("allocation sites that grew after the ring buffers filled (tracemalloc, top 12):")
        for stat in snap_end.compare_to(snap_full, "lineno")[:12]:
            print(f"  {stat}")


def report(
    args: argparse.Namespace,
    latencies: list[float],
    samples: list[tuple[float, int, float]],
    elapsed: float,
    busy_cpu: float,
    idle_cpu: float,
    lines: int,
    held: int,
    full_at: int,
) -> None:
    lat = sorted(latencies)
    if args.lines_per_node:
        per_node = args.lines_per_node
        print(
            f"stream (compressed): {args.nodes} nodes x {per_node} lines = {lines} lines in {elapsed:.0f} s"
            f" ({lines / elapsed:,.0f} lines/s); at 20 lines/s per node that is a"
            f" {per_node / 20 / 60:.0f}-minute run, {per_node // args.lines_per_step} steps per node"
        )
    else:
        wanted = args.nodes * args.rate * args.seconds
        print(
            f"stream: {args.nodes} nodes x {args.rate} lines/s for {args.seconds:.0f} s = {lines} lines"
            f" ({lines / wanted * 100:.0f} % of the {wanted:.0f} asked for; below 100 % the app fell behind"
            " or the machine was busy)"
        )
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if lat:
        print(
            f"key-to-screen latency over {len(lat)} presses: p50 {statistics.median(lat) * 1e3:.1f} ms, "
            f"p95 {lat[max(0, int(len(lat) * 0.95) - 1)] * 1e3:.1f} ms, max {lat[-1] * 1e3:.1f} ms"
        )
    print(f"CPU while streaming (whole process, incl. the generator): {busy_cpu * 100:.1f} % of a core")
    print(f"CPU per line delivered: {busy_cpu * elapsed / max(1, lines) * 1e6:.1f} µs")
    idle_s = args.idle_seconds
    print(f"idle CPU with the finished run on screen ({idle_s:.0f} s): {idle_cpu * 100:.2f} % of a core")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"memory: RSS {samples[-1][2]:.0f} MiB at the end; peak {peak:.0f} MiB")
    print(f"lines held in the ring buffers at the end: {held} (cap {state.NODE_BUFFER_LINES} per node)")
    print("RSS over time: " + ", ".join(f"{t:.0f}s {m:.0f}" for t, _n, m in samples) + " MiB")
    print(
        "RSS against lines delivered: "
        + ", ".join(f"{n / 1e6:.2f}M {m:.0f}" for _t, n, m in samples)
        + f" MiB (ring buffers full at {full_at / 1e6:.2f}M)"
    )
    slope = slope_mib_per_mline(samples, full_at)
    if slope is not None:
        after = [m for _t, n, m in samples if n >= full_at]
        print(
            f"RSS slope after the buffers filled: {slope:+.2f} MiB per million lines"
            f" ({after[0]:.0f} -> {after[-1]:.0f} MiB over {len(after)} samples)"
        )
    else:
        print("RSS slope after the buffers filled: too few samples after the buffers filled")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--rate", type=int, default=20, help="lines per second per node (live)")
    ap.add_argument("--seconds", type=float, default=120.0, help="length of the live stream")
    ap.add_argument(
        "--lines-per-node", type=int, default=0, help="compressed: deliver this many lines per node, fast"
    )
    ap.add_argument("--batch", type=int, default=40, help="compressed: lines per node per batch")
    ap.add_argument("--lines-per-step", type=int, default=2, help="compressed: lines per step event")
    ap.add_argument("--rss-every", type=float, default=10.0, help="seconds between RSS samples")
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--key-interval", type=float, default=0.5, help="seconds between key presses")
    ap.add_argument("--tracemalloc", action="store_true", help="compressed: list the sites that grew")
    ap.add_argument("--progress", action="store_true", help="print each RSS sample as it is taken")
    parsed = ap.parse_args()
    if parsed.tracemalloc:
        tracemalloc.start(1)
    asyncio.run(main(parsed))
