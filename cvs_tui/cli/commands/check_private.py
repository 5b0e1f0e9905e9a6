"""`cvs-tui check-private FILE... [--card] [--deny-term T] [--denylist F] [--config C] [--cluster F]`.

Prints `file:line:col category` for every private value found (hosts and addresses from the run context,
users, home and cluster paths, buckets, tokens, emails, job and pod names) and never the value itself.
`--card` applies the stricter card rules (no URLs, absolute paths, loopback addresses or wiring words).
"""

from __future__ import annotations

import argparse
import json
import re
import sys

from cvs_tui.cli.options import add_context_options, context_from_args
from cvs_tui.core.privacy import HOSTS_NOT_KNOWN, check_files


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "check-private",
        help="report private values in files as file:line:col category (never the value)",
        description="Check files or folders for private values before publishing them. Each finding is "
        "printed as file:line:col category; the matched text is never printed.",
        epilog="Exit codes: 0 nothing found, 1 something found, 2 bad input.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="files or folders (walked whole)")
    p.add_argument("--card", action="store_true", help="apply the stricter validation-card rules")
    p.add_argument(
        "--json",
        action="store_true",
        help="print the findings as JSON: {findings: [{file, line, col, category}], suspects, hosts_known}",
    )
    add_context_options(p)
    p.set_defaults(handler=run)


_FINDING = re.compile(r"(?P<file>.*):(?P<line>\d+):(?P<col>\d+) (?P<category>.*)")


def _finding(line: str) -> dict[str, str | int]:
    """`file:line:col category` as a record (line 0 col 0: the file's name holds the value)."""
    m = _FINDING.fullmatch(line)
    if m is None:  # not the documented shape: keep the line whole rather than drop it
        return {"file": "", "line": 0, "col": 0, "category": line}
    return {"file": m["file"], "line": int(m["line"]), "col": int(m["col"]), "category": m["category"]}


def run(args: argparse.Namespace) -> int:
    ctx = context_from_args(args, args.files)
    suspects: list[str] | None = None if ctx.hosts_known else []  # filled from the same reading
    lines = check_files(args.files, ctx, mode="card" if args.card else "log", suspects=suspects)
    if args.json:
        doc = {
            "findings": [_finding(line) for line in lines],
            "suspects": suspects or [],
            "hosts_known": ctx.hosts_known,
        }
        print(json.dumps(doc, indent=2))
        return 1 if lines else 0
    for line in lines:
        print(line)
    if not ctx.hosts_known:  # say what was not checked, and show what looks like a machine name
        for line in suspects or []:
            print(line)
        print(f"note: {HOSTS_NOT_KNOWN}", file=sys.stderr)
    return 1 if lines else 0
