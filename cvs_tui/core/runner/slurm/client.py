"""Slurm as a launcher: allocation, one job step per run, side commands, stopping, following.

Nodes come from an allocation: the one cvs-tui runs in (``SLURM_JOB_ID``; node list in Slurm's order
from ``scontrol show hostnames``, rank 0 = first node) or one it requests with ``salloc --no-shell``
and releases (``scancel``) at the end, also on failure and Ctrl-C. Each run is one job step:
``srun --jobid J -N n --ntasks-per-node=1 bash RUN/task.sh``; the task picks its rank's launcher script
(``core/runner/nodes/script.py``, the same as over SSH) by ``SLURM_NODEID``. Per-node files live in the run
folder on shared storage, so logs are followed and exit statuses read from there, and srun's own
``--output`` is named with ``%n`` (``%N`` is the same hostname for every node of a one-machine test
cluster). Side commands run as ``srun --overlap -w NODE``, so no SSH to compute nodes is needed.
Where a node does not see the run folder (or with ``--slurm-files node-local``), the step's files live
on the nodes instead and the logs come from the step's labelled stdout: :mod:`.nodelocal`.

Exit statuses: the ranks' own (``<log>.exit``), never srun's (143 when one rank exited 7) nor the
batch job's. Stopping: ``scancel --signal=TERM J.S``, grace, ``scancel J.S``, then the trainer's
process group is stopped through a side command on any node whose rank recorded no exit status (a
killed slurmstepd leaves its task running and srun hanging). srun itself is never signalled while its
tasks may run: srun turns TERM into SIGKILL for the tasks.

(Longer than the usual module: allocation, step and the launcher seam are one mechanism, read together.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import re
import shlex
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from cvs_tui.core.errors import UserError
from cvs_tui.core.plan import Plan, PlannedRun, SlurmFiles
from cvs_tui.core.run_folder import SLURM_STEPS
from cvs_tui.core.runner.nodes.script import (
    LaunchSpec,
    build_launcher,
    exit_file,
    kill_group_command,
    parse_exit_status,
)
from cvs_tui.core.transport import CommandResult, CommandTimeout
from cvs_tui.core.watch.followers import FileFollower
from cvs_tui.core.watch.options import RunOptions

if TYPE_CHECKING:
    from cvs_tui.core.runner.slurm.docker import SlurmDockerLauncher

_GRANTED = re.compile(r"(?:Pending|Granted) job allocation (\d+)")
_NO_NODE_FLAGS = ("--no-shell", "--jobid", "-j")


class SlurmError(Exception):
    """A Slurm command failed; the message names the command and Slurm's own words."""


@dataclass(frozen=True)
class SlurmClient:
    """Runs Slurm's client commands. ``prefix`` wraps each one (tests: ``nsenter --net=...``)."""

    prefix: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None  # None: this process's environment

    def argv(self, args: Sequence[str]) -> list[str]:
        return [*self.prefix, *args]

    async def spawn(
        self, args: Sequence[str], *, stderr_pipe: bool = True, stdin_pipe: bool = False
    ) -> asyncio.subprocess.Process:
        # Own session: a Ctrl-C in the terminal must not reach srun (it would kill the step's tasks).
        return await asyncio.create_subprocess_exec(
            *self.argv(args),
            stdin=asyncio.subprocess.PIPE if stdin_pipe else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE if stderr_pipe else asyncio.subprocess.DEVNULL,
            env=dict(self.env) if self.env is not None else None,
            start_new_session=True,
        )

    async def run(self, args: Sequence[str], timeout: float = 30.0) -> CommandResult:
        proc = await self.spawn(args)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except BaseException as exc:
            # a client command (squeue, scancel, scontrol), never a step's srun
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            if isinstance(exc, TimeoutError):
                raise CommandTimeout(f"`{shlex.join(args)}` timed out after {timeout} s") from None
            raise
        rc = proc.returncode if proc.returncode is not None else -1
        return CommandResult(rc, out.decode(errors="replace"), err.decode(errors="replace"))

    async def check(self, args: Sequence[str], timeout: float = 30.0) -> str:
        r = await self.run(args, timeout)
        if r.rc != 0:
            raise SlurmError(f"`{shlex.join(args)}` exited {r.rc}: {r.err.strip()[-300:]}")
        return r.out

    async def hostnames(self, nodelist: str) -> list[str]:
        """A Slurm node list (``node[1-2]``) expanded in Slurm's order; SlurmError when it names none
        (an allocation without nodes cannot be planned: L7)."""
        names = (await self.check(["scontrol", "show", "hostnames", nodelist])).split()
        if not names:
            raise SlurmError(f"`scontrol show hostnames {nodelist}` printed no node name; check the job")
        return names

    async def steps(self, job_id: str) -> dict[str, str]:
        """Step id (``J.S``) -> step name, for the job's live steps."""
        r = await self.run(["squeue", "-h", "-s", "-j", job_id, "-o", "%i|%j"])
        out: dict[str, str] = {}
        for line in r.out.splitlines() if r.rc == 0 else []:
            sid, _, name = line.partition("|")
            out[sid.strip()] = name.strip()
        return out


# ---------------------------------------------------------------------------------------------------------
# Allocation
# ---------------------------------------------------------------------------------------------------------
@dataclass
class Allocation:
    job_id: str
    nodes: list[str]  # in Slurm's order: rank i runs on nodes[i]
    owned: bool  # requested by cvs-tui (released at the end) or the one it runs inside


def parse_slurm_args(text: str) -> list[str]:
    """``--slurm-args`` as salloc arguments. Raises UserError on bad quoting or a flag cvs-tui sets."""
    try:
        args = shlex.split(text)
    except ValueError as exc:
        raise UserError(f"--slurm-args: {exc}; give it as one quoted word: --slurm-args '-N 2'") from None
    for a in args:
        if _refused_flag(a):
            raise UserError(f"--slurm-args: {a} is set by cvs-tui; remove it")
    return args


def _refused_flag(arg: str) -> bool:
    """``arg`` is a flag cvs-tui sets, also as salloc's getopt reads it: a long flag abbreviated to a
    prefix (`--jobi=5`), a short one with its value attached (`-j5`) (audit 3 L4)."""
    name = arg.split("=", 1)[0]
    if name.startswith("--"):
        return len(name) > 3 and any(f.startswith(name) for f in _NO_NODE_FLAGS if f.startswith("--"))
    return any(not f.startswith("--") and arg.startswith(f) for f in _NO_NODE_FLAGS)


async def allocation_from_env(client: SlurmClient, env: Mapping[str, str]) -> Allocation:
    """The allocation cvs-tui runs inside (``salloc`` shell or ``sbatch`` script)."""
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if not job:
        raise UserError(
            "--slurm: not inside a Slurm allocation (no SLURM_JOB_ID); run under salloc or "
            "sbatch, or pass --slurm-args '-N 2 ...' to request one"
        )
    nodelist = env.get("SLURM_JOB_NODELIST") or (await client.check(["squeue", "-h", "-j", job, "-o", "%N"]))
    return Allocation(job, await client.hostnames(nodelist.strip()), owned=False)


async def request_allocation(client: SlurmClient, salloc_args: Sequence[str], timeout: float) -> Allocation:
    """``salloc --no-shell ARGS``; the job is cancelled if this fails or is interrupted after the request."""
    proc = await client.spawn(["salloc", "--no-shell", *salloc_args])
    job: str | None = None
    err: list[str] = []
    try:
        async with asyncio.timeout(timeout):
            assert proc.stderr is not None
            async for raw in proc.stderr:
                line = raw.decode(errors="replace").rstrip()
                err.append(line)
                m = _GRANTED.search(line)
                job = m.group(1) if m else job
            rc = await proc.wait()
        if rc != 0 or job is None:
            raise SlurmError(f"salloc {shlex.join(salloc_args)} exited {rc}: {' '.join(err)[-300:]}")
        nodelist = await client.check(["squeue", "-h", "-j", job, "-o", "%N"])
        return Allocation(job, await client.hostnames(nodelist.strip()), owned=True)
    except BaseException:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()  # salloc, not a step: its pending request is revoked
            await proc.wait()
        if job is not None:
            await asyncio.shield(client.run(["scancel", job], 30))
        raise


async def release_allocation(client: SlurmClient, alloc: Allocation, timeout: float = 30.0) -> list[str]:
    """Cancel an allocation cvs-tui requested and wait until squeue no longer lists it; problem lines."""
    if not alloc.owned:
        return []
    r = await client.run(["scancel", alloc.job_id], timeout)
    if r.rc != 0:
        return [f"slurm: scancel {alloc.job_id} failed: {r.err.strip()[-200:]}"]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        q = await client.run(["squeue", "-h", "-j", alloc.job_id, "-o", "%T"])
        if q.rc != 0 or not q.out.strip() or q.out.strip() in ("COMPLETED", "CANCELLED"):
            return []
        await asyncio.sleep(0.2)
    return [f"slurm: job {alloc.job_id} still listed by squeue {timeout:.0f} s after scancel"]


# ---------------------------------------------------------------------------------------------------------
# One run = one job step
# ---------------------------------------------------------------------------------------------------------
def task_script(folder: str) -> str:
    """The step's task: one per node, rank = ``SLURM_NODEID``; runs that rank's launcher script.

    ``scancel --signal=TERM`` reaches every process of the step, this shell included. It must live on
    to record the trainer's real exit status, so it traps TERM/INT/HUP (the trainer, forked from it,
    gets the default action back) and ``wait`` is re-entered after a trapped signal, so the status is
    the trainer's own, not "interrupted". When the interrupted wait had already reaped the trainer,
    bash no longer knows the pid (127, or -1 in bash 5.2) and that wait's status stands.
    """
    d = shlex.quote(folder)
    return "\n".join(
        [
            "#!/usr/bin/env bash",
            "# cvs-tui Slurm task",
            "rank=${SLURM_NODEID:?not started by srun}",
            f"dir={d}",
            'printf \'%s %s.%s\\n\' "${SLURMD_NODENAME:-}" "${SLURM_JOB_ID:-}" "${SLURM_STEP_ID:-}" '
            '> "$dir/node$rank.slurm"',
            "cvs_sig=0",
            "trap 'cvs_sig=1' TERM INT HUP",
            'wait() { local rc prev=""; while :; do cvs_sig=0; builtin wait "$@"; rc=$?; '
            'if [ -n "$prev" ] && { [ "$rc" = 127 ] || [ "$rc" -lt 0 ]; }; then return "$prev"; fi; '
            '[ "$cvs_sig" = 1 ] || return "$rc"; prev=$rc; done; }',
            '. "$dir/node$rank.sh"',
            "",
        ]
    )


@dataclass
class SlurmStep:
    """One run's job step: its files on shared storage, srun, and how to stop it."""

    client: SlurmClient
    alloc: Allocation
    folder: str  # on shared storage: node<rank>.sh/.log/.log.exit, task.sh, srun's node%n.out
    name: str  # the step name (unique): finds the step id in squeue
    ranks: int
    proc: asyncio.subprocess.Process | None = None
    step_id: str | None = None
    notes: list[str] = field(default_factory=list)

    def log_path(self, rank: int) -> str:
        return posixpath.join(self.folder, f"node{rank}.log")

    async def start(self, specs: Sequence[LaunchSpec]) -> None:
        """Write the launcher and task scripts and start srun (returns once srun runs)."""
        os.makedirs(self.folder, exist_ok=True)
        for rank, spec in enumerate(specs):
            for p in (spec.log_path, exit_file(spec.log_path), f"{spec.log_path}.pid"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(p)
            _write(posixpath.join(self.folder, f"node{rank}.sh"), build_launcher(spec), 0o755)
        _write(posixpath.join(self.folder, "task.sh"), task_script(self.folder), 0o755)
        nodes = self.alloc.nodes[: self.ranks]
        self.proc = await self.client.spawn(
            [
                *step_argv(self.alloc.job_id, nodes, self.name),
                "--open-mode=append",
                f"--output={self.folder}/node%n.out",
                f"--error={self.folder}/node%n.out",
                "bash",
                posixpath.join(self.folder, "task.sh"),
            ],
            stderr_pipe=False,
        )

    async def find_step(self, timeout: float = 0.0) -> str | None:
        """The step id ``J.S`` (from squeue by the step's unique name), waiting up to ``timeout`` s."""
        end = time.monotonic() + timeout
        while self.step_id is None:
            for sid, name in (await self.client.steps(self.alloc.job_id)).items():
                if name == self.name:
                    self.step_id = sid
            if self.step_id is not None or time.monotonic() >= end:
                break
            await asyncio.sleep(0.1)
        return self.step_id

    async def exit_status(self, rank: int) -> int | None:
        return await asyncio.to_thread(_read_exit, self.log_path(rank))

    async def running(self) -> bool:
        """squeue still lists the step."""
        sid = await self.find_step()
        return sid is not None and sid in await self.client.steps(self.alloc.job_id)

    async def cancel(self, grace_s: float = 10.0, kill_timeout: float = 30.0) -> list[str]:
        """TERM the step, wait ``grace_s`` for every rank's exit status, then end the step and stop the
        trainers of ranks that still recorded none (a lost step daemon). Problem lines."""
        problems: list[str] = []
        sid = await self.find_step(timeout=2.0)
        if sid is not None:
            await self.client.run(["scancel", "--signal=TERM", sid])
        await self._wait_exits(grace_s)
        if sid is not None:
            await self.client.run(["scancel", sid])
        missing = [r for r in range(self.ranks) if await self.exit_status(r) is None]
        if missing:
            problems += await self._stop_orphans(missing, kill_timeout)
        await self._wait_exits(5.0)
        if not await self._wait_srun(10.0):
            problems.append(f"slurm: srun for step {sid or self.name} did not end after scancel")
        if sid is not None and not await self._wait_gone(sid, 5.0):
            # A killed slurmstepd never reports back: the controller lists the step until the job ends,
            # though no task is left (stopped above). Said, not a failure.
            self.notes.append(
                f"slurm: step {sid} has no task left but stays listed until job "
                f"{self.alloc.job_id} ends (a node's step daemon was lost)"
            )
        return problems

    async def _wait_gone(self, sid: str, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while sid in await self.client.steps(self.alloc.job_id):
            if time.monotonic() >= end:
                return False
            await asyncio.sleep(0.2)
        return True

    async def _wait_exits(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if all([await self.exit_status(r) is not None for r in range(self.ranks)]):
                return
            await asyncio.sleep(0.05)

    async def _stop_orphans(self, ranks: Sequence[int], timeout: float) -> list[str]:
        async def one(rank: int) -> str | None:
            node = self.alloc.nodes[rank]
            try:
                r = await side_command(
                    self.client, self.alloc, node, kill_group_command(self.log_path(rank), 5.0), timeout
                )
            except (CommandTimeout, SlurmError) as exc:
                return f"rank {rank} ({node}): could not stop its trainer: {exc}"
            return None if r.rc == 0 else f"rank {rank} ({node}): stopping its trainer exited {r.rc}"

        return [p for p in await asyncio.gather(*(one(r) for r in ranks)) if p]

    async def _wait_srun(self, timeout: float) -> bool:
        """Wait for srun to end. Once the step is gone it may still hang (its peer daemon died): only then
        it is killed, as no task can be harmed any more."""
        if self.proc is None or self.proc.returncode is not None:
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.proc.wait(), timeout)
            return True
        if await self.running():
            return False
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        await self.proc.wait()
        return True


def side_argv(
    job_id: str, node: str, name: str, argv: Sequence[str], *, unbuffered: bool = False
) -> list[str]:
    """srun arguments for one side step ``name`` running ``argv`` on ``node`` next to a running step.

    ``unbuffered`` (``-u``): output reaches srun as the task writes it, not line by line (binary streams);
    never together with ``-l``, which then adds empty labelled lines."""
    return [
        "srun",
        "--jobid",
        job_id,
        "--overlap",
        "-w",
        node,
        "-N1",
        "-n1",
        "-J",
        name,
        "--quiet",
        *(["-u"] if unbuffered else []),
        *argv,
    ]


def side_step_name() -> str:
    return f"cvs-side-{uuid.uuid4().hex[:8]}"


async def cancel_named_step(client: SlurmClient, job_id: str, name: str, *, wait_s: float = 0.0) -> bool:
    """scancel the job's step named ``name`` (waiting up to ``wait_s`` for squeue to list it); found it."""
    end = time.monotonic() + wait_s
    while True:
        sids = [sid for sid, n in (await client.steps(job_id)).items() if n == name]
        for sid in sids:
            await client.run(["scancel", sid])
        if sids or time.monotonic() >= end:
            return bool(sids)
        await asyncio.sleep(0.1)


async def side_run(
    client: SlurmClient,
    job_id: str,
    node: str,
    argv: Sequence[str],
    timeout: float | None,
    *,
    input: bytes | None = None,
    unbuffered: bool = False,
    what: str | None = None,
) -> tuple[int, bytes, bytes]:
    """``argv`` as one side step on ``node``: (exit status, stdout, stderr) as bytes; ``input`` is its stdin.

    On timeout (or cancellation) the side step is cancelled through scancel (srun is not signalled while
    the step may run) and CommandTimeout is raised."""
    name = side_step_name()
    args = side_argv(job_id, node, name, argv, unbuffered=unbuffered)
    proc = await client.spawn(args, stdin_pipe=input is not None)
    try:
        out, err = await asyncio.wait_for(proc.communicate(input), timeout)
    except BaseException as exc:
        await asyncio.shield(end_side_step(client, job_id, name, proc))
        if isinstance(exc, TimeoutError):
            shown = (what or shlex.join(argv))[:80]
            raise CommandTimeout(f"{node}: `{shown}` timed out after {timeout} s") from None
        raise
    return (proc.returncode if proc.returncode is not None else -1), out, err


async def end_side_step(
    client: SlurmClient, job_id: str, name: str, proc: asyncio.subprocess.Process
) -> None:
    """End side step ``name`` that ``proc`` (its srun) runs: scancel it, wait for srun, and kill srun only
    once no step of that name is left (srun turns a signal into SIGKILL for the task)."""
    for _ in range(3):
        if proc.returncode is not None:
            return
        await cancel_named_step(client, job_id, name, wait_s=2.0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 10)
    if proc.returncode is None and not await cancel_named_step(client, job_id, name):
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


def step_argv(job_id: str, nodes: Sequence[str], name: str) -> list[str]:
    """``srun`` for one job step of one task per node on ``nodes`` (named ``name`` for squeue and scancel;
    a rank's failure must not end the others: the ranks' own exit statuses are judged)."""
    n = str(len(nodes))
    return [
        "srun", "--jobid", job_id, "-N", n, "-n", n, "--ntasks-per-node=1", "-w", ",".join(nodes),
        "-J", name, "--quiet", "--kill-on-bad-exit=0",
    ]  # fmt: skip


async def side_command(
    client: SlurmClient, alloc: Allocation, node: str, cmd: str, timeout: float
) -> CommandResult:
    """``cmd`` (a shell line) on ``node`` inside the allocation, next to a running step (``--overlap``).

    On timeout the side step is cancelled through scancel and CommandTimeout is raised."""
    rc, out, err = await side_run(client, alloc.job_id, node, ["bash", "-c", cmd], timeout, what=cmd)
    return CommandResult(rc, out.decode(errors="replace"), err.decode(errors="replace"))


def _tail_lines(path: str, limit: int = 64 * 1024) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return []


def _write(path: str, text: str, mode: int) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _read_exit(log_path: str) -> int | None:
    try:
        with open(exit_file(log_path), encoding="utf-8") as f:
            return parse_exit_status(f.read())
    except FileNotFoundError:
        return None


# ---------------------------------------------------------------------------------------------------------
# The launcher seam (LAUNCHER.md): SlurmJob is a Job, SlurmLauncher a Launcher ("slurm")
# ---------------------------------------------------------------------------------------------------------
class SlurmJob:
    """One run started on every rank as one job step; logs followed from the shared run folder."""

    def __init__(self, run_key: str, step: SlurmStep, *, poll_interval: float = 0.05, grace_s: float = 10.0):
        self.run_key = run_key
        self.step = step
        self.ranks = step.ranks
        self.grace_s = grace_s
        self.problems: list[str] = []
        self._followers = [
            FileFollower(step.log_path(r), poll_interval=poll_interval, name=f"rank {r}")
            for r in range(step.ranks)
        ]
        self._cancelled = False

    def follow(self, rank: int) -> AsyncIterator[bytes]:
        """That rank's log bytes from offset 0, live, byte-identical (a lost node shows as no progress)."""
        return self._followers[rank].chunks()

    def stop_following(self, rank: int) -> None:
        self._followers[rank].stop()

    async def read_rest(self, rank: int) -> bytes:
        return await self._followers[rank].read_rest()

    async def exit_status(self, rank: int) -> int | None:
        return await self.step.exit_status(rank)

    async def scheduler_lines(self, rank: int) -> list[str]:
        """The last lines of the step's stderr on that rank's node (``node%n.out``: slurmstepd's
        messages, and the task's own stderr before them)."""
        return await asyncio.to_thread(_tail_lines, posixpath.join(self.step.folder, f"node{rank}.out"))

    async def cancel(self, ranks: Sequence[int]) -> None:
        """Stops the whole step (one step holds every rank; Slurm cannot TERM a single task of it)."""
        del ranks
        if self._cancelled:
            return
        self._cancelled = True
        self.problems += await self.step.cancel(self.grace_s)

    async def finish(self) -> list[str]:
        """After the step: anything left to check or remove (node-local files); problem lines."""
        return []

    async def wait_ended(self, timeout: float) -> bool:
        """srun ended (every task of the step exited) within ``timeout`` s."""
        if self.step.proc is None:
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.step.proc.wait(), timeout)
        return self.step.proc.returncode is not None


@dataclass
class SlurmLauncher:
    """Runs a plan's ranks as Slurm job steps in one allocation (its own or the one it runs inside)."""

    name: ClassVar[str] = "slurm"
    plan: Plan
    run_dir: Path  # on storage every node sees (the shared filesystem)
    salloc_args: Sequence[str] | None = None  # None: use the allocation cvs-tui runs inside
    client: SlurmClient = field(default_factory=SlurmClient)
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    grace_s: float = 10.0
    command_timeout_s: float = 120.0
    alloc_timeout_s: float = 600.0
    alloc: Allocation | None = None
    jobs: list[SlurmJob] = field(default_factory=list)
    files: SlurmFiles | None = None  # where the step's files live; None: the plan's (--slurm-files)
    node_local: bool = False  # decided by prepare: the nodes do not share the run folder (or forced)

    async def prepare(self, progress: Callable[[str], None] | None = None) -> list[str]:
        """Allocation (requested or inherited), enough nodes, and the run folder seen by every node."""
        try:
            if self.alloc is not None:  # allocated before planning (from_plan)
                pass
            elif self.salloc_args is not None:
                self.alloc = await request_allocation(self.client, self.salloc_args, self.alloc_timeout_s)
            else:
                self.alloc = await allocation_from_env(self.client, self.env)
        except (SlurmError, CommandTimeout) as exc:
            return [f"slurm: {exc}"]
        need = len(self.plan.nodes)
        if len(self.alloc.nodes) < need:
            return [
                f"slurm: job {self.alloc.job_id} has {len(self.alloc.nodes)} nodes "
                f"({','.join(self.alloc.nodes)}), the plan needs {need}; request -N {need}"
            ]
        mode = self.files or (self.plan.slurm.files if self.plan.slurm is not None else "auto")
        unseen, problems = ([], []) if mode == "node-local" else await self._probe_shared(need, mode)
        if problems:
            return problems
        self.node_local = mode == "node-local" or bool(unseen)
        if not self.node_local:
            return []
        with contextlib.suppress(OSError):
            (self.run_dir / "slurm").rmdir()  # the probe's folder: nothing of the step goes there
        if progress is not None:
            why = "--slurm-files node-local"
            if unseen:
                why = f"{', '.join(unseen)}: no run folder {self.run_dir}"
            scratch = self.plan.paths.get("temp_dir") or "/tmp"
            progress(
                f"slurm: node-local files ({why}): scripts and logs in {scratch} on each node, "
                "logs followed from the step's labelled stdout"
            )
        return await self._check_node_tools(need)

    async def _probe_shared(self, need: int, mode: str) -> tuple[list[str], list[str]]:
        """Which ranks do not see the run folder (``rank r (node)``), and problem lines (unreachable,
        or not seen when ``mode`` is shared)."""
        assert self.alloc is not None
        probe = self.run_dir / "slurm" / f".shared-{uuid.uuid4().hex[:8]}"
        probe.parent.mkdir(parents=True, exist_ok=True)
        probe.write_text(probe.name)
        try:
            results = await asyncio.gather(
                *(
                    self.run_on_node(r, f"cat -- {shlex.quote(str(probe))}", self.command_timeout_s)
                    for r in range(need)
                ),
                return_exceptions=True,
            )
        finally:
            probe.unlink()
        problems, unseen = [], []
        for r, res in enumerate(results):
            node = self.alloc.nodes[r]
            if isinstance(res, BaseException):
                problems.append(f"slurm: rank {r} ({node}): {res}")
            elif res.out.strip() != probe.name and mode == "shared":
                problems.append(
                    f"slurm: rank {r} ({node}) does not see the run folder {self.run_dir}; "
                    "put --out on a filesystem shared by every node, or drop --slurm-files shared"
                )
            elif res.out.strip() != probe.name:
                unseen.append(f"rank {r} ({node})")
        return unseen, problems

    async def _check_node_tools(self, need: int) -> list[str]:
        """Node-local files need GNU ``tail --pid`` on every node (it copies the log to the step's stdout)."""
        from cvs_tui.core.runner.slurm.nodelocal import TAIL_CHECK

        assert self.alloc is not None
        results = await asyncio.gather(
            *(self.run_on_node(r, TAIL_CHECK, self.command_timeout_s) for r in range(need)),
            return_exceptions=True,
        )
        problems = []
        for r, res in enumerate(results):
            node = self.alloc.nodes[r]
            if isinstance(res, BaseException):
                problems.append(f"slurm: rank {r} ({node}): {res}")
            elif res.rc != 0:
                problems.append(
                    f"slurm: rank {r} ({node}) has no GNU `tail --pid` (coreutils), needed without a shared "
                    "run folder; install coreutils there or put --out on a filesystem every node shares"
                )
        return problems

    def specs(self, run: PlannedRun, folder: str, *, write: bool = True) -> list[LaunchSpec]:
        """Each rank's launch spec, paths in ``folder``; the YAML is written there unless ``write`` is
        False (node-local files: the step itself writes it on the node)."""
        specs = []
        for rank in range(len(self.plan.nodes)):
            yaml_path = posixpath.join(folder, f"maxtext.node{rank}.yml")
            if write:
                _write(yaml_path, run.yaml_text, 0o600)  # owner only, like the launcher (audit #11)
            tokenizer = self.plan.stage("tokenizer").enabled
            specs.append(
                LaunchSpec(
                    log_path=posixpath.join(folder, f"node{rank}.log"),
                    config_path=yaml_path,
                    train_script_paths=self.plan.train_script_paths,
                    python=self.plan.python,
                    env={"PYTHONUNBUFFERED": "1", **run.env, **run.node_env[rank]},
                    hf_token_file=self.plan.paths.get("hf_token_file") if tokenizer else None,
                    label=f"run {run.key} node {rank}",
                    pre_env=self.plan.cluster_env,
                    post_env=self.plan.launcher_env,
                )
            )
        return specs

    async def start(self, run: PlannedRun) -> SlurmJob:
        if self.alloc is None:
            raise SlurmError("start before prepare: no allocation")
        if self.node_local:
            from cvs_tui.core.runner.slurm.nodelocal import start_node_local

            return await start_node_local(self, run)
        folder = str(self.run_dir / SLURM_STEPS / run.slug)
        os.makedirs(folder, exist_ok=True)
        return await self.start_specs(run.key, folder, self.specs(run, folder))

    async def start_specs(self, run_key: str, folder: str, specs: Sequence[LaunchSpec]) -> SlurmJob:
        """Start prepared launch specs (log paths in ``folder``, rank order) as one step."""
        assert self.alloc is not None
        step = SlurmStep(self.client, self.alloc, folder, f"cvs-{uuid.uuid4().hex[:10]}", len(specs))
        job = SlurmJob(run_key, step, grace_s=self.grace_s)
        self.jobs.append(job)  # before srun starts: teardown must find it whatever happens next
        await step.start(specs)
        return job

    async def run_on_node(
        self, rank: int, cmd: str, timeout: float, *, where: Literal["host", "trainer"] = "trainer"
    ) -> CommandResult:
        """A side command next to the running step (host runtime: host and trainer are the same)."""
        del where
        if self.alloc is None:
            raise SlurmError("run_on_node before prepare: no allocation")
        return await side_command(self.client, self.alloc, self.alloc.nodes[rank], cmd, timeout)

    async def teardown(self) -> list[str]:
        """Stop every step still running, then release an allocation cvs-tui requested. Problem lines."""
        problems: list[str] = []
        for job in self.jobs:
            if job.step.proc is not None and job.step.proc.returncode is None:
                await job.cancel(range(job.ranks))
            problems += job.problems + await job.finish()
        self.jobs = []
        if self.alloc is not None:
            problems += await release_allocation(self.client, self.alloc)
            if self.alloc.owned:
                self.alloc = None
        return problems


def from_plan(plan: Plan, options: RunOptions) -> SlurmLauncher | SlurmDockerLauncher:
    """The "slurm" launcher for a plan whose allocation is known (``plan.slurm``, see slurm.target):
    ranks in the job step (runtime host), or in Docker containers on the nodes (runtime docker)."""
    sl = plan.slurm
    if sl is None or sl.job_id is None:
        raise UserError("launcher slurm: the plan has no Slurm allocation; plan it with --slurm")
    client = options.slurm_client or SlurmClient()
    alloc = Allocation(sl.job_id, list(sl.nodes), owned=sl.owned)
    if plan.container_runtime == "docker":
        from cvs_tui.core.runner.slurm.docker import SlurmDockerLauncher  # imports aiodocker

        return SlurmDockerLauncher(plan, options, alloc, client)
    return SlurmLauncher(
        plan=plan,
        run_dir=Path(plan.out_dir).resolve(),
        client=client,
        env=dict(client.env) if client.env is not None else dict(os.environ),
        command_timeout_s=options.command_timeout_s,
        grace_s=options.slurm_grace_s,
        alloc=alloc,
    )
