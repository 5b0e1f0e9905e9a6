"""The plan as plain text for a terminal (``cvs-tui plan``), secrets masked."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from typing import Any

from cvs_tui.core.plan.model import Plan

_SLURM_FILES = {
    "auto": "the run folder if every node sees it, else node-local (checked at preflight)",
    "shared": "the run folder, on storage every node shares (logs followed from it)",
    "node-local": "node-local scratch (temp_dir); logs from the step's labelled stdout",
}


def _format_slurm_files(files: str, w: Callable[[str], None]) -> None:
    w(f"  files       {files}: {_SLURM_FILES.get(files, files)}  (--slurm-files)")


def _format_slurm(d: dict[str, Any], w: Callable[[str], None]) -> None:
    sl = d["slurm"]
    if sl["job_id"] is None:
        request = shlex.join(sl["salloc_args"])
        w(f"  slurm       will request: salloc --no-shell {request}  (released at the end)")
        _format_slurm_files(sl.get("files", "auto"), w)
        for n in d["nodes"]:
            w(f"  rank {n['rank']}  node {n['rank'] + 1} of the allocation, in Slurm's node-list order")
        return
    how = "requested by cvs-tui, released at the end" if sl["owned"] else "the allocation cvs-tui runs in"
    w(f"  slurm       job {sl['job_id']}  ({how})")
    _format_slurm_files(sl.get("files", "auto"), w)
    for n, name in zip(d["nodes"], sl["nodes"], strict=True):
        coord = "  (coordinator)" if n["rank"] == 0 else ""
        w(f"  rank {n['rank']}  {name}  address {n['host']}  srun --jobid {sl['job_id']} -w {name}{coord}")


def format_plan(plan: Plan) -> str:
    """The plan as plain text for a terminal (secrets masked)."""
    d = plan.display_dict()
    out: list[str] = []
    w = out.append
    w(f"Plan {d['run_id']}  ({d['mode']}, {len(d['nodes'])} node(s) x {d['gpus_per_node']} GPU(s))")
    w(f"  config      {d['config_path']}")
    w(f"  thresholds  {d['threshold_path']}  (enforce_thresholds: {str(d['enforce_thresholds']).lower()})")
    w(f"  model       {d['model_label']}   gpu {d['gpu_name']}   user {d['user']}")
    w(f"  run folder  {d['out_dir']}")
    rt = d["container_runtime"]
    if rt == "host":
        w("  container   none (runtime host: runs on each node itself)")
    else:
        w(f"  container   {d['container_name']}  image {d['container_image']}  ({d['container_lifetime']})")
    w(f"  trainer     {d['python']} {' | '.join(d['train_script_paths'])}  (first that exists)")
    if d["host_config"] is not None:
        w("  HostConfig  " + json.dumps(d["host_config"], sort_keys=True))
    for k, v in d["cluster_env"].items():
        w(f"  node env    {k}={v}  (cluster file env_vars, before every command)")
    for k, v in d["launcher_env"].items():
        w(f"  launcher    {k}={v}")
    for line in d["preflight_errors"]:
        w(f"  PREFLIGHT ERROR: {line}")
    for line in d["warnings"]:
        w(f"  warning: {line}")
    w("")
    w("Nodes")
    if d.get("slurm") is not None:
        _format_slurm(d, w)
    for n in [] if d.get("slurm") is not None else d["nodes"]:
        how = (
            "local" if n["local"] else f"ssh {n['user']}@{n['host']}" + (f":{n['port']}" if n["port"] else "")
        )
        coord = "  (coordinator)" if n["rank"] == 0 else ""
        w(f"  rank {n['rank']}  {n['host']}  {how}{coord}")
    w(f"  coordinator {d['coordinator']}:{d['coordinator_port']}")
    w("")
    w("Stages")
    for i, s in enumerate(d["stages"], 1):
        mark = "run " if s["enabled"] else "skip"
        w(f"  {i:2d}. [{mark}] {s['name']:<18} {s['reason']}")
    for r in d["runs"]:
        w("")
        w(f"Run {r['key']}  ({r['kind']}, {r['steps']} steps, logs/{r['slug']}/)")
        w(f"  run_name               {r['run_name']}")
        w(f"  base_output_directory  {r['base_output_directory']}")
        w(f"  XLA_FLAGS              {r['xla_flags'] if r['xla_flags'] else '(not set)'}")
        w("  env")
        for k, v in r["env"].items():
            if k != "XLA_FLAGS":
                w(f"    {k}={v}")
        w("  per-node env")
        for rank, e in enumerate(r["node_env"]):
            w(f"    rank {rank}: " + " ".join(f"{k}={v}" for k, v in e.items()))
        cell = r["threshold_cell"]
        if r["kind"] == "sweep":
            if cell is None:
                w("  thresholds: no cell for this key (every metric is recorded, none gated)")
            else:
                w("  thresholds")
                for metric, spec in cell.items():
                    extra = ""
                    if spec.get("tolerance_pct") is not None:
                        extra = f" +/-{spec['tolerance_pct']}%"
                    if spec.get("reference"):
                        extra = f" x {spec['reference']}"
                    w(f"    {metric}: {spec['kind']} {spec['value']}{extra}")
        w("  MaxText YAML")
        for line in r["yaml_text"].splitlines():
            w(f"    {line}")
    return "\n".join(out) + "\n"
