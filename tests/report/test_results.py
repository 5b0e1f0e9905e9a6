"""results.json: versioned, round-trips, atomic, and bad files are clear one-line errors."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from _analysis_samples import load_local, sample_results

from cvs_tui.core.errors import UserError
from cvs_tui.core.results import SCHEMA_VERSION, Results, load_results, write_results


def test_round_trip_and_schema_version(tmp_path: Path) -> None:
    res = sample_results(load_local(tmp_path), fail=True)
    p = write_results(res, tmp_path / "out" / "results.json")
    data = json.loads(p.read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["tool"] == "cvs-tui" and data["tool_version"]
    # NaN never reaches JSON: the NaN step has loss null and its text
    bad = data["runs"][1]
    nan_steps = [s for s in bad["nodes"][0]["steps"] if s["loss_text"]]
    assert nan_steps and all(s["loss"] is None and s["loss_text"] == "nan" for s in nan_steps)
    constants: list[str] = []
    json.loads(p.read_text(), parse_constant=constants.append)  # NaN/Infinity would land here
    assert constants == []
    back = load_results(p)
    assert back == res
    assert back.passed is False and any("nan" in f for f in back.failures)
    assert stat.S_IMODE(os.stat(p).st_mode) & 0o044  # readable by others, as the umask allows


def test_documented_fields_exist(tmp_path: Path) -> None:
    """docs/results-schema.md names every field of the model (and no stale ones)."""
    doc = (Path(__file__).resolve().parents[2] / "docs/results-schema.md").read_text()
    from cvs_tui.core import results as r

    for model in (
        r.Results,
        r.RunRecord,
        r.NodeRecord,
        r.StepPoint,
        r.MetricRecord,
        r.VerdictRecord,
        r.WindowRecord,
        r.ErrorRecord,
        r.Environment,
        r.StageRecord,
        r.EvalPoint,
        r.CheckpointRecord,
        r.LossCurveRecord,
        r.ExcludedStep,
        r.NodeHealthRecord,
        r.HealthFindingRecord,
        r.GpuSampleRecord,
        r.TelemetryPoint,
        r.HostPoint,
        r.StragglerRecord,
    ):
        for name in model.model_fields:
            assert f"`{name}`" in doc, f"{model.__name__}.{name} is not documented"


def test_atomic_write_leaves_no_temp_and_keeps_old_on_failure(tmp_path: Path) -> None:
    res = sample_results(load_local(tmp_path))
    p = write_results(res, tmp_path / "results.json")
    before = p.read_text()

    class Boom(Results):
        def model_dump_json(self, **kw: object) -> str:  # type: ignore[override]
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_results(Boom.model_validate(res.model_dump()), p)
    assert p.read_text() == before
    assert [x.name for x in tmp_path.iterdir() if x.name.startswith(".results")] == []


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("not json", "not JSON"),
        ("[1]", "no schema_version"),
        ('{"schema_version": 999}', "schema_version 999"),
        ('{"schema_version": 1, "tool_version": "x"}', "invalid results file"),
    ],
)
def test_bad_files_are_user_errors(tmp_path: Path, content: str, needle: str) -> None:
    p = tmp_path / "results.json"
    p.write_text(content)
    with pytest.raises(UserError) as exc:
        load_results(p)
    assert needle in exc.value.problems[0] and str(p) in exc.value.problems[0]
    with pytest.raises(UserError, match="no such results file"):
        load_results(tmp_path / "missing.json")
