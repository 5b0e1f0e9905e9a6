"""RunFolder: the one reader of a run folder's layout, and what a malformed folder means."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from _config_samples import write_config

from cvs_tui.core.cluster import cluster_from_nodes_arg
from cvs_tui.core.config.loader import load_config
from cvs_tui.core.errors import UserError
from cvs_tui.core.plan import Plan, build_plan
from cvs_tui.core.run_folder import RunFolder, node_logs_in


def _plan(tmp_path: Path) -> Plan:
    loaded = load_config(write_config(tmp_path), user="alice")
    cluster = cluster_from_nodes_arg("h1,h2", user="alice")
    return build_plan(loaded, cluster, out_dir=tmp_path / "run", run_id="RID")


def test_write_plan_round_trips_and_gives_slugs_and_hosts(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    folder = RunFolder(tmp_path / "run")
    path = folder.write_plan(plan)
    assert path == folder.plan_path and stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert folder.plan_dict() == json.loads(json.dumps(plan.display_dict()))
    assert folder.hosts() == ["h1", "h2"]
    slugs = folder.slugs()
    assert slugs and all(folder.run_log(key, 1).parent.name == slug for key, slug in slugs.items())
    assert not [p.name for p in folder.path.iterdir() if p.name.endswith(".tmp")]


def test_without_a_plan_nothing_is_guessed(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    assert folder.plan_dict() is None and folder.slugs() == {} and folder.hosts() is None
    assert folder.plan_info() == {}
    assert folder.run_log("BS8 SL2k", 0) == tmp_path / "logs" / "BS8_SL2k" / "node0.log"
    assert not folder.looks_like_run()


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{not json", r"plan\.json: not JSON \(line 1"),
        ("[1, 2]", r"plan\.json: not a cvs-tui plan"),
        ('{"runs": {"a": 1}}', r"plan\.json: runs: a list is expected"),
        ('{"runs": [{"key": "A"}]}', r"plan\.json: runs\[0\]: a string key and slug"),
        (
            '{"runs": [{"key": "A", "slug": "../.."}]}',
            r"plan\.json: runs\[0\]\.slug '\.\./\.\.' names no folder",
        ),
    ],
)
def test_a_malformed_plan_is_one_user_error_naming_the_file(tmp_path: Path, text: str, match: str) -> None:
    (tmp_path / "plan.json").write_text(text)
    folder = RunFolder(tmp_path)
    with pytest.raises(UserError, match=match) as info:
        folder.slugs()
    assert str(tmp_path / "plan.json") in info.value.problems[0]


def test_bad_nodes_are_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "plan.json").write_text(json.dumps({"nodes": [{"host": "h"}]}))
    with pytest.raises(UserError, match=r"plan\.json: nodes: a list of \{rank, host\}"):
        RunFolder(tmp_path).hosts()


def test_a_slug_cannot_leave_the_folder(tmp_path: Path) -> None:
    (tmp_path / "plan.json").write_text(json.dumps({"runs": [{"key": "R", "slug": "../../x"}]}))
    folder = RunFolder(tmp_path)
    path = folder.run_log("R", 0)
    assert path == tmp_path / "logs" / "x" / "node0.log"
    assert path.resolve().is_relative_to(tmp_path.resolve())
    assert folder.node_log("../../etc", 3) == tmp_path / "logs" / "etc" / "node3.log"
    with pytest.raises(ValueError):
        folder.node_log("..", 0)
    with pytest.raises(ValueError):
        folder.node_log("R", -1)


def test_node_logs_by_rank_then_by_name(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    assert folder.node_logs() == {}
    ranked = tmp_path / "logs" / "R"
    ranked.mkdir(parents=True)
    for rank in (10, 2, 0):
        (ranked / f"node{rank}.log").write_text("x\n")
    (ranked / "other.log").write_text("")
    named = tmp_path / "logs" / "Q"
    named.mkdir()
    for name in ("b.log", "a.log", "notes.txt"):
        (named / name).write_text("")
    logs = folder.node_logs()
    assert list(logs) == ["Q", "R"]
    assert [p.name for p in logs["R"]] == ["node0.log", "node2.log", "node10.log"]
    assert [p.name for p in logs["Q"]] == ["a.log", "b.log"]
    assert node_logs_in(ranked) == logs["R"]


def test_results_read_through_one_reader(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    with pytest.raises(UserError, match=r"results\.json: no such results file"):
        folder.results()
    folder.results_path.write_text("{}")
    with pytest.raises(UserError, match=r"results\.json: not a cvs-tui results file"):
        folder.results()
    assert folder.looks_like_run()


def test_attach_requires_the_events_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a directory"):
        RunFolder(tmp_path / "nope").require_events()
    with pytest.raises(UserError, match=r"events\.jsonl: not found"):
        RunFolder(tmp_path).require_events()
    (tmp_path / "events.jsonl").write_text("")
    assert RunFolder(tmp_path).require_events() == tmp_path / "events.jsonl"
