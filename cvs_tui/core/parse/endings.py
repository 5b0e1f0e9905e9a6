"""How the scheduler ended a run, from the lines Slurm writes into a job's or step's stderr.

``slurmstepd`` and ``srun`` print one line when they end a step or a task, and the cause is in it:

* ``slurmstepd: error: *** STEP 123.0 ON node7 CANCELLED AT 2024-04-20T09:09:37 DUE TO TIME LIMIT ***``
  (also ``DUE TO PREEMPTION``, ``DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS``,
  ``DUE TO JOB REQUEUE``, ``DUE TO TASK FAILURE``; a plain ``CANCELLED AT ... ***`` is an scancel;
  older Slurm wrote ``*** JOB 830329 CANCELLED AT ... DUE TO TIME LIMIT on n447 ***``);
* ``slurmstepd: error: Detected 2 oom_kill events in StepId=123.0. Some of the step tasks have been OOM
  Killed.`` (older: ``Detected 1 oom-kill event(s) in step 3495064.0 cgroup.``);
* ``srun: error: node7: task 3: Out Of Memory`` / ``Exited with exit code 2`` / ``Killed`` /
  ``Segmentation fault`` / ``Bus error`` / ``Terminated``;
* ``*** STEP 123.0 ON node7 FAILED (non-zero exit code or other failure mode) ***``.

A log holds the cause and its fallout: an OOM kill is followed by ``srun: Terminating job step`` and a
plain ``CANCELLED`` line; a time limit by ``tasks 0-3: Terminated``. :func:`read_ending` returns the
cause: scheduler decisions (time limit, preemption, node failure, requeue) first, then an OOM kill, a
task killed by a signal, a non-zero exit code, a step ended because a task failed, a cancel, and last a
task terminated by the cancel itself.

Pure functions over lines; :func:`read_log_ending` reads a file's tail (the lines are at its end).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

TIME_LIMIT = "time_limit"
PREEMPTION = "preemption"
NODE_FAILURE = "node_failure"
REQUEUE = "requeue"
OOM_KILL = "oom_kill"
SIGNAL = "signal"
EXIT_CODE = "exit_code"
TASK_FAILURE = "task_failure"
CANCELLED = "cancelled"

# the order in which a cause outranks another in the same log (lower first); Terminated tasks rank last
_RANK = {
    TIME_LIMIT: 0,
    PREEMPTION: 0,
    NODE_FAILURE: 0,
    REQUEUE: 0,
    OOM_KILL: 1,
    SIGNAL: 2,
    EXIT_CODE: 3,
    TASK_FAILURE: 4,
    CANCELLED: 5,
}
_TERMINATED_RANK = 6

_REASONS = {
    "TIME LIMIT": TIME_LIMIT,
    "PREEMPTION": PREEMPTION,
    "NODE FAILURE": NODE_FAILURE,
    "JOB REQUEUE": REQUEUE,
    "TASK FAILURE": TASK_FAILURE,
}
_REASON = r"(?P<reason>TIME LIMIT|PREEMPTION|NODE FAILURE|JOB REQUEUE|TASK FAILURE)"
_ID = r"(?P<id>[0-9][0-9A-Za-z_.+]{0,40})"

# every pattern is anchored on fixed words with bounded gaps: linear on any line
_CANCEL = re.compile(
    rf"\*\*\* (?P<what>JOB|STEP) {_ID}(?: ON (?P<node>\S{{1,80}}))? CANCELLED AT (?P<at>\S{{1,40}})"
    rf"(?: DUE TO {_REASON}[^*\n]{{0,80}}?(?: on (?P<node_old>\S{{1,80}}))?)?"
    r"(?: (?:by|BY) (?:uid )?(?P<uid>\S{1,40}))? \*\*\*(?: on (?P<node_tail>\S{1,80}))?"
)
_NODE_FAIL_OLD = re.compile(
    rf"\*\*\* (?:JOB|STEP) {_ID} CANCELLED AT \S{{1,40}} DUE TO NODE (?P<node>\S{{1,80}}) FAILURE"
)
_FAILED = re.compile(
    rf"\*\*\* (?:JOB|STEP) {_ID} ON (?P<node>\S{{1,80}}) FAILED \(non-zero exit code or other failure mode\)"
)
_OOM = re.compile(
    r"Detected (?P<n>\d{1,9}) oom[-_]kill event(?:s|\(s\))? in (?:StepId=|step )"
    r"(?P<id>[0-9A-Za-z_.+]{1,40}?)(?:\.? |\.?$| cgroup)"
)
_TASK = re.compile(
    r"srun: error: (?P<node>[^\s:]{1,80}): tasks? (?P<tasks>[0-9,\-]{1,200}): (?P<what>[^\n]{1,80})"
)
_EXIT = re.compile(r"Exited with exit code (?P<code>\d{1,3})")
_REQUEUED = re.compile(r"\bJOB ([0-9][0-9A-Za-z_.+]{0,40}) (?:was )?REQUEUED\b")
_TAIL_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Ending:
    """Why Slurm ended the run: ``cause`` (see the module constants), where and how."""

    cause: str
    line: str  # the line that says so, stripped
    line_no: int  # its index in the lines read
    node: str | None = None
    code: int | None = None  # exit code (cause exit_code)
    signal: str | None = None  # "Killed", "Segmentation fault", ... (cause signal)
    slurm_id: str | None = None  # job or step id (123 / 123.0 / 123.batch)

    def describe(self, step: int | None = None) -> str:
        """One line for a run's reason: ``Slurm: time limit reached at step 120 (STEP 5.0 on gpu-1)``."""
        at = f" at step {step}" if step is not None else ""
        on = f" on {self.node}" if self.node else ""
        what = {
            TIME_LIMIT: f"time limit reached{at}",
            PREEMPTION: f"preempted{at}",
            NODE_FAILURE: f"node failure{on}{at}",
            REQUEUE: f"job requeued{at}",
            OOM_KILL: f"out of memory (oom_kill){on}{at}",
            SIGNAL: f"task{on} ended by signal ({self.signal}){at}",
            EXIT_CODE: f"task{on} exited with code {self.code}{at}",
            TASK_FAILURE: f"step ended because a task failed{on}{at}",
            CANCELLED: f"cancelled{at}",
        }[self.cause]
        if self.cause in (TIME_LIMIT, PREEMPTION, REQUEUE, CANCELLED) and self.node:
            what += f" ({self.node})"
        return f"Slurm: {what}"


def _node(*names: str | None) -> str | None:
    for n in names:
        if n and re.search(r"[0-9A-Za-z]", n):  # "..." (elided by a poster) names no node
            return n
    return None


def _rank(e: Ending) -> int:
    return _TERMINATED_RANK if e.cause == SIGNAL and e.signal == "Terminated" else _RANK[e.cause]


def _of_line(i: int, raw: str) -> Ending | None:
    line = raw.strip()
    if "***" in line:
        m = _NODE_FAIL_OLD.search(line)
        if m:
            return Ending(NODE_FAILURE, line, i, node=_node(m.group("node")), slurm_id=m.group("id"))
        m = _FAILED.search(line)
        if m:
            return Ending(TASK_FAILURE, line, i, node=_node(m.group("node")), slurm_id=m.group("id"))
        m = _CANCEL.search(line)
        if m:
            cause = _REASONS[m.group("reason")] if m.group("reason") else CANCELLED
            node = _node(m.group("node"), m.group("node_old"), m.group("node_tail"))
            return Ending(cause, line, i, node=node, slurm_id=m.group("id"))
    if "kill event" in line:
        m = _OOM.search(line)
        if m:
            return Ending(OOM_KILL, line, i, slurm_id=m.group("id"))
    if line.startswith("srun: error: "):
        m = _TASK.match(line)
        if m:
            what = m.group("what").strip()
            node = _node(m.group("node"))
            if what == "Out Of Memory":
                return Ending(OOM_KILL, line, i, node=node)
            code = _EXIT.match(what)
            if code:
                n = int(code.group("code"))
                return Ending(EXIT_CODE, line, i, node=node, code=n) if n else None
            return Ending(SIGNAL, line, i, node=node, signal=what)
    m = _REQUEUED.search(line) if "REQUEUED" in line else None
    if m:
        return Ending(REQUEUE, line, i, slurm_id=m.group(1))
    return None


def read_ending(lines: Iterable[str]) -> Ending | None:
    """The cause Slurm gives for ending the run, from its lines (any order of cause and fallout)."""
    found = [e for i, ln in enumerate(lines) if (e := _of_line(i, ln)) is not None]
    if not found:
        return None
    best = min(found, key=lambda e: (_rank(e), e.line_no))
    if best.cause == OOM_KILL and best.node is None:
        # "Detected N oom_kill events in StepId=..." names no node; "task N: Out Of Memory" does
        best = next((e for e in found if e.cause == OOM_KILL and e.node), best)
    return best


def read_log_ending(path: Path) -> Ending | None:
    """The ending in the last 64 KB of a log file (None if it has none or cannot be read)."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - _TAIL_BYTES))
            tail = f.read()
    except OSError:
        return None
    text = tail.decode("utf-8", errors="replace")
    if "slurm" not in text and "srun" not in text and "***" not in text:
        return None
    return read_ending(text.splitlines())


__all__ = [
    "CANCELLED",
    "EXIT_CODE",
    "NODE_FAILURE",
    "OOM_KILL",
    "PREEMPTION",
    "REQUEUE",
    "SIGNAL",
    "TASK_FAILURE",
    "TIME_LIMIT",
    "Ending",
    "read_ending",
    "read_log_ending",
]
