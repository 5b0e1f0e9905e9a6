"""What ``cvs-tui analyze`` and follow mode judge: the node logs the inputs hold (plain logs, a folder of
them, or a cvs-tui run folder), the run each belongs to, and the plan to judge them with (the run
folder's plan.json, or the config's plan for as many local nodes as there are logs)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from cvs_tui.core.cluster import local_cluster
from cvs_tui.core.config.loader import LoadedConfig
from cvs_tui.core.errors import UserError
from cvs_tui.core.plan import Plan, PlannedRun, build_plan
from cvs_tui.core.results import Results, load_results
from cvs_tui.core.run_folder import RunFolder, node_logs_in


def live_results(paths: Sequence[str | Path]) -> Results | None:
    """The results.json a live run wrote into the run folder being analyzed; None for plain logs, an
    analyze output, or a file that cannot be read (then everything is judged from the logs alone)."""
    ps = [Path(p) for p in paths]
    if not is_run_folder(ps):
        return None
    try:
        res = load_results(RunFolder(ps[0]).results_path)
    except (OSError, ValueError, UserError):
        return None
    return res if res.source == "live" else None


def is_run_folder(ps: Sequence[Path]) -> bool:
    return len(ps) == 1 and ps[0].is_dir() and RunFolder(ps[0]).logs_dir.is_dir()


def planned_run(plan: Plan, run_key: str) -> PlannedRun:
    """The plan's run named by ``run_key``: its key (SMOKE, CKPT-1, a sweep key) or its slug (CKPT_1)."""
    for r in plan.runs:
        if run_key in (r.key, r.slug):
            return r
    raise UserError(f"--run {run_key!r}: no such run; pick one of {[r.key for r in plan.runs]}")


def resolve_log_inputs(
    plan: Plan, paths: Sequence[str | Path], run_key: str | None
) -> list[tuple[str, list[Path]]]:
    """(run key, node logs in rank order) for each run the inputs hold. See `cvs-tui analyze --help`."""
    ps = [Path(p) for p in paths]
    if not ps:
        raise UserError("--logs: give one log per node, a folder of node logs, or a cvs-tui run folder")
    missing = [str(p) for p in ps if not p.exists()]
    if missing:
        raise UserError([f"--logs: {m}: no such file or folder" for m in missing])
    if is_run_folder(ps):
        return _run_folder_inputs(plan, ps[0], run_key)
    if len(ps) == 1 and ps[0].is_dir():
        logs = node_logs_in(ps[0])
        if not logs:
            raise UserError(f"--logs: {ps[0]} holds no *.log file (expected node<rank>.log, one per node)")
    else:
        dirs = [str(p) for p in ps if p.is_dir()]
        if dirs:
            raise UserError(f"--logs: {dirs[0]} is a folder; give either one folder or one log file per node")
        logs = ps
        # /dev/zero or a FIFO would be read forever (audit #22): regular files only
        odd = [str(p) for p in logs if not p.is_file()]
        if odd:
            raise UserError([f"--logs: {o} is not a regular file; give the node log files" for o in odd])
    return [(run_key_for(plan, run_key), logs)]


def run_key_for(plan: Plan, run_key: str | None) -> str:
    """The key of the run a set of node logs belongs to: ``run_key`` (a key or slug), else the config's
    only sweep run; a UserError when the config selects several and none is named."""
    if run_key is None:
        sweeps = [r.key for r in plan.runs if r.kind == "sweep"]
        if len(sweeps) != 1:
            others = [r.key for r in plan.runs if r.kind != "sweep"]
            raise UserError(
                f"--run: the config selects {len(sweeps)} sweep runs; name the one these logs belong to "
                f"with --run KEY: {', '.join(sweeps)}" + (f" (or {', '.join(others)})" if others else "")
            )
        run_key = sweeps[0]
    return planned_run(plan, run_key).key


def _run_folder_inputs(plan: Plan, folder: Path, run_key: str | None) -> list[tuple[str, list[Path]]]:
    mapping = {r.slug: r.key for r in plan.runs}
    out: list[tuple[str, list[Path]]] = []
    problems: list[str] = []
    for sub in sorted(d for d in RunFolder(folder).logs_dir.iterdir() if d.is_dir()):
        key = mapping.get(sub.name)
        if key is None:
            problems.append(
                f"--logs: {sub}: no run of {plan.config_path} has slug {sub.name!r} "
                f"(known: {sorted(mapping)}); use the config the run was made with"
            )
            continue
        logs = node_logs_in(sub)
        if logs:
            out.append((key, logs))
    if problems:
        raise UserError(problems)
    if run_key is not None:
        want = planned_run(plan, run_key).key
        out = [(k, logs) for k, logs in out if k == want]
        if not out:
            raise UserError(f"--run {run_key!r}: the run folder {folder} holds no logs for that run")
    order = {r.key: i for i, r in enumerate(plan.runs)}  # the plan's order: SMOKE first
    out.sort(key=lambda kv: order.get(kv[0], len(order)))
    if not out:
        raise UserError(f"--logs: {folder}/logs holds no node logs (logs/<run slug>/node<rank>.log)")
    return out


def read_plan(folder: Path) -> Plan | None:
    """A run folder's plan.json, when it holds a whole plan of this version (secrets in it are masked)."""
    try:
        return Plan.model_validate(json.loads(RunFolder(folder).plan_path.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError):
        return None


def _node_count(ps: Sequence[Path]) -> int:
    """How many nodes the logs are of (the most over the runs of a run folder); errors come later."""
    if is_run_folder(ps):
        subs = [d for d in RunFolder(ps[0]).logs_dir.iterdir() if d.is_dir()]
        return max((len(node_logs_in(d)) for d in subs), default=1) or 1
    if len(ps) == 1 and ps[0].is_dir():
        return len(node_logs_in(ps[0])) or 1
    return max(len(ps), 1)


def plan_for(loaded: LoadedConfig, paths: Sequence[str | Path]) -> Plan:
    """The plan to judge logs with: the run folder's plan.json when it has one, else the config's plan
    for a local cluster of as many nodes as there are node logs."""
    ps = [Path(p) for p in paths]
    if is_run_folder(ps) and (stored := read_plan(ps[0])) is not None:
        return stored
    folder = ps[0] if ps and ps[0].is_dir() else (ps[0].parent if ps else Path.cwd())
    # a single-node config judges a multi-node log set as before; the node count only shapes the
    # per-node env, which judging does not read
    nodes = _node_count(ps) if loaded.mode == "distributed" else 1
    return build_plan(loaded, local_cluster(nodes), out_dir=folder, run_id=folder.name or "analyze")


def plan_hosts(paths: Sequence[str | Path]) -> list[str] | None:
    """Host names by rank from a run folder's plan.json, when there is a readable one."""
    if len(paths) != 1 or not Path(paths[0]).is_dir():
        return None
    return RunFolder(paths[0]).hosts()
