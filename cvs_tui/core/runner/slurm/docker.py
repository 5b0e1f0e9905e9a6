"""Docker on Slurm nodes: the "nodes" launcher with every node reached through srun side steps.

Under ``--slurm`` with ``container.runtime.name: docker`` each rank's trainer runs in a Docker container
on its Slurm node, exactly as over SSH (:class:`~.nodes.NodeLauncher`: image, container, per-rank
launcher scripts, logs, stopping, the leftover check). Only the way to the node differs: a
:class:`~.transport.SlurmTransport` per node, inside the allocation (requested with
``--slurm-args`` or the one cvs-tui runs in), so no SSH to compute nodes is needed; the Docker API is
reached through a side step that bridges the node's Docker socket. Teardown removes the containers,
cancels every side step, then releases an allocation cvs-tui requested (also on failure and Ctrl-C).

No shared filesystem is needed: files are written and logs followed through side steps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ClassVar

from cvs_tui.core.plan import Plan
from cvs_tui.core.runner.nodes.launcher import NodeLauncher
from cvs_tui.core.runner.slurm.client import Allocation, SlurmClient, release_allocation
from cvs_tui.core.runner.slurm.transport import SlurmTransport
from cvs_tui.core.transport import Transport
from cvs_tui.core.watch.options import RunOptions


class SlurmDockerLauncher(NodeLauncher):
    """Ranks in Docker containers on the nodes of a Slurm allocation (rank i on ``alloc.nodes[i]``)."""

    name: ClassVar[str] = "slurm"

    def __init__(self, plan: Plan, options: RunOptions, alloc: Allocation, client: SlurmClient) -> None:
        super().__init__(plan, options)
        self.alloc = alloc
        self.client = client
        self._released = False

    def _make_transports(self) -> list[Transport]:
        return [
            SlurmTransport(
                self.client,
                self.alloc.job_id,
                node,
                env_vars=self.plan.cluster_env,
                connect_timeout=self.opt.connect_timeout_s,
            )
            for node in self.alloc.nodes[: len(self.plan.nodes)]
        ]

    async def prepare(self, progress: Callable[[str], None] | None = None) -> list[str]:
        need = len(self.plan.nodes)
        if len(self.alloc.nodes) < need:
            return [
                f"slurm: job {self.alloc.job_id} has {len(self.alloc.nodes)} nodes "
                f"({','.join(self.alloc.nodes)}), the plan needs {need}; request -N {need}"
            ]
        return await super().prepare(progress)

    async def teardown(self) -> list[str]:
        """Containers and trainers first (through the allocation), then the allocation itself."""
        problems: list[str] = []
        try:
            problems += await super().teardown()
        finally:
            if not self._released:
                self._released = True
                problems += await asyncio.shield(release_allocation(self.client, self.alloc))
        return problems
