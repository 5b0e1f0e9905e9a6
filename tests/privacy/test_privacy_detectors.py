"""Privacy by construction (issue 15, audit #12/#13, F27): host and domain names, JobSet and Kubernetes
names, Slurm node lists, whole private key blocks, UTF-16/32 files, addresses in file names, secret values
from the environment, learned values, suspects, `--cluster` without the SSH key, and linear patterns."""

from __future__ import annotations

import codecs
import json
import signal
from collections.abc import Iterator
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
    read_cluster_hosts,
    scrub_files,
)

KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)
BODY = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"


def cats(text: str, ctx: PrivacyContext | None = None) -> list[str]:
    return [f.category for f in find_private(text, ctx)]


def scrub(text: str, ctx: PrivacyContext | None = None) -> str:
    return Scrubber(ctx or build_context(environ={})).scrub_text(text)


@pytest.mark.parametrize(
    "text",
    [
        "launching on gpu-node17.corp.acme.com now",
        "svc trainer-0.trainer.ml-team.svc.cluster.local ready",
        "db at db-1.internal:5432",
        "peer worker-0.trainer:8476 up",
        "coordinator wl-x-slice-job-0-0.wl-x:8482",
        "ip-10-0-0-1.ec2.internal joined",
        "MASTER_ADDR=gpu-node01",
        "Hostname: dgx-a100-017",
        "gpu-node02:318901:318901 [0] NCCL INFO Bootstrap",
        "srun: nodes gpu-node[01-04,07]",
        "https://ckpts-team.storage.googleapis.com/x",
    ],
)
def test_host_shaped_tokens_are_private(text: str) -> None:
    assert "host" in cats(text), text


@pytest.mark.parametrize(
    "text",
    [
        "python3 -m maxtext.trainers.pre_train.train",
        "I1130 07:28:34.238979 1 metric_logger.py:265] step",
        "train.main:45 called from absl.app and jax.numpy.float32; jax.distributed.initialize",
        "jax 0.4.35 rocm-6.3.1 orbax-checkpoint 0.6.4 python3.10",
        "https://huggingface.co/meta-llama/Llama-3.1-8B and https://github.com/AI-Hypercomputer/maxtext",
        "pip from https://pypi.org/simple and files.pythonhosted.org; docker.io/rocm/jax; ghcr.io/x/y",
        "https://storage.googleapis.com/ and oauth2.googleapis.com; metadata.google.internal",
        "jobset.sigs.k8s.io/jobset-name and batch.kubernetes.io/job-name keys",
        "see config.yml, base.yml, e.g. the i.e. case; params[0] x[1,2]",
        "completed step: 10, seconds: 1.234, TFLOP/s/device: 123.456, loss: 7.123",
    ],
)
def test_readable_public_text_stays(text: str) -> None:
    assert cats(text) == [], text
    assert scrub(text) == text


def test_a_bucket_under_a_public_storage_name_is_private() -> None:
    out = scrub("a https://storage.googleapis.com/team-ckpts-jdoe/run1 b s3.amazonaws.com/acme-data/x")
    assert "team-ckpts-jdoe" not in out and "acme-data" not in out
    assert out.startswith("a https://storage.googleapis.com/<bucket-1>/run1")


def test_jobset_service_name_is_scrubbed_whole_and_learned() -> None:
    """The audit: `scrub` replaced the pod label and kept the service name, the private job name."""
    text = (
        "peer llama-jd-7-slice-job-0-0.llama-jd-7:8482; workload llama-jd-7 done; "
        "pod llama-jd-7-slice-job-0-1"
    )
    out = scrub(text)
    assert "llama-jd-7" not in out, out
    assert out.startswith("peer <host-1>:8482; workload <job-")


def test_fqdn_teaches_its_short_name() -> None:
    out = scrub("up gpu-a17-10.dc3.acme.net; later gpu-a17-10 died")
    assert out == "up <host-1>; later <host-1> died"


def test_home_path_and_email_teach_the_user() -> None:
    out = scrub("cwd /home/zoltan/x; ran as zoltan; mail kvarga@acme.org from kvarga")
    assert "zoltan" not in out and "kvarga" not in out, out


def test_slurm_node_list_teaches_every_node() -> None:
    text = (
        "SLURM_JOB_NODELIST=gpu-node[01-03]\nsrun: error: gpu-node02: task 1 failed\n"
        "nid[0007-0008] ok nid0008"
    )
    out = scrub(text)
    assert "gpu-node02" not in out and "nid0008" not in out and "gpu-node[" not in out, out


@pytest.mark.parametrize(
    "text",
    [
        KEY,
        json.dumps({"traceback": "Error\n" + KEY + "after"}),  # one line, `\n` escaped
        "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n"
        + BODY
        + "\n"
        + BODY[:40]
        + "\nnext line here\n",
    ],
)
def test_the_whole_private_key_block_goes(text: str) -> None:
    out = scrub(text)
    assert BODY[:20] not in out and "PRIVATE KEY" not in out, out
    assert "<private-key>" in out
    assert "key" in cats(text)


def test_key_reproduction_from_the_audit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pk.txt").write_text(KEY)
    assert main(["scrub", str(tmp_path / "pk.txt"), "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "pk.txt").read_text() == "<private-key>\n"
    assert main(["check-private", str(tmp_path / "pk.txt")]) == 1
    assert capsys.readouterr().out.splitlines()[-1].endswith("pk.txt:1:1 key")


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-be", "utf-32", "utf-32-be", "utf-8-sig"])
def test_bom_files_are_decoded_scrubbed_and_re_encoded(tmp_path: Path, codec: str) -> None:
    token = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
    src = tmp_path / "in" / "f.log"
    src.parent.mkdir()
    bom = {"utf-16-be": codecs.BOM_UTF16_BE, "utf-32-be": codecs.BOM_UTF32_BE}.get(codec, b"")
    src.write_bytes(bom + f"ip 10.20.30.40 {token}\n".encode(codec))
    assert [ln.rsplit(" ", 1)[1] for ln in check_files([src])] == ["ip", "token"]
    report = scrub_files([src], build_context(environ={}), out_dir=tmp_path / "out")
    assert report.clean, report.leftovers
    data = (tmp_path / "out" / "f.log").read_bytes()
    assert data == bom + "ip <ip-1> <token>\n".encode(codec)  # the same encoding and byte order mark


def test_utf16_without_a_bom_is_flagged_not_passed(tmp_path: Path) -> None:
    f = tmp_path / "f.log"
    f.write_bytes("ip 10.20.30.40 here\n".encode("utf-16-le"))
    lines = check_files([f])
    assert any(ln.endswith("ip (in UTF-16-LE text)") for ln in lines), lines
    report = scrub_files([f], build_context(environ={}), out_dir=tmp_path / "o")
    assert report.left_out and not list((tmp_path / "o").rglob("f.log"))  # not text: left out, listed
    assert not scrub_files([f], build_context(environ={}), in_place=True).clean


def test_addresses_in_file_names(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    (d / "10.20.30.40.log").write_text("x\n")
    (d / "node-gpu-a17.dc3.acme.net.log").write_text("y\n")
    assert check_files([d / "10.20.30.40.log"]) == [f"{d / '10.20.30.40.log'}:0:0 ip (in the file name)"]
    report = scrub_files([d], build_context(environ={}), out_dir=tmp_path / "o")
    assert report.clean, report.leftovers
    names = sorted(p.name for p in (tmp_path / "o" / "logs").iterdir())
    assert names == ["<host-1>.log", "<ip-1>.log"], names


def test_secret_values_from_the_environment_and_token_files(tmp_path: Path) -> None:
    (tmp_path / "hf").write_text("opaque-secret-value-77\n")
    env = {
        "WANDB_API_KEY": "0a1b2c3d4e5f60718293",
        "MY_DB_PASSWORD": "hunter2hunter2",
        "TOKENIZERS_PARALLELISM": "false-ish-value",
        "HF_TOKEN_PATH": str(tmp_path / "hf"),
        "HOME": "/home/nobody-here",
    }
    ctx = build_context(environ=env)
    out = scrub("k 0a1b2c3d4e5f60718293 p hunter2hunter2 t opaque-secret-value-77 x false-ish-value", ctx)
    assert out == "k <token> p <token> t <token> x false-ish-value"
    assert "hunter2" not in repr(ctx)


def test_scrub_cluster_needs_no_key_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """F27: `scrub --cluster` refused to run because the SSH private key file did not exist."""
    cl = tmp_path / "cluster.json"
    cl.write_text(
        json.dumps(
            {
                "username": "bob",
                "priv_key_file": str(tmp_path / "no-such-key"),
                "node_dict": {"mi300-rack4-07": {"bmc_ip": "10.9.9.9"}, "bob@lab-b2:2222": {}},
            }
        )
    )
    assert read_cluster_hosts(cl)["hosts"] == ["mi300-rack4-07", "10.9.9.9", "lab-b2"]
    f = tmp_path / "a.log"
    f.write_text("on mi300-rack4-07 and lab-b2 as bob\n")
    assert main(["scrub", str(f), "--out", str(tmp_path / "o"), "--cluster", str(cl)]) == 0
    out = capsys.readouterr().out
    assert "clean  the re-check found no private value" in out
    assert (tmp_path / "o" / "a.log").read_text() == "on <host-1> and <host-2> as <user>\n"
    cl.write_text("[1]")
    assert main(["scrub", str(f), "--out", str(tmp_path / "o2"), "--cluster", str(cl)]) == 2


def test_without_cluster_suspects_are_shown_and_clean_is_not_claimed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """F27: bare node names no rule proves private are flagged as suspects, and the wording says what was
    not checked."""
    f = tmp_path / "a.log"
    f.write_text("slurm job 123456 on node mi300-rack4-07 via gpu-node17\nllama2-7b utf-8 x86-64 bf16\n")
    assert [x.col for x in find_suspects(f.read_text())] == [26, 45]
    assert main(["check-private", str(f)]) == 1
    cap = capsys.readouterr()
    assert cap.out.splitlines() == [
        f"{f}:1:11 job",
        f"{f}:1:26 suspect host-like name",
        f"{f}:1:45 suspect host-like name",
    ]
    assert "not known without --cluster" in cap.err
    assert main(["scrub", str(f), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "suspect host-like name" in out and "clean of known patterns" in out
    assert "check the 2 suspect(s) above" in out and "re-check found no private value" not in out


@pytest.fixture
def hang_guard() -> Iterator[None]:
    """Turns a hang into a failure: before the fix these inputs took hours (quadratic backtracking); the
    limit is a guard against that, far above the linear time (benchmarks/privacy_redos.py measures it)."""

    def boom(*_: object) -> None:
        raise TimeoutError("privacy patterns did not finish: quadratic backtracking")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(240)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("unit", ["a-", "a.", "eyJ", "Ab0_-z", "a@", "a:", "/a", "x[1-"])
def test_long_hostile_lines_finish(unit: str, hang_guard: None) -> None:
    line = unit * (256 * 1024 // len(unit))
    find_private(line)
    find_private(line, mode="card")
    Scrubber().scrub_text(line)
    find_suspects(line)


def test_bad_inputs_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Audit #18 for scrub/check-private: a pipe, an --out under a file, a cluster file nested too deep."""
    import os

    f = tmp_path / "a.log"
    f.write_text("10.1.2.3\n")
    (tmp_path / "afile").write_text("x")
    os.mkfifo(tmp_path / "pipe")
    deep = tmp_path / "deep.json"
    deep.write_text('{"a":' + "[" * 3000 + "]" * 3000 + "}")
    cases = [
        (["scrub", str(f), "--out", str(tmp_path / "afile" / "sub")], "cannot write"),
        (["check-private", str(tmp_path / "pipe")], "not a regular file or folder"),
        (["scrub", str(f), "--out", str(tmp_path / "o"), "--cluster", str(deep)], "not valid JSON"),
    ]
    for argv, msg in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_a_module_first_label_does_not_hide_a_host_under_a_domain_ending() -> None:
    """`os.a0.com` (found by the scrubber fuzz) is a host; `os.path.join` and `np.linalg.norm` stay code."""
    from cvs_tui.core.privacy.hosts import host_kind

    assert host_kind("os.a0.com", False) == "host"
    assert host_kind("jax.example.org", False) == "host"
    assert host_kind("os.path.join", False) is None
    assert host_kind("np.linalg.norm", False) is None
