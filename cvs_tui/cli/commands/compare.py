"""`cvs-tui compare BASE CANDIDATE`: is the candidate really faster, slower or the same?

Each side is a results.json, a run folder holding one, or raw node logs analysed with --config; several
repeated runs per side go through --base A B C --candidate D E F. See docs/compare.md.
Exit 0 nothing regressed, 1 a comparable metric REGRESSED (or, with --strict, anything was not judged),
2 bad input.
"""

from __future__ import annotations

import argparse
import math
import sys

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
    p.add_argument("--json", metavar="FILE", help="also write the comparison as JSON")
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


def render(report: cmp.CompareReport, console: Console) -> None:
    console.print(
        f"[bold]base[/]      {escape(', '.join(report.base))}\n"
        f"[bold]candidate[/] {escape(', '.join(report.candidate))}\n"
        f"practical threshold {report.threshold_pct:g} %, at least {report.min_steps} clean steps per run"
    )
    for rc in report.runs:
        title = Text.assemble(
            f"run {rc.key}  ", _verdict(rc.verdict), f"  ({rc.base_runs} vs {rc.candidate_runs} runs)"
        )
        if rc.banner:
            style = "magenta" if not rc.comparable else "yellow"
            head = "NOT COMPARABLE" if not rc.comparable else "note"
            console.print(
                Panel(Text("\n".join(rc.banner)), title=escape(f"{head}: {rc.key}"), border_style=style)
            )
        t = Table(title=title, title_justify="left", show_lines=False)
        t.add_column("metric")
        t.add_column("base", justify="right")
        t.add_column("candidate", justify="right")
        t.add_column("Δ", justify="right")
        t.add_column("Δ%", justify="right")
        t.add_column("noise band", justify="right")
        t.add_column("verdict")
        t.add_column("why", style="dim", overflow="fold")
        for m in rc.metrics:
            t.add_row(
                f"{m.label} ({m.unit}) {'↓' if m.better == 'lower' else '↑'}",
                format_number(m.base, "compare", unit=m.unit),
                format_number(m.candidate, "compare", unit=m.unit),
                format_number(m.delta, "compare", unit=m.unit),
                _delta_text(m),
                band_text(m),
                _verdict(m.verdict),
                Text(m.reason),
            )
        console.print(t)
        console.print(Text.assemble("loss per step: ", _verdict(rc.loss.verdict), f"  {rc.loss.reason}"))
        for ex in rc.excluded:
            warm = [str(s) for s, why in ex.excluded if why.startswith("warm-up")]
            head = f"{ex.side} {ex.run}: {ex.clean_steps} clean steps"
            console.print(
                Text(head + (f"; warm-up excluded: {', '.join(warm)}" if warm else ""), style="dim")
            )
            for s, why in ex.excluded:
                if not why.startswith("warm-up"):
                    console.print(Text(f"    step {s} excluded: {why}", style="dim"))
        for n in rc.notes:
            console.print(Text(f"note: {n}", style="dim"))
        console.print()
    for k in report.only_base:
        console.print(Text(f"run {k} is only on the base side; not compared", style="yellow"))
    for k in report.only_candidate:
        console.print(Text(f"run {k} is only on the candidate side; not compared", style="yellow"))
    console.print(Text.assemble("overall: ", _verdict(report.verdict)))


def run(args: argparse.Namespace) -> int:
    base_paths, cand_paths = _sides(args)
    if not (math.isfinite(args.threshold_pct) and args.threshold_pct >= 0):
        raise UserError(f"--threshold-pct: {args.threshold_pct} must be a finite number >= 0 (percent)")
    base = cmp.load_side(base_paths, config=args.config, side="base", run_key=args.run)
    cand = cmp.load_side(
        cand_paths, config=args.candidate_config or args.config, side="candidate", run_key=args.run
    )
    report = cmp.compare(base, cand, threshold_pct=args.threshold_pct, within_run=args.within_run)
    console = Console()
    if not console.is_terminal:  # a pipe or CI log: wide enough that the table is not folded
        console = Console(width=170)
    render(report, console)
    if args.json:
        print(f"  json     {cmp.write_json(report, args.json)}")
    if args.html:
        print(f"  html     {cmp.write_html(report, args.html)}")
    if report.regressed:
        return 1
    stepped = any(n.steps_logged for c in cand for r in c.results.runs for n in r.nodes)
    if not args.allow_empty and not stepped:
        print("cvs-tui: the candidate logged no training step; nothing was compared", file=sys.stderr)
        return 1
    if args.strict and any(r.verdict in (cmp.INCONCLUSIVE, cmp.NOT_COMPARABLE) for r in report.runs):
        return 1
    return 0
