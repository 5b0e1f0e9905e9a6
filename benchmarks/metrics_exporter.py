"""The live metrics export (``--metrics-port``, core/export/): series per node, scrape time, CPU cost.

    python benchmarks/metrics_exporter.py [--nodes 512] [--scrapes 30] [--fanout-nodes 256]
                                          [--fanout-seconds 15] [--rounds 2] [--no-fanout]

1. Series per node: the series table's count (``SERIES_PER_NODE``, bound 12) and the samples one rank
   has in an emulated exposition.
2. Scrape time at ``--nodes`` emulated nodes (goal: <= 50 ms at 512): a ``LiveRun`` fed a run's events
   (every node 64 timed steps, an error hit, a health finding; 20 verdicts), then the collector and the
   encoder timed as Prometheus pays for them: ``generate_latest`` (text format), the OpenMetrics encoder,
   and a GET of /metrics through the real endpoint (``start_http_server``, its own thread), p50 / max.
3. CPU cost at ``--fanout-nodes`` (goal: <= 5 % more): ``benchmarks/fanout.py`` (256 SSH streams through
   the live ingestion; needs ``.ci/infra.sh up``) without and with ``--exporter`` (every event also folded
   into the exporter's state, its endpoint scraped every second by another process: 15 times Prometheus's
   default rate), interleaved ``--rounds`` times; the core's CPU per line side by side.

Figures (this shared 2-core machine, other work running: load 5-9; 2026-12-05):

- series per node: 12 (table) = 12 (a rank with kernel-log health in the exposition); 10 per node and
  run plus 2 health series per node.
- scrape at 512 nodes (6,144 node samples): see the closing note of issue 29 / the output of a run.
- fan-out at 256 nodes: see the output of a run (the noise between two runs of the same command on this
  machine is several per cent).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from cvs_tui.core.events import (
    ErrorHit,
    HealthFindingEvent,
    NodeLogEvent,
    NodeState,
    NodeStatusEvent,
    RunStartEvent,
    Severity,
    StepEvent,
    VerdictEvent,
)
from cvs_tui.core.export.collector import RunCollector
from cvs_tui.core.export.endpoint import serve
from cvs_tui.core.export.exposition import Exposition
from cvs_tui.core.export.live import LiveRun
from cvs_tui.core.export.series import MAX_SERIES_PER_NODE, SERIES_PER_NODE

ROOT = Path(__file__).resolve().parents[1]
RUN = "BS=8,PRECISION=BF16,SL=4096"
GOAL_MS = 50.0
GOAL_CPU_PCT = 5.0


def emulated(nodes: int) -> LiveRun:
    """A run of ``nodes`` nodes in mid-training, as the exporter holds it."""
    live = LiveRun()
    hosts = tuple(f"gpu-node-{i:04d}.cluster.example" for i in range(nodes))
    live.apply(RunStartEvent(RUN, total_steps=1000, nodes=hosts, at=time.time()))
    for n in range(nodes):
        live.apply(NodeStatusEvent(RUN, n, hosts[n], NodeState.STARTING))
        for s in range(64):
            step = StepEvent(
                step=s, loss=3.0 - s / 100, line=s, seconds=0.8 + (n % 7) / 100, tokens_per_device=9e3
            )
            live.apply(NodeLogEvent(RUN, n, step))
        live.apply(NodeLogEvent(RUN, n, ErrorHit("warn", Severity.WARNING, "slow", 3, "benign")))
        live.apply(HealthFindingEvent(n, hosts[n], "xid-13", Severity.WARNING, "NVRM: Xid 13", 1.0, 1.7e9))
    for i in range(20):
        live.apply(VerdictEvent(RUN, f"metric.{i}", ("PASS", "RECORD", "N/A")[i % 3], "", 1.0, ""))
    return live


def timed(fn, n: int) -> tuple[list[float], list[float]]:  # type: ignore[no-untyped-def]
    """(wall seconds, CPU seconds of this process) of ``n`` calls: on a shared machine the wall time
    holds the other work's share of the cores; the CPU time is the scrape's own cost."""
    wall, cpu = [], []
    for _ in range(n):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return wall, cpu


def ms(xs: tuple[list[float], list[float]]) -> str:
    wall, cpu = xs
    return (
        f"CPU p50 {1000 * statistics.median(cpu):5.1f} ms, max {1000 * max(cpu):5.1f} ms | "
        f"wall p50 {1000 * statistics.median(wall):5.1f} ms"
    )


def scrape_figures(nodes: int, scrapes: int) -> float:
    live = emulated(nodes)
    registry = CollectorRegistry()
    registry.register(RunCollector(live, config="site.json"))
    clock, now = live.clock, live.clock()
    live.clock = lambda: now  # one instant for the check below
    text = generate_latest(registry)
    rank1 = sum(1 for line in text.decode().splitlines() if 'rank="1"' in line)
    samples = sum(1 for line in text.decode().splitlines() if line and not line.startswith("#"))
    print(
        f"series per node: {SERIES_PER_NODE} in the table (bound {MAX_SERIES_PER_NODE}); rank 1 has {rank1}"
    )
    print(f"{nodes} emulated nodes: {samples} samples, {len(text) / 1024:.0f} KiB of text exposition")
    expo = Exposition(registry)
    assert expo.render() == text  # the same bytes as prometheus_client's encoder
    live.clock = clock
    t_lib = timed(lambda: generate_latest(registry), scrapes)
    t_lib_om = timed(lambda: generate_openmetrics(registry), scrapes)
    t_text = timed(expo.render, scrapes)
    t_om = timed(lambda: expo.render(openmetrics=True), scrapes)
    t_collect = timed(lambda: list(registry.collect()), scrapes)
    server = serve(expo, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"

    def get() -> None:
        with urllib.request.urlopen(url, timeout=30) as r:
            r.read()

    t_http = timed(get, scrapes)  # the CPU column: this process, server thread and client together
    server.shutdown()
    server.server_close()
    print(f"  collect only (the families):              {ms(t_collect)}")
    print(f"  baseline, prometheus_client text format:  {ms(t_lib)}")
    print(f"  baseline, prometheus_client OpenMetrics:  {ms(t_lib_om)}")
    print(f"  exporter, text format:                    {ms(t_text)}  (goal <= {GOAL_MS:g} ms)")
    print(f"  exporter, OpenMetrics:                    {ms(t_om)}")
    print(f"  GET /metrics over loopback (+ client):    {ms(t_http)}")
    return statistics.median(t_text[1]) * 1000


CPU_LINE = re.compile(r"core CPU: (\d+) us per line = ([\d.]+)% of one core")


def fanout(nodes: int, seconds: float, exporter: bool) -> tuple[float, float, str]:
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks/fanout.py"),
        "--nodes",
        str(nodes),
        "--seconds",
        f"{seconds:g}",
    ]
    if exporter:
        cmd.append("--exporter")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    m = CPU_LINE.search(p.stdout)
    if p.returncode != 0 or m is None:
        raise SystemExit(f"fanout.py failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    extra = next((line for line in p.stdout.splitlines() if line.startswith("exporter:")), "")
    return float(m.group(1)), float(m.group(2)), extra


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=512)
    ap.add_argument("--scrapes", type=int, default=30)
    ap.add_argument("--fanout-nodes", type=int, default=256)
    ap.add_argument("--fanout-seconds", type=float, default=15.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-fanout", action="store_true", help="only the series and scrape figures")
    args = ap.parse_args()
    for n in sorted({64, 256, args.nodes}):
        scrape_figures(n, args.scrapes)
    if args.no_fanout:
        return 0
    print(
        f"fan-out at {args.fanout_nodes} nodes, {args.fanout_seconds:g} s a run, {args.rounds} round(s) "
        "interleaved (without, with the exporter):"
    )
    base, withx = [], []
    for r in range(args.rounds):
        us0, pct0, _ = fanout(args.fanout_nodes, args.fanout_seconds, exporter=False)
        us1, pct1, extra = fanout(args.fanout_nodes, args.fanout_seconds, exporter=True)
        base.append(us0)
        withx.append(us1)
        print(
            f"  round {r + 1}: without {us0:.0f} us/line ({pct0:.1f}% of a core) | with {us1:.0f} us/line "
            f"({pct1:.1f}%)  {extra}"
        )
    b, w = statistics.median(base), statistics.median(withx)
    more = 100 * (w - b) / b
    print(
        f"  median: without {b:.0f} us/line, with {w:.0f} us/line: {more:+.1f}% (goal <= +{GOAL_CPU_PCT:g}%)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
