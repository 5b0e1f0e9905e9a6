"""`cvs-tui plan CONFIG [--cluster F | --nodes H,H] [--json] [--out DIR]`: the resolved plan.

Nothing is launched. `--out DIR` plans for that run folder and writes DIR/plan.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cvs_tui.core.cluster import Cluster, cluster_from_nodes_arg, load_cluster, local_cluster
from cvs_tui.core.config.loader import LoadedConfig, load_config
from cvs_tui.core.errors import UserError
from cvs_tui.core.plan import Plan, build_plan, format_plan, new_run_id
from cvs_tui.core.run_folder import RunFolder

DEFAULT_RUNS_DIR = Path("runs")


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


def target_cluster(args: argparse.Namespace) -> Cluster:
    if getattr(args, "cluster", None):
        return load_cluster(args.cluster)
    if getattr(args, "nodes", None):
        return cluster_from_nodes_arg(args.nodes)
    return local_cluster(1)


def load_target(
    args: argparse.Namespace, *, out_dir: Path | None = None
) -> tuple[LoadedConfig, Cluster, Plan]:
    """Cluster first (it names the `{user-id}`), then the config, then the plan. Raises UserError."""
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


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "plan",
        help="show exactly what a config will do (nothing is launched)",
        description="Resolve a config against its nodes and print the plan: mode, nodes and ranks, stages "
        "(and why any is skipped), and for each run its MaxText YAML, env, XLA_FLAGS, per-node coordinator "
        "variables and threshold cell. Secrets are shown as ***.",
    )
    add_target_args(p)
    p.add_argument("--json", action="store_true", help="print the plan as JSON (see docs/config-format.md)")
    p.add_argument("--out", metavar="DIR", help="run folder to plan for; also writes DIR/plan.json")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    out = Path(args.out) if args.out else None
    _, _, plan = load_target(args, out_dir=out)
    if args.json:
        print(json.dumps(plan.display_dict(), indent=2))
    else:
        print(format_plan(plan), end="")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        written = RunFolder(out).write_plan(plan)
        if not args.json:
            print(f"wrote {written}")
    if plan.preflight_errors:
        for line in plan.preflight_errors:
            print(f"cvs-tui: error: {line}", file=sys.stderr)
        return 2
    return 0
