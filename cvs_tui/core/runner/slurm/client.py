"""Slurm's commands and the allocation a run's nodes come from.

:class:`SlurmClient` runs Slurm's commands (plainly, or wrapped for a login node). Nodes come from an
allocation: the one cvs-tui runs in (``SLURM_JOB_ID``; node list in Slurm's order from ``scontrol show
hostnames``, rank 0 = first node) or one it requests with ``salloc --no-shell`` and releases (``scancel``)
at the end, also on failure and Ctrl-C. The launcher that uses it: :mod:`.launcher`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cvs_tui.core.errors import UserError
from cvs_tui.core.transport import CommandResult, CommandTimeout

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
