"""Time to detect, per fault class: a fault matrix over the loopback SSH test nodes.

    python benchmarks/time_to_detect.py matrix [--repeat 5] [--only crash,hang,...]
    python benchmarks/time_to_detect.py clean --minutes 60

Needs root and the test infrastructure (``.ci/infra.sh up``). Each injection is one two-node suite run
in this process (the real runner, watchdog, node-health stage and judge, with their default limits:
hang budget max(60 s, 3 x p95), fail grace 15 s) whose trainer is a POSIX sh stand-in printing
MaxText-format lines at 0.25 s per step (tests/_fault_infra.py: the faults are about how cvs-tui
follows and judges a trainer, not about MaxText). The fault is injected at step 20 and timed on this
machine's clock (the nodes share it):

- crash: rank 1 exits 3 with no error line; rank 0 then waits silently, as a rank blocked in a
  collective with a dead peer does;
- silent hang: rank 1's trainer is stopped with SIGSTOP from outside;
- NaN: rank 1 logs a NaN loss and "Aborting training due to NaN loss." and exits 1;
- fatal kernel line: an amdgpu GPU reset line (nonce-tagged) written into the real kernel log
  (/dev/kmsg), read by the kernel-log follower over SSH with ``sudo -n``;
- lost node: node 1 is a private sshd on 198.18.77.x whose address is removed from `lo`;
- rising ECC: the recorded amd-smi output (tests/fixtures/smi, a replay of hardware this machine lacks)
  starts returning a rising uncorrectable ECC total;
- slow node: rank 1's trainer (CPU-bound steps here, each logging its own wall time) is put under a
  10 % CPU quota (cgroup v1 ``cpu``; at 30 % the quota did not bind while the machine's load was 15)
  at step 5; the straggler is named when the run is judged (at its
  end), so only the cause it names is printed.

Printed per class: p50/p95 from the fault to the node marked failed/hung (its NodeStatusEvent) and to
the run's verdict (RunEndEvent), and what was called. ``clean`` runs clean two-node runs back to back
for the given minutes (400 steps of 0.25 s, each logging its measured wall time) and counts false
alarms: any run not complete, any straggler named.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# the shared test helpers, and the folders of the two it borrows (_health_kmsg, test_fault_network)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "runner"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "health"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _fault_infra import fault_setup
from _runner_infra import infra
from suite_fixtures.helpers import SLUG, Setup, make_suite, remove_scratch_tree

from cvs_tui.core.events import NodeState, NodeStatusEvent, RunEndEvent, RunEvent, StageEvent, StageState
from cvs_tui.core.watch.options import RunOptions

STEP_S = 0.25
FAULT_STEP = 20
QUOTA_PCT = 10  # the slow node's CPU quota: low enough to bind on this shared, busy 2-core machine
SMI = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "smi"
MARK = 'F="$(dirname "$0")/../fault.$RANK"\n'
STAMP = 'date +%s.%N > "$F"\n'
BLOCK = (
    'while [ ! -e "$(dirname "$0")/../fault.1" ]; do steps $s $((s + 1)); s=$((s + 1)); done\nsleep 100000\n'
)
TIMED = r"""
timed_steps() {  # the logged seconds are each step's wall time; $3 = busy (CPU-bound) or sleep
  s=$1
  while [ "$s" -lt "$2" ]; do
    t0=$(date +%s%N)
    if [ "$3" = busy ]; then i=0; while [ $i -lt 12000 ]; do i=$((i + 1)); done; else sleep "$SLEEP"; fi
    t1=$(date +%s%N)
    d=$(( (t1 - t0) / 1000000 )); sec=$(printf '%d.%03d' $((d / 1000)) $((d % 1000)))
    info metric_logger.py:265 "completed step: $s, seconds: $sec, TFLOP/s/device: 1.0, \
Tokens/s/device: 1000.0, total_weights: 256, loss: 2.000, lm_loss: 2.000, perplexity: 7.389"
    s=$((s + 1))
  done
}
"""


@dataclass
class Outcome:
    fault_at: float | None = None
    node_at: float | None = None
    node_state: str = ""
    verdict_at: float | None = None
    end_at: float | None = None
    outcome: str = ""
    reason: str = ""
    straggler: dict[str, Any] | None = None
    events: list[tuple[float, RunEvent]] = field(default_factory=list)


def _body(kind: str) -> str:
    steps = f"header\nsteps 0 {FAULT_STEP}\n"
    if kind == "crash":
        return (
            MARK + steps + f'if [ "$RANK" = 1 ]; then {STAMP.strip()}; exit 3; fi\ns={FAULT_STEP}\n' + BLOCK
        )
    if kind == "nan":
        nan_step = (
            f"completed step: {FAULT_STEP}, seconds: 0.250, TFLOP/s/device: 1.0, Tokens/s/device: 1000.0, "
            "total_weights: 256, loss: nan, lm_loss: nan, perplexity: nan"
        )
        abort = 'info train.py:500 "Aborting training due to NaN loss."'
        return (
            MARK
            + steps
            + f'if [ "$RANK" = 1 ]; then {STAMP.strip()}; info metric_logger.py:265 "{nan_step}"; '
            + f"{abort}; exit 1; fi\n"
            + f"s={FAULT_STEP}\n"
            + BLOCK
        )
    if kind in ("hang", "kernel", "lost", "ecc"):
        return "header\nsteps 0 100000\n"
    if kind == "clean":
        return TIMED + "header\ntimed_steps 0 400 sleep\nexit 0\n"
    if kind == "slow":
        return TIMED + "header\ntimed_steps 0 300 busy\nexit 0\n"
    raise ValueError(kind)


def _setup(tmp: Path, kind: str) -> Setup:
    steps = {"clean": 400, "slow": 300}.get(kind, 100000)
    s = fault_setup(tmp, _body(kind), steps=steps, runtime="host", env={"CVS_FAULT_SLEEP": str(STEP_S)})
    cfg = json.loads(s.config.read_text())
    access = "sudo" if kind == "kernel" else "plain"
    cfg["health"] = {"kernel_log": access, "telemetry_interval_s": 1.0}
    if kind == "ecc":
        cfg["gpu_name"] = "mi300x"  # telemetry is off for CPU configs
        cfg["train_params"]["maxtext_config"]["hardware"] = "gpu"
    s.config.write_text(json.dumps(cfg, indent=2))
    if kind == "ecc":
        tools = s.root / "smi"
        shutil.copytree(SMI, tools)
        for name in ("rocm-smi", "nvidia-smi"):
            (tools / name).unlink()
        for p in [tools, *tools.iterdir()]:
            shutil.chown(p, infra().user, infra().user)
        cl = json.loads(s.cluster.read_text())
        cl["env_vars"] = {"PATH": f"{tools}:/usr/local/bin:/usr/bin:/bin"}
        s.cluster.write_text(json.dumps(cl))
    return s


def _steps(s: Setup, rank: int) -> int:
    p = s.out / "logs" / SLUG / f"node{rank}.log"
    return p.read_bytes().count(b"completed step:") if p.exists() else 0


def _pgid(s: Setup, rank: int) -> int:
    return int((s.node_log(rank).with_name(f"node{rank}.log.pid")).read_text().strip())


@contextlib.contextmanager
def _cpu_quota(pgid: int, pct: int) -> Iterator[None]:
    cg = Path(f"/sys/fs/cgroup/cpu/cvs-ttd-{os.getpid()}")
    cg.mkdir(exist_ok=True)
    try:
        (cg / "cpu.cfs_period_us").write_text("100000")
        (cg / "cpu.cfs_quota_us").write_text(str(pct * 1000))
        pids = subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True).stdout.split()
        for pid in pids:
            with contextlib.suppress(OSError):
                (cg / "cgroup.procs").write_text(pid)
        yield
    finally:
        parent = Path("/sys/fs/cgroup/cpu/cgroup.procs")
        for pid in (cg / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                parent.write_text(pid)
        with contextlib.suppress(OSError):
            cg.rmdir()


async def _one(kind: str, tmp: Path) -> Outcome:
    s = _setup(tmp, kind)
    out = Outcome()
    stack = contextlib.ExitStack()
    addr = f"198.18.77.{10 + os.getpid() % 200}"
    if kind == "lost":  # before the suite reads the cluster file: node 1 becomes a private sshd
        from test_fault_network import private_node

        stack.enter_context(private_node(s, addr, tmp, on_lo=True))
    if kind == "kernel":
        from _health_kmsg import sudo_kmsg_rule

        stack.enter_context(sudo_kmsg_rule(infra().user))
    suite = make_suite(s, RunOptions())
    orig = suite.emit

    def emit(ev: RunEvent) -> None:
        out.events.append((time.time(), ev))
        orig(ev)

    suite.emit = emit  # type: ignore[method-assign]
    suite.runs.emit = emit
    task = asyncio.create_task(suite.run())
    try:
        end = time.monotonic() + 120
        while min(_steps(s, 0), _steps(s, 1)) < (5 if kind == "slow" else FAULT_STEP):
            if task.done() or time.monotonic() > end:
                raise RuntimeError(f"{kind}: the run never reached the fault")
            await asyncio.sleep(0.05)
        if kind == "hang":
            os.killpg(_pgid(s, 1), signal.SIGSTOP)
            out.fault_at = time.time()
        elif kind == "kernel":
            from _health_kmsg import inject, nonce

            tag = nonce()
            out.fault_at = inject(f"amdgpu 0000:08:00.0: amdgpu: GPU reset begin! {tag}")
        elif kind == "lost":
            subprocess.run(["ip", "addr", "del", f"{addr}/32", "dev", "lo"], check=True)
            out.fault_at = time.time()
        elif kind == "ecc":
            (s.root / "smi" / "ecc_step").write_text("0 1")
            out.fault_at = time.time()
        elif kind == "slow":
            stack.enter_context(_cpu_quota(_pgid(s, 1), QUOTA_PCT))
            out.fault_at = time.time()
        await asyncio.wait_for(task, 900)
    finally:
        if kind == "hang":
            with contextlib.suppress(Exception):
                os.killpg(_pgid(s, 1), signal.SIGCONT)
        if kind == "lost":
            subprocess.run(["ip", "addr", "add", f"{addr}/32", "dev", "lo"], check=False)
        if not task.done():
            task.cancel()
        stack.close()
        suite.bus.close()
    if out.fault_at is None:
        stamp = s.root / "fault.1"
        out.fault_at = float(stamp.read_text()) if stamp.exists() else None
    bad = {NodeState.FAILED, NodeState.HUNG, NodeState.UNREACHABLE}
    for t, ev in out.events:
        if isinstance(ev, NodeStatusEvent) and ev.node == 1 and ev.state in bad and out.node_at is None:
            out.node_at, out.node_state = t, ev.state.value
        if isinstance(ev, StageEvent) and ev.stage.startswith("run:") and ev.state is StageState.FAILED:
            out.verdict_at = out.verdict_at or t  # the verdict, published as soon as it is known
        if isinstance(ev, RunEndEvent):
            out.end_at, out.outcome, out.reason = t, ev.outcome.value, ev.reason
    rec = s.run_record()
    out.straggler = rec.get("straggler_cause")
    remove_scratch_tree(s)
    return out


def _pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def _fmt(xs: list[float]) -> str:
    return f"{_pct(xs, 50):8.2f} {_pct(xs, 95):8.2f}" if xs else f"{'—':>8} {'—':>8}"


def matrix(kinds: list[str], repeat: int) -> None:
    rows = []
    for kind in kinds:
        to_node: list[float] = []
        to_verdict: list[float] = []
        to_end: list[float] = []
        called: list[str] = []
        for i in range(repeat):
            with tempfile.TemporaryDirectory(prefix=f"ttd-{kind}-") as d:
                o = asyncio.run(_one(kind, Path(d)))
            if o.fault_at is None:
                called.append("no fault stamp")
                continue
            if o.node_at is not None:
                to_node.append(o.node_at - o.fault_at)
            if o.verdict_at is not None and kind != "slow":
                to_verdict.append(o.verdict_at - o.fault_at)
            if o.end_at is not None and kind != "slow":
                to_end.append(o.end_at - o.fault_at)
            what = o.node_state or o.outcome
            if kind == "slow":
                sc = o.straggler
                what = f"straggler node {sc['node']}: {sc['cause']}" if sc else "no straggler named"
            called.append(what)
            print(
                f"  {kind} #{i + 1}: node {_s(o.node_at, o.fault_at)}, "
                f"verdict {_s(o.verdict_at, o.fault_at)}, "
                f"run ended {_s(o.end_at, o.fault_at)}, "
                f"{what}; {o.reason[:150]}",
                flush=True,
            )
        rows.append((kind, len(called), to_node, to_verdict, to_end, called))
    print("\nseconds from the fault to: the node marked failed/hung, the run's verdict, the run's end")
    head = ["fault", "n", "node p50", "p95", "verdict p50", "p95", "end p50", "p95"]
    print(f"{head[0]:<8} {head[1]:>3} " + " ".join(f"{h:>8}" for h in head[2:]) + "  called")
    for kind, n, tn, tv, te, called in rows:
        counts = {c: called.count(c) for c in dict.fromkeys(called)}
        what = ", ".join(f"{c} x{k}" for c, k in counts.items())
        print(f"{kind:<8} {n:>3} {_fmt(tn)} {_fmt(tv)} {_fmt(te)}  {what}")


def _s(at: float | None, t0: float) -> str:
    return f"{at - t0:.2f} s" if at is not None else "—"


def clean(minutes: float) -> None:
    end = time.monotonic() + minutes * 60
    runs = alarms = 0
    seconds = 0.0
    while time.monotonic() < end:
        with tempfile.TemporaryDirectory(prefix="ttd-clean-") as d:
            t0 = time.time()
            o = asyncio.run(_one("clean", Path(d)))
        runs += 1
        started = next((t for t, e in o.events if type(e).__name__ == "RunStartEvent"), t0)
        seconds += (o.end_at or time.time()) - started
        alarm = o.outcome != "complete" or o.straggler is not None
        alarms += alarm
        print(
            f"  clean #{runs}: {o.outcome} {'ALARM ' + o.reason[:200] if alarm else ''}"
            f"{' straggler ' + json.dumps(o.straggler) if o.straggler else ''}",
            flush=True,
        )
    hours = seconds / 3600
    print(
        f"\nclean runs: {runs}, {hours:.2f} h of training watched, false alarms: {alarms} "
        f"({alarms / hours if hours else 0:.2f} per hour)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("matrix", "clean"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", default="crash,hang,nan,kernel,lost,ecc,slow")
    ap.add_argument("--minutes", type=float, default=60.0)
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (SIGSTOP of the node user's trainer, /dev/kmsg, ip addr, cgroups)")
    if a.mode == "matrix":
        matrix(a.only.split(","), a.repeat)
    else:
        clean(a.minutes)


if __name__ == "__main__":
    main()
