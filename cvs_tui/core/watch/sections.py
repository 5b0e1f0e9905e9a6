"""Sections a rank's log announces, during which a step may take far longer than a training step.

The watchdog's training budget (``hang_factor`` × p95 step time, at least ``hang_min_s``) is short on
purpose; a checkpoint save or restore, an eval, a profiler capture or a compilation can take minutes,
and MaxText, orbax and JAX announce each of them in the log. :func:`line_section` reads them from each
complete line as it arrives, with the parser's own patterns (``dialects.CK_PATTERNS``, the eval
patterns): the parser emits a record only when the next one starts, and the line announcing a save is
the last one before the save's silence. JAX's compile lines (``jax_log_compiles``) are read here too;
the parser has no event for them (they carry no figure the judge uses).

A section opens at its announcement and closes at its closing line or at the rank's next step line,
whichever comes first; its length is recorded so the next section of the same kind gets
``section_factor`` × the longest seen so far, at least ``section_min_s`` (docs/watchdog.md).
"""

from __future__ import annotations

import re
from enum import StrEnum

from cvs_tui.core.events import CheckpointAction
from cvs_tui.core.parse.dialects import CK_PATTERNS, EVAL_MID, EVAL_NEW, EVAL_OLD, EVAL_START, PROF_STEP

SECTION_MIN_S = 300.0  # a section's budget is at least this (the first save, eval, compile of a run)
SECTION_FACTOR = 3.0  # ... and this many times the longest section of the same kind seen so far


class Section(StrEnum):
    CHECKPOINT_SAVE = "checkpoint save"
    CHECKPOINT_RESTORE = "checkpoint restore"
    EVAL = "eval"
    PROFILER = "profiler capture"
    COMPILE = "compilation"


_OPENS: dict[CheckpointAction, Section] = {
    CheckpointAction.SAVE_WAIT: Section.CHECKPOINT_SAVE,
    CheckpointAction.SAVE_START: Section.CHECKPOINT_SAVE,
    CheckpointAction.WAIT_PREVIOUS: Section.CHECKPOINT_SAVE,
    CheckpointAction.RESTORE_START: Section.CHECKPOINT_RESTORE,
}
_CLOSES: dict[CheckpointAction, Section] = {
    CheckpointAction.SAVE_BLOCKING_DONE: Section.CHECKPOINT_SAVE,
    CheckpointAction.SAVE_DONE: Section.CHECKPOINT_SAVE,
    CheckpointAction.RESTORE_DONE: Section.CHECKPOINT_RESTORE,
}
# JAX: "Compiling jit(train_step) with global shapes ..." / "Compiling train_step for with global
# shapes ..."; the close: "Finished XLA compilation of jit(train_step) in 1.2 sec".
_COMPILE_OPEN = re.compile(rb"\bCompiling \S+ (?:with|for) ")
_COMPILE_CLOSE = re.compile(rb"\bFinished XLA compilation of ")
# (anchor, pattern, section, opens): the anchor (case-folded, as the parser's) picks the pattern to run
_RULES: tuple[tuple[str, re.Pattern[bytes], Section, bool], ...] = (
    *(
        (anchor.decode(), rx, _OPENS.get(action) or _CLOSES[action], action in _OPENS)
        for anchor, rx, action, _dialect, _layout in CK_PATTERNS
        if action in _OPENS or action in _CLOSES
    ),
    ("starting eval after", EVAL_START, Section.EVAL, True),
    ("completed eval after", EVAL_NEW, Section.EVAL, False),
    ("eval metrics after", EVAL_MID, Section.EVAL, False),
    ("average loss after step=", EVAL_OLD, Section.EVAL, False),
    ("completed profiler", PROF_STEP, Section.PROFILER, True),  # the trace is written at deactivation
    ("compiling ", _COMPILE_OPEN, Section.COMPILE, True),
    ("finished xla compilation", _COMPILE_CLOSE, Section.COMPILE, False),
)
_ANCHOR = re.compile("|".join(re.escape(a) for a, *_ in _RULES))  # on the case-folded line
# every anchor holds one of these: a line with none of them (nearly all) costs a few substring tests
_ROOTS = ("checkpoint", "save", "restor", "load", "eval", "profiler", "compil", "/read/", "average loss")
assert all(any(r in a for r in _ROOTS) for a, *_ in _RULES)
_BY_ANCHOR: dict[str, list[tuple[re.Pattern[bytes], Section, bool]]] = {}
for _a, _rx, _sec, _opens in _RULES:
    _BY_ANCHOR.setdefault(_a, []).append((_rx, _sec, _opens))

STEP_LINE = "completed step: "  # a train (or rampup) step line: it ends whatever section is open


def line_section(line: str) -> tuple[Section, bool] | None:
    """(section, opens) for a line that announces (True) or ends (False) a section; None otherwise.

    A step line is not a section line: the caller checks ``STEP_LINE`` first (nearly every line)."""
    low = line.lower()
    if not any(r in low for r in _ROOTS):
        return None
    m = _ANCHOR.search(low)
    if m is None:
        return None
    raw = line.encode("utf-8", "replace")
    for rx, sec, opens in _BY_ANCHOR[m.group()]:
        if rx.search(raw):
            return sec, opens
    return None
