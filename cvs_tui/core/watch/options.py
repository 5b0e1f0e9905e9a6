"""What a live run may be tuned with: the watchdog's limits and the node-command timeouts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cvs_tui.core.watch.sections import SECTION_FACTOR, SECTION_MIN_S

if TYPE_CHECKING:
    from cvs_tui.core.runner.slurm.client import SlurmClient

MIN_FREE_BYTES = 512 * 1024 * 1024  # free space wanted for the run folder and the nodes' output folders


@dataclass
class RunOptions:
    """Timeouts of the watchdog and of node commands (seconds)."""

    compile_allowance_s: float = 1800.0  # no step yet: start-up, data, compile
    hang_factor: float = 3.0  # after the first steps: k × p95 step time ...
    hang_min_s: float = 60.0  # ... but never less than this
    # while the log announces a checkpoint save/restore, an eval, a profiler capture or a compilation
    # (watch/sections.py): k × the longest such section so far, at least this (docs/watchdog.md)
    section_factor: float = SECTION_FACTOR
    section_min_s: float = SECTION_MIN_S
    fail_grace_s: float = 15.0  # after a node failed: how long the others get to exit on their own
    # a node whose connection dropped (its launcher cannot reach it) and stays down this long is lost
    lost_after_s: float = 15.0
    connect_timeout_s: float = 30.0
    command_timeout_s: float = 120.0
    setup_timeout_s: float = 1800.0  # branch checkout + install command, tokenizer download
    resume: Path | None = None  # a run folder whose completed runs are judged again and kept
    min_free_bytes: int = MIN_FREE_BYTES  # free space preflight wants in the run folder and on each node
    slurm_grace_s: float = 10.0  # Slurm: after `scancel --signal=TERM` of a step, before `scancel`
    slurm_client: SlurmClient | None = None  # how Slurm's commands run (None: plainly, this environment)
