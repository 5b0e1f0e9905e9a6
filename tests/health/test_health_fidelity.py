"""Node-health fidelity: trust (user-space records), the probe's clock, linear-time matching, the device
each finding names (and whether the node has it) and one incident per fault.

Case ids (HK.., HL1, HM1, HM2) are those of the reliability audit; the records below are fed to the
follower's own per-record path (``KernelLogFollower.finding``), the one ``findings()`` runs.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from cvs_tui.core.events import Severity
from cvs_tui.core.health.incidents import IncidentGrouper
from cvs_tui.core.health.kmsg import KernelLogFollower, KernelLogUnreadable, parse_probe, parse_record
from cvs_tui.core.health.signatures import device_of, match_message
from cvs_tui.core.runner.nodes.local import LocalTransport

XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."


def _follower(pci: frozenset[str] | None = None) -> KernelLogFollower:
    f = KernelLogFollower(LocalTransport(name="local#0"), node=0, host="n0")
    f.boot_epoch = 1_700_000_000.0
    f.pci_devices = pci
    return f


def _record(facility: int, message: str, seq: int = 11, level: int = 3) -> bytes:
    return f"{facility * 8 + level},{seq},100000000,-;{message}".encode()


# --- trust: records written from user space (audit M5) ------------------------------------------------
@pytest.mark.parametrize(
    ("case", "facility", "message"),
    [
        ("HK02", 1, XID79),
        ("HK03", 3, XID79),
        ("HK04", 1, "Out of memory: Killed process 4242 (python) total-vm:1kB"),
        ("HK05", 1, "Kernel panic - not syncing: fake"),
        ("HK06", 1, "mlx5_core 0000:3b:00.0: mlx5_health_try_recover:338:(pid 1): health compromised"),
    ],
)
def test_user_space_records_never_become_findings(case: str, facility: int, message: str) -> None:
    f = _follower()
    rec = parse_record(_record(facility, message))
    assert rec is not None and rec.facility == facility
    assert match_message(rec.message) is not None  # the text alone would be a finding ...
    assert f.finding(rec) is None, case  # ... but it did not come from the kernel
    assert f.untrusted == 1


def test_kernel_records_still_become_findings() -> None:
    rec = parse_record(_record(0, XID79))
    assert rec is not None
    f = _follower()
    got = f.finding(rec)
    assert got is not None and got.severity is Severity.FATAL and got.device == "0000:3b:00.0"
    assert got.incident == 1 and "incident" not in got.detail
    later = parse_record(_record(0, "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed", seq=12))
    assert later is not None
    again = f.finding(later)
    assert again is not None and again.incident == 1
    assert again.detail.endswith("; incident 1, opened by nvidia_xid")


# --- the probe's clock (HK32-HK34) --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("case", "out"),
    [("HK32", "nan\nnan\n"), ("HK33", "inf\n-inf\n"), ("HK34", "1e308\n-1e308\n"), ("HK34b", "5\n1e300\n")],
)
def test_non_finite_clock_is_unreadable(case: str, out: str) -> None:
    with pytest.raises(KernelLogUnreadable, match="clock is not a time"):
        parse_probe(out, "plain")


def test_probe_reads_the_pci_list() -> None:
    p = parse_probe("10.5\n1700000010.5\npci: 0000:00:00.0 0000:3B:00.0 \n6,7,1,-;x\n", "plain")
    assert p.pci_devices == frozenset({"0000:00:00.0", "0000:3b:00.0"}) and p.last_seq == 7
    assert parse_probe("10.5\n1700000010.5\npci: \n", "plain").pci_devices is None  # /sys unreadable


# --- linear time on long lines (HL1, HM1, HM2) --------------------------------------------------------
@pytest.fixture
def hang_guard() -> Iterator[None]:
    """Turns a hang into a failure: these 1 MB inputs took over 30 s each with the quadratic patterns;
    linear matching takes well under a second (benchmarks/health_redos.py measures it)."""

    def boom(*_: object) -> None:
        raise TimeoutError("kernel-log patterns did not finish: quadratic backtracking")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.mark.usefixtures("hang_guard")
def test_hl1_parse_record_long_line() -> None:
    assert parse_record(b"1,2,3," + b"a" * 1_000_000) is None
    assert parse_record(b"1,2,3,-," + b"a" * 1_000_000) is None
    rec = parse_record(b"1,2,3,-," + b"a" * 1_000_000 + b";msg")
    assert rec is not None and rec.message == "msg"


@pytest.mark.usefixtures("hang_guard")
def test_hm1_xid_prefix_then_junk() -> None:
    assert match_message("NVRM: Xid (PCI:" + "a" * 1_000_000) is None


@pytest.mark.usefixtures("hang_guard")
def test_hm2_mc_status_repeated() -> None:
    assert match_message("MC1_STATUS[" * 100_000) is None


@pytest.mark.usefixtures("hang_guard")
@pytest.mark.parametrize("unit", ["a", "0000:", "amdgpu ", "SXid (PCI:", "ring ", "INFO: task ", "1 "])
def test_every_signature_is_linear_on_long_lines(unit: str) -> None:
    match_message(unit * (256 * 1024 // len(unit)))


# --- the device each finding names, and whether the node has it (F2) ----------------------------------
@pytest.mark.parametrize(
    ("line", "device"),
    [
        ("amdgpu 0000:c5:00.0: amdgpu: GPU reset begin!", "0000:c5:00.0"),
        ("NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.", "0000:44:00.0"),
        ("nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44", "0000:04:00.0"),
        ("pcieport 0000:00:1c.4: AER: Uncorrected (Fatal) error received: id=00e4", "0000:00:1c.4"),
        ("amdgpu 000d:31:00.0: GPU reset begin!", "000d:31:00.0"),
        ("NVRM: GPU at 0000:01:00.0 has fallen off the bus.", "0000:01:00.0"),
        ("amdgpu: Failed to quiesce KFD", None),
        ("SMU: I'm not done with your previous command: SMN_C2PMSG_66:0x00000012", None),
    ],
)
def test_device_of(line: str, device: str | None) -> None:
    assert device_of(line) == device


def test_f2_fatal_line_on_a_missing_device_says_so_and_does_not_fail() -> None:
    rec = parse_record(_record(0, "amdgpu 0000:08:00.0: amdgpu: GPU reset begin!"))
    assert rec is not None
    got = _follower(frozenset({"0000:00:00.0"})).finding(rec)
    assert got is not None and got.severity is Severity.WARNING
    assert "no such PCI device" in got.detail and "0000:08:00.0" in got.detail


def test_f2_fatal_line_on_a_present_device_stays_fatal() -> None:
    rec = parse_record(_record(0, "amdgpu 0000:08:00.0: amdgpu: GPU reset begin!"))
    assert rec is not None
    for pci in (frozenset({"0000:08:00.0"}), None):  # present, or the list could not be read
        got = _follower(pci).finding(rec)
        assert got is not None and got.severity is Severity.FATAL and "PCI 0000:08:00.0" in got.detail


# --- one incident per fault ---------------------------------------------------------------------------
def test_a_reset_burst_is_one_incident_caught_by_its_first_line() -> None:
    lines = [
        (0.0, "amdgpu 0000:c5:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled seq=1, emitted seq=3"),
        (2.2, "amdgpu 0000:c5:00.0: amdgpu: Ring gfx_0.0.0 reset failed"),
        (2.2, "amdgpu 0000:c5:00.0: amdgpu: GPU reset begin!"),
        (4.3, "amdgpu: Failed to quiesce KFD"),
        (4.5, "amdgpu 0000:c5:00.0: amdgpu: MODE2 reset"),
        (5.0, "[drm] VRAM is lost due to GPU reset!"),
    ]
    g = IncidentGrouper()
    got = []
    for t, line in lines:
        hit = match_message(line)
        assert hit is not None, line
        got.append(g.add(hit, t))
    assert len(g.incidents) == 1 and all(i is got[0] for i in got)
    inc = got[0]
    assert inc.first.signature == "amdgpu_ring_timeout" and inc.device == "0000:c5:00.0"
    assert inc.severity is Severity.FATAL and inc.lines == 6


def test_incidents_split_by_device_and_by_quiet_time() -> None:
    g = IncidentGrouper(window=30.0)
    a = match_message(
        "amdgpu 0000:42:00.0: {1}[Hardware Error]: Accelerator Check Architecture events logged"
    )
    b = match_message(
        "amdgpu 0000:55:00.0: {1}[Hardware Error]: Accelerator Check Architecture events logged"
    )
    assert a is not None and b is not None
    first, second = g.add(a, 0.0), g.add(b, 0.1)
    assert first is not second and first.severity is Severity.WARNING
    assert g.add(a, 100.0) is not first  # same device after a long quiet: a new incident
    warn = match_message("amdgpu 0000:0d:00.0: amdgpu: Failed to export SMU metrics table!")
    fatal = match_message(
        "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout, signaled seq=1, emitted seq=2"
    )
    assert warn is not None and fatal is not None
    inc = g.add(warn, 200.0)
    assert g.add(fatal, 210.0) is inc and inc.severity is Severity.FATAL  # escalated, still one incident
