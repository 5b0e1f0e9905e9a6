"""Audit 3 H1, M4, M10, L17: credentials of every shape the audit listed are scrubbed (`scrub`, `--public`)
and flagged (`check-private`); a PEM BEGIN and END in different JSON strings keep the JSON between them;
StatefulSet pods, namespaces, InfiniBand GUIDs and Windows user paths are names to scrub; a secret that
survives anywhere fails the export; a leftover names the public copy, not a scratch folder."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from cvs_tui.cli.main import main
from cvs_tui.cli.publish import publish
from cvs_tui.core.privacy import PrivacyContext, Scrubber, find_private, scrub_files
from cvs_tui.core.privacy.secret_rules import RULES

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "maxtext"
CONFIG = ROOT / "configs" / "local" / "cpu_jaxmaxtext_tiny-llama_single.json"
KEYB = "MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM2k7c7ObJf9e8CK8Tq8k3xYkB0pP4qW0dN1sT"

# (audit case id, log line, the parts that must not survive): the audit's own reproductions
CASES = [
    ("PV10", "trainer pod maxtext-llama70b-worker-12 ready", ["maxtext-llama70b-worker-12", "llama70b"]),
    ("PV12", "kubectl logs -n ml-research-team pod/x", ["ml-research-team"]),
    (
        "PV23",
        "https://s3.amazonaws.com/corpbkt/obj?X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20240101&X-Amz-Signature="
        "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7",
        ["AKIAIOSFODNN7EXAMPLE", "5d672d79c15b13162d9279b0855cfba"],
    ),
    (
        "PV24",
        "https://acmestore01.blob.core.windows.net/ckpt/x?sv=2022-11-02&sig=AbCdEf0123456789xyzXYZ%2BAbCd%3D",
        ["acmestore01", "AbCdEf0123456789xyz"],
    ),
    (
        "PV26",
        "DefaultEndpointsProtocol=https;AccountName=acmestore02;AccountKey=Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA==;"
        "EndpointSuffix=core.windows.net",
        ["acmestore02", "Zm9vYmFyYmF6cXV4MTIz"],
    ),
    ("PV31", "creds ASIAY34FZKBOKMUTVV7A", ["ASIAY34FZKBOKMUTVV7A"]),
    ("PV32", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ["wJalrXUtnFEMI"]),
    ("PV33", "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ["wJalrXUtnFEMI"]),
    (
        "PV38",
        "PuTTY-User-Key-File-3: ssh-ed25519\nPrivate-Lines: 1\n"
        "AAAAIBtYZLRj4cG5QmD3k8ZQm1mkmY9kxbAfH0yBm5PjFvAb",
        ["AAAAIBtYZLRj4cG5QmD3k8"],
    ),
    ("PV42", "CI_JOB_TOKEN glpat-AbCdEfGhIjKlMnOpQrSt", ["glpat-AbCdEf"]),
    ("PV43", "client OPENAI sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", ["sk-proj-AbCdEf"]),
    ("PV44", "maps AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY", ["AIzaSyD-9tSrke72"]),
    ("PV45", "wandb login 0123456789abcdef0123456789abcdef01234567", ["0123456789abcdef0123"]),
    ("PV49", "header Authorization: Basic YWxpY2U6UzNjcmV0UHc=", ["YWxpY2U6UzNjcmV0UHc"]),
    ("PV50", "Cookie: session=9f8e7d6c5b4a39281706f5e4d3c2b1a0", ["9f8e7d6c5b4a3928"]),
    ("PV51", "docker login -u alice -p D0ckerPw! registry.acme-corp.com", ["D0ckerPw"]),
    ("PV55", "port guid 0x506b4b0300c8d1e2 mac 50:6b:4b:c8:d1:e2", ["506b4b0300c8d1e2", "50:6b:4b:c8:d1:e2"]),
    ("PV57", r"saved to C:\Users\carol\ckpt", ["carol"]),
    ("PV64", "key sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-AbCdEf", ["sk-ant-api03-AbCd"]),
    (
        "PV65",
        "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
        ["XXXXXXXXXXXXXXXXXXXXXXXX"],
    ),
]


@pytest.mark.parametrize(("cid", "line", "secrets"), CASES, ids=[c[0] for c in CASES])
def test_scrub_removes_the_audited_shape(
    cid: str, line: str, secrets: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """H1/M10 (PV10-PV65): each shape is flagged by check-private and gone after scrub, which exits 0."""
    log = tmp_path / f"{cid}.log"
    log.write_text(f"I1130 07:28:26.1 1 x.py:1] {line}\n")
    assert main(["check-private", str(log)]) == 1
    assert main(["scrub", str(log), "--out", str(tmp_path / "o")]) == 0
    out = (tmp_path / "o" / f"{cid}.log").read_text()
    assert [s for s in secrets if s in out] == [], out
    assert find_private(out) == []
    capsys.readouterr()


def test_rules_are_data_with_unique_ids_and_needles() -> None:
    """H1: the detector set is loaded from secret_rules.toml; every rule has an id and a prefilter."""
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids)) and len(ids) >= 25
    for r in RULES:
        assert r.needles and all(n == n.lower() for n in r.needles), r.id


def test_key_named_values_that_are_not_secrets_stay() -> None:
    """H1: the key=value rule leaves numbers, placeholders, references and file locations alone."""
    text = (
        "max_tokens=2048 token_type: bearer_ref hf_token_file: ~/.cache/huggingface/token "
        "password=${DB_PASSWORD} secret: <token> tokenizer_path=/models/tok\n"
    )
    out = Scrubber().scrub_text(text)
    for keep in ("max_tokens=2048", "hf_token_file: ~/.cache", "${DB_PASSWORD}", "tokenizer_path=/models"):
        assert keep in out, out


def test_a_secret_learned_in_one_file_is_found_bare_in_another(tmp_path: Path) -> None:
    """H1 re-check: a secret found by its key in one file is replaced bare elsewhere; a file the
    scrubber cannot rewrite (not text) is left out of a copy, and in place it makes the export fail."""
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.log").write_text(f"AWS_SECRET_ACCESS_KEY={secret}\n")
    (src / "b.log").write_text(f"retrying with {secret} now\n")
    (src / "c.bin").write_bytes(b"\x80\x81\x00junk " + secret.encode() + b"\n")
    report = scrub_files([src], PrivacyContext(), out_dir=tmp_path / "out")
    assert secret not in (tmp_path / "out" / "in" / "b.log").read_text()
    assert report.clean and [Path(x).name for x in report.left_out] == ["c.bin"]
    assert not (tmp_path / "out" / "in" / "c.bin").exists()
    inplace = scrub_files([src], PrivacyContext(), in_place=True)
    assert not inplace.clean
    assert any("c.bin" in line and "token" in line for line in inplace.leftovers), inplace.leftovers


def test_pem_begin_and_end_in_different_json_strings_keep_the_json(tmp_path: Path) -> None:
    """M4 (PV80): BEGIN in one JSON string and END in another: the keys between them survive and the
    output is valid JSON."""
    pem = tmp_path / "pem.json"
    pem.write_text(
        '{\n "text": "bad -----BEGIN OPENSSH PRIVATE KEY-----",\n "count": 3,\n'
        ' "other": "-----END OPENSSH PRIVATE KEY----- x"\n}\n'
    )
    assert main(["scrub", str(pem), "--out", str(tmp_path / "o")]) == 0
    data = json.loads((tmp_path / "o" / "pem.json").read_text())
    assert data["count"] == 3 and data["other"].endswith(" x") and "BEGIN" not in data["text"]


def test_pem_key_lines_as_separate_json_strings_are_scrubbed() -> None:
    """M4: a key whose lines are separate JSON strings (an error record's context) loses its body, and
    the JSON stays valid."""
    doc = json.dumps(
        {
            "context": [
                "E: -----BEGIN OPENSSH PRIVATE KEY-----",
                KEYB,
                KEYB[::-1],
                "-----END OPENSSH PRIVATE KEY-----",
            ]
        }
    )
    out = Scrubber().scrub_text(doc)
    assert KEYB[:20] not in out and KEYB[::-1][:20] not in out
    json.loads(out)


def _public_run(tmp_path: Path, extra: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CVS_TUI_MAXTEXT_PYTHON", "/usr/bin/python3")
    node_log = tmp_path / "node0.log"
    node_log.write_text((FIX / "single_20steps.log").read_text() + extra)
    key = json.loads(CONFIG.read_text())["runs"][0]
    out = tmp_path / "out"
    rc = main(["analyze", str(CONFIG), "--logs", str(node_log), "--run", key, "--out", str(out), "--public"])
    assert rc in (0, 1)
    return out / "public"


def test_public_export_of_every_audited_shape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """H1 (PB01): every shape above as an error record through analyze --public: nothing survives in
    public/, and public/results.json is valid JSON."""
    extra = "".join(
        f"E1130 07:28:35.{i:06d} 1 x.py:1] ValueError: {line}\n" for i, (_, line, _) in enumerate(CASES)
    )
    public = _public_run(tmp_path, extra, monkeypatch)
    err = capsys.readouterr().err
    assert "private value left" not in err, err
    text = "".join(f.read_text(errors="replace") for f in public.rglob("*") if f.is_file())
    assert [cid for cid, _, secrets in CASES if any(s in text for s in secrets)] == []
    json.loads((public / "results.json").read_text())


def test_public_export_with_pem_begin_and_end_on_separate_error_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """M4 (PV81): BEGIN on one error line, END two lines later: public/results.json is valid JSON and
    holds no key line."""
    extra = (
        "E1130 07:28:35.000001 1 x.py:1] ValueError: key -----BEGIN OPENSSH PRIVATE KEY-----\n"
        f"{KEYB}\n"
        "E1130 07:28:35.000002 1 x.py:1] ValueError: end -----END OPENSSH PRIVATE KEY-----\n"
    )
    public = _public_run(tmp_path, extra, monkeypatch)
    capsys.readouterr()
    json.loads((public / "results.json").read_text())
    for f in public.rglob("*"):
        if f.is_file():
            assert KEYB[:24] not in f.read_text(errors="replace"), f


def test_public_leftover_names_the_public_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """L17 (PB01): a leftover names the file in <run>/public, not the scratch folder it was checked in."""
    monkeypatch.setenv("HOME", str(tmp_path))
    run = tmp_path / "run"
    run.mkdir()
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    (run / "node0.log").write_text(f"AWS_SECRET_ACCESS_KEY={secret}\n")
    (run / "blob.bin").write_bytes(b"\x80\x81\x00 " + secret.encode())
    args = argparse.Namespace(public=True, deny_term=[], denylist=[])
    assert publish(run, args) is False
    err = capsys.readouterr().err
    assert f"{run / 'public' / 'blob.bin'}:" in err and "tmp" not in err.replace(str(tmp_path), "")


def test_a_big_node_list_is_found_through_one_shape(tmp_path: Path) -> None:
    """RB05/RB08 (M9): the 4096 names `gpu[0001-4096]` teaches are found by one pattern and a table (each
    name was a search of the whole text); every learned name is replaced, a name outside the list stays."""
    text = (
        "nodes gpu[0001-4096] allocated\n" + "step ok\n" * 100 + "gpu0077 slow; gpu4096 ok; gpu5000 spare\n"
    )
    out = Scrubber().scrub_text(text)
    last = out.splitlines()[-1]
    assert "gpu0077" not in last and "gpu4096" not in last and "gpu5000 spare" in last
    assert re.fullmatch(r"<host-\d+> slow; <host-\d+> ok; gpu5000 spare", last), last
