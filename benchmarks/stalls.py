"""Stall detection cost on a long run.

    python benchmarks/stalls.py [--steps 100000] [--repeat 5]

A generated node series: ``--steps`` train steps of 0.15 s with lognormal jitter (CV 20 %), a stall of
10-60 s every 5,000 steps, step lines one per line with times (the line clock), and an async
checkpoint save every 100 steps as a background interval. Printed: the time of ``stream_stalls`` over
the node's step table (the rule, the wall placement and the attribution, read a chunk at a time), of
``background_intervals`` on the checkpoint events, and of ``line_clock`` on the log text: wall best and
median, and the median process CPU time of ``--repeat`` runs, plus what was found.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime

from cvs_tui.core.events import CheckpointAction, CheckpointEvent, LogEvent, StepEvent
from cvs_tui.core.judge.background import background_intervals
from cvs_tui.core.judge.clock import line_clock
from cvs_tui.core.judge.stalls import Interval, StallReport, stream_stalls
from cvs_tui.core.judge.stream import StreamLog
from cvs_tui.core.judge.table import StepCollector
from cvs_tui.core.judge.window import WARMUP_STEPS


def find_stalls(log: StreamLog, bg: list[Interval]) -> StallReport:
    return stream_stalls(log, bg, WARMUP_STEPS)


def generate(n: int, seed: int = 1) -> tuple[list[StepEvent], list[LogEvent], bytes]:
    rng = random.Random(seed)
    sigma = math.sqrt(math.log(1.0 + 0.2**2))
    steps: list[StepEvent] = []
    ckpts: list[LogEvent] = []
    lines: list[str] = []
    t = 0.0
    for i in range(n):
        secs = 0.15 * math.exp(rng.gauss(0.0, sigma))
        if i % 5000 == 2500:
            secs = rng.uniform(10.0, 60.0)
        t += secs
        stamp = datetime.fromtimestamp(946684800.0 + t, UTC)
        head = stamp.strftime("I%m%d %H:%M:%S.%f") + " 1397 metric_logger.py:265] "
        if i % 100 == 0:
            ckpts.append(CheckpointEvent(CheckpointAction.SAVE_START, len(lines) + 1, i, dialect="maxtext"))
            lines.append(head + f"Started an asynchronous checkpoint save for step {i}")
            ckpts.append(CheckpointEvent(CheckpointAction.SAVE_DONE, len(lines) + 1, i, 1.5, "orbax-new"))
            lines.append(head + f"[async] Finished save (blocking + background) in 1.5 seconds @ /ck/{i}")
        steps.append(StepEvent(i, 2.0, len(lines) + 1, seconds=round(secs, 3)))
        lines.append(head + f"completed step: {i}, seconds: {secs:.3f}, total_weights: 256, loss: 2.000")
    return steps, ckpts, ("\n".join(lines) + "\n").encode()


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float, float]:
    """(best wall, median wall, median process CPU) seconds; CPU time is less bent by other load."""
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return min(wall), statistics.median(wall), statistics.median(cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    steps, ckpts, text = generate(args.steps)
    clock = line_clock(text)
    bg = background_intervals(ckpts, clock)
    collector = StepCollector()
    collector.add(list(steps))
    log = StreamLog(collector.table(), clock)
    report = find_stalls(log, bg)
    print(f"{args.steps} steps, {len(bg)} background saves, {len(text) / 1e6:.1f} MB of step lines")
    print(
        f"found {report.stall_count} stalls ({report.stall_seconds:.1f} s lost), median "
        f"{report.median_seconds:.3f} s, threshold {report.threshold_seconds:.3f} s, "
        f"goodput {report.goodput_pct():.2f} %"
    )
    for name, fn in (
        ("stream_stalls", lambda: find_stalls(log, bg)),
        ("background_intervals", lambda: background_intervals(ckpts, clock)),
        ("line_clock", lambda: line_clock(text)),
    ):
        best, med, cpu = timed(fn, args.repeat)
        print(
            f"{name:22s} wall best {best * 1000:7.1f} ms, median {med * 1000:7.1f} ms; "
            f"CPU median {cpu * 1000:7.1f} ms"
        )
    collector.discard()


if __name__ == "__main__":
    main()
