"""Slurm as a launcher ("slurm", LAUNCHER.md): :class:`SlurmJob` is a Job, :class:`SlurmLauncher` a Launcher.

Nodes come from an allocation (:mod:`.client`), each run is one job step (:mod:`.steps`), side commands
run as overlapping steps. Where a node does not see the run folder (or with ``--slurm-files
node-local``), the step's files live on the nodes instead and the logs come from the step's labelled
stdout: :mod:`.nodelocal`. In Docker: :mod:`.docker`.

Stopping: ``scancel --signal=TERM J.S``, grace, ``scancel J.S``, then the trainer's process group is
stopped through a side command on any node whose rank recorded no exit status (a killed slurmstepd
leaves its task running and srun hanging). srun itself is never signalled while its tasks may run: srun
turns TERM into SIGKILL for the tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import shlex
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
)
from cvs_tui.core.transport import CommandResult, CommandTimeout, Transport
from cvs_tui.core.watch.followers import FileFollower
from cvs_tui.core.watch.options import RunOptions

if TYPE_CHECKING:
    from cvs_tui.core.runner.slurm.docker import SlurmDockerLauncher

from cvs_tui.core.runner.slurm.client import (
    Allocation,
    SlurmClient,
    SlurmError,
    allocation_from_env,
    release_allocation,
    request_allocation,
)
from cvs_tui.core.runner.slurm.steps import SlurmStep, side_command, tail_lines, write_step_file
from cvs_tui.core.runner.slurm.transport import SlurmTransport


class SlurmJob:
    """One run started on every rank as one job step; logs followed from the shared run folder."""

    def __init__(self, run_key: str, step: SlurmStep, *, poll_interval: float = 0.05, grace_s: float = 10.0):
        self.run_key = run_key
        self.step = step
        self.ranks = step.ranks
        self.grace_s = grace_s
        self.problems: list[str] = []
        self._followers = self._open_followers(poll_interval)
        self._cancelled = False
        self._ended: dict[int, str] = {}  # rank -> why nothing more will come from it (see link_down)

    def _open_followers(self, poll_interval: float) -> list[FileFollower]:
        """One follower per rank's log in the shared run folder."""
        return [
            FileFollower(self.step.log_path(r), poll_interval=poll_interval, name=f"rank {r}")
            for r in range(self.ranks)
        ]

    def follow(self, rank: int) -> AsyncIterator[bytes]:
        """That rank's log bytes from offset 0, live, byte-identical (a lost node shows as no progress)."""
        return self._followers[rank].chunks()

    def stop_following(self, rank: int) -> None:
        self._followers[rank].stop()

    async def read_rest(self, rank: int) -> bytes:
        return await self._followers[rank].read_rest()

    async def exit_status(self, rank: int) -> int | None:
        return await self.step.exit_status(rank)

    def link_down(self, rank: int) -> str | None:
        """The job step ended (srun exited) without cvs-tui stopping it: a rank that recorded no exit
        status will write nothing more (``scancel`` of the step from outside, a node failure), in
        Slurm's words from the node's step output where it left some."""
        proc = self.step.proc
        if self._cancelled or proc is None or proc.returncode is None:
            return None
        if rank not in self._ended:
            out = tail_lines(posixpath.join(self.step.folder, f"node{rank}.out"), 4096)
            said = [ln.strip() for ln in out if "***" in ln]
            self._ended[rank] = (
                f"Slurm: the job step ended (srun exited {proc.returncode}) without this rank's exit status"
                + (f" ({said[-1]})" if said else "")
            )
        return self._ended[rank]

    async def scheduler_lines(self, rank: int) -> list[str]:
        """The last lines of the step's stderr on that rank's node (``node%n.out``: slurmstepd's
        messages, and the task's own stderr before them)."""
        return await asyncio.to_thread(tail_lines, posixpath.join(self.step.folder, f"node{rank}.out"))

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
    # each node's host through side steps, for node health (kernel log, GPU telemetry); made by prepare
    transports: list[Transport] = field(default_factory=list)

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
        self.transports = [
            SlurmTransport(self.client, self.alloc.job_id, node, env_vars=self.plan.cluster_env)
            for node in self.alloc.nodes[:need]
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
                write_step_file(yaml_path, run.yaml_text, 0o600)  # owner only, like the launcher (audit #11)
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
        # the health side steps (a kernel-log follower per node) end before the allocation may go
        for t in self.transports:
            await t.close()
        self.transports = []
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
