"""`cvs-tui plan CONFIG [--cluster F | --nodes H,H] [--json] [--out DIR]`: the resolved plan.

Nothing is launched. `--out DIR` plans for that run folder and writes DIR/plan.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cvs_tui.cli.options import add_target_args, load_target


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    from cvs_tui.core.plan import format_plan
    from cvs_tui.core.run_folder import RunFolder

    out = Path(args.out) if args.out else None
    _, _, plan = load_target(args, out_dir=out)
    if args.json:
        print(json.dumps(plan.display_dict(), indent=2))
    else:
        print(format_plan(plan), end="")
    if not plan.enforce_thresholds:
        # said at the top of the plan (a warning) and again as the last line, where a long plan ends
        print("cvs-tui: warning: thresholds NOT enforced (see the warnings at the top)", file=sys.stderr)
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
