"""The `checkpoint_resume` leaf from the CKPT-1/CKPT-2/CKPT-REF runs. The judge already decided whether
the resume worked (the `checkpoint.*` verdicts in results.json); the leaf reports those verdicts, with the
resume point and the tolerance the judge used."""

from __future__ import annotations

from cvs_tui.core.card.facts import (
    CardSource,
    maxtext_config_for,
    run_date,
    run_problems,
    workload_of,
)
from cvs_tui.core.card.schema import (
    ResumeComparison,
    ResumeLeaf,
    ResumeMetrics,
    ResumePoint,
    Workload,
)
from cvs_tui.core.judge.checkpoint import SENTINEL_ATOL, SENTINEL_RTOL, record_losses, restored_step
from cvs_tui.core.plan import CKPT_REF_KEY
from cvs_tui.core.results import RunRecord, VerdictRecord


def _verdict(run: RunRecord, metric: str) -> VerdictRecord | None:
    return next((v for v in run.verdicts if v.metric == metric), None)


def _resume_problems(p2: RunRecord, has_ref: bool) -> tuple[list[str], bool]:
    """What the judge's checkpoint verdicts on phase 2 say (the card does not judge again), and whether
    the sentinel losses matched the reference."""
    problems: list[str] = []
    if _verdict(p2, "checkpoint.resumed") is None:
        problems.append("the results hold no checkpoint.resumed verdict; analyze the run again")
    sentinels = _verdict(p2, "checkpoint.sentinel_losses")
    match = sentinels is not None and sentinels.status == "PASS"
    if has_ref and sentinels is None:
        problems.append("the results hold no checkpoint.sentinel_losses verdict; analyze the run again")
    elif has_ref and not match:
        problems.append("resumed losses differ from the uninterrupted run at the sentinel steps")
    return problems, match


def _resume_workload(src: CardSource, base: RunRecord) -> Workload:
    mc = maxtext_config_for(src, CKPT_REF_KEY)
    if mc is not None:
        return workload_of(src, base, mc)
    # checkpoint runs reuse a sweep's workload: known when the results hold exactly one
    ws = [workload_of(src, r, None) for r in src.results.runs if r.kind == "sweep"]
    sweeps = {(x.per_device_batch_size, x.max_target_length, x.precision) for x in ws}
    w = workload_of(src, base, None)
    if len(sweeps) == 1:
        pdb, seq, prec = next(iter(sweeps))
        w = w.model_copy(
            update={
                "per_device_batch_size": pdb,
                "global_batch_size": pdb * w.num_gpus if pdb else None,
                "max_target_length": seq,
                "precision": prec,
            }
        )
    return w


def resume_leaf(src: CardSource) -> ResumeLeaf | None:
    runs = {r.kind: r for r in src.results.runs}
    p2 = runs.get("ckpt_phase2")
    if p2 is None:
        return None
    p1, ref = runs.get("ckpt_phase1"), runs.get("ckpt_reference")
    res = src.results
    problems, match = _resume_problems(p2, ref is not None)
    l2 = record_losses(p2)
    l1 = record_losses(p1) if p1 is not None else {}
    restored = restored_step(p2)
    ckpt = restored if restored is not None else (max(l1) if l1 else None)
    resume = None
    comparison = None
    if ckpt is not None and l2:
        first, last = min(l2), max(l2)
        resume = ResumePoint(checkpoint_step=ckpt, first_resumed_step=first, last_step=last)
        if ref is not None:
            comparison = ResumeComparison(
                reference="uninterrupted_run",
                sentinel_steps=[first, last],
                loss_relative_tolerance=SENTINEL_RTOL,
                loss_absolute_tolerance=SENTINEL_ATOL,
                loss_source="log_3dp",
                sentinels_match=match,
            )
    else:
        problems.append("phase 2 logged no restore or no finite loss")
    if ref is None:
        problems.append("no uninterrupted reference run (CKPT-REF) in these results")
    for r in (p1, p2, ref):
        if r is not None and (r.outcome != "complete" or r.status != "PASS"):
            problems.append(f"{r.key}: " + "; ".join(run_problems(r, None, None) or ["run status FAIL"]))
    w = _resume_workload(src, ref or p2)
    missing = [
        f for f in ("per_device_batch_size", "max_target_length", "precision") if getattr(w, f) is None
    ]
    if missing:
        problems.append(f"workload facts unknown: {', '.join(missing)} (pass --config)")
    save = p1.metric("training.checkpoint_save_seconds") if p1 is not None else None
    load = p2.metric("training.checkpoint_load_seconds")
    ok = not problems
    return ResumeLeaf(
        status="verified" if ok else "unverified",
        precision=w.precision,
        workload=w,
        resume=resume,
        resume_comparison=comparison,
        last_verified=run_date(p2, res, src.label) if ok else None,
        metrics=ResumeMetrics(
            checkpoint_save_seconds=save.value if save is not None and save.value is not None else None,
            checkpoint_load_seconds=load.value if load is not None and load.value is not None else None,
        ),
        expected_result=(
            "The run restored from checkpoint k resumes at step k+1 and its losses at every step it shares "
            f"with an uninterrupted run (sentinels [k+1, last]) match within {SENTINEL_ATOL:g} + "
            f"{SENTINEL_RTOL:g} x |reference| (the checkpoint.resumed and checkpoint.sentinel_losses "
            "verdicts)."
        ),
        result=None if ok else "; ".join(problems),
    )


__all__ = ["resume_leaf"]
