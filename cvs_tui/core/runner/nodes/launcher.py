"""The "nodes" launcher: every rank on its own node over SSH (or locally), in Docker or on the host.

Each node gets one reused connection (:mod:`.ssh`; :mod:`.local`) and a container runtime
(:mod:`.containers`: a Docker container reached through the node's forwarded socket, or the node
itself). A run writes a launcher script per rank (:mod:`.script`), starts it detached where the trainer
runs, and follows ``node<rank>.log`` on that node with one :class:`~.tail.LogTailer` each. Stopping
runs the process-group kill where the trainer runs. Nodes whose Docker API is one daemon share one container.

Every rank's trainer carries a nonce in its environment (``CVS_TUI_JOB``, kept in memory here): the stop
finds the trainer's processes by it (also children that left the group with setsid), and teardown checks
on every node that no process of any run is left, reporting a node it cannot check as a problem.
"""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
import secrets
import shlex
from collections.abc import AsyncIterator, Callable, Sequence
from typing import ClassVar, Literal

from cvs_tui.core.config.host_config import gpu_mode
from cvs_tui.core.errors import UserError
from cvs_tui.core.plan import Plan, PlannedRun
from cvs_tui.core.runner.launch import LaunchFailed, NodeLost
from cvs_tui.core.runner.nodes.connect import transport_for
from cvs_tui.core.runner.nodes.containers import ContainerRuntime, ContainerSpec, DockerRuntime, runtime_for
from cvs_tui.core.runner.nodes.script import (
    ENVIRON_HAS,
    JOB_TOKEN_ENV,
    LaunchSpec,
    build_launcher,
    cancel_file,
    kill_group_command,
    launch_command,
    parse_exit_status,
    read_exit_command,
    scan_command,
)
from cvs_tui.core.runner.nodes.tail import LogTailer, coalesce_for
from cvs_tui.core.transport import CommandResult, Transport, TransportError, connect_all
from cvs_tui.core.watch.options import MIN_FREE_BYTES, RunOptions

DOCKER_SOCKET_ARG = "docker_socket"  # container.runtime.args key: the nodes' Docker socket path


class NodeJob:
    """One run on every node: each rank's log is ``<node_root>/cvs-logs/<slug>/node<rank>.log`` there."""

    def __init__(self, launcher: NodeLauncher, run: PlannedRun) -> None:
        self.launcher = launcher
        self.run_key = run.key
        self.ranks = len(launcher.plan.nodes)
        self.logs_dir = posixpath.join(launcher.node_root, "cvs-logs", run.slug)
        self.scratch = posixpath.join(launcher.scratch_root, run.slug)
        self.log_paths = [posixpath.join(self.logs_dir, f"node{r}.log") for r in range(self.ranks)]
        self._tailers: dict[int, LogTailer] = {}
        self.tokens = [secrets.token_hex(16) for _ in range(self.ranks)]  # never written to the node
        self.problems: dict[int, str] = {}  # rank -> why its last stop did not leave it clean

    def follow(self, rank: int) -> AsyncIterator[bytes]:
        # the tailer exists from this call on, so stop_following works before the first chunk
        tailer = LogTailer(
            self.launcher.transports[rank], self.log_paths[rank], coalesce=coalesce_for(self.ranks)
        )
        self._tailers[rank] = tailer
        return self._chunks(rank, tailer)

    async def _chunks(self, rank: int, tailer: LogTailer) -> AsyncIterator[bytes]:
        try:
            async for chunk in tailer.chunks():
                yield chunk
        except TransportError as exc:
            raise NodeLost(rank, str(exc)) from exc

    def stop_following(self, rank: int) -> None:
        tailer = self._tailers.get(rank)
        if tailer is not None:
            tailer.stop()

    def link_down(self, rank: int) -> str | None:
        tailer = self._tailers.get(rank)
        return tailer.down if tailer is not None else None

    async def scheduler_lines(self, rank: int) -> list[str]:
        del rank
        return []  # SSH + Docker: no scheduler ends the run

    async def read_rest(self, rank: int) -> bytes:
        tailer = self._tailers.get(rank)
        if tailer is None:
            return b""
        try:
            return await tailer.read_rest()
        except (TransportError, OSError) as exc:
            raise NodeLost(rank, str(exc)) from exc

    async def exit_status(self, rank: int) -> int | None:
        # the node-side folders are bound at the same path in the container: read it on the host
        t = self.launcher.transports[rank]
        r = await t.run(read_exit_command(self.log_paths[rank]), self.launcher.opt.command_timeout_s)
        return parse_exit_status(r.out)

    async def cancel(self, ranks: Sequence[int]) -> None:
        """Stop the ranks (cancel flag, TERM, grace, KILL) and check they are gone; see ``problems``."""

        async def one(rank: int) -> None:
            la = self.launcher
            cmd = kill_group_command(self.log_paths[rank], token=self.tokens[rank])
            try:
                r = await la.runtimes[rank].exec(cmd, timeout=la.opt.command_timeout_s)
            except Exception as exc:
                self.problems[rank] = f"cannot stop its trainer: {exc}"
                return
            if r.rc == 0:
                self.problems.pop(rank, None)
            else:
                self.problems[rank] = (r.out or r.err).strip()[:200] or f"stop exited {r.rc}"

        await asyncio.gather(*(one(r) for r in ranks))

    async def start_rank(self, run: PlannedRun, rank: int) -> None:
        la = self.launcher
        plan = la.plan
        t, rt = la.transports[rank], la.runtimes[rank]
        # each rank's launcher and YAML (env values, paths) in a folder only its user reads (audit #11;
        # under /tmp/<user>/ by default). One folder per rank: nodes that share a filesystem may log in as
        # different users, and a 0700 folder of one must not lock the others out.
        rank_dir = posixpath.join(self.scratch, f"node{rank}")
        yaml_path = posixpath.join(rank_dir, f"maxtext.node{rank}.yml")
        script = posixpath.join(rank_dir, f"launch.node{rank}.sh")
        log = self.log_paths[rank]
        dirs = " ".join(shlex.quote(d) for d in (self.logs_dir, self.scratch))
        stale = " ".join(shlex.quote(p) for p in (log, f"{log}.exit", f"{log}.pid", cancel_file(log)))
        private = shlex.quote(rank_dir)
        r = await t.run(
            f"mkdir -p -- {dirs} && mkdir -p -m 700 -- {private} && chmod 700 -- {private} "
            f"&& rm -f -- {stale}",
            la.opt.command_timeout_s,
        )
        if r.rc != 0:
            raise RuntimeError(f"cannot prepare {self.logs_dir}: {r.err.strip()[:200]}")
        await t.write_file(yaml_path, run.yaml_text, 0o600)
        # unbuffered stdout keeps print() records in order with the stderr log lines, and live
        env = {"PYTHONUNBUFFERED": "1", **run.env, **run.node_env[rank], JOB_TOKEN_ENV: self.tokens[rank]}
        spec = LaunchSpec(
            log_path=log,
            config_path=yaml_path,
            train_script_paths=plan.train_script_paths,
            python=plan.python,
            env=env,
            workdir=plan.maxtext_root if plan.container_runtime == "docker" else None,
            hf_token_file=plan.paths.get("hf_token_file") if plan.stage("tokenizer").enabled else None,
            label=f"run {run.key} node {rank}",
            pre_env=plan.cluster_env,
            post_env=plan.launcher_env,
        )
        await t.write_file(script, build_launcher(spec), 0o700)
        await rt.start_detached(launch_command(script))


class NodeLauncher:
    """Today's path: a transport and a container runtime per node."""

    name: ClassVar[str] = "nodes"

    def __init__(self, plan: Plan, options: RunOptions) -> None:
        self.plan = plan
        self.opt = options
        self.transports: list[Transport] = []
        self.runtimes: list[ContainerRuntime] = []
        # rank -> the rank whose runtime launches and removes the container it runs in
        self._container_owner: dict[int, int] = {}
        self._interrupted: list[NodeJob] = []  # starts cut short: teardown stops their ranks
        self._jobs: list[NodeJob] = []  # every run started: teardown checks none of it is left
        self.node_root = posixpath.dirname(plan.runs[0].base_output_directory) if plan.runs else ""
        self.scratch_root = posixpath.join(plan.paths.get("temp_dir") or self.node_root, plan.run_id)

    # -- prepare -----------------------------------------------------------------------------------------
    async def prepare(self, progress: Callable[[str], None] | None = None) -> list[str]:
        """Connect every node; unless something is wrong already, check image, folders, free space."""
        plan = self.plan
        self.transports = self._make_transports()
        errors = await connect_all(self.transports, timeout=self.opt.connect_timeout_s)
        problems = [
            f"node {n.rank} ({n.host}) unreachable: {err}"
            for n, err in zip(plan.nodes, errors, strict=True)
            if err is not None
        ]
        if problems or plan.preflight_errors:  # nothing will be launched: touch nothing else
            return problems
        try:
            spec = self._container_spec()
            kw = {"socket_path": self._docker_socket()} if plan.container_runtime == "docker" else {}
            self.runtimes = [runtime_for(t, spec, plan.container_runtime, **kw) for t in self.transports]
        except UserError as exc:
            return exc.problems
        problems = await self._node_checks(progress)
        if not problems:
            problems = await self._shared_daemons()
        return problems

    def _make_transports(self) -> list[Transport]:
        """One transport per node, rank order: SSH, or local for local hosts (the Slurm launcher: srun)."""
        plan = self.plan
        return [
            transport_for(
                n,
                user=plan.user,
                known_hosts=plan.known_hosts,
                verify_host_keys=plan.verify_host_keys,
                connect_timeout=self.opt.connect_timeout_s,
                env_vars=plan.cluster_env,
                password=plan.ssh_password.get_secret_value() if plan.ssh_password else None,
            )
            for n in plan.nodes
        ]

    def _docker_socket(self) -> str | None:
        """``container.runtime.args.docker_socket``: the Docker socket on every node (else the default)."""
        value = self.plan.container_args.get(DOCKER_SOCKET_ARG)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise UserError(
                f"container.runtime.args.{DOCKER_SOCKET_ARG}: {value!r} is not a socket path; "
                "use e.g. /var/run/docker.sock"
            )
        return value.strip()

    def _container_spec(self) -> ContainerSpec | None:
        plan = self.plan
        if plan.container_runtime != "docker":
            return None
        return ContainerSpec(
            name=plan.container_name,
            image=plan.container_image,
            # docker_socket says where the API is, not how to run the container
            args={k: v for k, v in plan.container_args.items() if k != DOCKER_SOCKET_ARG},
            gpu=gpu_mode(plan.gpu_name, cpu_only=_cpu(plan)),
            image_tar=plan.container_image_tar,
            env=plan.runs[0].env if plan.runs else {},
            lifetime=plan.container_lifetime,
            # the run's node-side folders, same path inside and out: the node can follow the logs
            extra_binds=[f"{d}:{d}" for d in (self.node_root, self.scratch_root) if d],
            labels={"cvs-tui.run-id": plan.run_id, "cvs-tui.user": plan.user},
        )

    async def _node_checks(self, progress: Callable[[str], None] | None) -> list[str]:
        dirs = [d for d in (self.node_root, self.scratch_root) if d]

        async def one(rank: int, t: Transport, rt: ContainerRuntime) -> list[str]:
            host = self.plan.nodes[rank].host
            out: list[str] = []
            try:
                if self.plan.container_runtime == "docker":
                    # GPU devices, then the image (pulled or loaded when missing, with progress)
                    out += [f"node {rank} ({host}): {p}" for p in await rt.prepare(progress)]
                mk = " ".join(shlex.quote(d) for d in dirs)
                r = await t.run(f"mkdir -p -- {mk} && df -Pk -- {mk}", self.opt.command_timeout_s)
                if r.rc != 0:
                    out.append(
                        f"node {rank} ({host}): cannot create {', '.join(dirs)}: {r.err.strip()[:200]}"
                    )
                else:
                    out += _low_space(rank, host, r.out, self.opt.min_free_bytes)
            except (TransportError, Exception) as exc:
                out.append(f"node {rank} ({host}): {exc}")
            return out

        found = await asyncio.gather(
            *(one(i, t, rt) for i, (t, rt) in enumerate(zip(self.transports, self.runtimes, strict=True)))
        )
        return [p for ps in found for p in ps]

    async def _shared_daemons(self) -> list[str]:
        """Nodes whose Docker API is one daemon (two ranks on one machine) share one container.

        The container name carries user and run id but not the rank, so such nodes must not each
        create (or, per_run, replace) it: the first node of each daemon launches and removes it.
        """
        docker = [rt for rt in self.runtimes if isinstance(rt, DockerRuntime)]
        if self.plan.container_runtime != "docker" or len(docker) != len(self.runtimes):
            return []
        ids = await asyncio.gather(*(rt.daemon_id() for rt in docker), return_exceptions=True)
        problems = [f"node {i}: {r}" for i, r in enumerate(ids) if isinstance(r, BaseException)]
        first: dict[str, int] = {}
        for i, d in enumerate(ids):
            if isinstance(d, str) and d:
                self._container_owner[i] = first.setdefault(d, i)
        return problems

    def _owns_container(self, rank: int) -> bool:
        return self._container_owner.get(rank, rank) == rank

    # -- the container stage (docker only) ---------------------------------------------------------------
    async def launch_containers(self) -> tuple[bool, str]:
        """Start the run's container on every node (one per Docker daemon); (all started, detail)."""
        owners = [i for i in range(len(self.runtimes)) if self._owns_container(i)]
        res = dict(
            zip(
                owners,
                await asyncio.gather(*(self.runtimes[i].launch() for i in owners), return_exceptions=True),
                strict=True,
            )
        )
        bad = [f"node {i}: {r}" for i, r in res.items() if isinstance(r, BaseException)]
        if bad:
            return False, "; ".join(bad)
        return True, ", ".join(
            f"node {i}: {res[i]}" if i in res else f"node {i}: shares node {self._container_owner[i]}'s"
            for i in range(len(self.runtimes))
        )

    # -- runs --------------------------------------------------------------------------------------------
    async def start(self, run: PlannedRun) -> NodeJob:
        job = NodeJob(self, run)
        self._jobs.append(job)
        self._interrupted.append(job)  # until every rank's start has returned
        started = await asyncio.gather(
            *(job.start_rank(run, r) for r in range(job.ranks)), return_exceptions=True
        )
        self._interrupted.remove(job)
        errors = {r: str(e) for r, e in enumerate(started) if isinstance(e, BaseException)}
        if errors:
            raise LaunchFailed(job, errors)
        return job

    async def run_on_node(
        self, rank: int, cmd: str, timeout: float, *, where: Literal["host", "trainer"] = "trainer"
    ) -> CommandResult:
        if where == "host":
            return await self.transports[rank].run(cmd, timeout)
        return await self.runtimes[rank].exec(cmd, timeout=timeout)

    # -- teardown ----------------------------------------------------------------------------------------
    async def teardown(self) -> list[str]:
        problems: list[str] = []
        for job in self._interrupted:
            await job.cancel(range(job.ranks))
        self._interrupted = []
        problems += await self._left_running()
        owners = [i for i in range(len(self.runtimes)) if self._owns_container(i)]
        res = dict(
            zip(
                owners,
                await asyncio.gather(*(self.runtimes[i].teardown() for i in owners), return_exceptions=True),
                strict=True,
            )
        )
        for i, r in res.items():
            if isinstance(r, BaseException):
                problems.append(f"node {i}: {r}")
            elif r is False:
                problems.append(f"node {i}: container {self.plan.container_name} is still there")
        for rt in self.runtimes:
            with contextlib.suppress(Exception):
                await rt.close()
        for t in self.transports:
            with contextlib.suppress(Exception):
                await t.close()
        return problems

    async def _left_running(self) -> list[str]:
        """Check every node (where its trainers ran) for a process of any run; stop any found, once."""
        if not self._jobs or not self.runtimes:
            return []

        async def one(rank: int) -> str | None:
            jobs = [j for j in self._jobs if rank < j.ranks]
            host = self.plan.nodes[rank].host
            try:
                left = await self._processes(rank, [j.tokens[rank] for j in jobs])
                if left:
                    await asyncio.gather(*(j.cancel([rank]) for j in jobs))
                    left = await self._processes(rank, [j.tokens[rank] for j in jobs])
            except Exception as exc:
                return f"node {rank} ({host}): cannot check that its trainers stopped: {exc}"
            if left:
                return f"node {rank} ({host}): trainer processes still running after stop: {' '.join(left)}"
            return None

        found = await asyncio.gather(*(one(r) for r in range(len(self.runtimes))))
        return [p for p in found if p]

    async def _processes(self, rank: int, tokens: Sequence[str]) -> list[str]:
        """Pids (where the trainer runs) whose environment holds one of ``tokens``."""
        cmd = f"{ENVIRON_HAS} {scan_command(*tokens)}; echo checked"
        r = await self.runtimes[rank].exec(cmd, timeout=self.opt.command_timeout_s)
        out = r.out.split()
        if not out or out[-1] != "checked":  # the check itself did not run to its end
            raise RuntimeError(f"process check failed (exit {r.rc}): {r.err.strip()[:200]}")
        return out[:-1]


def _low_space(rank: int, host: str, df_out: str, need: int = MIN_FREE_BYTES) -> list[str]:
    """Problem lines for the ``df -Pk`` rows with less than ``need`` bytes available."""
    out = []
    for line in df_out.splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 4 and cols[3].isdigit() and int(cols[3]) * 1024 < need:
            out.append(
                f"node {rank} ({host}): only {int(cols[3]) >> 10} MiB free on {cols[-1]}; "
                f"need {need >> 20} MiB for the run's output"
            )
    return out


def _cpu(plan: Plan) -> bool:
    hardware = [str(r.maxtext_config.get("hardware", "")).lower() for r in plan.runs]
    return bool(hardware) and all(h == "cpu" for h in hardware)
