"""Where a ``--slurm`` run's nodes come from, and the plan that says so.

Inside an allocation (``SLURM_JOB_ID``) the plan's nodes are its nodes in Slurm's node-list order
(rank 0 = first, the JAX coordinator at its ``NodeAddr``). Outside one, ``--slurm-args`` names what
``salloc --no-shell`` is given: ``plan`` shows that request and the rank map without allocating, a run
requests the allocation before it plans (the coordinator's address is only known then) and releases it
at the end, also on failure and Ctrl-C (:func:`release_owned`).

Containers: with the ``host`` runtime the trainer runs in the job step; with ``docker`` it runs in a
container on each node, as over SSH, every node reached through ``srun --overlap`` side steps and its
Docker socket through a side step that bridges it (:mod:`.docker`). pyxis/enroot is not available
here (see docs/config-format.md, "Containers under Slurm", for the proposed config shape).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence

from cvs_tui.core.cluster import Cluster, Node, os_user
from cvs_tui.core.errors import UserError
from cvs_tui.core.plan import Plan, PlannedSlurm, PlannedStage, SlurmFiles
from cvs_tui.core.runner.slurm.client import (
    Allocation,
    SlurmClient,
    SlurmError,
    allocation_from_env,
    parse_slurm_args,
    release_allocation,
    request_allocation,
)
from cvs_tui.core.transport import CommandTimeout

_NODES_FLAG = re.compile(r"^(?:-N|--nodes)(?:=?(.*))$")
_COUNT = re.compile(r"[0-9]{1,9}")  # ASCII digits only: str.isdigit takes `２` and `²`
_NODES_PER_CALL = 500
MAX_SLURM_NODES = 16384  # the plan holds every node: past this it would take minutes and gigabytes


def requested_nodes(salloc_args: Sequence[str]) -> int:
    """The node count in ``--slurm-args`` (``-N 2``, ``-N2``, ``--nodes=2``); UserError when absent,
    given twice (salloc takes the last, the plan would show the first: L5), not a plain ASCII number
    (`２`, `²`: L4, L6) or more than MAX_SLURM_NODES (M7)."""
    counts: list[tuple[str, str]] = []
    for i, a in enumerate(salloc_args):
        m = _NODES_FLAG.match(a)
        if m:
            counts.append((a, m.group(1) or (salloc_args[i + 1] if i + 1 < len(salloc_args) else "")))
    if not counts:
        raise UserError("--slurm-args: no node count; add -N <nodes>, e.g. --slurm-args '-N 2 -p debug'")
    if len(counts) > 1:
        given = " and ".join(f"{a} {v}" if not v or v not in a else a for a, v in counts)
        raise UserError(f"--slurm-args: the node count is given {len(counts)} times ({given}); give -N once")
    a, value = counts[0]
    if not _COUNT.fullmatch(value) or int(value) == 0:
        raise UserError(f"--slurm-args: {a} {value}: give the node count as one number, e.g. -N 2")
    if int(value) > MAX_SLURM_NODES:
        raise UserError(
            f"--slurm-args: {a} {value}: more nodes than cvs-tui plans for ({MAX_SLURM_NODES}); "
            "give a smaller -N"
        )
    return int(value)


def slurm_args_or_none(text: str | None, env: Mapping[str, str]) -> list[str] | None:
    """salloc arguments when cvs-tui must request the allocation; None inside one (args then ignored:
    UserError, as they would be silently dropped)."""
    inside = bool(env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID"))
    if inside:
        if text:
            raise UserError(
                "--slurm-args: cvs-tui runs inside Slurm job "
                f"{env.get('SLURM_JOB_ID') or env.get('SLURM_JOBID')} and uses its nodes; drop --slurm-args"
            )
        return None
    if not text:
        raise UserError(
            "--slurm: not inside a Slurm allocation (no SLURM_JOB_ID); run under salloc or sbatch, "
            "or pass --slurm-args '-N 2 ...' to request one"
        )
    args = parse_slurm_args(text)
    requested_nodes(args)
    return args


async def node_addresses(client: SlurmClient, nodes: Sequence[str]) -> list[str]:
    """Each node's ``NodeAddr`` (the JAX coordinator must be an address the other ranks reach)."""
    # a few hundred names per call: one argv word holds 128 KiB at most (20 000 names did not fit: L8)
    out = "\n".join(
        [
            await client.check(["scontrol", "show", "node", "-o", ",".join(nodes[i : i + _NODES_PER_CALL])])
            for i in range(0, len(nodes), _NODES_PER_CALL)
        ]
    )
    addr: dict[str, str] = {}
    for line in out.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "NodeName" in fields:
            addr[fields["NodeName"]] = fields.get("NodeAddr") or fields["NodeName"]
    return [addr.get(n, n) for n in nodes]


async def allocate(
    client: SlurmClient, env: Mapping[str, str], salloc_args: list[str] | None, timeout: float = 600.0
) -> tuple[Allocation, list[str]]:
    """The allocation to run in (requested when ``salloc_args`` is given) and its nodes' addresses.

    A requested allocation is released again when reading the addresses fails."""
    try:
        if salloc_args is None:
            alloc = await allocation_from_env(client, env)
        else:
            alloc = await request_allocation(client, salloc_args, timeout)
    except (SlurmError, CommandTimeout) as exc:
        raise UserError(f"--slurm: {exc}") from None
    try:
        return alloc, await node_addresses(client, alloc.nodes)
    except BaseException:
        await asyncio.shield(release_allocation(client, alloc))
        raise


def allocation_cluster(alloc: Allocation, addresses: Sequence[str], user: str | None = None) -> Cluster:
    """The allocation's nodes as a cluster (host = NodeAddr, so rank 0's is the coordinator)."""
    return Cluster(
        nodes=[Node(host=a, rank=i) for i, a in enumerate(addresses)],
        user=user or os_user(),
        source=f"slurm job {alloc.job_id}",
    )


def pending_cluster(n: int, user: str | None = None) -> Cluster:
    """``plan --slurm`` outside an allocation: ``n`` nodes not known yet."""
    return Cluster(
        nodes=[Node(host=f"<allocation node {i + 1}>", rank=i) for i in range(n)],  # 1-based, as plan says
        user=user or os_user(),
        source="slurm (to be requested)",
    )


def slurm_plan(plan: Plan, alloc: Allocation | None, salloc_args: Sequence[str] | None) -> Plan:
    """``plan`` run through Slurm: launcher, allocation, and stage rows that say what applies."""
    if plan.container_runtime not in ("host", "docker"):
        raise UserError(
            f"{plan.config_path}: container.runtime.name {plan.container_runtime!r} is not supported with "
            '--slurm; use {"name": "host"} (the trainer runs in the job step) or {"name": "docker"}'
        )
    sl = PlannedSlurm(
        job_id=alloc.job_id if alloc else None,
        nodes=list(alloc.nodes) if alloc else [],
        salloc_args=list(salloc_args or []),
        owned=alloc.owned if alloc else salloc_args is not None,
    )
    where = f"job {sl.job_id}" if sl.job_id else "the requested allocation"
    rows = {
        "preflight": PlannedStage(
            name="preflight",
            enabled=True,
            reason=f"reach {len(plan.nodes)} node(s) in {where} through `srun --overlap` (no SSH); "
            "check every node sees the run folder",
        ),
        "launch_container": PlannedStage(
            name="launch_container",
            enabled=False,
            reason="runtime host under Slurm: no container, each rank runs in the run's job step",
        ),
        "teardown": PlannedStage(
            name="teardown",
            enabled=True,
            reason=f"end the job steps in {where}"
            + ("; release the allocation (scancel)" if sl.owned else "; the allocation stays"),
        ),
    }
    if plan.container_runtime == "docker":
        release = "; release the allocation (scancel)" if sl.owned else "; the allocation stays"
        rows = _docker_rows(plan, sl.job_id, where, release)
    stages = [
        s if plan.preflight_errors and s.name == "preflight" else rows.get(s.name, s) for s in plan.stages
    ]
    return plan.model_copy(update={"launcher": "slurm", "slurm": sl, "stages": stages})


def _docker_rows(plan: Plan, job_id: str | None, where: str, release: str) -> dict[str, PlannedStage]:
    """Stage rows for Docker on the Slurm nodes: every node and its Docker API through side steps."""
    # the key nodes.DOCKER_SOCKET_ARG and containers.DEFAULT_DOCKER_SOCKET (not imported: aiodocker)
    sock = str(plan.container_args.get("docker_socket") or "/var/run/docker.sock")
    side = f"`srun --jobid {job_id or 'JOB'} --overlap -w NODE` side commands"
    via = f"Docker API at {sock} on each node through a side step bridging it (socat, else python3)"
    rows = {
        "preflight": PlannedStage(
            name="preflight",
            enabled=True,
            reason=f"reach {len(plan.nodes)} node(s) in {where} through srun side commands (no SSH); "
            f"{via}; image, folders and free space on every node",
        ),
        "teardown": PlannedStage(
            name="teardown",
            enabled=True,
            reason=f"stop the trainers and remove the containers ({plan.container_lifetime}) through "
            f"srun side commands, end every side step{release}",
        ),
    }
    base = next((s for s in plan.stages if s.name == "launch_container"), None)
    if base is not None and base.enabled:
        rows["launch_container"] = base.model_copy(
            update={"reason": f"{base.reason}; the Docker API reached through {side}"}
        )
    return rows


async def release_owned(plan: Plan, client: SlurmClient) -> list[str]:
    """Release the plan's allocation if cvs-tui requested it and it is still listed (idempotent)."""
    sl = plan.slurm
    if sl is None or not sl.owned or sl.job_id is None:
        return []
    q = await client.run(["squeue", "-h", "-j", sl.job_id, "-o", "%T"])
    if q.rc != 0 or not q.out.strip():
        return []
    return await release_allocation(client, Allocation(sl.job_id, list(sl.nodes), owned=True))


_FILES: dict[str, SlurmFiles] = {"auto": "auto", "shared": "shared", "node-local": "node-local"}


def with_files(plan: Plan, files: str) -> Plan:
    """The Slurm plan with ``--slurm-files`` (where the step's files live) and its preflight row."""
    mode = _FILES.get(files)
    if mode is None:
        raise UserError(f"--slurm-files: {files!r} is not one of {', '.join(_FILES)}; pick one of those")
    sl = plan.slurm
    if sl is None:
        return plan
    check = {
        "auto": "check every node sees the run folder (if one does not: node-local files, logs from the "
        "step's labelled stdout)",
        "shared": "check every node sees the run folder",
        "node-local": "node-local files (--slurm-files node-local), logs from the step's labelled stdout; "
        "check GNU tail on every node",
    }[mode]
    stages = [
        s.model_copy(update={"reason": s.reason.replace("check every node sees the run folder", check)})
        if s.name == "preflight" and s.enabled
        else s
        for s in plan.stages
    ]
    return plan.model_copy(update={"slurm": sl.model_copy(update={"files": mode}), "stages": stages})
