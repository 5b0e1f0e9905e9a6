"""`cvs-tui config list | copy NAME [DEST] | validate CONFIG | schema`."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from cvs_tui.cli.options import add_target_args, load_target
from cvs_tui.core.config.loader import DISTRIBUTED_ENV_VARS
from cvs_tui.core.config.model import CvsConfig
from cvs_tui.core.config.shipped import find_shipped, list_shipped, shipped_configs_dir, sibling_thresholds
from cvs_tui.core.errors import UserError


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("config", help="list, copy, validate shipped configs; print the JSON Schema")
    sub = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    sub.add_parser("list", help="list the shipped configs").set_defaults(handler=run_list)
    c = sub.add_parser("copy", help="copy a shipped config and its threshold file(s)")
    c.add_argument("name", metavar="NAME", help="a name from `cvs-tui config list`")
    c.add_argument("dest", metavar="DEST", nargs="?", default=".", help="folder or .json file (default: .)")
    c.add_argument("--force", action="store_true", help="overwrite existing files")
    c.set_defaults(handler=run_copy)
    v = sub.add_parser(
        "validate", help="check a config (and nodes): exit 0 valid, 2 with one line per problem"
    )
    add_target_args(v)
    v.set_defaults(handler=run_validate)
    sub.add_parser("schema", help="print the JSON Schema of the config format").set_defaults(
        handler=run_schema
    )
    m = sub.add_parser("migrate", help="convert a pre-2026 config (training{}) to the current layout")
    m.add_argument("old", metavar="OLD.json", help="the old-layout config")
    m.add_argument("dest", metavar="DEST", nargs="?", help="new config file (default: OLD_migrated.json)")
    m.add_argument("--force", action="store_true", help="overwrite existing files")
    m.set_defaults(handler=run_migrate)
    p.set_defaults(handler=run_list)


def _summary(path: Path) -> str:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return "(unreadable)"
    env = (data.get("container") or {}).get("env") or {}
    mode = "distributed" if any(env.get(k) for k in DISTRIBUTED_ENV_VARS) else "single"
    sweeps = data.get("sweeps") or {}
    runs = data.get("runs") or [k for k in sweeps if not k.startswith("_")]
    return f"{mode:<11} gpu {data.get('gpu_name', '?'):<6} runs: {', '.join(runs) or 'default'}"


def run_list(args: argparse.Namespace) -> int:
    items = list_shipped()
    print(f"Shipped configs in {shipped_configs_dir()}:")
    if not items:
        print("  (none)")
    for name, path in items:
        print(f"  {name:<52} {_summary(path)}")
        tagged = json.loads(path.read_text(encoding="utf-8")).get("threshold_json", "")
        for t in sibling_thresholds(path, tagged if isinstance(tagged, str) else None):
            print(f"      threshold: {t.name}")
    print("Copy one with `cvs-tui config copy NAME [DEST]`, replace every <changeme>, then `cvs-tui plan`.")
    return 0


def run_copy(args: argparse.Namespace) -> int:
    src = find_shipped(args.name)
    if src is None:
        names = [n for n, _ in list_shipped()]
        import difflib

        close = difflib.get_close_matches(args.name, names, n=1, cutoff=0.5)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UserError(f"{args.name}: no shipped config of that name{hint}; see `cvs-tui config list`")
    dest = Path(args.dest)
    if dest.suffix == ".json":
        folder, cfg_dest = dest.parent, dest
    else:
        folder, cfg_dest = dest, dest / src.name
    raw = json.loads(src.read_text(encoding="utf-8"))
    given = raw.get("threshold_json") if isinstance(raw.get("threshold_json"), str) else None
    copies = [(src, cfg_dest)] + [(t, folder / t.name) for t in sibling_thresholds(src, given)]
    if any(d == cfg_dest for _, d in copies[1:]):
        # the threshold copy would overwrite the config just copied there (audit #20)
        raise UserError(f"{cfg_dest}: that is the threshold file's name; give the config another name")
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{folder}: exists and is not a folder; give a folder or a NAME.json path")
    existing = [str(d) for _, d in copies if d.exists()]
    if existing and not args.force:
        raise UserError([f"{d}: already exists; pass --force to overwrite" for d in existing])
    folder.mkdir(parents=True, exist_ok=True)
    for s, d in copies:
        shutil.copyfile(s, d)
        print(f"copied {s.name} -> {d}")
    print(
        f"Next: replace every <changeme> in {cfg_dest} (image tag, NCCL device vars, threshold_json), "
        f"then `cvs-tui plan {cfg_dest}`."
    )
    return 0


def run_validate(args: argparse.Namespace) -> int:
    loaded, cluster, plan = load_target(args)
    for w in loaded.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if plan.preflight_errors:
        for line in plan.preflight_errors:
            print(f"cvs-tui: error: {line}", file=sys.stderr)
        return 2
    print(
        f"OK {loaded.path}: {loaded.mode}, {len(cluster.nodes)} node(s), {len(loaded.runs)} run(s) "
        f"[{', '.join(r.key for r in loaded.runs)}], thresholds {loaded.threshold_path.name}"
    )
    return 0


def run_migrate(args: argparse.Namespace) -> int:
    from cvs_tui.core.config.migrate import write_migrated

    for line in write_migrated(Path(args.old), Path(args.dest) if args.dest else None, force=args.force):
        print(line)
    return 0


def config_json_schema() -> dict[str, Any]:
    """CvsConfig's JSON Schema, allowing `_` comment keys wherever unknown keys are forbidden."""
    schema = CvsConfig.model_json_schema()

    def allow_comments(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("additionalProperties") is False:
                node.setdefault("patternProperties", {})["^_"] = {}
            for v in node.values():
                allow_comments(v)
        elif isinstance(node, list):
            for v in node:
                allow_comments(v)

    allow_comments(schema)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def run_schema(args: argparse.Namespace) -> int:
    print(json.dumps(config_json_schema(), indent=2))
    return 0
