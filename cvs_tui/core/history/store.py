"""The history database: one SQLite file (the standard library's sqlite3) shared by every cvs-tui process.

Path: ``CVS_TUI_HISTORY_DB``, else ``$XDG_DATA_HOME/cvs-tui/history.db``, else
``~/.local/share/cvs-tui/history.db``. The file is versioned (``meta.schema_version``); writers use WAL and
a busy timeout so two runs ending at once both register. A file that is not SQLite, or is SQLite but not
a cvs-tui history, is a UserError naming the path, never a traceback and never overwritten.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cvs_tui.core.errors import UserError

ENV_VAR = "CVS_TUI_HISTORY_DB"
SCHEMA_VERSION = 1
APP_ID = "cvs-tui-history"
BUSY_TIMEOUT_MS = 15_000  # another run registering at the same moment holds the lock for milliseconds

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE groups (
    id INTEGER PRIMARY KEY,
    series TEXT NOT NULL,       -- config, run key, GPU, node count (JSON): what a run is a repeat of
    stack TEXT NOT NULL,        -- the environment fingerprint (JSON): toolchain, hardware, workload
    key TEXT NOT NULL UNIQUE,   -- sha256 of series + stack
    label TEXT NOT NULL,
    created_at REAL NOT NULL,
    previous INTEGER REFERENCES groups(id),  -- the same series' group before the stack changed
    change TEXT NOT NULL DEFAULT ''          -- what changed against it
);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    run_dir TEXT NOT NULL,
    run_key TEXT NOT NULL,
    group_id INTEGER NOT NULL REFERENCES groups(id),
    at REAL NOT NULL,           -- when the run started (else when its results were written)
    registered_at REAL NOT NULL,
    status TEXT NOT NULL,
    outcome TEXT NOT NULL,
    complete INTEGER NOT NULL,  -- outcome complete: its metrics are measured over a whole run
    metrics TEXT NOT NULL,      -- {metric name: value} of the numbers the check judges
    UNIQUE (run_dir, run_key)
);
CREATE INDEX runs_group_at ON runs (group_id, at);
CREATE TABLE run_hosts (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    host TEXT NOT NULL,
    rank INTEGER NOT NULL,
    root_cause INTEGER NOT NULL,
    straggler INTEGER NOT NULL,
    fatal INTEGER NOT NULL,
    warning INTEGER NOT NULL,
    stalls INTEGER NOT NULL,
    PRIMARY KEY (run_id, rank)
);
"""


def default_path() -> Path:
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base / "cvs-tui" / "history.db"


@dataclass(frozen=True, slots=True)
class StoredRun:
    id: int
    run_dir: str
    run_key: str
    group_id: int
    at: float
    status: str
    outcome: str
    complete: bool
    metrics: dict[str, float]


@dataclass(frozen=True, slots=True)
class Group:
    id: int
    series: dict[str, Any]
    stack: dict[str, Any]
    key: str
    label: str
    created_at: float
    previous: int | None
    change: str


def _bad(path: Path, what: str) -> UserError:
    return UserError(f"{path}: {what}; point {ENV_VAR} at another file (or move this one away) and run again")


class HistoryStore:
    """An open history database. Use as a context manager; every write is one transaction."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self.conn = conn

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None, *, create: bool = True) -> HistoryStore | None:
        """The database at ``path`` (default: ``default_path()``); None when it does not exist and
        ``create`` is False (a reader with nothing to read)."""
        p = Path(path) if path is not None else default_path()
        if not p.exists() and not create:
            return None
        if p.exists() and not p.is_file():
            raise _bad(p, "is not a file")
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(p, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise _bad(p, f"cannot open the history database ({exc})") from None
        store = cls(p, conn)
        try:
            store._prepare()
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise _bad(p, f"not a cvs-tui history database ({exc})") from None
        except UserError:
            conn.close()
            raise
        return store

    def _prepare(self) -> None:
        c = self.conn
        c.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        c.execute("PRAGMA foreign_keys = ON")
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            with self.transaction():
                # a second process may have created it since we looked: check again under the lock
                if not c.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone():
                    # statement by statement: executescript would commit the open transaction first
                    for statement in SCHEMA.split(";"):
                        if statement.strip():
                            c.execute(statement)
                    c.executemany(
                        "INSERT INTO meta VALUES (?, ?)",
                        [("app", APP_ID), ("schema_version", str(SCHEMA_VERSION))],
                    )
            tables = {"meta"}
        if "meta" not in tables:
            raise _bad(self.path, "is an SQLite file but not a cvs-tui history database (no meta table)")
        meta = dict(c.execute("SELECT key, value FROM meta").fetchall())
        if meta.get("app") != APP_ID:
            raise _bad(self.path, "is an SQLite file but not a cvs-tui history database")
        if meta.get("schema_version") != str(SCHEMA_VERSION):
            raise _bad(
                self.path,
                f"history schema {meta.get('schema_version')!r} is not the one this cvs-tui reads "
                f"({SCHEMA_VERSION})",
            )
        if c.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            c.execute("PRAGMA journal_mode = WAL")  # readers never block the writer, nor it them

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE: take the write lock up front so two writers queue instead of deadlocking."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- reads -----------------------------------------------------------------------------------------
    def groups(self) -> list[Group]:
        rows = self.conn.execute(
            "SELECT id, series, stack, key, label, created_at, previous, change FROM groups ORDER BY id"
        ).fetchall()
        return [Group(r[0], json.loads(r[1]), json.loads(r[2]), *r[3:]) for r in rows]

    def group(self, group_id: int) -> Group | None:
        return next((g for g in self.groups() if g.id == group_id), None)

    def group_by_key(self, key: str) -> Group | None:
        return next((g for g in self.groups() if g.key == key), None)

    def groups_of_series(self, series: str) -> list[Group]:
        """The series' groups, the one with the latest run first."""
        rows = self.conn.execute(
            "SELECT g.id FROM groups g LEFT JOIN runs r ON r.group_id = g.id WHERE g.series = ? "
            "GROUP BY g.id ORDER BY max(coalesce(r.at, g.created_at)) DESC, g.id DESC",
            (series,),
        ).fetchall()
        groups = {g.id: g for g in self.groups()}
        return [groups[r[0]] for r in rows]

    def latest_group_of_series(self, series: str) -> Group | None:
        found = self.groups_of_series(series)
        return found[0] if found else None

    def _run(self, r: tuple[Any, ...]) -> StoredRun:
        return StoredRun(r[0], r[1], r[2], r[3], r[4], r[5], r[6], bool(r[7]), json.loads(r[8]))

    _RUN_COLS = "id, run_dir, run_key, group_id, at, status, outcome, complete, metrics"

    def runs(self, *, group_id: int | None = None, last: int | None = None) -> list[StoredRun]:
        """Runs oldest first (of one group, the latest ``last`` of them)."""
        where, params = ("WHERE group_id = ?", [group_id]) if group_id is not None else ("", [])
        rows = self.conn.execute(
            f"SELECT {self._RUN_COLS} FROM runs {where} ORDER BY at DESC, id DESC"
            + (" LIMIT ?" if last is not None else ""),
            [*params, *([last] if last is not None else [])],
        ).fetchall()
        return [self._run(r) for r in reversed(rows)]

    def runs_of_dir(self, run_dir: str) -> list[StoredRun]:
        rows = self.conn.execute(
            f"SELECT {self._RUN_COLS} FROM runs WHERE run_dir = ? ORDER BY id", (run_dir,)
        ).fetchall()
        return [self._run(r) for r in rows]

    def host_rows(self) -> list[tuple[str, int, int, int, int, int, int]]:
        """(host, run id, root cause, straggler, fatal, warning, stalls) of every complete-or-not run."""
        return [
            tuple(r)
            for r in self.conn.execute(
                "SELECT host, run_id, root_cause, straggler, fatal, warning, stalls FROM run_hosts "
                "ORDER BY run_id, rank"
            )
        ]


__all__ = ["ENV_VAR", "SCHEMA_VERSION", "Group", "HistoryStore", "StoredRun", "default_path"]
