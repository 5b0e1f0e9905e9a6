"""Time to detect, per fault class: a fault matrix over the loopback SSH test nodes or the Slurm cluster.

    python benchmarks/time_to_detect.py matrix [--launcher ssh|slurm] [--repeat 5] [--only crash,hang,...]
    python benchmarks/time_to_detect.py clean --minutes 60 [--launcher ssh|slurm]

Needs root and the test infrastructure (``.ci/infra.sh up``; for ``--launcher slurm`` the two-node
Slurm cluster of ``.ci/slurm.sh up``, each run one job step in a fresh allocation). Each injection is
one two-node suite run in this process (the real runner, watchdog, node-health stage and judge, with
their default limits: hang budget max(60 s, 3 x p95), fail grace 15 s) whose trainer is a POSIX sh
stand-in printing MaxText-format lines at 0.25 s per step (tests/_fault_infra.py: the faults are about
how cvs-tui follows and judges a trainer, not about MaxText). The fault is injected at step 20 and
timed on this machine's clock (the nodes share it):

- crash: rank 1 exits 3 with no error line; rank 0 then waits silently, as a rank blocked in a
  collective with a dead peer does;
- silent hang: rank 1's trainer is stopped with SIGSTOP from outside;
- NaN: rank 1 logs a NaN loss and "Aborting training due to NaN loss." and exits 1;
- fatal kernel line: an amdgpu GPU reset line (nonce-tagged) written into the real kernel log
  (/dev/kmsg), read by the kernel-log follower over SSH with ``sudo -n``;
- stall past its gate: rank 1's trainer pauses STALL_S (20 s) inside step 20 and then logs that step's
  wall time, as MaxText does; the threshold cell gates ``training.longest_stall_seconds`` at max 5 s;
  "node marked" is the node marked stalled, "verdict" the run marked failing (it goes on to its end);
- lost node: SSH: node 1 is a private sshd on 198.18.77.x whose address is removed from `lo`; Slurm:
  node 2's slurmstepd of the run's step is killed (-9) and rank 1's trainer frozen (SIGSTOP), which
  Slurm does not notice (srun waits);
- step cancelled (Slurm only): ``scancel J.S`` of the run's job step from outside;
- rising ECC: the recorded amd-smi output (tests/fixtures/smi, a replay of hardware this machine lacks)
  starts returning a rising uncorrectable ECC total;
- slow node: rank 1's trainer (CPU-bound steps here, each logging its own wall time) is put under a
  10 % CPU quota (cgroup v1 ``cpu``; at 30 % the quota did not bind while the machine's load was 15)
  at step 5; the straggler is named when the run is judged (at its
  end), so only the cause it names is printed.

Printed per class: p50/p95 from the fault to the node marked failed/hung/lost/stalled (its
NodeStatusEvent), to the run's verdict (the run stage marked failed, or failing for a stall) and to the
run's end (RunEndEvent), what was called, and for a hang the time from rank 1's last line's arrival to
the node marked hung (the budget counts from there). ``clean`` runs clean two-node runs back to back
for the given minutes (400 steps of 0.25 s, each logging its measured wall time) and counts false
alarms: any run not complete, any node marked failed, hung, lost or stalled (the clean runs carry the
stall gate too), any straggler named.
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
from suite_fixtures.helpers import SLUG, TRAINER, make_suite, remove_scratch_tree

from cvs_tui.core.events import (
    LogLinesEvent,
    NodeState,
    NodeStatusEvent,
    RunEndEvent,
    RunEvent,
    StageEvent,
    StageState,
)
from cvs_tui.core.runner.suite import Suite
from cvs_tui.core.watch.options import RunOptions

STEP_S = 0.25
FAULT_STEP = 20
STALL_S = 20  # the stall injected inside step FAULT_STEP
STALL_GATE_S = 5.0  # training.longest_stall_seconds: max
STALL_METRIC = "training.longest_stall_seconds"
DETECT_LIMIT_S = 240.0  # a fault not called by then is reported as not detected (the run is stopped)
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
    last_line_at: float | None = None  # rank 1's last log line before it was marked, as it arrived
    node_at: float | None = None
    node_state: str = ""
    node_detail: str = ""
    verdict_at: float | None = None
    end_at: float | None = None
    outcome: str = ""
    reason: str = ""
    straggler: dict[str, Any] | None = None
    status: str = ""  # the judged record's PASS/FAIL
    marked: list[str] = field(default_factory=list)  # every node marked failed/hung/lost/stalled
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
    if kind == "stall":
        return (
            MARK
            + TIMED
            + f"header\ntimed_steps 0 {FAULT_STEP} sleep\n"
            + f'if [ "$RANK" = 1 ]; then {STAMP.strip()}; SLEEP={STALL_S}; fi\n'
            + f"timed_steps {FAULT_STEP} {FAULT_STEP + 1} sleep\nSLEEP={STEP_S}\n"
            + f"timed_steps {FAULT_STEP + 1} {FAULT_STEP + 40} sleep\nexit 0\n"
        )
    if kind in ("hang", "kernel", "lost", "ecc", "cancel"):
        return "header\nsteps 0 100000\n"
    if kind == "clean":
        return TIMED + "header\ntimed_steps 0 400 sleep\nexit 0\n"
    if kind == "slow":
        return TIMED + "header\ntimed_steps 0 300 busy\nexit 0\n"
    raise ValueError(kind)


@dataclass
class Bench:
    """One injection's set-up on either launcher: where the ranks' logs and pid files are."""

    launcher: str
    root: Path  # the nodes' folder (the trainer script, the fault stamps)
    config: Path
    out: Path
    setup: Any  # tests' Setup (SSH) or SlurmSetup

    def node_log(self, rank: int) -> Path:
        if self.launcher == "slurm":
            return self.out / "slurm" / SLUG / f"node{rank}.log"
        return Path(self.setup.node_log(rank))

    def copied_log(self, rank: int) -> Path:
        return self.out / "logs" / SLUG / f"node{rank}.log"


def _steps_for(kind: str) -> int:
    return {"clean": 400, "slow": 300, "stall": FAULT_STEP + 40}.get(kind, 100000)


def _setup(tmp: Path, kind: str, launcher: str) -> Bench:
    steps = _steps_for(kind)
    env = {"CVS_FAULT_SLEEP": str(STEP_S)}
    if launcher == "slurm":
        from _fault_infra import PRELUDE
        from _slurm_suite import make_setup as slurm_setup

        ss = slurm_setup(tmp, env=env, steps=steps)
        (ss.root / "bin" / TRAINER.name).write_text(PRELUDE + _body(kind))
        b = Bench(launcher, ss.root, ss.config, ss.out, ss)
    else:
        s = fault_setup(tmp, _body(kind), steps=steps, runtime="host", env=env)
        b = Bench(launcher, s.root, s.config, s.out, s)
    cfg = json.loads(b.config.read_text())
    access = "sudo" if kind == "kernel" else "plain"
    cfg["health"] = {"kernel_log": access, "telemetry_interval_s": 1.0}
    if kind == "ecc":
        cfg["gpu_name"] = "mi300x"  # telemetry is off for CPU configs
        cfg["train_params"]["maxtext_config"]["hardware"] = "gpu"
    b.config.write_text(json.dumps(cfg, indent=2))
    if kind in ("stall", "clean"):  # clean runs carry the gate too: a live stall call there is an alarm
        th_path = b.config.with_name(cfg["threshold_json"])
        th = json.loads(th_path.read_text())
        for cell in th.values():
            if isinstance(cell, dict):
                cell[STALL_METRIC] = {"kind": "max", "value": STALL_GATE_S}
        th_path.write_text(json.dumps(th, indent=2))
    if kind == "ecc":
        tools = b.root / "smi"
        shutil.copytree(SMI, tools)
        for name in ("rocm-smi", "nvidia-smi"):
            (tools / name).unlink()
        for p in [tools, *tools.iterdir()]:
            shutil.chown(p, infra().user, infra().user)
        cl = json.loads(b.setup.cluster.read_text())
        cl["env_vars"] = {"PATH": f"{tools}:/usr/local/bin:/usr/bin:/bin"}
        b.setup.cluster.write_text(json.dumps(cl))
    return b


def _steps(b: Bench, rank: int) -> int:
    p = b.copied_log(rank)
    return p.read_bytes().count(b"completed step:") if p.exists() else 0


def _pgid(b: Bench, rank: int) -> int:
    return int((b.node_log(rank).with_name(f"node{rank}.log.pid")).read_text().strip())


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


async def _suite(b: Bench, kind: str) -> Suite:
    if b.launcher == "slurm":
        from _slurm_infra import slurm
        from _slurm_suite import slurm_plan

        from cvs_tui.core.bus import EventBus

        plan = await slurm_plan(b.setup, ["-N", "2", "-J", f"cvs-ttd-{kind}"])
        b.out.mkdir(parents=True, exist_ok=True)
        opts = RunOptions(slurm_client=slurm().client())
        return Suite(plan, b.out, EventBus(b.out / "events.jsonl"), opts)
    return make_suite(b.setup, RunOptions())


def _lose_slurm_node(b: Bench) -> None:
    """Node 2's slurmstepd of the run's step dies and rank 1's trainer freezes (Slurm does not notice)."""
    from _slurm_infra import stepd_pid

    step = (b.out / "slurm" / SLUG / "node1.slurm").read_text().split()[1]
    pid = stepd_pid(step, "node2")
    if pid is None:
        raise RuntimeError("no slurmstepd found for node 2 of the run's step")
    os.kill(pid, signal.SIGKILL)
    os.killpg(_pgid(b, 1), signal.SIGSTOP)


async def _one(kind: str, tmp: Path, launcher: str = "ssh") -> Outcome:
    b = _setup(tmp, kind, launcher)
    out = Outcome()
    stack = contextlib.ExitStack()
    addr = f"198.18.77.{10 + os.getpid() % 200}"
    if kind == "lost" and launcher == "ssh":  # before the suite reads the cluster file: a private sshd
        from test_fault_network import private_node

        stack.enter_context(private_node(b.setup, addr, tmp, on_lo=True))
    if kind == "kernel":
        from _health_kmsg import sudo_kmsg_rule

        stack.enter_context(sudo_kmsg_rule(infra().user))
    suite = await _suite(b, kind)
    orig = suite.emit

    def emit(ev: RunEvent) -> None:
        out.events.append((time.time(), ev))
        orig(ev)

    suite.emit = emit  # type: ignore[method-assign]
    suite.runs.emit = emit
    task = asyncio.create_task(suite.run())
    frozen = False
    try:
        end = time.monotonic() + 120
        while min(_steps(b, 0), _steps(b, 1)) < (5 if kind == "slow" else FAULT_STEP):
            if task.done() or time.monotonic() > end:
                raise RuntimeError(f"{kind}: the run never reached the fault")
            await asyncio.sleep(0.05)
        if kind == "hang":
            os.killpg(_pgid(b, 1), signal.SIGSTOP)
            frozen = True
            out.fault_at = time.time()
        elif kind == "kernel":
            from _health_kmsg import inject, nonce

            tag = nonce()
            out.fault_at = inject(f"amdgpu 0000:08:00.0: amdgpu: GPU reset begin! {tag}")
        elif kind == "cancel":  # Slurm: the run's job step cancelled from outside
            from _slurm_infra import slurm

            step = (b.out / "slurm" / SLUG / "node1.slurm").read_text().split()[1]
            slurm().cmd("scancel", step)
            out.fault_at = time.time()
        elif kind == "lost" and launcher == "slurm":
            _lose_slurm_node(b)
            frozen = True
            out.fault_at = time.time()
        elif kind == "lost":
            subprocess.run(["ip", "addr", "del", f"{addr}/32", "dev", "lo"], check=True)
            out.fault_at = time.time()
        elif kind == "ecc":
            (b.root / "smi" / "ecc_step").write_text("0 1")
            out.fault_at = time.time()
        elif kind == "slow":
            stack.enter_context(_cpu_quota(_pgid(b, 1), QUOTA_PCT))
            out.fault_at = time.time()
        try:
            await asyncio.wait_for(asyncio.shield(task), 900 if kind in ("clean", "slow") else DETECT_LIMIT_S)
        except TimeoutError:
            out.outcome = f"not detected in {DETECT_LIMIT_S:.0f} s"
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
    finally:
        if frozen:
            with contextlib.suppress(Exception):
                os.killpg(_pgid(b, 1), signal.SIGCONT)
        if kind == "lost" and launcher == "ssh":
            subprocess.run(["ip", "addr", "add", f"{addr}/32", "dev", "lo"], check=False)
        if not task.done():
            task.cancel()
        stack.close()
        suite.bus.close()
    if out.fault_at is None:
        stamp = b.root / "fault.1"
        out.fault_at = float(stamp.read_text()) if stamp.exists() else None
    bad = {NodeState.FAILED, NodeState.HUNG, NodeState.UNREACHABLE, NodeState.STALLED}
    for t, ev in out.events:
        if isinstance(ev, NodeStatusEvent) and ev.state in bad:
            out.marked.append(f"node {ev.node} {ev.state.value}: {ev.detail[:150]}")
        if isinstance(ev, LogLinesEvent) and ev.node == 1 and out.node_at is None:
            out.last_line_at = t
        if isinstance(ev, NodeStatusEvent) and ev.node == 1 and ev.state in bad and out.node_at is None:
            out.node_at, out.node_state, out.node_detail = t, ev.state.value, ev.detail
        stage = isinstance(ev, StageEvent) and ev.stage.startswith("run:") and out.verdict_at is None
        if stage and (ev.state is StageState.FAILED or "failing" in ev.detail):  # type: ignore[union-attr]
            out.verdict_at = t  # the verdict (or the run failing, for a stall), as soon as it is known
        if isinstance(ev, RunEndEvent) and not out.outcome.startswith("not detected"):
            out.end_at, out.outcome, out.reason = t, ev.outcome.value, ev.reason
    rec = b.setup.run_record()
    out.straggler = rec.get("straggler_cause")
    out.status = rec.get("status", "")
    if kind == "stall":  # the judged verdict on the gate, to set beside the live one
        out.reason = next(
            (v.get("message", "") for v in rec.get("verdicts", []) if v.get("metric") == STALL_METRIC), ""
        )
    if launcher == "ssh":
        from _fault_infra import left_running

        for line in left_running(b.setup):  # the lost node's trainer outlived a network cvs-tui lost
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split()[0]), signal.SIGKILL)
        remove_scratch_tree(b.setup)
    return out


def _pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def _fmt(xs: list[float]) -> str:
    return f"{_pct(xs, 50):8.2f} {_pct(xs, 95):8.2f}" if xs else f"{'—':>8} {'—':>8}"


def matrix(kinds: list[str], repeat: int, launcher: str) -> None:
    rows = []
    for kind in kinds:
        to_node: list[float] = []
        to_verdict: list[float] = []
        to_end: list[float] = []
        from_line: list[float] = []
        called: list[str] = []
        for i in range(repeat):
            with tempfile.TemporaryDirectory(prefix=f"ttd-{kind}-") as d:
                o = asyncio.run(_one(kind, Path(d), launcher))
            if o.fault_at is None:
                called.append("no fault stamp")
                continue
            if o.node_at is not None:
                to_node.append(o.node_at - o.fault_at)
                if o.last_line_at is not None:
                    from_line.append(o.node_at - o.last_line_at)
            if o.verdict_at is not None and kind != "slow":
                to_verdict.append(o.verdict_at - o.fault_at)
            if o.end_at is not None and kind != "slow":
                to_end.append(o.end_at - o.fault_at)
            what = o.node_state or o.outcome
            if kind == "slow":
                sc = o.straggler
                what = f"straggler node {sc['node']}: {sc['cause']}" if sc else "no straggler named"
            elif kind == "stall":
                what += f", judged {o.status or '?'}"
                print(f"    live: {o.node_detail}\n    judged: {o.reason}", flush=True)
            called.append(what)
            print(
                f"  {launcher} {kind} #{i + 1}: node {_s(o.node_at, o.fault_at)} "
                f"({_s(o.node_at, o.last_line_at)} after its last line arrived), "
                f"verdict {_s(o.verdict_at, o.fault_at)}, "
                f"run ended {_s(o.end_at, o.fault_at)}, "
                f"{what}; {o.reason[:200]}",
                flush=True,
            )
        rows.append((kind, len(called), to_node, to_verdict, to_end, from_line, called))
    print(
        f"\n{launcher}: seconds from the fault to: the node marked, the run's verdict, the run's end; "
        "and from the node's last line's arrival to the node marked"
    )
    head = ["fault", "n", "node p50", "p95", "verdict p50", "p95", "end p50", "p95", "line p50", "p95"]
    print(f"{head[0]:<8} {head[1]:>3} " + " ".join(f"{h:>8}" for h in head[2:]) + "  called")
    for kind, n, tn, tv, te, tl, called in rows:
        counts = {c: called.count(c) for c in dict.fromkeys(called)}
        what = ", ".join(f"{c} x{k}" for c, k in counts.items())
        print(f"{kind:<8} {n:>3} {_fmt(tn)} {_fmt(tv)} {_fmt(te)} {_fmt(tl)}  {what}")


def _s(at: float | None, t0: float | None) -> str:
    return f"{at - t0:.2f} s" if at is not None and t0 is not None else "—"


def clean(minutes: float, launcher: str) -> None:
    end = time.monotonic() + minutes * 60
    runs = alarms = 0
    seconds = 0.0
    while time.monotonic() < end:
        with tempfile.TemporaryDirectory(prefix="ttd-clean-") as d:
            t0 = time.time()
            o = asyncio.run(_one("clean", Path(d), launcher))
        runs += 1
        started = next((t for t, e in o.events if type(e).__name__ == "RunStartEvent"), t0)
        seconds += (o.end_at or time.time()) - started
        alarm = o.outcome != "complete" or o.straggler is not None or bool(o.marked)
        alarms += alarm
        print(
            f"  {launcher} clean #{runs}: {o.outcome} {'ALARM ' + o.reason[:200] if alarm else ''}"
            f"{' marked ' + '; '.join(o.marked) if o.marked else ''}"
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
    ap.add_argument("--only", default="crash,hang,nan,stall,kernel,lost,ecc,slow")
    ap.add_argument("--launcher", choices=("ssh", "slurm"), default="ssh")
    ap.add_argument("--minutes", type=float, default=60.0)
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (SIGSTOP of the node user's trainer, /dev/kmsg, ip addr, cgroups)")
    if a.mode == "matrix":
        matrix(a.only.split(","), a.repeat, a.launcher)
    else:
        clean(a.minutes, a.launcher)


if __name__ == "__main__":
    main()
