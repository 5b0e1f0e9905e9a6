"""A node's start-up phase from MaxText's own log lines, for the long wait before its first step.

JAX start-up, checkpoint restore and XLA compilation take seconds to minutes with no step to show; the
phase tells a watcher which of them a node is in. Markers are real MaxText/absl lines (see
tests/fixtures/maxtext/*.log); the order they appear in there is: imports, device set-up, checkpoint
restore (or "not restoring"), compilation of the train step, then the first step.
"""

from __future__ import annotations

import re

IMPORTING = "importing"
DEVICES = "setting up devices"
RESTORING = "restoring checkpoint"
COMPILING = "compiling"
FIRST_STEP = "running the first step"

# (phase, pattern): the phase a node is in once the line is seen; the latest marker wins
_MARKERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (DEVICES, re.compile(r"\] (Num_devices: |System Information: |PjRt-IFRT device count)")),
    (RESTORING, re.compile(r"\] (restoring from |\[process=\d+\] \[sync\] Started load checkpoint)")),
    # after the restore (or none), MaxText compiles the train step; the memory estimate follows it
    (COMPILING, re.compile(r"\] (No existing checkpoints found|Finished load in |Compiling |.*\bcompil)")),
    (FIRST_STEP, re.compile(r"\] \[train\] Total estimated memory size")),
)
_ORDER = {name: i for i, name in enumerate((IMPORTING, DEVICES, RESTORING, COMPILING, FIRST_STEP))}


def line_phase(line: str) -> str | None:
    """The phase a log line marks, or None when it marks none."""
    if "] " not in line:
        return None
    for phase, pattern in reversed(_MARKERS):
        if pattern.search(line):
            return phase
    return None


def next_phase(current: str, line: str) -> str:
    """The phase after ``line``: any output means imports are under way; a phase never goes back (the
    compiler's "could over-estimate" note comes after the estimate, restore chatter after the restore)."""
    marked = line_phase(line)
    if marked is None:
        return current or IMPORTING
    if current and _ORDER.get(current, -1) >= _ORDER[marked]:
        return current
    return marked
