"""Health signatures against real kernel lines (tests/fixtures/health/kernel_lines.tsv, with sources)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cvs_tui.core.events import Severity
from cvs_tui.core.health.signatures import SIGNATURES, match_message

TSV = Path(__file__).parents[1] / "fixtures" / "health" / "kernel_lines.tsv"


def _rows() -> list[tuple[str, str, str]]:
    rows = []
    for raw in TSV.read_text().splitlines():
        if not raw.strip() or raw.startswith("#"):
            continue
        sig, sev, line, source = raw.split("\t")
        assert source.strip(), f"every sample names its source: {line}"
        rows.append((sig, sev, line))
    return rows


ROWS = _rows()


@pytest.mark.parametrize(("sig", "sev", "line"), ROWS, ids=[f"{r[0]}:{i}" for i, r in enumerate(ROWS)])
def test_real_line_gets_its_signature_and_severity(sig: str, sev: str, line: str) -> None:
    hit = match_message(line)
    if sig == "-":
        assert hit is None, f"{line!r} must not match, got {hit}"
        return
    assert hit is not None, f"{line!r} should match {sig}"
    assert (hit.signature, hit.severity) == (sig, Severity(sev))


def test_every_signature_has_a_real_sample() -> None:
    covered = {r[0] for r in ROWS}
    missing = (
        {s.name for s in SIGNATURES}
        - covered
        - {"kernel_panic", "rcu_stall", "amdgpu_reset_failed", "amdgpu_init_error"}
    )
    assert not missing, f"signatures without a real sample line: {sorted(missing)}"


def test_xid_detail_names_code_and_device() -> None:
    hit = match_message("NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.")
    assert hit is not None and hit.detail == "Xid 79 (GPU has fallen off the bus) on PCI 0000:44:00"


def test_one_record_gives_one_finding_first_signature_wins() -> None:
    # the Xid line also contains "GPU has fallen off the bus": the Xid signature comes first
    hit = match_message("NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.")
    assert hit is not None and hit.signature == "nvidia_xid"


def test_ras_zero_count_and_aer_non_fatal() -> None:
    assert match_message("amdgpu 0000:0b:00.0: 0 uncorrectable hardware errors detected in umc block") is None
    hit = match_message("pcieport 0000:00:02.0: AER: Uncorrected (Non-Fatal) error received: 0000:02:00.0")
    assert hit is not None and hit.severity is Severity.WARNING
