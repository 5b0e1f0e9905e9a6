"""Putting a run folder into the history: each of its runs joins its group (a new group when its stack
changed), with the metrics the check reads and each host's part in what went wrong."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from cvs_tui.core.compare.inputs import RunInput, load_input
from cvs_tui.core.errors import UserError
from cvs_tui.core.history.grouping import (
    canonical,
    fits,
    group_key,
    label_of,
    series_of,
    stack_change,
    stack_of,
)
from cvs_tui.core.history.metrics import values_of
from cvs_tui.core.history.store import Group, HistoryStore
from cvs_tui.core.results import Results, RunRecord
from cvs_tui.core.run_folder import RunFolder


@dataclass(frozen=True, slots=True)
class Registered:
    run_dir: str
    run_key: str
    group: Group
    new_group: bool  # this run opened its group
    updated: bool  # the run was in the history already (its row was refreshed)


def resolve_run_dir(path: str | Path) -> Path:
    """A run folder (or the results.json in one) as an absolute path; a UserError when it holds none."""
    p = Path(path)
    if p.is_file() and p.name == "results.json":
        p = p.parent
    if not p.is_dir():
        raise UserError(f"{p}: no such run folder; pass a folder a run or `analyze` wrote")
    if not RunFolder(p).results_path.is_file():
        raise UserError(f"{p}: no results.json in this folder; pass a folder a run or `analyze` wrote")
    return p.resolve()


def load_run_input(run_dir: Path) -> RunInput:
    return load_input(str(run_dir), config=None, side="run")


def run_time(results: Results, run: RunRecord) -> float:
    return run.started_at if run.started_at is not None else results.created_at


def _host_rows(results: Results, run: RunRecord) -> list[tuple[str, int, int, int, int, int, int]]:
    """(host, rank, root cause, straggler, fatal, warning, unexplained stalls) per node with a host name.
    Only a live run's nodes are hosts: `analyze` names a node by its log file (node0.log in every
    folder), which would merge different machines into one."""
    if results.source != "live":
        return []
    rows = []
    for n in run.nodes:
        host = n.host or (results.hosts[n.rank] if 0 <= n.rank < len(results.hosts) else "")
        if not host:
            continue  # a node without a name cannot be followed across runs
        found = [f for f in run.health_findings if f.node == n.rank]
        rows.append(
            (
                host,
                n.rank,
                int(run.root_cause_node == n.rank),
                int(n.straggler),
                int(any(f.severity == "fatal" for f in found)),
                int(any(f.severity == "warning" for f in found)),
                int(any(s.cause == "unexplained" for s in n.stalls)),
            )
        )
    return rows


def matching_group(store: HistoryStore, inp: RunInput, run: RunRecord) -> Group | None:
    """The run's group: the one with its exact stack, else the latest of its series that agrees on every
    fact the run recorded (see ``grouping.fits``)."""
    series, stack = series_of(inp, run), stack_of(inp, run)
    found = store.group_by_key(group_key(series, stack))
    if found is not None:
        return found
    if any(v is None for v in stack.values()):
        return next((g for g in store.groups_of_series(canonical(series)) if fits(stack, g.stack)), None)
    return None


def _group_for(store: HistoryStore, inp: RunInput, run: RunRecord) -> tuple[Group, bool]:
    found = matching_group(store, inp, run)
    if found is not None:
        return found, False
    series, stack = series_of(inp, run), stack_of(inp, run)
    key = group_key(series, stack)
    before = store.latest_group_of_series(canonical(series))
    change = stack_change(before.stack, stack) if before is not None else ""
    cur = store.conn.execute(
        "INSERT INTO groups (series, stack, key, label, created_at, previous, change) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            canonical(series),
            canonical(stack),
            key,
            label_of(series),
            time.time(),
            before.id if before else None,
            change,
        ),
    )
    group = store.group(int(cur.lastrowid or 0))
    assert group is not None
    return group, True


def register(store: HistoryStore, path: str | Path) -> list[Registered]:
    """Register every run of the folder (again: its rows are replaced, so this is idempotent)."""
    run_dir = resolve_run_dir(path)
    inp = load_run_input(run_dir)
    out = []
    with store.transaction() as c:
        for run in inp.results.runs:
            group, new = _group_for(store, inp, run)
            old = c.execute(
                "SELECT id FROM runs WHERE run_dir = ? AND run_key = ?", (str(run_dir), run.key)
            ).fetchone()
            values = (
                group.id,
                run_time(inp.results, run),
                time.time(),
                run.status,
                run.outcome,
                int(run.outcome == "complete"),
                json.dumps(values_of(run), sort_keys=True),
            )
            if old:
                c.execute(
                    "UPDATE runs SET group_id=?, at=?, registered_at=?, status=?, outcome=?, complete=?, "
                    "metrics=? WHERE id = ?",
                    (*values, old[0]),
                )
                run_id = int(old[0])
                c.execute("DELETE FROM run_hosts WHERE run_id = ?", (run_id,))
            else:
                cur = c.execute(
                    "INSERT INTO runs (run_dir, run_key, group_id, at, registered_at, status, outcome, "
                    "complete, metrics) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (str(run_dir), run.key, *values),
                )
                run_id = int(cur.lastrowid or 0)
            c.executemany(
                "INSERT INTO run_hosts VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [(run_id, *row) for row in _host_rows(inp.results, run)],
            )
            out.append(Registered(str(run_dir), run.key, group, new, bool(old)))
    return out


def describe(reg: Registered) -> str:
    """One line for the console: where the run went, and a changed stack said out loud."""
    head = f"history: {reg.run_key} -> group {reg.group.id} ({reg.group.label})"
    if reg.new_group and reg.group.change:
        return f"{head}: new group, the stack changed against group {reg.group.previous}: {reg.group.change}"
    if reg.new_group:
        return f"{head}: new group"
    return head + (" (updated)" if reg.updated else "")


__all__ = [
    "Registered",
    "describe",
    "load_run_input",
    "matching_group",
    "register",
    "resolve_run_dir",
    "run_time",
]
