"""`cvs-tui config list | copy NAME [DEST] | validate CONFIG | schema`."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from cvs_tui.cli.options import add_target_args, load_target
from cvs_tui.core.config.shipped import find_shipped, list_shipped, shipped_configs_dir, sibling_thresholds
from cvs_tui.core.errors import UserError


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("config", help="list, copy, validate shipped configs; print the JSON Schema")
    sub = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    ls = sub.add_parser("list", help="list the shipped configs")
    ls.add_argument("--json", action="store_true", help="print the list as JSON")
    ls.set_defaults(handler=run_list)
    c = sub.add_parser("copy", help="copy a shipped config and its threshold file(s)")
    c.add_argument("name", metavar="NAME", help="a name from `cvs-tui config list`")
    c.add_argument("dest", metavar="DEST", nargs="?", default=".", help="folder or .json file (default: .)")
    c.add_argument("--force", action="store_true", help="overwrite existing files")
    c.set_defaults(handler=run_copy)
    v = sub.add_parser(
        "validate", help="check a config (and nodes): exit 0 valid, 2 with one line per problem"
    )
    add_target_args(v)
    v.add_argument(
        "--json", action="store_true", help="print the outcome as one JSON object (errors included)"
    )
    v.set_defaults(handler=run_validate)
    sub.add_parser("schema", help="print the JSON Schema of the config format").set_defaults(
        handler=run_schema
    )
    m = sub.add_parser("migrate", help="convert a pre-2026 config (training{}) to the current layout")
    m.add_argument("old", metavar="OLD.json", help="the old-layout config")
    m.add_argument("dest", metavar="DEST", nargs="?", help="new config file (default: OLD_migrated.json)")
    m.add_argument("--force", action="store_true", help="overwrite existing files")
    m.set_defaults(handler=run_migrate)
    p.set_defaults(handler=run_list, json=False)


# cvs_tui.core.config.loader.DISTRIBUTED_ENV_VARS, repeated so that `config list` does not import the
# loader (and pydantic); a test keeps the two equal.
DISTRIBUTED_ENV_VARS = ("NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_GID_INDEX")


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


def changeme_paths(node: Any, at: str = "") -> list[str]:
    """Where a config still holds `<changeme>`: dotted key paths (`container.image`), in file order."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in changeme_paths(v, f"{at}.{k}" if at else str(k))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in changeme_paths(v, f"{at}[{i}]")]
    return [at] if isinstance(node, str) and "<changeme>" in node else []


def _list_json(items: list[tuple[str, Path]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name, path in items:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            data = None
        if not isinstance(data, dict):
            out.append({"name": name, "path": str(path), "readable": False})
            continue
        env = (data.get("container") or {}).get("env") or {}
        sweeps = data.get("sweeps") or {}
        tagged = data.get("threshold_json", "")
        out.append(
            {
                "name": name,
                "path": str(path),
                "readable": True,
                "mode": "distributed" if any(env.get(k) for k in DISTRIBUTED_ENV_VARS) else "single",
                "gpu_name": data.get("gpu_name"),
                "runs": data.get("runs") or [k for k in sweeps if not k.startswith("_")],
                "thresholds": [
                    str(t) for t in sibling_thresholds(path, tagged if isinstance(tagged, str) else None)
                ],
                "changeme": changeme_paths(data),
            }
        )
    return out


def run_list(args: argparse.Namespace) -> int:
    items = list_shipped()
    if args.json:
        print(json.dumps({"dir": str(shipped_configs_dir()), "configs": _list_json(items)}, indent=2))
        return 0
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
    todo = changeme_paths(raw)
    if todo:
        where = ", ".join(todo)
        print(f"Next: replace every <changeme> in {cfg_dest} ({where}), then `cvs-tui plan {cfg_dest}`.")
    else:
        print(f"Nothing to fill in: ready for `cvs-tui plan {cfg_dest}`.")
    return 0


def run_validate(args: argparse.Namespace) -> int:
    if args.json:
        return _validate_json(args)
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
    if loaded.maxtext_keys_note:  # checked against which base.yml, or why not (never skipped silently)
        print(f"note: {loaded.maxtext_keys_note}")
    return 0


def _validate_json(args: argparse.Namespace) -> int:
    """`config validate --json`: one object on stdout, valid or not; exit 0 valid, 2 invalid."""
    try:
        loaded, cluster, plan = load_target(args)
    except UserError as exc:
        print(json.dumps({"valid": False, "config": args.config, "errors": exc.problems}, indent=2))
        return 2
    doc = {
        "valid": not plan.preflight_errors,
        "config": str(loaded.path),
        "mode": loaded.mode,
        "nodes": len(cluster.nodes),
        "runs": [r.key for r in loaded.runs],
        "thresholds": str(loaded.threshold_path),
        "enforce_thresholds": plan.enforce_thresholds,
        "warnings": list(loaded.warnings),
        "maxtext_keys": loaded.maxtext_keys_note,
        "errors": list(plan.preflight_errors),
    }
    print(json.dumps(doc, indent=2))
    return 2 if plan.preflight_errors else 0


def run_migrate(args: argparse.Namespace) -> int:
    from cvs_tui.core.config.migrate import write_migrated

    for line in write_migrated(Path(args.old), Path(args.dest) if args.dest else None, force=args.force):
        print(line)
    return 0


def config_json_schema() -> dict[str, Any]:
    """CvsConfig's JSON Schema, allowing `_` comment keys wherever unknown keys are forbidden."""
    from cvs_tui.core.config.model import CvsConfig

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
