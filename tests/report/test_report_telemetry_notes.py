"""report.html and summary.md say per node what its latest GPU sample could not read, its active
throttle reasons and a PCIe link below its maximum, as warnings (the run's verdict unchanged), the
same lines the health screen prints; ``--public`` copies keep the node index, never the host. The
telemetry is recorded ``nvidia-smi -q`` output (tests/fixtures/smi/), a test double for GPU hardware
this machine lacks."""

from __future__ import annotations

import html
from pathlib import Path

from _analysis_samples import load_local, sample_results

from cvs_tui.cli.main import main
from cvs_tui.core.health.nvidia_smi import parse_nvidia_smi_q
from cvs_tui.core.report import write_reports
from cvs_tui.core.results import GpuSampleRecord, NodeHealthRecord, write_results

SMI = Path(__file__).parents[1] / "fixtures" / "smi"
HOST = "gpu-rack7-n02.cluster.example.net"
WHY = "(GPU says N/A or Not Supported to nvidia-smi)"
LINES = [
    "node 2 GPU 1: clocks throttled (SW power cap)",
    "node 2 GPU 1: PCIe link 2.5 GT/s x8, below its maximum 8 GT/s x16",
    f"not readable on node 2: ecc.*, retired_pages.*, remapped_rows.* {WHY}",
]


def _results(tmp_path: Path):
    res = sample_results(load_local(tmp_path / "", steps=20))
    samples = parse_nvidia_smi_q((SMI / "nvidia-smi-q-rtx2080.txt").read_text())
    res.node_health = [
        NodeHealthRecord(
            rank=2,
            host=HOST,
            state="ok",
            telemetry_tool="nvidia-smi",
            telemetry_last=[
                GpuSampleRecord(**{k: getattr(s, k) for k in GpuSampleRecord.model_fields}) for s in samples
            ],
        )
    ]
    return res


def test_html_and_markdown_print_the_notes_as_warnings(tmp_path: Path) -> None:
    res = _results(tmp_path)
    assert res.passed
    paths = write_reports(res, tmp_path / "out")
    page = html.unescape(paths["html"].read_text())
    md = paths["md"].read_text()
    for line in LINES:
        assert f"<li>warning: {line}</li>" in page
        assert f"- warning: {line}\n" in md
    assert md.startswith("## ✅ PASS") and HOST in page  # the private report names it; public copies not


def test_public_copy_keeps_the_notes_and_drops_the_host(tmp_path: Path) -> None:
    src = write_results(_results(tmp_path), tmp_path / "r" / "results.json")
    assert main(["report", str(src), "--public"]) == 0
    public = tmp_path / "r" / "public"
    page = html.unescape((public / "report.html").read_text())
    md = (public / "summary.md").read_text()
    for text in (page, md):
        assert HOST not in text
        assert all(line in text for line in LINES)
