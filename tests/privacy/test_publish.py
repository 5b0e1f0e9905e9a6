"""`--public`: analyze writes a scrubbed copy of every artefact next to the originals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cvs_tui.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "maxtext"
CONFIG = ROOT / "configs" / "local" / "cpu_jaxmaxtext_tiny-llama_single.json"
SECRETS = ["gpu-node-17.corp.example", "10.42.7.19", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "alice"]


def test_analyze_public_copy_has_no_private_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CVS_TUI_MAXTEXT_PYTHON", "/usr/bin/python3")
    log = (FIX / "single_20steps.log").read_text()
    # a warning-level signature (never fails a run) whose record and context carry the private values
    noisy = (
        f"I1130 06:52:46.000000 1 distributed.py:211] Connecting to JAX distributed service on "
        f"{SECRETS[0]}:1234 ({SECRETS[1]})\n"
        f"E1130 06:52:46.000001 1 rendezvous.cc:10] This thread has been waiting for `{SECRETS[0]}` for "
        f"10 seconds and may be stuck; token {SECRETS[2]} in /home/{SECRETS[3]}/models\n"
    )
    node_log = tmp_path / "node0.log"
    node_log.write_text(noisy + log)
    cfg = json.loads(CONFIG.read_text())
    key = cfg["runs"][0]
    out = tmp_path / "out"
    rc = main(
        ["analyze", str(CONFIG), "--logs", str(node_log), "--run", key, "--out", str(out), "--public",
         "--deny-term", SECRETS[0]]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert rc in (0, 1), captured.err
    public = out / "public"
    assert (public / "results.json").exists() and (public / "report.html").exists()
    originals = (out / "results.json").read_text()
    assert SECRETS[0] in originals  # the run folder keeps the originals
    for f in public.rglob("*"):
        if f.is_file():
            text = f.read_text(errors="replace")
            for s in SECRETS:
                assert s not in text, f"{s} left in {f}"
    json.loads((public / "results.json").read_text())  # still valid JSON
    shutil.rmtree(out)
