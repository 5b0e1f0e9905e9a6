"""The launcher seam: how trainers start on the nodes, are followed and are stopped.

The suite (stages, watchdog, parsing, judging) talks only to a :class:`Launcher`. A launcher prepares the
nodes, starts one planned run on every rank (a :class:`Job` with per-rank log streams and exit statuses),
runs side commands on a node, and tears down what it started. Launchers never decide outcomes: the
watchdog (:mod:`cvs_tui.core.watch.watchdog`) does.

A launcher is found by name through :data:`LAUNCHERS` ("module:Class", imported when chosen), the
torchx scheduler-registry pattern: a new launcher is one module plus one line here. Every launcher
writes its per-rank launcher script with :mod:`cvs_tui.core.runner.nodes.script` (environment, own process
group, the real exit status as the last log line ``EXIT_CODE=N`` and in ``<log>.exit``).

This module imports nothing heavy (no SSH, no Docker): the stage modules and ``build_plan`` reach it.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol

from cvs_tui.core.errors import UserError

if TYPE_CHECKING:
    from cvs_tui.core.plan import Plan, PlannedRun
    from cvs_tui.core.transport import CommandResult
    from cvs_tui.core.watch.options import RunOptions


class NodeLost(Exception):
    """A rank's node became unreachable while following it (``str()`` says why)."""

    def __init__(self, rank: int, message: str) -> None:
        super().__init__(message)
        self.rank = rank


class LaunchFailed(Exception):
    """:meth:`Launcher.start` could not start some ranks.

    ``errors`` maps each such rank to why; ``job`` holds the ranks that did start, for the caller to
    follow or cancel. (The agreed seam has no way to report a partial start; this is the smallest one.)
    """

    def __init__(self, job: Job, errors: dict[int, str]) -> None:
        super().__init__("; ".join(f"node {r}: {e}" for r, e in sorted(errors.items())))
        self.job = job
        self.errors = errors


class Job(Protocol):
    """One run started on every rank."""

    run_key: str
    ranks: int

    def follow(self, rank: int) -> AsyncIterator[bytes]:
        """That rank's log bytes from offset 0, live, byte-identical, resuming after a disconnect.

        Raises :class:`NodeLost` when the node is gone for good.
        """
        ...

    def stop_following(self, rank: int) -> None:
        """End :meth:`follow` for that rank at its next opportunity."""
        ...

    async def read_rest(self, rank: int) -> bytes:
        """Whatever was written after following stopped (the last lines, the EXIT_CODE line).

        Raises :class:`NodeLost` when the node cannot be read.
        """
        ...

    async def exit_status(self, rank: int) -> int | None:
        """The rank's real exit status as the launcher recorded it; None while it runs."""
        ...

    async def cancel(self, ranks: Sequence[int]) -> None:
        """TERM the ranks' trainers (their whole process group / job step), grace, then KILL."""
        ...

    def link_down(self, rank: int) -> str | None:
        """Why that rank's node cannot be reached now, in the transport's or the scheduler's words
        (its connection dropped and it has not answered since; Slurm: its node is down); None while it
        can. The watchdog calls the node lost when this lasts (``RunOptions.lost_after_s``)."""
        ...

    async def scheduler_lines(self, rank: int) -> list[str]:
        """The scheduler's own last lines about that rank's task (Slurm: the step's stderr, where
        slurmstepd writes ``*** STEP ... CANCELLED ... DUE TO TIME LIMIT ***``); [] without a scheduler."""
        ...


class Launcher(Protocol):
    """Starts planned runs on the plan's nodes. Constructed as ``cls(plan, options)``."""

    name: ClassVar[str]  # registry key, e.g. "nodes", "slurm"

    async def prepare(self, progress: Callable[[str], None] | None = None) -> list[str]:
        """Connect to and check every node; one problem line each (empty: ready). ``progress`` gets
        one-line news of long steps (an image pull) while it works."""
        ...

    async def start(self, run: PlannedRun) -> Job:
        """Write per-rank launcher scripts and start every rank; :class:`LaunchFailed` if some did not."""
        ...

    async def run_on_node(
        self, rank: int, cmd: str, timeout: float, *, where: Literal["host", "trainer"] = "trainer"
    ) -> CommandResult:
        """A side command on one node: on the host itself, or where the trainer runs (its container)."""
        ...

    async def teardown(self) -> list[str]:
        """Stop everything it started (containers, interrupted starts, connections); problem lines."""
        ...


class LauncherClass(Protocol):
    """What :data:`LAUNCHERS` names: a launcher class, called with the plan and the run options."""

    def __call__(self, plan: Plan, options: RunOptions) -> Launcher: ...


# name -> "module:Class"; imported only when a plan asks for it.
LAUNCHERS: dict[str, str] = {
    "nodes": "cvs_tui.core.runner.nodes.launcher:NodeLauncher",
    "slurm": "cvs_tui.core.runner.slurm.launcher:from_plan",  # a factory: the plan carries the allocation
}


def launcher_class(name: str) -> LauncherClass:
    """The launcher class registered under ``name``; a UserError naming the choices otherwise."""
    target = LAUNCHERS.get(name)
    if target is None:
        raise UserError(f"launcher: {name!r} is not one of {sorted(LAUNCHERS)}; pick one of those")
    module, _, cls = target.partition(":")
    found: LauncherClass = getattr(importlib.import_module(module), cls)
    return found


def launcher_for(plan: Plan, options: RunOptions) -> Launcher:
    """The plan's launcher (``plan.launcher``), ready for :meth:`Launcher.prepare`."""
    return launcher_class(plan.launcher)(plan, options)
