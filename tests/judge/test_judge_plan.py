"""The plan is the judge's only input: each planned run carries its judge spec, plan.json reads back as a
Plan, and analyze judges a run folder with the plan it was run with."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from _analysis_samples import FIXTURES, load_local, plan_of

from cvs_tui.core.judge.checkpoint import loss_agreement
from cvs_tui.core.judge.format import format_number
from cvs_tui.core.plan import Plan
from cvs_tui.core.sources.inputs import plan_for, read_plan
from cvs_tui.core.sources.offline import analyze_paths

KEY = "BS=2,PRECISION=BF16,SL=128"


def test_each_run_carries_what_judging_it_needs(tmp_path: Path) -> None:
    def gate(doc: dict) -> None:
        doc["checkpoint_resume"]["max_save_seconds"] = 0.05
        doc["checkpoint_resume"]["max_load_seconds"] = 5.0

    plan = plan_of(load_local(tmp_path, steps=12, runs=[KEY], mutate=gate))
    sweep, smoke, p1, p2, ref = (plan.run(k) for k in (KEY, "SMOKE", "CKPT-1", "CKPT-2", "CKPT-REF"))
    assert sweep.judge.cell_key == KEY and sweep.judge.cell == sweep.threshold_cell
    assert sweep.judge.enforce is plan.enforce_thresholds
    assert smoke.judge.cell_key is None and not smoke.judge.enforce and not smoke.judge.loss_curve.enforce
    assert list(p1.judge.extra_specs) == ["training.checkpoint_save_seconds"] and p1.judge.checkpointing
    assert list(p2.judge.extra_specs) == ["training.checkpoint_load_seconds"]
    assert not ref.judge.checkpointing and ref.judge.extra_specs == {}
    # one recipe: the checkpoint runs share the reference's LR schedule
    assert {r.maxtext_config["learning_rate_schedule_steps"] for r in (p1, p2, ref)} == {12}
    # the local config trains in float32 (its dtype), whatever its keys say: MFU and the card use fp32
    assert all(r.judge.gpu_name == plan.gpu_name and r.judge.precision == "fp32" for r in plan.runs)


def test_plan_json_reads_back_as_the_plan(tmp_path: Path) -> None:
    plan = plan_of(load_local(tmp_path, steps=12, runs=[KEY]))
    back = Plan.model_validate(json.loads(json.dumps(plan.display_dict())))
    assert [r.judge for r in back.runs] == [r.judge for r in plan.runs]


def test_analyze_judges_a_run_folder_with_its_own_plan(tmp_path: Path) -> None:
    loaded = load_local(tmp_path, steps=20, runs=[KEY])
    folder = tmp_path / "run"
    (folder / "logs" / loaded.runs[0].slug).mkdir(parents=True)
    shutil.copy(FIXTURES / "single_20steps.log", folder / "logs" / loaded.runs[0].slug / "node0.log")
    assert read_plan(folder) is None  # no plan.json: the config's plan
    assert plan_for(loaded, [folder]).config_path == str(loaded.path)
    stored = plan_of(loaded).model_copy(update={"run_id": "the-run", "enforce_thresholds": False})
    (folder / "plan.json").write_text(json.dumps(stored.display_dict()))
    assert plan_for(loaded, [folder]).run_id == "the-run"
    assert analyze_paths(loaded, [folder]).enforce_thresholds is False


def test_one_loss_rule_and_one_formatter() -> None:
    assert loss_agreement(7.0, 7.0 + 0.0699, 1e-6, 0.01)
    assert not loss_agreement(7.0, 7.0 + 1e-6 + 0.0701, 1e-6, 0.01)
    assert format_number(None) == "—" and format_number(None, "fixed", missing="-") == "-"
    assert format_number(1234.5, "grouped", digits=1) == "1,234.5" and format_number(2.0, "metric") == "2"
    assert (
        format_number(12345.0, "rate") == "12.3k"
        and format_number(0.1234, "compare", unit="loss") == "0.1234"
    )
