"""`cvs-tui [run] CONFIG [--cluster F | --nodes H,H]`: run the suite."""

from __future__ import annotations

import argparse
import sys

from cvs_tui.core.errors import UserError
from cvs_tui.tui.commands.plan import add_target_args, load_target


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("run", help="run the suite (`cvs-tui CONFIG` is short for this)")
    add_target_args(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    _, _, plan = load_target(args)
    if plan.preflight_errors:
        raise UserError(plan.preflight_errors)
    print(
        "cvs-tui: running a plan is not available in this build yet (it comes with the run engine); "
        f"`cvs-tui plan {args.config}` shows what would run",
        file=sys.stderr,
    )
    return 2
