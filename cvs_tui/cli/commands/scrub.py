"""`cvs-tui scrub FILE... [--deny-term T] [--denylist F] [--config C] [--cluster F] (--out DIR | --in-place)`.

Replaces every private value (hosts, addresses, users, home and cluster paths, buckets, tokens, emails,
job and pod names) with a stable placeholder such as `<host-1>` or `<token>`: the same value gets the same
placeholder in every file of one invocation. FILE may be a file or a folder (a run folder is walked whole
and its plan.json and results.json add their hosts, user, paths and container names to the denylist).
The output is re-checked; anything left is printed as `file:line:col category` and the exit code is 1.
"""

from __future__ import annotations

import argparse

from cvs_tui.cli.options import add_context_options, context_from_args
from cvs_tui.core.privacy import HOSTS_NOT_KNOWN, scrub_files


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "scrub",
        help="replace hosts, users, paths, tokens and other private values with stable placeholders",
        description="Scrub files or whole run folders for publishing: each private value becomes a "
        "placeholder (<host-1>, <ip-2>, <user>, <home>, <bucket-1>, <token>, <email-1>, <job-1>), the same "
        "one for the same value across every file given, then the output is re-checked.",
        epilog="Exit codes: 0 the output is clean, 1 the re-check still found something, 2 bad input.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="files or folders (run folders are walked whole)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--out", metavar="DIR", help="write scrubbed copies here (inputs are left as they are)"
    )
    where.add_argument("--in-place", action="store_true", help="rewrite the inputs themselves")
    add_context_options(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    ctx = context_from_args(args, args.files)
    report = scrub_files(args.files, ctx, out_dir=args.out, in_place=args.in_place)
    counts = ", ".join(f"{k} {v}" for k, v in sorted(report.replaced.items())) or "nothing"
    print(f"scrubbed {len(report.files)} file(s); replaced: {counts}")
    if args.out:
        print(f"  out      {args.out}")
    if report.left_out:
        print(f"  left out {len(report.left_out)} binary file(s) that cannot be rewritten safely:")
        for name in report.left_out:
            print(f"    {name}")
    for line in report.leftovers:
        print(line)
    if not report.clean:
        print(f"FAIL  {len(report.leftovers)} private value(s) remain; do not publish this output")
        return 1
    if report.hosts_known:
        print("clean  the re-check found no private value")
        return 0
    for line in report.suspects:
        print(line)
    more = f"; check the {len(report.suspects)} suspect(s) above" if report.suspects else ""
    print(f"clean of known patterns; {HOSTS_NOT_KNOWN}{more}")
    return 0
