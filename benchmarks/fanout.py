"""Fan-out: many nodes streaming at once through the live path; core CPU use and line -> event latency.

    python benchmarks/fanout.py [--nodes 64] [--rate 20] [--seconds 20] [--profile out.prof]
                                [--coalesce S] [--transport-only] [--exporter [--scrape-every S]]

Needs the test infrastructure (``.ci/infra.sh up``; reads ``$CVS_TEST_ROOT/env``, default
``/tmp/cvs-ci/env``). Each emulated node is an SSH node of its own to the loopback sshd nodes
(127.0.0.2, 127.0.0.3, ... in turn): one asyncssh connection (opened at most ``CONNECTS`` at a time:
sshd drops unauthenticated connections past its MaxStartups) and, as in a live run, its log stream
through an ``ssh`` client process (``Transport.start_follow``, core/runner/nodes/openssh.py; asyncssh where
that cannot be used), so 512 nodes are 512 connections and 512 ``ssh`` processes. Each node's file
starts with one line; the window opens once every stream has delivered it (every ``ssh`` connected).
A separate writer process then appends a MaxText step line to each node's file ``--rate`` times a
second (staggered across nodes) and records when it wrote each one. This process follows every file
the way a live run does: one :class:`LogTailer` per node (``tail -c +N -F`` on the node) with a live
run's latency budget (``coalesce_for(nodes)``: 0.15 s up to 85 nodes, 0.45 s at 256, 0.5 s from 285;
``--coalesce`` sets another), each chunk handed to the live run's own ingestion
(``RunExecution._ingest``: the run-folder copy, line split and ``LogLinesEvent``, the parser, one
``NodeLogEvent`` per parsed event), every event folded into a :class:`RunState` and published on an
:class:`EventBus` that writes ``events.jsonl``. ``--transport-only`` reads the streams and nothing
more (a line's arrival stands in for its event): what SSH and the tailers cost alone. ``--exporter``
adds the live metrics export (``--metrics-port``, core/export/): every event also folded into its
``LiveRun``, its HTTP endpoint on 127.0.0.1, scraped every ``--scrape-every`` seconds (1) by a separate
process (the scraper's CPU is Prometheus's, not counted; the endpoint's thread is this process's, counted);
``benchmarks/metrics_exporter.py`` runs both and prints them side by side.

Printed: CPU time (user + system) over the streaming window of this process (``resource.getrusage``)
and of its ``ssh`` processes (sampled from /proc once a second; the sampling's own CPU is taken off
this process's figure): their sum is the core's CPU, per line and as a share of one core at the
written line rate (CPU per line x lines per second: on a busy machine the window stretches while the
work per line does not), with the wall time; the ``ssh`` processes' memory (PSS); the latency from a
line's write to its ``StepEvent`` in the core, p50/p95/max (the nodes share this machine's monotonic
clock); lines lost (written but no event; must be 0), whether every run-folder copy is
byte-identical to its node's file, how many reads (chunks) the lines came in, and this process's
peak RSS. The remote ``tail`` and sshd processes are the nodes' cost, not counted here. Upstream CVS
reads nodes one after another every 60 s: its latency is 60-120 s by design.

Most of the cost is per read, not per line: one SSH packet (decrypted by ``ssh``, or by asyncssh in
Python), the tailer's read waking, one parse per chunk. So read the CPU figure beside the lines per
read: on a loaded machine the loop falls behind, chunks grow and the CPU per line drops, which is no
gain. Give each run a quiet start: the load a run leaves (its 256 sshd sessions and tails) takes a
minute to fade.

Figures (quiet machine: nothing else running, load 0-5 at the start, left by the run before; 30 s;
before = the same script with ``PYTHONPATH`` at the code before this change, asyncssh streams, 0.4 s
budget at 256 nodes):

- 256 nodes, three runs each, interleaved: 48.6 / 48.9 / 50.0 % of a core (95-98 us per line, 7.8
  lines per read, p95 382-385 ms) -> 35.5 / 34.7 / 38.4 % (68-75 us per line: this process 31 %,
  its ssh processes 4 %; 8.8 lines per read at the 0.45 s budget, p50 228-233 ms, p95 431-437 ms,
  max 0.85-0.91 s); the ssh processes 347 MiB (PSS, 1.36 MiB each), this process 323 MiB RSS.
  Before the budget change (0.4 s, ssh streams and the C step line already in): 41.5 / 40.6 / 40.9 %.
- 512 nodes (0.5 s either way): 71.1 -> 63.3 % (69 -> 62 us per line, 9.7 lines per read), p95 499 ->
  507 ms; RSS 572 -> 579 MiB plus 692 MiB of ssh processes.
- 64 nodes (0.15 s either way): 31.8 -> 23.5 % (248 -> 184 us per line, 3.0 lines per read), p95 147
  -> 145 ms; ssh processes 88 MiB.
- ``--transport-only``, 256 nodes: 23.6 % of a core (asyncssh, 0.4 s, 7.9 lines per read) -> 13.4 %
  (this process 9.1 %, ssh 4.3 %; 0.45 s, 8.7 lines per read).
- The core's ingestion alone (``benchmarks/fanout_ingest.py --lines-per-chunk 8``, three interleaved
  runs): 27-36 -> 25-30 us per line.

Where the time goes at 256 nodes (cProfile, tottime; the profiler inflates Python calls). Before:
asyncssh's per-packet work (``_recv_packet``, decryption, dispatch, a packet log line, a keepalive
timer reset: ``--transport-only`` 23.6 % of a core, ~370 us of CPU a read), the events.jsonl step
encoder (``_num``, ``_encode_step``, ``_extras``: 5.8 us a step unprofiled), the state reducer, the
parser's per-chunk work. After: the transport is a pipe read per chunk in this process and C
decryption in ``ssh``; the step line is written in C (``core/_eventjson.c``, 1.8 us a step); what is
left is spread thin: the ingestion loop, the reducer, the parser's per-chunk work, the run-folder
append, the event loop's own work per wake-up.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import resource
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _runner_infra import load_infra

from cvs_tui.core.bus import EventBus
from cvs_tui.core.events import NodeLogEvent, RunEvent, StepEvent
from cvs_tui.core.parse import NodeLogParser
from cvs_tui.core.runner.execute import RankLog, RunExecution
from cvs_tui.core.runner.nodes.ssh import SSHTransport
from cvs_tui.core.runner.nodes.tail import LogTailer
from cvs_tui.core.state import RunState
from cvs_tui.core.watch.watchdog import NodeWatch

try:
    from cvs_tui.core.runner.nodes.tail import coalesce_for
except ImportError:  # the code before per-node-count budgets (a before/after run): 0.15 s for any count

    def coalesce_for(streams: int) -> float:
        return 0.15


READY = b"I1130 12:00:00.000000 140000000000001 train.py:1] streams open\n"  # each log's first line
CONNECTS = 64  # SSH connections opened at once (the test sshd's MaxStartups is 200)

# The writer runs as its own process so that its work is not counted as the core's.
WRITER = r"""
import json, sys, time
paths, rate, seconds, out = json.loads(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
n = len(paths)
files = [open(p, "ab", buffering=0) for p in paths]
period = 1.0 / rate
t0 = time.monotonic() + 0.2
written = [[] for _ in paths]
steps = int(seconds * rate)
due = sorted((t0 + s * period + i * period / n, i, s) for i in range(n) for s in range(steps))
for at, i, s in due:
    delay = at - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    line = (
        "I1130 12:00:00.000000 140000000000001 metric_logger.py:265] completed step: %d, seconds: 0.050, "
        "TFLOP/s/device: 1.0, Tokens/s/device: 1000.0, total_weights: 256, loss: 3.000, lm_loss: 3.000, "
        "perplexity: 20.086\n" % s
    )
    files[i].write(line.encode())
    written[i].append(time.monotonic())
with open(out, "w") as f:
    json.dump(written, f)
"""


# The scraper (--exporter) stands in for Prometheus: a process of its own, so its CPU is not counted.
SCRAPER = r"""
import json, signal, sys, time, urllib.request
url, every, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
took = []
def done(*_):
    with open(out, "w") as f:
        json.dump(took, f)
    sys.exit(0)
signal.signal(signal.SIGTERM, done)
while True:
    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as r:
        n = len(r.read())
    took.append((time.perf_counter() - t, n))
    time.sleep(every)
"""


def proc_ticks(pids: set[int]) -> dict[int, int]:
    """{pid: CPU clock ticks (user + system) so far} of the live processes among ``pids``."""
    ticks = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                rest = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        ticks[pid] = int(rest[11]) + int(rest[12])
    return ticks


def proc_pss(pids: set[int]) -> int:
    """Proportional set size (shared pages split between sharers) of the live processes, bytes."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
                for line in f:
                    if line.startswith(b"Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            continue
    return total


class ChildCPU:
    """The CPU of the ``ssh`` processes the streams run through (core/runner/nodes/openssh.py): they decrypt
    the nodes' packets, so they count. Sampled once a second from /proc (a stream's ssh ends as soon as
    its node's last line arrived: its last second is not seen, < 1 ms of CPU); the sampling's own CPU is
    kept apart and taken off this process's figure."""

    def __init__(self, pids: Callable[[], set[int]]) -> None:
        self.pids = pids
        self.start = proc_ticks(pids())
        self.latest = dict(self.start)
        self.peak_pss = 0
        self.own = 0.0

    async def sample(self) -> None:
        n = 0
        while True:
            t = time.process_time()
            live = self.pids()
            self.latest.update(proc_ticks(live))
            if n % 5 == 2:
                self.peak_pss = max(self.peak_pss, proc_pss(live))
            n += 1
            self.own += time.process_time() - t
            await asyncio.sleep(1.0)

    def seconds(self) -> float:
        return sum(t - self.start.get(pid, 0) for pid, t in self.latest.items()) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--rate", type=float, default=20.0, help="lines per second per node")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--profile", metavar="FILE", help="cProfile the streaming window into FILE")
    ap.add_argument(
        "--coalesce", type=float, help="the tailers' latency budget, s (default: a live run's, coalesce_for)"
    )
    ap.add_argument("--exporter", action="store_true", help="with the live metrics export, scraped")
    ap.add_argument(
        "--scrape-every", type=float, default=1.0, help="with --exporter: seconds between scrapes"
    )
    ap.add_argument(
        "--transport-only",
        action="store_true",
        help="only read the streams (SSH and the tailers), no ingestion: the transport's share of the cost",
    )
    args = ap.parse_args()
    infra = load_infra()
    if infra is None:
        print("test infrastructure not up: run `bash .ci/infra.sh up` first", file=sys.stderr)
        return 2
    d = Path(infra.scratch) / f"fanout-{uuid.uuid4().hex[:8]}"
    d.mkdir(parents=True)
    shutil.chown(d, infra.user, infra.user)
    local = Path(tempfile.mkdtemp(prefix="cvs-fanout-"))
    paths = [str(d / f"node{i}.log") for i in range(args.nodes)]
    for p in paths:
        Path(p).write_bytes(READY)
    hosts = [infra.nodes[i % len(infra.nodes)] for i in range(args.nodes)]
    transports = [
        SSHTransport(h, port=infra.port, user=infra.user, key_file=infra.key, known_hosts=infra.known_hosts)
        for h in hosts
    ]
    expected = int(args.seconds * args.rate)
    arrived: list[dict[int, float]] = [{} for _ in range(args.nodes)]
    bus = EventBus(local / "events.jsonl")
    state = RunState()

    live, scraper, scrapes_out = None, None, local / "scrapes.json"
    took: list[tuple[float, int]] = []  # (seconds, bytes) of each scrape
    if args.exporter:  # what a front-end's stream tapped by --metrics-port folds, and its endpoint
        from prometheus_client import CollectorRegistry, start_http_server

        from cvs_tui.core.export.collector import RunCollector
        from cvs_tui.core.export.live import LiveRun

        live = LiveRun()
        registry = CollectorRegistry()
        registry.register(RunCollector(live, config="fanout.json"))
        server, _thread = start_http_server(0, addr="127.0.0.1", registry=registry)
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"

    def emit(ev: RunEvent) -> None:  # what the suite's emit does: fold, then publish
        state.apply(ev)
        bus.publish(ev)
        if live is not None:
            live.apply(ev)
        if isinstance(ev, NodeLogEvent) and isinstance(ev.event, StepEvent):
            arrived[ev.node][ev.event.step] = time.monotonic()

    # the live run's ingestion; this plan stand-in carries only what ingestion reads (the hosts)
    plan: Any = SimpleNamespace(nodes=[SimpleNamespace(host=h) for h in hosts], error_patterns=())
    unused: Any = None  # ingestion neither launches nor reads options
    ex = RunExecution(plan=plan, launcher=unused, options=unused, run_dir=local, emit=emit, records={})
    pr: Any = SimpleNamespace(key="fanout")
    ranks = [
        RankLog(
            watch=NodeWatch(rank=i, host=hosts[i], last_progress=time.time()),
            local_log=local / f"node{i}.log",
            parser=NodeLogParser(),
        )
        for i in range(args.nodes)
    ]
    for r in ranks:
        r.local_log.write_bytes(b"")
    coalesce = coalesce_for(args.nodes) if args.coalesce is None else args.coalesce
    tailers = [LogTailer(t, p, coalesce=coalesce) for t, p in zip(transports, paths, strict=True)]

    reads = [0]
    seen = [0] * args.nodes  # lines seen per node (--transport-only)

    async def follow(i: int) -> None:
        async for chunk in tailers[i].chunks():
            reads[0] += 1
            if args.transport_only:  # a line's arrival stands in for its event (line k is step k)
                now, got = time.monotonic(), seen[i]  # line 0 is READY, line k + 1 is step k
                seen[i] += chunk.count(b"\n")
                arrived[i].update((k - 1, now) for k in range(max(got, 1), seen[i]))
            else:
                ex._ingest(pr, ranks[i], chunk)
            if len(arrived[i]) >= expected:
                tailers[i].stop()

    gate = asyncio.Semaphore(CONNECTS)

    async def connect(t: SSHTransport) -> None:
        async with gate:
            await t.connect()

    prof = cProfile.Profile() if args.profile else None
    try:
        t0 = time.perf_counter()
        await asyncio.gather(*(connect(t) for t in transports))
        print(
            f"{args.nodes} nodes: {args.nodes} SSH connections to {', '.join(infra.nodes)} port {infra.port} "
            f"(connected in {time.perf_counter() - t0:.1f} s); {args.rate:g} lines/s per node for "
            f"{args.seconds:g} s = {args.nodes * expected} lines; coalescing {coalesce:g} s"
        )
        readers = [asyncio.create_task(follow(i)) for i in range(args.nodes)]
        # every stream open (its ssh connected, its first line in) before the window starts
        async with asyncio.timeout(120):
            while any(t.offset < len(READY) for t in tailers):
                await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        out = local / "written.json"
        if prof is not None:
            prof.enable()
        ru0, w0, kids = (
            resource.getrusage(resource.RUSAGE_SELF),
            time.perf_counter(),
            ChildCPU(lambda: set().union(*(getattr(t, "stream_pids", set()) for t in transports))),
        )
        sampler = asyncio.create_task(kids.sample())
        if live is not None:
            scraper = await asyncio.create_subprocess_exec(
                sys.executable, "-c", SCRAPER, url, str(args.scrape_every), str(scrapes_out)
            )
        writer = await asyncio.create_subprocess_exec(
            sys.executable, "-c", WRITER, json.dumps(paths), str(args.rate), str(args.seconds), str(out)
        )
        await writer.wait()
        await asyncio.wait(readers, timeout=60)
        ru1, w1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        sampler.cancel()
        if scraper is not None:
            scraper.terminate()
            await scraper.wait()
            took = json.loads(scrapes_out.read_text()) if scrapes_out.exists() else []
        via_ssh = sum(1 for t in transports if getattr(t, "follow_client", "") == "ssh")
        if prof is not None:
            prof.disable()
            prof.dump_stats(args.profile)
        for t in tailers:
            t.stop()
        await asyncio.gather(*readers, return_exceptions=True)
        written = json.loads(out.read_text())
        identical = args.transport_only or all(
            Path(p).read_bytes() == r.local_log.read_bytes() for p, r in zip(paths, ranks, strict=True)
        )
    finally:
        bus.close()
        for t in transports:
            await t.close()
        shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(local, ignore_errors=True)

    lat = [
        arrived[i][s] - written[i][s] for i in range(args.nodes) for s in range(expected) if s in arrived[i]
    ]
    own = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime) - kids.own
    kid_cpu = kids.seconds()
    cpu = own + kid_cpu
    wall = w1 - w0
    lines = args.nodes * expected
    got = sum(len(a) for a in arrived)
    copies = "n/a" if args.transport_only else "yes" if identical else "NO"
    print(
        f"events: {got} step events for {lines} lines written; lines lost: {lines - got}; "
        f"run-folder copies byte-identical: {copies}; "
        f"{reads[0]} reads ({lines / max(reads[0], 1):.1f} lines per read)"
    )
    demand = cpu / args.seconds  # the core's CPU per second of streaming at this line rate
    print(
        f"core CPU: {1e6 * cpu / lines:.0f} us per line = {100 * demand:.1f}% of one core at "
        f"{args.nodes * args.rate:g} lines/s ({100 * demand / args.nodes:.3f}% per node); "
        f"{cpu:.2f} s over {wall:.1f} s of wall time; max RSS {ru1.ru_maxrss / 1024:.0f} MiB"
    )
    print(
        f"streams: {via_ssh} of {args.nodes} through the OpenSSH client, the rest on asyncssh; CPU of this "
        f"process {100 * own / args.seconds:.1f}% + its ssh processes {100 * kid_cpu / args.seconds:.1f}%"
        + (f", their memory {kids.peak_pss / 2**20:.0f} MiB (PSS)" if via_ssh else "")
    )
    print(
        f"line -> event latency: p50 {1000 * pct(lat, 50):.1f} ms, p95 {1000 * pct(lat, 95):.1f} ms, "
        f"max {1000 * max(lat):.1f} ms (upstream CVS: 60-120 s)"
    )
    if took:
        print(
            f"exporter: {len(took)} scrapes every {args.scrape_every:g} s, each {took[-1][1]} "
            f"bytes; scrape time p50 {1000 * pct([t for t, _ in took], 50):.1f} ms, "
            f"max {1000 * max(t for t, _ in took):.1f} ms"
        )
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end")
    return 0 if got == lines and identical else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
