"""The `cvs-tui` entry point.

`cvs-tui CONFIG [...]` runs the suite; every other first word names a subcommand. Each subcommand lives in
its own module under ``cvs_tui.cli.commands`` (``add_parser(subparsers)`` + ``run(args) -> int``).
Exit codes: 0 nothing failed, 1 something failed, 2 bad input, 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Protocol, cast

from cvs_tui import __version__
from cvs_tui.core.errors import UserError

# (subcommand, module under cvs_tui.cli.commands); `run` is the default when the first word is a path.
SUBCOMMANDS: tuple[tuple[str, str], ...] = (
    ("run", "run"),
    ("plan", "plan"),
    ("config", "config"),
    ("analyze", "analyze"),
    ("report", "report"),
    ("attach", "attach"),
    ("compare", "compare"),
    ("card", "card"),
    ("scrub", "scrub"),
    ("check-private", "check_private"),
)


class Command(Protocol):
    """What each module under ``cvs_tui.cli.commands`` provides."""

    def add_parser(self, subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None: ...


def _commands() -> list[Command]:
    """Every subcommand module. All of them ship with the package: a missing one is a broken install and
    fails loudly here rather than dropping a subcommand from --help."""
    return [cast(Command, importlib.import_module(f"cvs_tui.cli.commands.{mod}")) for _, mod in SUBCOMMANDS]


class _VersionAction(argparse.Action):
    """`cvs-tui --version`: the version and which log-parser path runs (the C scanner or pure Python)."""

    def __call__(self, parser: argparse.ArgumentParser, *_args: object, **_kw: object) -> None:
        from cvs_tui.core.parse import accel

        print(f"cvs-tui {__version__} (log parser: {accel.describe()})")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cvs-tui",
        description="Run the CVS jaxmaxtext training-validation suite on every node at once, live.",
        epilog="`cvs-tui CONFIG` is short for `cvs-tui run CONFIG`. Exit codes: 0 passed, 1 failed, "
        "2 bad input, 130 interrupted.",
    )
    parser.add_argument("--version", action=_VersionAction, nargs=0, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in _commands():
        mod.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    names = {name for name, _ in SUBCOMMANDS}
    if args_list and not args_list[0].startswith("-") and args_list[0] not in names:
        args_list.insert(0, "run")
    parser = build_parser()
    args = parser.parse_args(args_list)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args))
    except UserError as exc:
        for line in exc.problems:
            print(f"cvs-tui: error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("cvs-tui: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`cvs-tui config list | head`): stop quietly, as other tools do, and keep
        # the interpreter's final flush from raising again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:
        # an output path we cannot write (a file where a folder is needed, a full disk, /dev/null as a
        # folder): one line naming the path, never a traceback (audit #18)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"cvs-tui: error: {where}{exc.strerror or exc}; check the path and free space", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
