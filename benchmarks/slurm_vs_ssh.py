"""Detection latency and teardown time through Slurm next to the same figures over SSH.

    python benchmarks/slurm_vs_ssh.py [--repeat 3]

Needs both test infrastructures (``.ci/infra.sh up`` for the loopback SSH nodes, ``.ci/slurm.sh up``
for the two-node Slurm cluster). The suite runs in-process with the stand-in trainer
(tests/suite_fixtures) on the host runtime, two ranks:

1. Detection: rank 1 exits 3 after step 3 (silent crash). Crash time = the mtime of rank 1's
   ``node1.log.exit`` (written by the launcher the moment the trainer exited); figures are until the
   NodeStatusEvent that marks node 1 failed, and until the RunEndEvent (after the other rank was
   stopped).
2. Teardown: a long run is cancelled (as Ctrl-C does) after 5 steps on every rank; the figure is
   cancel → no trainer process left (polled every 20 ms), and cancel → the suite returned.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _slurm_suite as sl
from suite_fixtures import helpers as ssh

from cvs_tui.core.runner.suite import Suite

SetupT = Any  # ssh.Setup or sl.SlurmSetup: both have out, node_log(), marker()


def _events(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines() if x.strip()]


def _steps(path: Path) -> int:
    return path.read_bytes().count(b"completed step:") if path.exists() else 0


def _ssh_make(
    tmp: Path, env: dict[str, str], steps: int
) -> tuple[SetupT, Callable[[], Coroutine[Any, Any, Suite]]]:
    tmp.mkdir(parents=True)
    s = ssh.make_setup(tmp, runtime="host", env=env, sweeps={ssh.SWEEP: {"steps": steps}})

    async def start() -> Suite:
        return ssh.make_suite(s, ssh.fast_options())

    return s, start


def _slurm_make(
    tmp: Path, env: dict[str, str], steps: int
) -> tuple[SetupT, Callable[[], Coroutine[Any, Any, Suite]]]:
    tmp.mkdir(parents=True)
    s = sl.make_setup(tmp, env=env, steps=steps)

    async def start() -> Suite:
        from cvs_tui.core.bus import EventBus

        plan = await sl.slurm_plan(s, ["-N", "2", "-J", "cvs-bench"])
        s.out.mkdir(parents=True, exist_ok=True)
        return Suite(plan, s.out, EventBus(s.out / "events.jsonl"), sl.fast_options())

    return s, start


async def detection(make: Any, tmp: Path) -> tuple[float, float]:
    s, start = make(tmp, {"CVS_STANDIN_MODE": "crash", "CVS_STANDIN_FAIL_RANK": "1"}, 5000)
    suite = await start()
    try:
        await suite.run()
    finally:
        suite.bus.close()
    crash = Path(f"{s.node_log(1)}.exit").stat().st_mtime
    ev = _events(s.out)
    failed = next(
        e["at"] for e in ev if e["type"] == "NodeStatusEvent" and e["node"] == 1 and e["state"] == "failed"
    )
    end = next(e["at"] for e in ev if e["type"] == "RunEndEvent" and e["run"] == ssh.SWEEP)
    return failed - crash, end - crash


async def teardown(make: Any, tmp: Path) -> tuple[float, float]:
    s, start = make(tmp, {"CVS_STANDIN_STEP_SLEEP": "0.05"}, 50000)
    suite = await start()
    task = asyncio.create_task(suite.run())
    while not (s.out / "plan.json").exists() or min(_steps(s.node_log(r)) for r in (0, 1)) < 5:
        await asyncio.sleep(0.05)
    gone: list[float] = []
    t0 = time.monotonic()

    def watch() -> None:
        while sl.processes_with(s.marker()):
            time.sleep(0.02)
        gone.append(time.monotonic())

    w = threading.Thread(target=watch)
    w.start()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    finally:
        suite.bus.close()
    returned = time.monotonic()
    w.join(60)
    assert gone, "a trainer process was left"
    return gone[0] - t0, returned - t0


def row(name: str, xs: list[float]) -> str:
    return f"  {name:<38} median {statistics.median(xs):7.3f} s   min {min(xs):7.3f} s   max {max(xs):7.3f} s"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for label, make in (
        ("ssh (loopback sshd, host runtime)", _ssh_make),
        ("slurm (2 slurmd, srun)", _slurm_make),
    ):
        fail, end, gone, ret = [], [], [], []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="cvs-bench-") as d:
                a, b = asyncio.run(detection(make, Path(d) / "det"))
                c, e = asyncio.run(teardown(make, Path(d) / "td"))
            fail.append(a)
            end.append(b)
            gone.append(c)
            ret.append(e)
        print(label)
        print(row("crash -> node failed event", fail))
        print(row("crash -> run ended (FAILED)", end))
        print(row("cancel -> no trainer process left", gone))
        print(row("cancel -> suite returned (teardown done)", ret))


if __name__ == "__main__":
    main()
