"""The `cvs-tui` entry point.

`cvs-tui CONFIG [...]` runs the suite; every other first word names a subcommand. Each subcommand lives in
its own module under ``cvs_tui.cli.commands`` (``add_parser(subparsers)`` + ``run(args) -> int``).
Exit codes: 0 nothing failed, 1 something failed, 2 bad input, 130 interrupted.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import io
import os
import re
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, TextIO, cast

from cvs_tui import __version__
from cvs_tui.core.errors import UserError

# (subcommand, module under cvs_tui.cli.commands, its one-line help); `run` is the default when the first
# word is a path. The help is repeated here so that `--help` and `--version` need not import any command
# module (each pulls in its own stack: SSH, docker, the parser, rich); a test keeps both copies equal.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("run", "run", "run the suite (`cvs-tui CONFIG` is short for this)"),
    ("plan", "plan", "show exactly what a config will do (nothing is launched)"),
    ("config", "config", "list, copy, validate shipped configs; print the JSON Schema"),
    (
        "analyze",
        "analyze",
        "judge a finished (or crashed) run from its node logs: metrics, verdicts, reports",
    ),
    ("report", "report", "re-render report.html, junit.xml and summary.md from a results.json"),
    ("attach", "attach", "watch a run in progress (or finished) from its run folder"),
    ("compare", "compare", "compare a candidate run against a base run: regression, improvement or noise"),
    (
        "history",
        "history",
        "the run history: register runs, list them, check a run against its own past, score hosts",
    ),
    ("card", "card", "export a validation card from results, or `card validate CARD` to check one"),
    (
        "scrub",
        "scrub",
        "replace hosts, users, paths, tokens and other private values with stable placeholders",
    ),
    (
        "check-private",
        "check_private",
        "report private values in files as file:line:col category (never the value)",
    ),
    ("completion", "completion", "print a shell completion script: cvs-tui completion bash|zsh|fish"),
)
SUBCOMMANDS: tuple[tuple[str, str], ...] = tuple((name, mod) for name, mod, _ in COMMANDS)
QUIET_FLAGS = ("-q", "--quiet")
# commands that open connections (SSH, docker, Slurm); the rest only read and write files
LIVE_COMMANDS = frozenset({"run", "attach"})


class Command(Protocol):
    """What each module under ``cvs_tui.cli.commands`` provides."""

    def add_parser(self, subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None: ...


def _command(module: str) -> Command:
    """One subcommand module. All of them ship with the package: a missing one is a broken install and
    fails loudly here rather than dropping a subcommand."""
    return cast(Command, importlib.import_module(f"cvs_tui.cli.commands.{module}"))


class _VersionAction(argparse.Action):
    """`cvs-tui --version`: the version and which log-parser path runs (the C scanner or pure Python)."""

    def __call__(self, parser: argparse.ArgumentParser, *_args: object, **_kw: object) -> None:
        print(f"cvs-tui {__version__} (log parser: {describe_scanner()})")
        parser.exit()


def describe_scanner() -> str:
    """What ``accel.describe()`` says, without importing the parser (it costs more than the rest of
    `--version`): the C scanner when its extension file is installed, else pure Python. A built scanner
    that refuses to load is only found out by importing it, so that case defers to ``accel``."""
    from importlib.machinery import EXTENSION_SUFFIXES

    import cvs_tui

    folder = Path(cvs_tui.__file__).resolve().parent / "core" / "parse"
    if not any((folder / f"_native{suffix}").is_file() for suffix in EXTENSION_SUFFIXES):
        return "pure Python (C scanner not built)"
    if os.environ.get("CVS_TUI_PURE_PARSER") == "1":
        return "pure Python (CVS_TUI_PURE_PARSER=1)"
    if "cvs_tui.core.parse.accel" in sys.modules:
        return str(sys.modules["cvs_tui.core.parse.accel"].describe())
    return "C scanner"


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser (``only=None``), or one whose subcommand ``only`` is complete and the others are
    names with their help (enough for `--help`; ``only=""`` loads no command module)."""
    parser = argparse.ArgumentParser(
        prog="cvs-tui",
        description="Run the CVS jaxmaxtext training-validation suite on every node at once, live.",
        epilog="`cvs-tui CONFIG` is short for `cvs-tui run CONFIG`. Exit codes: 0 passed, 1 failed, "
        "2 bad input, 130 interrupted. NO_COLOR=1 turns colour off.",
    )
    parser.add_argument("--version", action=_VersionAction, nargs=0, help="show the version and exit")
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="for CI: print only the verdict line (and errors on stderr); also accepted after COMMAND",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module, help_text in COMMANDS:
        if only is None or name == only:
            _command(module).add_parser(sub)
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def _did_you_mean(word: str) -> str | None:
    """The error for a first word that is neither a command nor an existing path but close to a command
    (`plna` -> `plan`); None when it may well be a CONFIG (a path, or a shipped config name)."""
    if "/" in word or "." in word or Path(word).exists():
        return None
    close = difflib.get_close_matches(word, [name for name, _, _ in COMMANDS], n=1, cutoff=0.6)
    if not close:
        return None
    from cvs_tui.core.config.shipped import find_shipped

    if find_shipped(word) is not None:
        return None
    return f"unknown command {word!r}; did you mean {close[0]!r}?"


def _refuse_unknown_options(parser: argparse.ArgumentParser, command: str, words: Sequence[str]) -> None:
    """An option the command does not have is named first (argparse would first complain about a missing
    required option, e.g. `scrub --public` -> "--out or --in-place is required")."""
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    cmd = sub.choices.get(command) if sub is not None else None
    if cmd is None:
        return
    known = [*parser._option_string_actions, *_options_below(cmd)]
    unknown = []
    for word in words:
        if " " in word or not (word.startswith("--") or (len(word) == 2 and word[0] == "-")):
            continue  # a value (`--slurm-args "-N 2"`), a positional, or a negative number
        opt = word.split("=", 1)[0]
        if opt in known or (opt.startswith("--") and any(k.startswith(opt) for k in known)):
            continue  # argparse takes an unambiguous prefix of a long option
        if word[1:].lstrip("-").replace(".", "", 1).isdigit():
            continue
        unknown.append(word)
    if unknown:
        cmd.error(f"unrecognized arguments: {' '.join(unknown)} (see cvs-tui {command} --help)")


def _options_below(parser: argparse.ArgumentParser) -> list[str]:
    """The option strings of ``parser`` and of its own subcommands (`config list --json`)."""
    out = list(parser._option_string_actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                out += _options_below(child)
    return out


class _VerdictOnly(io.TextIOBase):
    """stdout under ``-q``: whole lines pass only when they are a verdict line (``suite PASSED ...``,
    ``PASS  overall``, ``overall: REGRESSED``); everything else is dropped. Errors go to stderr as ever."""

    VERDICT = re.compile(r"^(suite (PASSED|FAILED)|(PASS|FAIL)\s+overall|overall: )")

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._pending = ""

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            if self.VERDICT.match(line):
                self._out.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self._out.flush()


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    end = args_list.index("--") if "--" in args_list else len(args_list)
    quiet = any(a in QUIET_FLAGS for a in args_list[:end])
    args_list = [a for i, a in enumerate(args_list) if i >= end or a not in QUIET_FLAGS]
    names = {name for name, _, _ in COMMANDS}
    first = next((i for i, a in enumerate(args_list) if not a.startswith("-")), None)
    if first is not None and args_list[first] not in names:
        if message := _did_you_mean(args_list[first]):
            print(f"cvs-tui: error: {message}", file=sys.stderr)
            return 2
        args_list.insert(first, "run")
    parser = build_parser(only=args_list[first] if first is not None else "")
    if first is not None:
        _refuse_unknown_options(parser, args_list[first], args_list[first + 1 : end])
    args = parser.parse_args(args_list)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    if argv is None and args.command not in LIVE_COMMANDS and hasattr(signal, "SIGPIPE"):
        # a reader that goes away (`cvs-tui compare a b | head -1`) ends the process as it ends `cat`:
        # killed by SIGPIPE, status 141 in the shell, never 1 (which means "regressed"). Not for
        # commands that talk to nodes: a closed SSH or docker socket must stay an error they handle.
        # Only as the process's entry point (argv None), never inside a host program such as a test.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    stdout = sys.stdout
    if quiet:
        sys.stdout = cast(TextIO, _VerdictOnly(stdout))
    try:
        rc = int(args.handler(args))
        sys.stdout.flush()  # a reader that went away shows here, not in the interpreter's exit flush
        return rc
    except UserError as exc:
        for line in exc.problems:
            print(f"cvs-tui: error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("cvs-tui: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`cvs-tui compare a b | head -1`): stop quietly with the status a shell
        # gives a process killed by SIGPIPE, never 1 (which means "regressed"/"failed"); keep the
        # interpreter's final flush from raising again
        os.dup2(os.open(os.devnull, os.O_WRONLY), stdout.fileno())
        return 141
    except OSError as exc:
        # an output path we cannot write (a file where a folder is needed, a full disk, /dev/null as a
        # folder): one line naming the path, never a traceback (audit #18)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"cvs-tui: error: {where}{exc.strerror or exc}; check the path and free space", file=sys.stderr)
        return 2
    finally:
        sys.stdout = stdout


if __name__ == "__main__":
    sys.exit(main())
