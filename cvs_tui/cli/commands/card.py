"""`cvs-tui card RESULTS... [--out card.yaml] [--accelerator NAME]` and `cvs-tui card validate CARD...`.

Build: RESULTS are run folders or results.json files (one stack: same image and JAX). Each result's
config (its recorded config_path, or --config) supplies the workload facts; when it cannot be read the
sweep key (BS=, PRECISION=, SL=) does. The card is validated before it is written, so a card that would
carry a private value or break a rule is never written. Validate: YAML structure, schema, rules and the
privacy check, one line per problem; with --results RESULTS..., every number in the card is
re-derived from those results and a number that differs is a problem.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from cvs_tui.cli.options import add_context_options, context_from_args
from cvs_tui.core.card import (
    CardSource,
    build_card,
    card_to_yaml,
    load_card_source,
    rederive_problems,
    validate_card_text,
    with_config,
)
from cvs_tui.core.errors import UserError
from cvs_tui.core.inputfile import CARD_MAX, InputFileError, read_text_capped
from cvs_tui.core.privacy import build_context


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "card",
        help="export a validation card from results, or `card validate CARD` to check one",
        description="Build a small, machine-checkable validation card (YAML) from one or more results: "
        "pretrain_performance per precision, checkpoint_resume and pretrain_weak_scaling, keyed by public "
        "accelerator name. `cvs-tui card validate CARD...` checks a card: unique keys, no anchors or "
        "aliases, allowlisted keys and hardware, index matching the items, verified evidence, privacy.",
        epilog="Exit codes: 0 card written / valid, 1 the card has problems (one line each), 2 bad input.",
    )
    p.add_argument(
        "targets",
        nargs="+",
        metavar="RESULTS",
        help="run folders or results.json files; or `validate` followed by card files",
    )
    p.add_argument("--out", metavar="FILE", help="write the card here (default: standard output)")
    p.add_argument(
        "--accelerator",
        metavar="NAME",
        help="public accelerator name for the hardware key (needed when gpu_name is a family such as mi3xx)",
    )
    p.add_argument("--image", metavar="IMAGE", help="public base image name (default: the config's image)")
    p.add_argument(
        "--results",
        nargs="+",
        metavar="RESULTS",
        help="with validate: the run folders or results.json files the card was made from; every number "
        "in the card is re-derived from them and a mismatch is a problem",
    )
    add_context_options(p)
    p.set_defaults(handler=run)


def _sources(args: argparse.Namespace, targets: list[str]) -> list[CardSource]:
    from cvs_tui.core.config.loader import load_config

    explicit = load_config(args.config) if args.config else None
    out = []
    for target in targets:
        src = load_card_source(target)
        loaded = explicit
        cfg_path = Path(src.results.config_path)
        if loaded is None and cfg_path.is_file():
            try:
                loaded = load_config(cfg_path)
            except UserError as exc:
                print(
                    f"cvs-tui: note: {target}: its config cannot be read ({exc.problems[0]}); workload facts "
                    "come from the sweep keys (pass --config to use a config)",
                    file=sys.stderr,
                )
        out.append(with_config(src, loaded, explicit=explicit is not None))
    return out


def _write(text: str, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _validate(args: argparse.Namespace, files: list[str]) -> int:
    if not files:
        raise UserError("card validate: give at least one card file")
    ctx = context_from_args(args)
    problems: list[str] = []
    # the card the named results build, with the same options: the numbers a card may carry
    rebuilt = (
        build_card(_sources(args, args.results), accelerator=args.accelerator, image=args.image)
        if args.results
        else None
    )
    matched = 0
    for f in files:
        try:
            text = read_text_capped(f, CARD_MAX)
        except FileNotFoundError:
            raise UserError(f"{f}: no such card file") from None
        except InputFileError as exc:
            raise UserError(f"{exc}; pass a card file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"{f}: cannot read ({exc.__class__.__name__})") from None
        problems += validate_card_text(text, source=f, context=ctx)
        if rebuilt is not None:
            wrong, ok = rederive_problems(text, rebuilt, source=f)
            problems += wrong
            matched += ok
    for line in problems:
        print(line)
    if problems:
        return 1
    if rebuilt is None:
        print(
            f"valid  {len(files)} card(s) (numbers not re-derived: give --results RESULTS... to check them)"
        )
    else:
        print(
            f"valid  {len(files)} card(s), {matched} number(s) re-derived from {len(args.results)} result(s)"
        )
    return 0


def run(args: argparse.Namespace) -> int:
    if args.targets[0] == "validate":
        return _validate(args, args.targets[1:])
    if args.results:
        raise UserError("--results: only with `card validate CARD...` (a card is built from RESULTS)")
    sources = _sources(args, args.targets)
    card = build_card(sources, accelerator=args.accelerator, image=args.image)
    text = card_to_yaml(card)
    ctx = context_from_args(args)
    for src in sources:
        ctx = ctx.merged(build_context(loaded=src.loaded, results=src.results, environ={}))
    problems = validate_card_text(text, source=args.out or "card", context=ctx)
    if problems:
        for line in problems:
            print(line, file=sys.stderr)
        print("cvs-tui: card not written: fix the problems above", file=sys.stderr)
        return 1
    if args.out:
        _write(text, Path(args.out))
        print(f"card  {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
