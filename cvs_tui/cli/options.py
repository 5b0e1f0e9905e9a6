"""Option groups and loaders that several subcommands share, so no command imports another's helpers.

* ``add_target_args`` / ``load_target``: CONFIG and its nodes made a plan (plan, run, config validate);
* ``add_context_options`` / ``context_from_args``: the privacy denylist (scrub, check-private, card);
* ``add_public_options``: ``--public`` and its denylist (run, analyze, report).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from cvs_tui.cli.publish import PUBLIC_DIR
from cvs_tui.core.errors import UserError

# Each import below is made where it is used: building the parser must stay cheap (`--help`), and
# pydantic, the config loader and the privacy rules cost more than the rest of a `plan`.
if TYPE_CHECKING:
    from cvs_tui.core.cluster import Cluster
    from cvs_tui.core.config.loader import LoadedConfig
    from cvs_tui.core.plan import Plan
    from cvs_tui.core.privacy import PrivacyContext

DEFAULT_RUNS_DIR = Path("runs")


# -- CONFIG and where to run it ----------------------------------------------------------------------------
def add_target_args(p: argparse.ArgumentParser) -> None:
    """CONFIG plus where to run it (shared by plan, run and config validate)."""
    p.add_argument("config", metavar="CONFIG", help="the CVS jaxmaxtext config (JSON)")
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--cluster", metavar="FILE", help="cluster file (node_dict/nodes, username, priv_key_file)"
    )
    where.add_argument(
        "--nodes", metavar="H1,H2", help="comma-separated [user@]host[:port]; default: this machine"
    )
    where.add_argument(
        "--slurm",
        action="store_true",
        help="run through Slurm: the allocation cvs-tui runs in (salloc/sbatch), or one requested "
        "with --slurm-args; rank 0 = first node",
    )
    p.add_argument(
        "--slurm-args",
        metavar="ARGS",
        help="with --slurm outside an allocation: what `salloc --no-shell` gets, e.g. '-N 2 -p debug' "
        "(a single word: --slurm-args=-N2)",
    )
    p.add_argument(
        "--slurm-files",
        choices=("auto", "shared", "node-local"),
        help="with --slurm: where the job step's scripts and logs live: the run folder on storage every "
        "node shares, node-local scratch with logs from the step's labelled stdout, or auto (default: "
        "node-local when a node does not see the run folder)",
    )


def target_cluster(args: argparse.Namespace) -> Cluster:
    from cvs_tui.core.cluster import cluster_from_nodes_arg, load_cluster, local_cluster

    if getattr(args, "cluster", None):
        return load_cluster(args.cluster)
    if getattr(args, "nodes", None):
        return cluster_from_nodes_arg(args.nodes)
    return local_cluster(1)


def load_target(
    args: argparse.Namespace, *, out_dir: Path | None = None, allocate: bool = False
) -> tuple[LoadedConfig, Cluster, Plan]:
    """Cluster first (it names the `{user-id}`), then the config, then the plan. Raises UserError.

    With ``--slurm`` and ``allocate`` (a run), an allocation is requested when cvs-tui is not inside
    one; the caller releases it (``slurm.target.release_owned``). Without ``allocate`` (plan) nothing
    is requested: the plan shows the request and the rank map."""
    from cvs_tui.core.config.loader import load_config
    from cvs_tui.core.plan import build_plan, new_run_id

    args.config = resolve_config_arg(args.config)
    if getattr(args, "slurm", False):
        return _load_slurm_target(args, out_dir=out_dir, allocate=allocate)
    for flag in ("slurm_args", "slurm_files"):
        if getattr(args, flag, None):
            name = "--" + flag.replace("_", "-")
            raise UserError(f"{name}: only with --slurm; add --slurm")
    problems: list[str] = []
    cluster: Cluster | None = None
    try:
        cluster = target_cluster(args)
    except UserError as exc:  # keep going: the config's problems are reported in the same run
        problems += exc.problems
    try:
        loaded = load_config(args.config, user=cluster.user if cluster else None)
    except UserError as exc:
        raise UserError(problems + exc.problems) from None
    if problems or cluster is None:
        raise UserError(problems)
    run_id = new_run_id()
    plan = build_plan(loaded, cluster, out_dir=out_dir or DEFAULT_RUNS_DIR / run_id, run_id=run_id)
    return loaded, cluster, plan


def _load_slurm_target(
    args: argparse.Namespace, *, out_dir: Path | None, allocate: bool
) -> tuple[LoadedConfig, Cluster, Plan]:
    import asyncio

    from cvs_tui.core.cluster import os_user
    from cvs_tui.core.config.loader import load_config
    from cvs_tui.core.plan import build_plan, new_run_id
    from cvs_tui.core.runner.slurm import target as st
    from cvs_tui.core.runner.slurm.client import SlurmClient, release_allocation

    salloc_args = st.slurm_args_or_none(args.slurm_args, os.environ)
    files = getattr(args, "slurm_files", None) or "auto"
    loaded = load_config(args.config, user=os_user())
    run_id = new_run_id()
    out = out_dir or DEFAULT_RUNS_DIR / run_id
    if salloc_args is not None and not allocate:
        cluster = st.pending_cluster(st.requested_nodes(salloc_args))
        plan = build_plan(loaded, cluster, out_dir=out, run_id=run_id)
        return loaded, cluster, st.with_files(st.slurm_plan(plan, None, salloc_args), files)
    client = SlurmClient()
    alloc, addresses = asyncio.run(st.allocate(client, os.environ, salloc_args))
    try:
        cluster = st.allocation_cluster(alloc, addresses)
        plan = build_plan(loaded, cluster, out_dir=out, run_id=run_id)
        return loaded, cluster, st.with_files(st.slurm_plan(plan, alloc, salloc_args), files)
    except BaseException:
        asyncio.run(release_allocation(client, alloc))
        raise


def resolve_config_arg(config: str) -> str:
    """CONFIG as given, or the path of the shipped config it names (a name from `cvs-tui config list`)
    when no such file exists. A shipped config that still holds `<changeme>` must be copied and filled
    in first: that is the error, with the command to do it."""
    if Path(config).exists():
        return config
    from cvs_tui.core.config.shipped import find_shipped

    shipped = find_shipped(config)
    if shipped is None:
        return config  # the loader names the missing file and the fix
    if "<changeme>" in shipped.read_text(encoding="utf-8"):
        raise UserError(
            f"{config}: a shipped config with <changeme> values; copy it first with "
            f"`cvs-tui config copy {config}`, fill them in, then pass the copy"
        )
    return str(shipped)


# -- the privacy denylist ----------------------------------------------------------------------------------
def add_context_options(p: argparse.ArgumentParser) -> None:
    """The denylist options `scrub`, `check-private` and `card` share."""
    p.add_argument(
        "--deny-term",
        action="append",
        default=[],
        metavar="T",
        help="a private term (site or project name); repeatable; matched case-insensitively",
    )
    p.add_argument(
        "--denylist",
        action="append",
        default=[],
        metavar="F",
        help="a file of private terms, one per line, `#` comments; keep it out of version control",
    )
    p.add_argument(
        "--config", metavar="CONFIG", help="the run's config: adds its paths, volumes, container name"
    )
    p.add_argument("--cluster", metavar="FILE", help="the run's cluster file: adds its hosts and users")


def context_from_args(args: argparse.Namespace, inputs: list[str] | None = None) -> PrivacyContext:
    """Denylist from --deny-term/--denylist/--config/--cluster, the local user and $HOME, and every run
    folder among ``inputs`` (a folder holding plan.json or results.json)."""
    from cvs_tui.core.privacy import build_context, context_from_run_folder, read_cluster_hosts
    from cvs_tui.core.run_folder import RunFolder

    loaded = cluster = None
    if getattr(args, "config", None):
        from cvs_tui.core.config.loader import load_config

        loaded = load_config(resolve_config_arg(args.config))
    if getattr(args, "cluster", None):  # names only: the SSH key file need not exist to scrub
        cluster = read_cluster_hosts(args.cluster)
    ctx = build_context(
        loaded=loaded,
        cluster=cluster,
        deny_terms=args.deny_term,
        denylist_files=args.denylist,
        environ=os.environ,
    )
    for item in inputs or []:
        folder = RunFolder(item)
        if folder.looks_like_run():
            folder.plan_dict()  # a malformed plan.json would hide its hosts from the denylist: stop here
            ctx = ctx.merged(context_from_run_folder(folder.path, environ={}))
    return ctx


# -- --public ----------------------------------------------------------------------------------------------
def add_history_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--no-history",
        action="store_true",
        help="neither read nor register the run history (`cvs-tui history`; path from "
        "CVS_TUI_HISTORY_DB, else the XDG data folder)",
    )


def add_public_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--public",
        action="store_true",
        help=f"also write a scrubbed copy of every artefact into <out>/{PUBLIC_DIR}/ (no hosts, IPs, "
        "users, home paths, buckets or tokens)",
    )
    p.add_argument(
        "--deny-term",
        action="append",
        default=[],
        metavar="T",
        help="with --public: a further private term (site or project name); repeatable",
    )
    p.add_argument(
        "--denylist",
        action="append",
        default=[],
        metavar="F",
        help="with --public: a file of private terms, one per line",
    )
