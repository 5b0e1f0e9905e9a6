"""One run = one job step, and the side commands beside it.

Each run is one job step: ``srun --jobid J -N n --ntasks-per-node=1 bash RUN/task.sh``; the task picks its
rank's launcher script (``core/runner/nodes/script.py``, the same as over SSH) by ``SLURM_NODEID``.
Per-node files live in the run folder on shared storage, so logs are followed and exit statuses read from
there, and srun's own ``--output`` is named with ``%n`` (``%N`` is the same hostname for every node of a
one-machine test cluster). Side commands run as ``srun --overlap -w NODE``, so no SSH to compute nodes
is needed. Where a node does not see the run folder, see :mod:`.nodelocal`.

Exit statuses: the ranks' own (``<log>.exit``), never srun's (143 when one rank exited 7) nor the batch
job's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import shlex
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cvs_tui.core.runner.nodes.script import (
    LaunchSpec,
    build_launcher,
    exit_file,
    kill_group_command,
    parse_exit_status,
)
from cvs_tui.core.transport import CommandResult, CommandTimeout

if TYPE_CHECKING:
    pass

from cvs_tui.core.runner.slurm.client import Allocation, SlurmClient, SlurmError


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
            write_step_file(posixpath.join(self.folder, f"node{rank}.sh"), build_launcher(spec), 0o755)
        write_step_file(posixpath.join(self.folder, "task.sh"), task_script(self.folder), 0o755)
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


def tail_lines(path: str, limit: int = 64 * 1024) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return []


def write_step_file(path: str, text: str, mode: int) -> None:
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
