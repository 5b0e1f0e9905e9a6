"""Host timing per node: CPU steal and pressure, and the trainer's own throttled and waiting time.

One shell command per sample (:func:`probe_command`) prints, on the node:

- ``/proc/stat``'s ``cpu`` line (steal is its 8th value, in jiffies);
- ``/proc/pressure/cpu``'s ``some`` line (PSI; absent on kernels without it);
- for the trainer of the run in progress (its process group leader, from the launcher's ``<log>.pid``),
  ``/proc/<pid>/schedstat`` (time on a CPU and time waiting for one, ns) and its CPU cgroup's
  ``cpu.stat`` (time throttled by a CPU quota: ``throttled_time`` ns in cgroup v1, ``throttled_usec``
  in v2).

Two consecutive samples make a :class:`HostPoint` (:func:`host_point`): steal as a share of all CPU
time, PSI's avg10 as is, throttled and waiting time as a share of the wall time between samples. A
value that could not be read is None, never 0. The loopback test nodes share one kernel, so steal and
pressure are the same on both; the trainer's own figures still differ per node.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shlex
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from cvs_tui.core.results import HostPoint
from cvs_tui.core.transport import Transport, TransportError

_CG_FIND = (
    'cg=$(grep -E "^[0-9]+:([^:]*,)?cpu(,[^:]*)?:|^0::" /proc/$pg/cgroup 2>/dev/null '
    "| head -n1 | cut -d: -f3-); "
    "for d in /sys/fs/cgroup/cpu,cpuacct$cg /sys/fs/cgroup/cpu$cg /sys/fs/cgroup$cg; do "
    '[ -r "$d/cpu.stat" ] && { sed "s/^/cg /" "$d/cpu.stat"; break; }; done'
)


def probe_command(pid_file: str | None) -> str:
    """The shell command of one sample; ``pid_file``: the trainer's ``<log>.pid`` (None: host only)."""
    cmd = 'head -n1 /proc/stat; echo "psi $(head -n1 /proc/pressure/cpu 2>/dev/null)"'
    if pid_file:
        cmd += (
            f'; pg=$(cat -- {shlex.quote(pid_file)} 2>/dev/null) && [ -n "$pg" ] && '
            '{ echo "sched $(cat /proc/$pg/schedstat 2>/dev/null)"; ' + _CG_FIND + "; }"
        )
    return cmd


@dataclass(frozen=True)
class HostCounters:
    """One sample's raw counters (None where not read)."""

    at: float
    cpu_total: int | None = None  # jiffies, every field of the cpu line
    steal: int | None = None
    psi_avg10: float | None = None
    wait_ns: int | None = None
    throttled_ns: int | None = None


_PSI = re.compile(r"some avg10=(\d+(?:\.\d+)?)")


def parse_probe(text: str, at: float) -> HostCounters:
    """The counters in one probe's output (see the module doc)."""
    total = steal = wait = throttled = None
    psi = None
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "cpu" and len(parts) >= 9 and all(p.isdigit() for p in parts[1:]):
            vals = [int(p) for p in parts[1:]]
            # guest time is already counted in user (fields 9-10): leave it out of the total
            total, steal = sum(vals[:8]), vals[7]
        elif parts[0] == "psi" and (m := _PSI.search(line)):
            psi = float(m.group(1))
        elif parts[0] == "sched" and len(parts) >= 3 and parts[2].isdigit():
            wait = int(parts[2])
        elif parts[0] == "cg" and len(parts) == 3 and parts[2].isdigit():
            if parts[1] == "throttled_time":
                throttled = int(parts[2])
            elif parts[1] == "throttled_usec":
                throttled = int(parts[2]) * 1000
    return HostCounters(at, total, steal, psi, wait, throttled)


def host_point(prev: HostCounters, cur: HostCounters) -> HostPoint:
    """The shares between two samples (percent); None where either sample lacks the counter."""
    wall_ns = (cur.at - prev.at) * 1e9

    def share(a: int | None, b: int | None, over: float | None) -> float | None:
        if a is None or b is None or not over or over <= 0 or b < a:
            return None
        return min(100.0, 100.0 * (b - a) / over)

    total = None
    if prev.cpu_total is not None and cur.cpu_total is not None:
        total = float(cur.cpu_total - prev.cpu_total)
    return HostPoint(
        at=cur.at,
        steal_pct=share(prev.steal, cur.steal, total),
        cpu_pressure_pct=cur.psi_avg10,
        trainer_throttled_pct=share(prev.throttled_ns, cur.throttled_ns, wall_ns),
        trainer_wait_pct=share(prev.wait_ns, cur.wait_ns, wall_ns),
    )


class HostSampler:
    """Samples one node's host timing over its transport every ``interval`` seconds."""

    def __init__(
        self,
        transport: Transport,
        *,
        interval: float,
        pid_file: Callable[[], str | None] = lambda: None,
        timeout: float = 20.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.transport = transport
        self.interval = interval
        self.pid_file = pid_file
        self.timeout = timeout
        self.clock = clock
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def counters(self) -> HostCounters | None:
        at = self.clock()
        try:
            r = await self.transport.run(probe_command(self.pid_file()), timeout=self.timeout)
        except TransportError:
            return None
        return parse_probe(r.out, at)

    async def points(self) -> AsyncIterator[HostPoint]:
        """A point every ``interval`` s until :meth:`stop` (a failed probe skips one)."""
        prev: HostCounters | None = None
        pid: str | None = None
        while not self._stop.is_set():
            started = self.clock()
            now_pid = self.pid_file()
            cur = await self.counters()
            if cur is not None:
                if prev is not None and pid == now_pid:  # a new run's trainer starts its own counters
                    yield host_point(prev, cur)
                prev, pid = cur, now_pid
            wait = max(0.0, self.interval - (self.clock() - started))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), wait)
