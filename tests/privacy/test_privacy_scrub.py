"""Scrubbing a whole run folder: real MaxText node logs carrying the node names, user, paths, a job id and a
fake token, plus every artefact `analyze` writes from them. After the scrub, grep finds none of the
private values in any output file, placeholders are the same across files, and the JSON still loads."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from _analysis_samples import FIXTURES, LOCAL_2PROC, write_config

from cvs_tui.cli.main import main
from cvs_tui.core.config.loader import load_config
from cvs_tui.core.privacy import build_context, scrub_run_folder
from cvs_tui.core.results import load_results

KEY = "BS=2,PRECISION=BF16,SL=128"
SLUG = "BS_2_PRECISION_BF16_SL_128"
HOSTS = ("gpu-node-17.corp.example", "gpu-node-18.corp.example")
USER = "alice"
TOKEN = "hf_FAKEabcdefghijklmnopqrstuvwxyz0123456"
PRIVATE = (
    *HOSTS,
    "gpu-node-17",
    "gpu-node-18",
    "corp.example",
    "10.20.30.41",
    "10.20.30.42",
    USER,
    "/home/alice",
    "/lustre/teamx",
    TOKEN,
    "FAKEabcdefghij",
    "cvs-alice",
    "4242424",
    "alice@corp.example.com",
)


def _run_folder(tmp: Path) -> tuple[Path, Path]:
    """A run folder as a live two-node run leaves it, then `analyze --out` into it for every report."""
    token_file = tmp / "hf_token"
    token_file.write_text(TOKEN + "\n")

    def mutate(doc: dict) -> None:
        doc["paths"] = {
            "shared_fs": "/home/{user-id}/cvs",
            "log_dir": "/lustre/teamx/{user-id}/runs",
            "models_dir": "{shared_fs}/models",
            "hf_token_file": str(token_file),
            "temp_dir": "/tmp/{user-id}/jax",
        }
        doc["container"]["name"] = "cvs-alice"

    cfg = write_config(tmp, source=LOCAL_2PROC, steps=20, runs=[KEY], mutate=mutate)
    run = tmp / "run-20261130-1"
    (run / "logs" / SLUG).mkdir(parents=True)
    for rank, (host, ip) in enumerate(zip(HOSTS, ("10.20.30.41", "10.20.30.42"), strict=True)):
        head = (
            f"I1130 07:28:30.000001 1 launch.py:1] rank {rank} on {host} ({ip}) as {USER}, "
            f"coordinator {HOSTS[0]}:12346\n"
            f"I1130 07:28:30.000002 1 launch.py:2] output /lustre/teamx/{USER}/runs/run-20261130-1 "
            f"cache /home/{USER}/cvs/models container cvs-alice-20261130-1\n"
            f"I1130 07:28:30.000003 1 launch.py:3] SLURM_JOB_ID=4242424 on {host.split('.')[0]} "
            f"token {TOKEN} mail {USER}@corp.example.com\n"
        )
        body = (FIXTURES / f"twoproc_node{rank}.log").read_text()
        (run / "logs" / SLUG / f"node{rank}.log").write_text(head + body)
    plan = {
        "user": USER,
        "nodes": [{"host": h, "rank": i} for i, h in enumerate(HOSTS)],
        "coordinator": HOSTS[0],
        "paths": {"shared_fs": f"/home/{USER}/cvs", "log_dir": f"/lustre/teamx/{USER}/runs"},
        "container_name": f"cvs-{USER}-20261130-1",
        "container_args": {"volumes": [f"/lustre/teamx/{USER}:/data"]},
    }
    (run / "plan.json").write_text(json.dumps(plan, indent=2))
    with (run / "events.jsonl").open("w") as fh:
        for i, h in enumerate(HOSTS):
            fh.write(json.dumps({"type": "node_connected", "rank": i, "host": h, "user": USER}) + "\n")
    code = main(["analyze", str(cfg), "--logs", str(run), "--out", str(run)])
    assert code in (0, 1)
    for name in ("results.json", "report.html", "junit.xml", "summary.md"):
        assert (run / name).is_file(), name
    return run, cfg


def _grep(term: str, where: Path) -> list[str]:
    """Files under ``where`` that contain ``term`` (case-insensitive, fixed string), by grep itself."""
    out = subprocess.run(
        ["grep", "-r", "-i", "-l", "-F", "--", term, str(where)], capture_output=True, text=True
    )
    assert out.returncode in (0, 1), out.stderr
    return out.stdout.split()


@pytest.fixture
def run_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.setenv("CVS_TUI_MAXTEXT_PYTHON", "/opt/maxtext-venv/bin/python")
    return _run_folder(tmp_path)


def test_the_folder_really_holds_the_private_values(run_folder: tuple[Path, Path]) -> None:
    run, _ = run_folder
    assert load_results(run / "results.json").hosts == list(HOSTS)
    for term in (HOSTS[0], USER, TOKEN, "/lustre/teamx", "4242424"):
        assert _grep(term, run), term
    assert _grep(HOSTS[1], run / "report.html")


def test_scrub_cli_leaves_no_private_value(run_folder: tuple[Path, Path], tmp_path: Path, capsys) -> None:
    run, cfg = run_folder
    out = tmp_path / "public"
    code = main(["scrub", str(run), "--config", str(cfg), "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "clean" in printed and TOKEN not in printed and USER not in printed
    scrubbed = out / run.name
    files = sorted(p.relative_to(scrubbed).as_posix() for p in scrubbed.rglob("*") if p.is_file())
    assert {"results.json", "report.html", "junit.xml", "summary.md", "plan.json", "events.jsonl"} <= set(
        files
    )
    assert f"logs/{SLUG}/node0.log" in files and f"logs/{SLUG}/node1.log" in files
    for term in PRIVATE:
        assert _grep(term, out) == [], term
    assert main(["check-private", str(out), "--deny-term", USER]) == 0
    # the input is untouched
    assert _grep(TOKEN, run)


def test_placeholders_are_stable_across_files(run_folder: tuple[Path, Path], tmp_path: Path) -> None:
    run, cfg = run_folder
    out = tmp_path / "public"
    assert main(["scrub", str(run), "--config", str(cfg), "--out", str(out)]) == 0
    s = out / run.name
    n0 = (s / "logs" / SLUG / "node0.log").read_text()
    n1 = (s / "logs" / SLUG / "node1.log").read_text()
    head0 = re.search(r"rank 0 on (<host-\d+>) \((<ip-\d+>)\) as (<user>), coordinator (<host-\d+>)", n0)
    head1 = re.search(r"rank 1 on (<host-\d+>) \((<ip-\d+>)\) as (<user>), coordinator (<host-\d+>)", n1)
    assert head0 and head1, (n0[:400], n1[:400])
    h0, h1 = head0[1], head1[1]
    assert h0 != h1 and head0[2] != head1[2]
    assert head1[4] == h0  # the coordinator named in node 1's log is node 0's placeholder
    assert f"SLURM_JOB_ID=<job-1> on {h0} token <token>" in n0  # short name -> the FQDN's placeholder
    assert f"SLURM_JOB_ID=<job-1> on {h1} token <token>" in n1
    res = load_results(s / "results.json")  # still valid JSON in the results schema
    assert res.hosts == [h0, h1] and [n.host for n in res.runs[0].nodes] == [h0, h1]
    plan = json.loads((s / "plan.json").read_text())
    assert [n["host"] for n in plan["nodes"]] == [h0, h1] and plan["user"] == "<user>"
    events = [json.loads(line) for line in (s / "events.jsonl").read_text().splitlines()]
    assert [e["host"] for e in events] == [h0, h1]
    html = (s / "report.html").read_text()
    assert h0.replace("<", "&lt;").replace(">", "&gt;") in html and h0 not in html  # escaped for HTML
    assert h0 not in (s / "junit.xml").read_text() or "&lt;" in (s / "junit.xml").read_text()


def test_scrub_run_folder_in_place(run_folder: tuple[Path, Path]) -> None:
    run, cfg = run_folder
    loaded = load_config(cfg)
    report = scrub_run_folder(run, build_context(loaded=loaded, environ={}))
    assert report.clean, report.leftovers
    assert report.replaced.get("host", 0) >= 4 and report.replaced.get("token", 0) >= 2
    for term in PRIVATE:
        assert _grep(term, run) == [], term
    assert load_results(run / "results.json").hosts[0].startswith("<host-")


def test_check_private_on_the_raw_folder(run_folder: tuple[Path, Path], capsys) -> None:
    run, cfg = run_folder
    assert main(["check-private", str(run), "--config", str(cfg)]) == 1
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines and all(
        re.fullmatch(r".+:\d+:\d+ [a-z @]+( \(matched private term #\d+\))?", ln) for ln in lines
    )
    body = "\n".join(ln.split(" ", 1)[1] for ln in lines)
    for term in PRIVATE:
        assert term.lower() not in body.lower(), term
    assert "token" in body and "host" in body and "job" in body


def test_a_run_folder_copy_leaves_binary_files_out_and_keeps_svg_namespaces(tmp_path: Path) -> None:
    """A run folder's TensorBoard event files cannot be rewritten safely: a copy to --out leaves them out
    and says so, instead of copying them and failing the re-check; the SVG charts' namespace URLs are
    public names, not private hosts."""
    from cvs_tui.core.privacy import scrub_files
    from cvs_tui.core.privacy.hosts import host_kind

    run = tmp_path / "run"
    (run / "work" / "tb").mkdir(parents=True)
    (run / "node0.log").write_text("connected to gpu-node-7.corp.example.com:8476\n")
    (run / "work" / "tb" / "events.out.tfevents.1.gpu-node-7").write_bytes(
        b"\x00\x01\x02binary gpu-node-7.corp.example.com \xff\xfe\x00" * 20
    )
    (run / "chart.svg").write_text(
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:dc="http://purl.org/dc/elements/1.1/"/>\n'
    )
    report = scrub_files([run], out_dir=tmp_path / "out")
    assert report.clean, report.leftovers
    assert len(report.left_out) == 1 and "tfevents" in report.left_out[0]
    assert "gpu-node-7" not in report.left_out[0]  # the name it is listed under is scrubbed too
    assert not any(p.name.startswith("events.out") for p in (tmp_path / "out").rglob("*"))
    assert "http://www.w3.org/2000/svg" in next((tmp_path / "out").rglob("chart.svg")).read_text()
    assert host_kind("www.w3.org", False) == "public"
