"""The privacy corpus (tests/fixtures/privacy): real-shaped GKE/XPK pod logs, Slurm job logs and CVS-style
cluster logs, each with the list of private values it holds. `scrub` must remove every one of them with
no cluster file or deny term given (the detectors alone), `check-private` must find nothing afterwards,
and the public text (MaxText metric lines, module paths, versions, public service names) must survive."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cvs_tui.cli.main import main
from cvs_tui.core.privacy import (
    PrivacyContext,
    Scrubber,
    build_context,
    check_files,
    find_private,
    find_suspects,
    scrub_files,
)

CORPUS = Path(__file__).parents[1] / "fixtures" / "privacy"
NAMES = ("gke_xpk_pod", "slurm_job", "cvs_cluster", "cloud_secrets")


def private_values(name: str) -> list[str]:
    lines = (CORPUS / f"{name}.private.txt").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def test_every_corpus_value_is_really_in_its_log() -> None:
    for name in NAMES:
        text = (CORPUS / f"{name}.log").read_text().lower()
        values = private_values(name)
        assert len(values) >= 10, name
        for v in values:
            assert v.lower() in text, (name, v)


@pytest.mark.parametrize("name", NAMES)
def test_scrub_removes_every_private_value(name: str, tmp_path: Path) -> None:
    report = scrub_files([CORPUS / f"{name}.log"], build_context(environ={}), out_dir=tmp_path)
    assert report.clean, report.leftovers
    out = (tmp_path / f"{name}.log").read_text()
    for v in private_values(name):
        assert v.lower() not in out.lower(), (name, v)
    assert check_files([tmp_path / f"{name}.log"], PrivacyContext()) == []
    # the metric lines keep their numbers
    for line in (CORPUS / f"{name}.log").read_text().splitlines():
        if "completed step:" in line:
            assert line in out.splitlines()


def test_the_whole_corpus_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "public"
    assert main(["scrub", str(CORPUS), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    # no cluster file: the output says what was not checked instead of "clean"
    assert "clean of known patterns" in printed and "not known without --cluster" in printed
    assert "the re-check found no private value" not in printed
    for name in NAMES:
        text = (out / "privacy" / f"{name}.log").read_text().lower()
        assert [v for v in private_values(name) if v.lower() in text] == []
    assert main(["check-private", str(out / "privacy" / "gke_xpk_pod.log")]) == 0
    assert main(["check-private", str(out / "privacy" / "slurm_job.log")]) == 0
    assert main(["check-private", str(out / "privacy" / "cvs_cluster.log")]) == 0
    assert main(["check-private", str(out / "privacy" / "cloud_secrets.log")]) == 0


def test_one_placeholder_per_value_across_the_corpus(tmp_path: Path) -> None:
    scrub_files([CORPUS], build_context(environ={}), out_dir=tmp_path)
    slurm = (tmp_path / "privacy" / "slurm_job.log").read_text()
    # the node list teaches gpu-node01..04: MASTER_ADDR, the NCCL prefix and SLURMD_NODENAME agree
    node01 = re.search(r"SLURMD_NODENAME=(<host-\d+>)", slurm)
    assert node01 and f"MASTER_ADDR={node01[1]}" in slurm and slurm.count(node01[1]) == 3
    job = re.search(r"SLURM_JOB_ID=(<job-\d+>)", slurm)
    assert job and f"STEP {job[1]}.0" in slurm and f"slurm-{job[1]}.out" in slurm
    gke = (tmp_path / "privacy" / "gke_xpk_pod.log").read_text()
    # the JobSet name is learned from its pods: the workload line loses it too
    assert re.search(r"workload <job-\d+> in namespace", gke)
    cvs = (tmp_path / "privacy" / "cvs_cluster.log").read_text()
    host = re.search(r"connecting to (<host-\d+>) as (<user[-\d]*>)", cvs)
    assert host and f"rank 0 on {host[1]} step" in cvs  # short name -> the FQDN's placeholder
    assert f"--name cvs-{host[2]}-jax" in cvs  # the SSH user, learned from /home/<user>


def test_public_text_survives_unchanged(tmp_path: Path) -> None:
    text = (CORPUS / "public.log").read_text()
    assert find_private(text) == []
    assert find_suspects(text) == []
    assert Scrubber(build_context(environ={})).scrub_text(text) == text
    report = scrub_files([CORPUS / "public.log"], build_context(environ={}), out_dir=tmp_path)
    assert report.clean and report.suspects == []
    assert (tmp_path / "public.log").read_text() == text


def test_check_private_on_the_raw_corpus_names_categories_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-private", str(CORPUS)]) == 1
    out = capsys.readouterr().out
    body = "\n".join(ln.split(" ", 1)[1] for ln in out.splitlines())
    for name in NAMES:
        for v in private_values(name):
            assert v.lower() not in body.lower(), v
    for cat in ("host", "ip", "job", "bucket", "email", "user", "home", "token", "key"):
        assert re.search(rf"^{cat}\b", body, re.M), cat
