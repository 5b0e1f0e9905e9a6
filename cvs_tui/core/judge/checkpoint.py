"""Checkpoint-resume judging, and the one rule for "two losses agree" that resume, compare and card share.

:func:`judge_checkpoint_resume` adds the resume verdicts to the phase-2 run (CKPT-2):

* ``checkpoint.resumed``: phase 2 restored phase 1's last checkpoint (step N) and its first step is N+1;
* ``checkpoint.sentinel_losses``: every step phase 2 shares with the uninterrupted reference run agrees
  within ``SENTINEL_ATOL + SENTINEL_RTOL * |ref|`` (the first diverging step is named);
* ``checkpoint.boundary_loss_delta``: upstream's check, the largest |delta| against
  checkpoint_resume.loss_tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from cvs_tui.core.events import CheckpointAction
from cvs_tui.core.judge.format import DASH, format_number
from cvs_tui.core.judge.verdicts import FAIL, PASS
from cvs_tui.core.plan import Plan, RunKind
from cvs_tui.core.results import RunRecord, VerdictRecord

# the runs whose losses the checkpoint-resume verdicts compare step by step (their judges keep them)
RESUME_KINDS: tuple[RunKind, ...] = ("ckpt_phase1", "ckpt_phase2", "ckpt_reference")

SENTINEL_ATOL = 1e-6
SENTINEL_RTOL = 0.01


def loss_agreement(a: float, b: float, atol: float, rtol: float) -> bool:
    """Whether loss ``b`` agrees with the reference loss ``a``: |b − a| ≤ atol + rtol·|a|.

    Non-finite values only agree with themselves (NaN with NaN, inf with inf)."""
    if not (math.isfinite(a) and math.isfinite(b)):
        return (math.isnan(a) and math.isnan(b)) or a == b
    return abs(b - a) <= atol + rtol * abs(a)


def record_losses(run: RunRecord) -> dict[int, float]:
    """The run's finite losses by step, from the first node that logged steps (SPMD losses are global)."""
    if not run.nodes:
        return {}
    node = next((n for n in run.nodes if n.steps), run.nodes[0])
    return {p.step: p.loss for p in node.steps if p.loss is not None}


def restored_step(run: RunRecord) -> int | None:
    """The latest checkpoint step the run restored, if it restored one."""
    steps = [
        c.step
        for n in run.nodes
        for c in n.checkpoints
        if c.action in (CheckpointAction.RESTORE_START.value, CheckpointAction.RESTORE_DONE.value)
        and c.step is not None
    ]
    return max(steps) if steps else None


def _last_saved_step(run: RunRecord | None) -> int | None:
    if run is None:
        return None
    saves = (CheckpointAction.SAVE_START.value, CheckpointAction.SAVE_DONE.value)
    steps = [c.step for n in run.nodes for c in n.checkpoints if c.action in saves and c.step is not None]
    return max(steps) if steps else None


def _resumed(p1: RunRecord | None, p2: RunRecord, l2: dict[int, float]) -> VerdictRecord:
    restored = restored_step(p2)
    saved = _last_saved_step(p1)
    first = min(l2) if l2 else None
    if restored is None:
        ok, msg = False, "phase 2 logged no checkpoint restore"
    elif saved is not None and restored != saved:
        ok, msg = False, f"phase 2 restored step {restored}, but phase 1's last checkpoint is step {saved}"
    else:
        ok = first == restored + 1
        msg = (
            f"phase 2 restored step {restored} and its first logged step is {first} (expected {restored + 1})"
        )
    return VerdictRecord(
        metric="checkpoint.resumed",
        status=PASS if ok else FAIL,
        expected=f"first step = {restored + 1}" if restored is not None else "a restore",
        actual=float(first) if first is not None else None,
        actual_text=str(first) if first is not None else DASH,
        unit="step",
        message=msg,
        gated=True,
    )


def _sentinels(l2: dict[int, float], lref: dict[int, float], shared: list[int]) -> VerdictRecord:
    bad = [s for s in shared if not loss_agreement(lref[s], l2[s], SENTINEL_ATOL, SENTINEL_RTOL)]
    if not shared:
        ok, msg = False, "phase 2 and the reference run share no step with a finite loss"
    elif bad:
        b = bad[0]
        ok, msg = (
            False,
            f"step {b} diverges: phase 2 {l2[b]:.6g} vs reference {lref[b]:.6g} "
            f"({len(bad)} of {len(shared)} shared steps outside 1e-6 + 1% of the reference)",
        )
    else:
        ok, msg = True, f"all {len(shared)} shared steps ({shared[0]}..{shared[-1]}) within 1e-6 + 1%"
    return VerdictRecord(
        metric="checkpoint.sentinel_losses",
        status=PASS if ok else FAIL,
        expected="|a-b| <= 1e-6 + 0.01*|ref| at every shared step",
        actual=float(len(bad)) if shared else None,
        actual_text=f"{len(bad)} diverging" if shared else DASH,
        unit="steps",
        message=msg,
        gated=True,
    )


def _boundary(
    l2: dict[int, float], lo: dict[int, float], shared: list[int], label: str, tol: float
) -> VerdictRecord:
    delta: float | None
    if shared:
        deltas = [abs(l2[s] - lo[s]) for s in shared]
        worst = max(range(len(shared)), key=lambda i: deltas[i])
        delta = deltas[worst]
        where = f"max |Δloss| {delta:.3g} at step {shared[worst]} vs {label}"
    elif lo and l2:
        delta = abs(l2[min(l2)] - lo[max(lo)])
        where = f"|Δloss| {delta:.3g} between {label} step {max(lo)} and phase 2 step {min(l2)}"
    else:
        delta, where = None, f"no finite losses to compare ({label} or phase 2 missing)"
    bound = "≤" if delta is not None and delta <= tol else ">"
    return VerdictRecord(
        metric="checkpoint.boundary_loss_delta",
        status=FAIL if delta is None or delta > tol else PASS,
        expected=f"<= {format_number(tol)}",
        actual=delta,
        actual_text=format_number(delta),
        unit="loss",
        message=f"{where} ({bound} loss_tolerance {tol:g})" if delta is not None else where,
        gated=True,
    )


def _record_of(plan: Plan, records: dict[str, RunRecord], kind: RunKind) -> RunRecord | None:
    key = next((r.key for r in plan.runs if r.kind == kind), None)
    return records.get(key) if key is not None else None


def judge_checkpoint_resume(
    plan: Plan, records: dict[str, RunRecord], losses: Mapping[str, dict[int, float]] | None = None
) -> None:
    """Add the resume verdicts (see the module docstring) to the CKPT-2 record in ``records``.
    ``losses``: by run key, the losses :func:`record_losses` would read from a record whose step series
    is whole, for records whose series were bounded (``cvs-tui analyze`` of long runs)."""
    exact = losses or {}

    def losses_of(r: RunRecord) -> dict[int, float]:
        return exact[r.key] if r.key in exact else record_losses(r)

    p2 = _record_of(plan, records, "ckpt_phase2")
    if p2 is None:
        return
    p1 = _record_of(plan, records, "ckpt_phase1")
    ref = _record_of(plan, records, "ckpt_reference")
    tol = float(plan.checkpoint_resume["loss_tolerance"])
    l2 = losses_of(p2)
    verdicts = [v for v in p2.verdicts if not v.metric.startswith("checkpoint.")]
    verdicts.append(_resumed(p1, p2, l2))
    other, label = (ref, "reference") if ref is not None else (p1, "phase 1")
    lo = losses_of(other) if other is not None else {}
    shared = sorted(set(lo) & set(l2))
    if ref is not None:
        verdicts.append(_sentinels(l2, lo, shared))
    verdicts.append(_boundary(l2, lo, shared, label, tol))
    p2.verdicts = verdicts
    if any(v.status == FAIL for v in verdicts):
        p2.status = "FAIL"


__all__ = [
    "SENTINEL_ATOL",
    "SENTINEL_RTOL",
    "judge_checkpoint_resume",
    "loss_agreement",
    "record_losses",
    "restored_step",
]
