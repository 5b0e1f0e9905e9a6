"""`cvs-tui history add|list|show|check|hosts`: the run history and its automatic baselines.

Every run, `analyze` and follow-mode run registers its run folder at the end (`--no-history` opts out);
`history add` registers older ones. `check` judges each headline and gated metric of a run against its
group's earlier runs; `hosts` names hosts at fault more often than the fleet's base rate.
Exit codes: check 1 when a metric REGRESSED, hosts 1 when a host is flagged, otherwise 0; 2 bad input.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from cvs_tui.core.errors import UserError
from cvs_tui.core.history.check import DEFAULT_LAST, MetricCheck, RunCheck, check_input
from cvs_tui.core.history.hosts import ALPHA, KINDS, score_hosts
from cvs_tui.core.history.noise import MIN_HISTORY, REGRESSED
from cvs_tui.core.history.register import describe, load_run_input, register, resolve_run_dir
from cvs_tui.core.history.store import ENV_VAR, HistoryStore, StoredRun, default_path
from cvs_tui.core.history.trend import Trend, trend_for
from cvs_tui.core.judge.format import format_number, format_pct
from cvs_tui.core.textsafe import sanitize_text


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "history",
        help="the run history: register runs, list them, check a run against its own past, score hosts",
        description="Every run folder is registered in a history database (SQLite; path from "
        f"{ENV_VAR}, else $XDG_DATA_HOME/cvs-tui/history.db, else ~/.local/share/cvs-tui/history.db). "
        "Runs are grouped by config, run key, GPU, node count and the environment fingerprint `compare` "
        "uses; a changed stack starts a new group. `check` judges a run's throughput, step time, "
        "goodput, stall time, final loss, scaling efficiency and gated metrics against its group's "
        "earlier runs, with the noise and level learned from them.",
        epilog="Exit codes: check 1 when a metric REGRESSED, hosts 1 when a host is flagged, otherwise 0; "
        "2 bad input.",
    )
    p.add_argument("--db", metavar="FILE", help=f"the history database (default: ${ENV_VAR} or the XDG path)")
    sub = p.add_subparsers(dest="history_command", metavar="ACTION", required=True)
    a = sub.add_parser("add", help="register run folders (idempotent: a folder added again is refreshed)")
    a.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="a run folder holding results.json")
    ls = sub.add_parser("list", help="the latest runs, newest last, with their groups")
    ls.add_argument("--last", type=int, default=20, metavar="N", help="how many runs (default 20)")
    ls.add_argument("--json", action="store_true", help="print JSON on stdout")
    sh = sub.add_parser("show", help="a registered run folder: its groups and the runs around it")
    sh.add_argument("run_dir", metavar="RUN_DIR")
    sh.add_argument("--json", action="store_true", help="print JSON on stdout")
    ck = sub.add_parser(
        "check",
        help="each metric of a run against its group's earlier runs: REGRESSED, IMPROVED, NO CHANGE or "
        "NOT ENOUGH HISTORY",
        description="Judge a run against the runs of its group that came before it. The baseline is the "
        "median of the group's current level (a level change confirmed by three runs re-bases it); the "
        "band is the baseline ± the alert line times the spread learned from the group "
        f"(how far its runs lie from their level). A verdict needs {MIN_HISTORY} earlier runs; "
        "docs/history.md has the rules.",
        epilog="Exit codes: 0 nothing regressed, 1 a metric REGRESSED, 2 bad input.",
    )
    ck.add_argument("run_dir", metavar="RUN_DIR", help="a run folder (registered or not)")
    ck.add_argument(
        "--last",
        type=int,
        default=DEFAULT_LAST,
        metavar="N",
        help=f"learn the noise and level from the group's latest N earlier runs (default {DEFAULT_LAST})",
    )
    ck.add_argument("--json", action="store_true", help="print JSON on stdout")
    ho = sub.add_parser(
        "hosts",
        help="hosts at fault (root cause, straggler, health finding, stall) unusually often",
        description="Score every host over its runs: how often it was the root cause, the straggler, had "
        "a fatal or warning health finding or an unexplained stall, against the rest of the fleet's "
        f"rate (binomial tail, Holm-adjusted over all hosts, family-wise error {ALPHA:g}).",
        epilog="Exit codes: 0 no host flagged, 1 a host is flagged, 2 bad input.",
    )
    ho.add_argument("--json", action="store_true", help="print JSON on stdout")
    ho.add_argument("--all", action="store_true", help="list every host, not only those ever at fault")
    for action in (a, ls, sh, ck, ho):  # `--db` also after the action (argparse.SUPPRESS: never unsets it)
        action.add_argument("--db", metavar="FILE", default=argparse.SUPPRESS, help="the history database")
    p.set_defaults(handler=run)


def _when(ts: float) -> str:
    try:
        return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%d %H:%M")
    except (ValueError, OverflowError, OSError):
        return "?"


def _positive(n: int, flag: str) -> int:
    if n < 1:
        raise UserError(f"{flag}: {n} must be at least 1")
    return n


def _open(args: argparse.Namespace, *, create: bool) -> HistoryStore | None:
    return HistoryStore.open(args.db, create=create)


def run(args: argparse.Namespace) -> int:
    action = args.history_command
    if action == "add":
        return _add(args)
    if action == "list":
        return _list(args)
    if action == "show":
        return _show(args)
    if action == "check":
        return _check(args)
    return _hosts(args)


def _add(args: argparse.Namespace) -> int:
    folders = [resolve_run_dir(d) for d in args.run_dirs]  # every path checked before anything is written
    store = _open(args, create=True)
    assert store is not None
    with store:
        for folder in folders:
            for reg in register(store, folder):
                print(sanitize_text(describe(reg)) + f"  [{folder}]")
    return 0


def _headline(r: StoredRun) -> str:
    tok = r.metrics.get("training.tokens_per_sec_per_gpu")
    p50 = r.metrics.get("training.step_time_p50_ms")
    return f"{format_number(tok, 'sig')} tok/s/GPU, p50 {format_number(p50, 'sig')} ms"


def _list(args: argparse.Namespace) -> int:
    last = _positive(args.last, "--last")
    store = _open(args, create=False)
    if store is None:
        if args.json:
            print(json.dumps({"groups": [], "runs": []}))
        else:
            where = args.db or default_path()
            print(f"no history yet at {where}; runs register themselves as they end")
        return 0
    with store:
        runs = store.runs(last=last)
        groups = {g.id: g for g in store.groups()}
    if args.json:
        used = sorted({r.group_id for r in runs})
        print(
            json.dumps(
                {
                    "groups": [_group_dict(groups[g]) for g in used],
                    "runs": [_run_dict(r) for r in runs],
                },
                indent=2,
            )
        )
        return 0
    for gid in sorted({r.group_id for r in runs}):
        g = groups[gid]
        extra = f"  (stack changed against group {g.previous}: {g.change})" if g.change else ""
        print(sanitize_text(f"group {g.id}: {g.label}{extra}"))
    for r in runs:
        print(
            sanitize_text(
                f"  {_when(r.at)}  group {r.group_id:<3} {r.status:4} {r.outcome:10} {r.run_key:12} "
                f"{_headline(r)}  {r.run_dir}"
            )
        )
    return 0


def _group_dict(g: Any) -> dict[str, Any]:
    return {
        "id": g.id,
        "label": g.label,
        "series": g.series,
        "stack": g.stack,
        "previous": g.previous,
        "change": g.change,
    }


def _run_dict(r: StoredRun) -> dict[str, Any]:
    return {
        "run_dir": r.run_dir,
        "run": r.run_key,
        "group": r.group_id,
        "at": r.at,
        "status": r.status,
        "outcome": r.outcome,
        "metrics": r.metrics,
    }


def _show(args: argparse.Namespace) -> int:
    folder = resolve_run_dir(args.run_dir)
    store = _open(args, create=False)
    rows = store.runs_of_dir(str(folder)) if store is not None else []
    if store is None or not rows:
        if store is not None:
            store.close()
        raise UserError(f"{folder}: not in the history; register it with `cvs-tui history add {folder}`")
    with store:
        out = []
        for r in rows:
            g = store.group(r.group_id)
            group_runs = store.runs(group_id=r.group_id)
            out.append((r, g, group_runs))
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "run": _run_dict(r),
                        "group": _group_dict(g),
                        "group_runs": [_run_dict(x) for x in gr],
                    }
                    for r, g, gr in out
                ],
                indent=2,
            )
        )
        return 0
    for r, g, gr in out:
        assert g is not None
        pos = next(i for i, x in enumerate(gr) if x.id == r.id)
        print(sanitize_text(f"{r.run_key}  {_when(r.at)}  {r.status} ({r.outcome})  {_headline(r)}"))
        print(sanitize_text(f"  group {g.id}: {g.label}; run {pos + 1} of {len(gr)}"))
        if g.change:
            print(
                sanitize_text(
                    f"  the group began when the stack changed against group {g.previous}: {g.change}"
                )
            )
        for k, v in sorted(g.stack.items()):
            print(sanitize_text(f"    {k}: {v}"))
    return 0


def _band(mc: MetricCheck) -> str:
    j = mc.judgement
    if j is None or j.band is None:
        return "—"
    lo, hi = j.band
    return f"{format_number(lo, 'sig')} – {format_number(hi, 'sig')}"


def _from(mc: MetricCheck) -> str:
    runs = mc.baseline_runs
    if not runs:
        return ""
    return f"{len(runs)} runs {_when(runs[0].at)} … {_when(runs[-1].at)}"


def _print_check(rc: RunCheck) -> None:
    head = f"run {rc.run_key}"
    head += f"  group {rc.group.id} ({rc.group.label})" if rc.group else "  no group yet"
    print(sanitize_text(head))
    if rc.note:
        print(sanitize_text(f"  note: {rc.note}"))
    rows = [("metric", "value", "baseline", "band", "Δ %", "verdict", "baseline from")]
    for mc in rc.metrics:
        j = mc.judgement
        if mc.value is None:
            continue  # the run has no such figure (scaling efficiency without a baseline, ...)
        arrow = "↓" if mc.metric.better == "lower" else "↑"
        base = j.baseline.location if j is not None and j.baseline is not None else None
        rows.append(
            (
                f"{mc.metric.label} {arrow}",
                format_number(mc.value, "sig"),
                format_number(base, "sig"),
                _band(mc),
                format_pct(j.delta_pct) if j is not None and j.delta_pct is not None else "—",
                mc.verdict,
                _from(mc) or mc.reason,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1])
    for mc in rc.metrics:
        j = mc.judgement
        if mc.verdict == REGRESSED and j is not None:
            print(sanitize_text(f"  {mc.metric.label}: {mc.reason}"))
        if j is not None and j.baseline is not None and j.baseline.changed_from is not None:
            print(
                sanitize_text(
                    f"  {mc.metric.label}: new level since run {j.baseline.level_start + 1} of the history "
                    f"(was {format_number(j.baseline.changed_from, 'sig')})"
                )
            )


def _check(args: argparse.Namespace) -> int:
    last = _positive(args.last, "--last")
    folder = resolve_run_dir(args.run_dir)
    inp = load_run_input(folder)
    store = _open(args, create=False)
    try:
        checks = check_input(store, inp, run_dir=folder, last=last)
    finally:
        if store is not None:
            store.close()
    regressed = [
        f"{rc.run_key}: {', '.join(m.metric.label for m in rc.regressed)}" for rc in checks if rc.regressed
    ]
    if args.json:
        print(
            json.dumps(
                {
                    "run_dir": str(folder),
                    "regressed": [
                        {"run": rc.run_key, "metric": m.metric.name} for rc in checks for m in rc.regressed
                    ],
                    "runs": [rc.to_dict() for rc in checks],
                },
                indent=2,
            )
        )
    else:
        for rc in checks:
            _print_check(rc)
            print()
        print("overall: " + (f"REGRESSED ({', '.join(regressed)})" if regressed else "no regression"))
    return 1 if regressed else 0


def _hosts(args: argparse.Namespace) -> int:
    store = _open(args, create=False)
    rows = []
    if store is not None:
        with store:
            rows = store.host_rows()
    scores = score_hosts(rows)
    shown = scores if args.all else [s for s in scores if s.faulty_runs]
    flagged = [s for s in scores if s.flagged]
    if args.json:
        print(json.dumps({"alpha": ALPHA, "hosts": [s.to_dict() for s in shown]}, indent=2))
        return 1 if flagged else 0
    if not scores:
        print("no host in the history yet (runs with named nodes register them)")
        return 0
    head = ("host", "runs", "at fault", "expected", *KINDS, "p (Holm)", "")
    table: list[tuple[str, ...]] = [head]
    for s in shown:
        table.append(
            (
                s.host,
                str(s.runs),
                str(s.faulty_runs),
                f"{s.expected:.2f}",
                *(str(s.counts[k]) for k in KINDS),
                f"{s.adjusted:.2g}",
                "FLAGGED" if s.flagged else "",
            )
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for r in table:
        print(sanitize_text("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()))
    print(f"{len(scores)} host(s), {len(flagged)} flagged (family-wise error {ALPHA:g})")
    return 1 if flagged else 0


def trend_of(run_dir: str | Path, args: argparse.Namespace) -> Trend | None:
    """The run folder against its history for the reports; None under `--no-history`. A history that
    cannot be read is a warning on stderr and no trend: the reports are written all the same."""
    if getattr(args, "no_history", False):
        return None
    trend = trend_for(run_dir)
    if trend.error:
        print(f"cvs-tui: history not read: {trend.error}", file=sys.stderr)
    return trend


def rewrite_reports_with_history(run_dir: Path, args: argparse.Namespace) -> None:
    """A live or followed run wrote its reports as it went: once it has ended, again with its history
    (only when there is one to show)."""
    trend = trend_of(run_dir, args)
    if not trend:
        return
    from cvs_tui.core.report import write_reports
    from cvs_tui.core.run_folder import RunFolder

    write_reports(RunFolder(run_dir).results(), run_dir, trend)


def record(run_dir: str | Path, args: argparse.Namespace, *, out: TextIO | None = None) -> None:
    """Register a finished run folder (`--no-history` skips it). A history that cannot be written is a
    warning on stderr: the run's own verdict does not depend on it."""
    if getattr(args, "no_history", False):
        return
    try:
        store = HistoryStore.open(None, create=True)
        assert store is not None
        with store:
            for reg in register(store, run_dir):
                print(sanitize_text(describe(reg)), file=out or sys.stdout)
    except UserError as exc:
        for line in exc.problems:
            print(f"cvs-tui: history not updated: {line}", file=sys.stderr)
