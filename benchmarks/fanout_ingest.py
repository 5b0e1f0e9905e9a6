"""Fan-out without the network: the core's CPU per line for chunks of N lines from many nodes.

    python benchmarks/fanout_ingest.py [--nodes 256] [--lines-per-chunk 3] [--rounds 50] [--profile]

``benchmarks/fanout.py`` measures the whole live path over SSH; on a shared machine its figures move
with the load (a loop that falls behind reads bigger chunks). This one feeds the same ingestion
(``RunExecution._ingest``: the run-folder copy, line split, ``LogLinesEvent``, the parser, one
``NodeLogEvent`` per step) with chunks of a fixed size, round-robin over the nodes, every event folded
into a :class:`RunState` and published on an :class:`EventBus` writing ``events.jsonl``, inside an
event loop as a live run does. The chunk size stands in for the tailers' coalescing: 20 lines/s
per node with a 0.15 s budget is 3 lines a chunk, with 0.256 s (256 nodes) about 5, with 0.5 s 10.

Printed: CPU time (``time.process_time``) per line, the minimum and median of five equal parts of
the run. ``--profile`` prints cProfile's top entries (which inflate Python calls).

Figures (2 cores shared with other jobs, load 5-10; before = ``PYTHONPATH`` at the code before this
change; the least of four runs each, interleaved): 3 lines a chunk 68.9 -> 50.6 us per line, 7 lines a
chunk 37.7 -> 28.2 us.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import shutil
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from cvs_tui.core.bus import EventBus
from cvs_tui.core.events import RunEvent
from cvs_tui.core.parse import NodeLogParser
from cvs_tui.core.runner.execute import RankLog, RunExecution
from cvs_tui.core.state import RunState
from cvs_tui.core.watch.watchdog import NodeWatch

LINE = (
    "I1130 12:00:00.000000 140000000000001 metric_logger.py:265] completed step: %d, seconds: 0.050, "
    "TFLOP/s/device: 1.0, Tokens/s/device: 1000.0, total_weights: 256, loss: 3.000, lm_loss: 3.000, "
    "perplexity: 20.086\n"
)
PARTS = 5


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--lines-per-chunk", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=50, help="chunks per node (a multiple of 5)")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    local = Path(tempfile.mkdtemp(prefix="cvs-fanout-ingest-"))
    bus = EventBus(local / "events.jsonl")
    state = RunState()

    def emit(ev: RunEvent) -> None:  # what the suite's emit does: fold, then publish
        state.apply(ev)
        bus.publish(ev)

    hosts = [f"node{i}" for i in range(args.nodes)]
    plan: Any = SimpleNamespace(nodes=[SimpleNamespace(host=h) for h in hosts], error_patterns=())
    unused: Any = None  # ingestion neither launches nor reads options
    ex = RunExecution(plan=plan, launcher=unused, options=unused, run_dir=local, emit=emit, records={})
    pr: Any = SimpleNamespace(key="fanout")
    ranks = [
        RankLog(
            watch=NodeWatch(rank=i, host=h, last_progress=time.time()),
            local_log=local / f"node{i}.log",
            parser=NodeLogParser(),
        )
        for i, h in enumerate(hosts)
    ]
    for r in ranks:
        r.local_log.write_bytes(b"")
    n, step, parts = args.lines_per_chunk, 0, []
    prof = cProfile.Profile() if args.profile else None
    if prof is not None:
        prof.enable()
    for _ in range(PARTS):
        t0 = time.process_time()
        for _ in range(args.rounds // PARTS):
            chunk = "".join(LINE % (step + j) for j in range(n)).encode()
            step += n
            for r in ranks:
                ex._ingest(pr, r, chunk)
        bus.flush()
        parts.append(time.process_time() - t0)
    if prof is not None:
        prof.disable()
    bus.close()
    shutil.rmtree(local, ignore_errors=True)
    lines = args.nodes * (args.rounds // PARTS) * n
    parts.sort()
    print(
        f"{args.nodes} nodes, {n} lines a chunk: {1e6 * parts[0] / lines:.1f} us of CPU per line "
        f"(median {1e6 * parts[PARTS // 2] / lines:.1f})"
    )
    if prof is not None:
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
