"""`cvs-tui compare BASE CANDIDATE`: is the candidate really faster, slower or the same?

Each side is a results.json, a run folder holding one, or raw node logs analysed with --config; several
repeated runs per side go through --base A B C --candidate D E F. See docs/compare.md.
Exit 0 nothing regressed, 1 a comparable metric REGRESSED (or, with --strict, anything was not judged),
2 bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from cvs_tui.core import compare as cmp
from cvs_tui.core.errors import UserError
from cvs_tui.core.judge.format import format_number, format_pct
from cvs_tui.core.report.compare_html import band_text

VERDICT_STYLE: dict[str, str] = {
    cmp.IMPROVED: "bold green",
    cmp.REGRESSED: "bold red",
    cmp.NO_CHANGE: "dim",
    cmp.INCONCLUSIVE: "bold yellow",
    cmp.NOT_COMPARABLE: "bold magenta",
}


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "compare",
        help="compare a candidate run against a base run: regression, improvement or noise",
        description="Compare the steady-state performance and per-step loss of two runs (or two sets of "
        "repeated runs) of the same sweep. Each side is a results.json, a run folder, or node logs given "
        "with --config. Differences inside the noise band or below the practical threshold are NO CHANGE; "
        "any toolchain, hardware or workload difference makes a run NOT COMPARABLE.",
        epilog="Exit codes: 0 nothing regressed, 1 a comparable metric REGRESSED (with --strict also any "
        "INCONCLUSIVE or NOT COMPARABLE run), 2 bad input.",
    )
    p.add_argument("base_pos", nargs="?", metavar="BASE", help="the base run")
    p.add_argument("candidate_pos", nargs="?", metavar="CANDIDATE", help="the candidate run")
    p.add_argument("--base", nargs="+", metavar="RUN", help="base runs (repetitions of one recipe)")
    p.add_argument("--candidate", nargs="+", metavar="RUN", help="candidate runs (repetitions)")
    p.add_argument("--config", metavar="CONFIG", help="config for sides given as raw node logs")
    p.add_argument(
        "--candidate-config",
        metavar="CONFIG",
        help="config for a candidate given as raw logs (default --config)",
    )
    p.add_argument(
        "--run",
        metavar="KEY",
        help="the run raw logs belong to (a sweep key, SMOKE, CKPT-1, ...) when the config selects several",
    )
    p.add_argument("--html", metavar="FILE", help="also write the comparison as HTML")
    p.add_argument(
        "--json",
        metavar="FILE",
        nargs="?",
        const="-",
        help="also write the comparison as JSON to FILE; `--json` alone prints only the JSON on stdout",
    )
    p.add_argument(
        "--threshold-pct",
        type=float,
        default=cmp.DEFAULT_THRESHOLD_PCT,
        metavar="P",
        help=f"practical threshold in percent (default {cmp.DEFAULT_THRESHOLD_PCT:g})",
    )
    p.add_argument(
        "--within-run",
        action="store_true",
        help="with one run per side, judge on the within-run band alone (step-to-step noise, not "
        "run-to-run variance); without it a single pair is INCONCLUSIVE for performance",
    )
    p.add_argument(
        "--strict", action="store_true", help="exit 1 also when a run is INCONCLUSIVE or NOT COMPARABLE"
    )
    p.add_argument(
        "--allow-empty",
        action="store_true",
        help="exit 0 even when the candidate logged no training step (default: exit 1, so a dead or "
        "empty candidate never reads as a pass in CI)",
    )
    p.set_defaults(handler=run)


def _sides(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    pos = [x for x in (args.base_pos, args.candidate_pos) if x is not None]
    if pos and (args.base or args.candidate):
        raise UserError("give either BASE CANDIDATE or --base ... --candidate ..., not both")
    if pos:
        if len(pos) != 2:
            raise UserError("give both BASE and CANDIDATE (or --base ... --candidate ...)")
        return [pos[0]], [pos[1]]
    if not args.base or not args.candidate:
        raise UserError("give BASE CANDIDATE, or --base RUN... and --candidate RUN...")
    return list(args.base), list(args.candidate)


def _verdict(v: str) -> Text:
    return Text(v, style=VERDICT_STYLE.get(v, ""))


def _delta_text(m: cmp.MetricDelta) -> Text:
    """Δ% coloured by the metric's direction: green when better, red when worse, whatever the sign."""
    if m.delta_pct is None or m.delta is None:
        return Text("—")
    better = m.delta < 0 if m.better == "lower" else m.delta > 0
    style = "" if m.delta == 0 or not math.isfinite(m.delta) else ("green" if better else "red")
    return Text(format_pct(m.delta_pct), style=style)


class Footnotes:
    """Why-texts shared by more than one row are printed once, at the end, as numbered notes."""

    def __init__(self, report: cmp.CompareReport) -> None:
        texts = [m.reason for r in report.runs for m in r.metrics if m.reason]
        texts += [r.loss.reason for r in report.runs if r.loss.reason]
        counts = Counter(texts)
        self.numbers: dict[str, int] = {}
        for t in texts:
            if counts[t] > 1 and t not in self.numbers:
                self.numbers[t] = len(self.numbers) + 1

    def ref(self, text: str) -> str:
        n = self.numbers.get(text)
        return f"[{n}]" if n is not None else text

    def render(self, console: Console) -> None:
        for text, n in self.numbers.items():
            console.print(Text(f"[{n}] {text}", style="dim"))


_VERDICT_WIDTH = max(len(v) for v in VERDICT_STYLE)


def _change_text(m: cmp.MetricDelta | None) -> str:
    if m is None:
        return "none"
    return f"{m.label} {format_pct(m.delta_pct)}"


def render_summary(report: cmp.CompareReport, console: Console, notes: Footnotes) -> None:
    """One line per run: verdict, its biggest change and why (the answer before any table)."""
    key_w = max(len(r.key) for r in report.runs)
    for rc in report.runs:
        why = cmp.headline_reason(rc)
        console.print(
            Text.assemble(
                _verdict(rc.verdict.ljust(_VERDICT_WIDTH)),
                f"  {rc.key.ljust(key_w)}  ",
                "biggest Δ " + _change_text(cmp.biggest_change(rc)),
                ("  ·  " + notes.ref(why), "dim"),
            ),
            overflow="fold",
        )


def _table(rc: cmp.RunComparison, console: Console, notes: Footnotes) -> Table:
    """The run's metric table. The verdict never shrinks; at narrow widths the noise band and Δ columns
    drop and the metric and why columns wrap."""
    narrow = console.width < 110
    title = Text.assemble(
        f"run {rc.key}  ", _verdict(rc.verdict), f"  ({rc.base_runs} vs {rc.candidate_runs} runs)"
    )
    t = Table(title=title, title_justify="left", show_lines=False)
    t.add_column("metric", overflow="fold", ratio=2 if narrow else None)
    t.add_column("base", justify="right", no_wrap=True)
    t.add_column("cand.", justify="right", no_wrap=True)
    if not narrow:
        t.add_column("Δ", justify="right", no_wrap=True)
    t.add_column("Δ%", justify="right", no_wrap=True)
    if not narrow:
        t.add_column("noise band", justify="right", no_wrap=True)
    t.add_column("verdict", no_wrap=True, min_width=_VERDICT_WIDTH)
    t.add_column("why", style="dim", overflow="fold", ratio=1 if narrow else None)
    for m in rc.metrics:
        cells: list[str | Text] = [
            f"{m.label} ({m.unit}) {'↓' if m.better == 'lower' else '↑'}",
            format_number(m.base, "compare", unit=m.unit),
            format_number(m.candidate, "compare", unit=m.unit),
        ]
        if not narrow:
            cells.append(format_number(m.delta, "compare", unit=m.unit))
        cells.append(_delta_text(m))
        if not narrow:
            cells.append(band_text(m))
        cells += [_verdict(m.verdict), Text(notes.ref(m.reason))]
        t.add_row(*cells)
    return t


def _render_run(rc: cmp.RunComparison, console: Console, notes: Footnotes) -> None:
    if rc.banner:
        style = "magenta" if not rc.comparable else "yellow"
        head = "NOT COMPARABLE" if not rc.comparable else "note"
        console.print(
            Panel(Text("\n".join(rc.banner)), title=escape(f"{head}: {rc.key}"), border_style=style)
        )
    console.print(_table(rc, console, notes))
    console.print(
        Text.assemble("loss per step: ", _verdict(rc.loss.verdict), f"  {notes.ref(rc.loss.reason)}")
    )
    for ex in rc.excluded:
        warm = [str(s) for s, why in ex.excluded if why.startswith("warm-up")]
        head = f"{ex.side} {ex.run}: {ex.clean_steps} clean steps"
        console.print(Text(head + (f"; warm-up excluded: {', '.join(warm)}" if warm else ""), style="dim"))
        for s, why in ex.excluded:
            if not why.startswith("warm-up"):
                console.print(Text(f"    step {s} excluded: {why}", style="dim"))
    for n in rc.notes:
        console.print(Text(f"note: {n}", style="dim"))
    console.print()


def render(report: cmp.CompareReport, console: Console) -> None:
    """The answer first (one line per run), then a table per run, then the shared reasons as footnotes.
    A run compared with itself gets the summary only: every Δ is 0 by construction."""
    console.print(
        f"[bold]base[/]      {escape(', '.join(report.base))}\n"
        f"[bold]candidate[/] {escape(', '.join(report.candidate))}\n"
        f"practical threshold {report.threshold_pct:g} %, at least {report.min_steps} clean steps per run"
    )
    notes = Footnotes(report)
    if report.same_run:
        console.print(
            Text(
                "base and candidate are the same run: every Δ is 0 by construction, so nothing is "
                "judged here; compare it with another run of the same sweep",
                style="bold yellow",
            )
        )
        for rc in report.runs:
            console.print(Text.assemble(_verdict(rc.verdict.ljust(_VERDICT_WIDTH)), f"  {rc.key}"))
        console.print(Text.assemble("overall: ", _verdict(report.verdict)))
        return
    console.print()
    render_summary(report, console, notes)
    console.print()
    for rc in report.runs:
        _render_run(rc, console, notes)
    for k in report.only_base:
        console.print(Text(f"run {k} is only on the base side; not compared", style="yellow"))
    for k in report.only_candidate:
        console.print(Text(f"run {k} is only on the candidate side; not compared", style="yellow"))
    notes.render(console)
    console.print(Text.assemble("overall: ", _verdict(report.verdict)))


def _render_console(report: cmp.CompareReport) -> None:
    console = Console()
    if not console.is_terminal:  # a pipe or CI log: wide enough that the table is not folded
        console = Console(width=170)
    render(report, console)


def run(args: argparse.Namespace) -> int:
    base_paths, cand_paths = _sides(args)
    if not (math.isfinite(args.threshold_pct) and args.threshold_pct >= 0):
        raise UserError(f"--threshold-pct: {args.threshold_pct} must be a finite number >= 0 (percent)")
    base = cmp.load_side(base_paths, config=args.config, side="base", run_key=args.run)
    cand = cmp.load_side(
        cand_paths, config=args.candidate_config or args.config, side="candidate", run_key=args.run
    )
    report = cmp.compare(base, cand, threshold_pct=args.threshold_pct, within_run=args.within_run)
    to_stdout = args.json == "-"
    if to_stdout:  # stdout holds the JSON alone, so a script can parse it
        print(json.dumps(report.to_dict(), indent=2, allow_nan=False))
    else:
        _render_console(report)
    if args.json and not to_stdout:
        print(f"  json     {cmp.write_json(report, args.json)}")
    if args.html:
        print(f"  html     {cmp.write_html(report, args.html)}", file=sys.stderr if to_stdout else sys.stdout)
    if report.regressed:
        return 1
    stepped = any(n.steps_logged for c in cand for r in c.results.runs for n in r.nodes)
    if not args.allow_empty and not stepped:
        print("cvs-tui: the candidate logged no training step; nothing was compared", file=sys.stderr)
        return 1
    if args.strict and any(r.verdict in (cmp.INCONCLUSIVE, cmp.NOT_COMPARABLE) for r in report.runs):
        return 1
    return 0
