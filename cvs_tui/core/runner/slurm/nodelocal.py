"""Slurm runs where the nodes do not share the run folder: node-local files, logs from srun's stdout.

The step's files go to a node-local scratch folder per rank, ``<temp_dir>/<run id>/<slug>/node<rank>``
(0700, like the SSH path's), delivered through the step itself: srun broadcasts its standard input (a
bundle read from an unlinked temporary file, never argv) to every task, and each task writes its own
rank's launcher script (:func:`.launcher.build_launcher`, the same as everywhere), the task script of
the shared mode (:func:`.slurm.task_script`) and the MaxText YAML, then starts them. (Every task gets
every rank's launcher, a few KiB each: 512 ranks broadcast about 2 MB, once per run.) The HF token stays
a file on the node, read there by the launcher, as over SSH. A task that cannot do this (its scratch
not writable) prints why and a line tagged with the step's nonce carrying its exit status: no launcher
ran, so no ``.exit`` file will ever say it.

Logs: the launcher writes the rank's log on the node as always; the task copies it to its stdout
(``tail -f --pid``, immune to the step's TERM, so the lines written after a stop still come) and srun
(``-l``, labelled, line-buffered; no ``-u``) merges them. :mod:`.stream` splits that back into
one byte stream per rank for :meth:`NodeLocalJob.follow`. At the end each rank's node log is compared
(size, SHA-256) with what came through, through a side command; bytes srun never delivered (a lost
step daemon) are read from the node there when the rest matches, any other difference is a problem line.

Exit statuses: the ranks' ``.exit`` files, read through side commands (``srun --overlap``) once the
rank's stream ends with its ``EXIT_CODE=`` line, srun ended or the step is being stopped; never srun's
own status. Stopping is the shared mode's (:meth:`.slurm.SlurmStep.cancel`); then the scratch folder
of every rank is removed, through a side command on its node.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import posixpath
import secrets
import shlex
import tempfile
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from cvs_tui.core.runner.nodes.script import (
    RC_SETUP_FAILED,
    LaunchSpec,
    build_launcher,
    parse_exit_status,
    read_exit_command,
)
from cvs_tui.core.runner.slurm.client import SlurmError
from cvs_tui.core.runner.slurm.launcher import SlurmJob
from cvs_tui.core.runner.slurm.steps import SlurmStep, side_command, step_argv, task_script
from cvs_tui.core.runner.slurm.stream import LabelDemux
from cvs_tui.core.transport import CommandTimeout
from cvs_tui.core.watch.followers import FileFollower

if TYPE_CHECKING:
    from cvs_tui.core.plan import PlannedRun
    from cvs_tui.core.runner.slurm.launcher import SlurmLauncher

# The task's first words (argv): read the bundle from stdin, then run it. Small and fixed, so no rank
# count can make it pass MAX_ARG_STRLEN.
BOOT = 'b=$(cat) || exit 2; eval "$b"'
EXIT_RETRY_S = 0.3  # a rank's .exit is read through a side command at most this often
TAIL_CHECK = "tail -c 1 --pid=1 -- /dev/null >/dev/null 2>&1 || { echo 'no GNU tail --pid'; exit 3; }"


def scratch_base(temp_dir: str | None, run_id: str, slug: str) -> str:
    """The run's node-local folder; each rank has ``node<rank>`` in it."""
    return posixpath.join(temp_dir or "/tmp", run_id, slug)


def rank_dir(base: str, rank: int) -> str:
    return posixpath.join(base, f"node{rank}")


def failure_tag(nonce: str) -> bytes:
    """The start of the line a task prints when it cannot start its launcher (then ``<rc>``): its own
    word for its exit status, as no ``.exit`` file can exist. The nonce is the step's, never the
    trainer's (it does not run then), so a trainer cannot print one."""
    return f"CVS_TUI_TASK_FAILED={nonce} ".encode()


def bundle(base: str, launchers: Sequence[str], yaml_text: str | None, nonce: str) -> bytes:
    """The script every task reads from stdin: its rank's files into ``<base>/node<rank>`` (0700), then
    the launcher (through the shared mode's task script) with its log copied to stdout."""
    q = shlex.quote
    cant = 'die "cannot write to $d"'
    cases = []
    for r, text in enumerate(launchers):
        d = rank_dir(base, r)
        cases.append(
            f"{r}) printf '%s' {q(text)} > \"$d/node{r}.sh\" && "
            f"printf '%s' {q(task_script(d))} > \"$d/task.sh\" || {cant} ;;"
        )
    put_yaml = f"printf '%s' {q(yaml_text or '')} > \"$d/maxtext.node$rank.yml\" || {cant}"
    yaml = [] if yaml_text is None else [put_yaml]
    tag = failure_tag(nonce).decode()
    lines = [
        "# cvs-tui node-local task: files for this rank, then its launcher, its log copied to stdout",
        "rank=${SLURM_NODEID:?not started by srun}",
        f'd={q(base)}/"node$rank"',
        f'die() {{ printf \'cvs-tui task on %s: %s\\n{tag}%s\\n\' "${{SLURMD_NODENAME:-?}}" "$1" '
        f"{RC_SETUP_FAILED}; exit {RC_SETUP_FAILED}; }}",
        "umask 077",
        'mkdir -p -- "$d" && chmod 700 -- "$d" || die "cannot create $d"',
        'case "$rank" in',
        *cases,
        '*) die "no launcher for rank $rank" ;;',
        "esac",
        *yaml,
        'log="$d/node$rank.log"',
        ': >> "$log" || die "cannot write $log"',
        # the launcher lives on through the step's TERM (task.sh traps it) to record the real status.
        # Its own words (bash's "Killed" notices) go to a file: stdout carries the log's bytes only, and
        # a pipe to a lost step daemon would kill it with SIGPIPE before it records the exit status
        'bash "$d/task.sh" > "$d/task.err" 2>&1 < /dev/null &',
        "task=$!",
        "cvs_sig=0",
        "trap 'cvs_sig=1' TERM INT HUP",
        # TERM ignored: the copy goes on until the launcher ended, then reads the log to its end
        '( trap "" TERM INT HUP; exec tail -c +1 -f -s 0.1 --pid="$task" -- "$log" )',
        # the launcher must never be cut short by this shell ending (the step would end with it)
        'while kill -0 "$task" 2>/dev/null; do wait "$task"; done',
        "exit 0",
        "",
    ]
    return "\n".join(lines).encode()


@dataclass
class NodeLocalStep(SlurmStep):
    """A job step whose files live on the nodes (``base``); logs come from srun's labelled stdout."""

    base: str = ""
    yaml_text: str | None = None  # written as <rank dir>/maxtext.node<rank>.yml on each node
    command_timeout_s: float = 120.0
    ending: bool = False  # being stopped: exit statuses are read without waiting for the stream
    nonce: str = field(init=False)
    demux: LabelDemux = field(init=False)
    stderr_tail: deque[str] = field(init=False, default_factory=lambda: deque(maxlen=20))
    exits: dict[int, int] = field(init=False, default_factory=dict)
    _next_read: dict[int, float] = field(init=False, default_factory=dict)
    _pump: asyncio.Task[None] | None = field(init=False, default=None)
    _errs: asyncio.Task[None] | None = field(init=False, default=None)
    _finished: list[str] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.nonce = secrets.token_hex(8)
        self.demux = LabelDemux(self.ranks, failure_tag=failure_tag(self.nonce))

    def log_path(self, rank: int) -> str:
        return posixpath.join(rank_dir(self.base, rank), f"node{rank}.log")

    def config_path(self, rank: int) -> str:
        return posixpath.join(rank_dir(self.base, rank), f"maxtext.node{rank}.yml")

    async def start(self, specs: Sequence[LaunchSpec]) -> None:
        """srun with the bundle as its stdin (broadcast to every task); returns once srun runs."""
        data = bundle(self.base, [build_launcher(s) for s in specs], self.yaml_text, self.nonce)
        nodes = self.alloc.nodes[: self.ranks]
        args = [
            *step_argv(self.alloc.job_id, nodes, self.name),
            "--label",
            "bash",
            "-c",
            BOOT,
        ]
        # unlinked at once: the bundle (environment values, paths) is left nowhere on this machine
        with tempfile.TemporaryFile() as fh:
            fh.write(data)
            fh.seek(0)
            # own session: a Ctrl-C in the terminal must not reach srun (it would kill the tasks)
            self.proc = await asyncio.create_subprocess_exec(
                *self.client.argv(args),
                stdin=fh,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=dict(self.client.env) if self.client.env is not None else None,
                start_new_session=True,
            )
        self._pump = asyncio.create_task(self._read_stdout())
        self._errs = asyncio.create_task(self._read_stderr())

    async def _read_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            while data := await self.proc.stdout.read(1 << 16):
                self.demux.feed(data)
        finally:
            self.demux.close()

    async def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        async for raw in self.proc.stderr:
            self.stderr_tail.append(raw.decode(errors="replace").rstrip()[:300])

    async def exit_status(self, rank: int) -> int | None:
        """The rank's ``.exit`` through a side command, once it may be there (see the module doc)."""
        if rank in self.exits:
            return self.exits[rank]
        if (failed := self.demux.ranks[rank].task_failed) is not None:
            self.exits[rank] = failed  # the task could not start its launcher: no .exit file will come
            return failed
        ended = self.proc is None or self.proc.returncode is not None
        if not (self.ending or ended or self.demux.ranks[rank].exit_line):
            return None
        now = time.monotonic()
        if now < self._next_read.get(rank, 0.0):
            return None
        self._next_read[rank] = now + 3600.0  # one read at a time
        try:
            r = await side_command(
                self.client,
                self.alloc,
                self.alloc.nodes[rank],
                read_exit_command(self.log_path(rank)),
                self.command_timeout_s,
            )
        except (CommandTimeout, SlurmError):
            return None
        finally:
            self._next_read[rank] = time.monotonic() + EXIT_RETRY_S
        code = parse_exit_status(r.out) if r.rc == 0 else None
        if code is not None:
            self.exits[rank] = code
        return code

    async def finish(self) -> list[str]:
        """After srun: compare each node's log with what came through, then remove the node-local
        folders (idempotent). Problem lines."""
        if self._finished is not None:
            return []
        self._finished = []
        if self._pump is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._pump), 10.0)
            if not self._pump.done():
                said = " | ".join(self.stderr_tail)[-300:]
                self._finished.append(f"slurm: srun's output for step {self.name} did not end: {said}")
                self._pump.cancel()
        if self._errs is not None and not self._errs.done():
            self._errs.cancel()
        results = await asyncio.gather(*(self._check_and_remove(r) for r in range(self.ranks)))
        self._finished += [p for p in results if p]
        if self.demux.stray_count:
            shown = b" | ".join(self.demux.stray).decode(errors="replace")[:300]
            n = self.demux.stray_count
            self._finished.append(f"slurm: {n} line(s) of srun's output had no rank: {shown}")
        return self._finished

    async def _check_and_remove(self, rank: int) -> str | None:
        """One side command on the rank's node: its log's size and SHA-256 (whole, and of the part that
        came through srun), its exit status, the bytes srun never delivered (a lost step daemon), then
        the folder's removal. Those bytes complete the stream when the rest matches; else a problem."""
        node = self.alloc.nodes[rank]
        got = self.demux.ranks[rank]
        log = shlex.quote(self.log_path(rank))
        d = rank_dir(self.base, rank)
        exit_cmd = read_exit_command(self.log_path(rank))
        cmd = (
            f"if [ -f {log} ]; then wc -c < {log}; sha256sum < {log} | cut -c1-64; "
            f"head -c {got.size} -- {log} | sha256sum | cut -c1-64; "
            f"else echo none; echo; echo; fi; printf '%s\\n' \"$({exit_cmd})\"; "
            f"[ -f {log} ] && tail -c +{got.size + 1} -- {log} | base64 | tr -d '\\n'; echo; "
            f"rm -rf -- {shlex.quote(d)}; rmdir -- {shlex.quote(self.base)} "
            f"{shlex.quote(posixpath.dirname(self.base))} 2>/dev/null; exit 0"
        )
        try:
            r = await side_command(self.client, self.alloc, node, cmd, self.command_timeout_s)
        except (CommandTimeout, SlurmError) as exc:
            return f"slurm: rank {rank} ({node}): could not check and remove {d}: {exc}"
        lines = [line.strip() for line in r.out.split("\n")]
        if r.rc != 0 or len(lines) < 5 or not (lines[0] == "none" or lines[0].isdigit()):
            return f"slurm: rank {rank} ({node}): checking {d} exited {r.rc}: {r.err.strip()[-200:]}"
        code = parse_exit_status(lines[3])
        if code is not None:
            self.exits.setdefault(rank, code)
        if lines[0] == "none":
            if got.size == 0 or got.task_failed is not None:  # no launcher ran: nothing to compare
                return None
            return f"slurm: rank {rank} ({node}): no log on the node to compare"
        size, whole, head = int(lines[0]), lines[1], lines[2]
        if size > got.size and head == got.sha.hexdigest():
            with contextlib.suppress(ValueError):
                got.add(base64.b64decode(lines[4], validate=True))  # what srun could not deliver
        if (size, whole) == (got.size, got.sha.hexdigest()):
            return None
        why = "the copy differs"
        if got.size == size + 1:
            why = "the node's log ends mid-line (its launcher was stopped) and srun added a newline"
        return (
            f"slurm: rank {rank} ({node}): log copied from srun's output ({got.size} bytes) is not the "
            f"node's own ({size} bytes): {why}"
        )


class NodeLocalJob(SlurmJob):
    """A :class:`.slurm.SlurmJob` whose ranks' logs come from srun's labelled stdout."""

    step: NodeLocalStep

    def __init__(self, run_key: str, step: NodeLocalStep, *, grace_s: float = 10.0) -> None:
        super().__init__(run_key, step, grace_s=grace_s)

    def _open_followers(self, poll_interval: float) -> list[FileFollower]:
        return []  # the logs come through the step's demultiplexer, not from files

    def follow(self, rank: int) -> AsyncIterator[bytes]:
        return self.step.demux.ranks[rank].chunks()

    def stop_following(self, rank: int) -> None:
        self.step.demux.ranks[rank].stop()

    async def read_rest(self, rank: int) -> bytes:
        return self.step.demux.ranks[rank].take()

    async def cancel(self, ranks: Sequence[int]) -> None:
        del ranks
        if self._cancelled:
            return
        self._cancelled = True
        self.step.ending = True
        self.problems += await self.step.cancel(self.grace_s)
        self.problems += await self.finish()

    async def finish(self) -> list[str]:
        return await self.step.finish()


async def start_node_local(la: SlurmLauncher, run: PlannedRun) -> NodeLocalJob:
    """Start a planned run as one step with node-local files (``la`` is prepared)."""
    assert la.alloc is not None
    base = scratch_base(la.plan.paths.get("temp_dir"), la.plan.run_id, run.slug)
    step = NodeLocalStep(
        la.client,
        la.alloc,
        base,
        f"cvs-{uuid.uuid4().hex[:10]}",
        len(la.plan.nodes),
        base=base,
        yaml_text=run.yaml_text,
        command_timeout_s=la.command_timeout_s,
    )
    specs = [
        replace(s, log_path=step.log_path(r), config_path=step.config_path(r))
        for r, s in enumerate(la.specs(run, base, write=False))
    ]
    job = NodeLocalJob(run.key, step, grace_s=la.grace_s)
    la.jobs.append(job)  # before srun starts: teardown must find it whatever happens next
    await step.start(specs)
    return job
