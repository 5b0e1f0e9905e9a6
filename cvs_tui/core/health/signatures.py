"""Kernel-log health signatures: which kernel messages mean a node is unhealthy, and how badly.

Each :class:`Signature` is matched against one kernel record's message (the text after the kmsg
prefix, no timestamp). The first signature in :data:`SIGNATURES` that matches a record wins, so one
record gives at most one finding (an ``NVRM: Xid ... 79, ... GPU has fallen off the bus`` line is one
Xid finding, not also a "fallen off the bus" one). Every match names the PCI device the line is about
when the line has one (:func:`device_of`), so the lines of one incident can be grouped
(:mod:`cvs_tui.core.health.incidents`) and a finding on a device the node does not have can say so.

Severity policy (docs/node-health.md):

* ``fatal``: the job can no longer trust that device or link: an uncorrectable or uncontained error,
  the GPU fell off the bus, was reset or lost its memory, the driver lost the job's queues (MES/KFD),
  a PCIe link failed or could not recover, an RDMA port or NIC firmware went down, the kernel killed
  a process (OOM) or the CPU reported an uncorrected machine check;
* ``warning``: degraded, the device still serves the job: corrected errors, contained or non-fatal
  NVLink/SXid events, a NIC queue the driver recovered (TX timeout), SMU/power-management message
  failures, throttling, hung tasks, soft lockups.

``fatal`` fails the run that was active when the line was logged; ``warning`` is recorded and shown,
never fails a run.

The shapes are those the drivers print (format strings in the Linux/NVIDIA/NVSwitch drivers; real
lines with their sources in ``tests/fixtures/health/kernel_lines.tsv`` and the world corpus
``tests/fixtures/world/kernel/``). Checklists read for coverage: AMD's node-scraper dmesg analyser
(RAS counts, poison, bad pages, ACA, throttling, AER, MCE/APEI), NVIDIA's Xid and SXid catalogues and
the kernel's PCIe AER how-to; none of their code is used.

Every pattern is linear in the line's length: no two adjacent unbounded quantifiers can match the
same characters, and free text between fixed parts is bounded (``{0,N}``). Kernel records are 1-8 KB,
but a corrupt or hostile stream must not stall the follower (audit cases HL1, HM1, HM2).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from cvs_tui.core.events import Severity

FATAL = Severity.FATAL
WARNING = Severity.WARNING

# NVIDIA Xid codes that mean the GPU (or its memory, or its links) can no longer be trusted for the
# running job. The rest (13 graphics exception, 31 MMU fault, 43 reset channel, 45 preemptive cleanup,
# 63 row remap pending, 94 contained ECC, ...) are application-level or already contained: warnings.
# The NVLink codes 144-150 carry their own "Fatal"/"Nonfatal" word, which decides (see _xid).
XID_FATAL: frozenset[int] = frozenset(
    {48, 62, 64, 74, 79, 92, 95, 109, 119, 120, 123, 136, 140, 143, 149, 150, 151, 154}
)
XID_MEANING: dict[int, str] = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup",
    48: "double-bit ECC error",
    62: "internal micro-controller halt",
    63: "ECC page retirement / row remap pending",
    64: "ECC page retirement / row remap failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    109: "context switch timeout",
    119: "GSP RPC timeout",
    120: "GSP error",
    123: "SPI PMU RPC failure",
    140: "ECC unrecovered error",
    143: "GPU initialization failure",
    144: "NVLink SAW error",
    145: "NVLink RLW error",
    149: "NVLink NETIR error",
    154: "GPU recovery action changed",
}


@dataclass(frozen=True, slots=True)
class SignatureMatch:
    """A record that matched: which signature, how severe, a short detail and the device it names."""

    signature: str
    severity: Severity
    category: str
    detail: str
    device: str | None = None  # PCI address (dddd:bb:dd.f) the line is about, if it names one


Classifier = Callable[[re.Match[str]], tuple[Severity, str]]


@dataclass(frozen=True, slots=True)
class Signature:
    name: str
    category: str  # amd_gpu, nvidia_gpu, nvswitch, pcie, rdma_nic, memory, cpu, hardware
    severity: Severity
    pattern: re.Pattern[str]
    classify: Classifier | None = None  # severity/detail from the match (Xid code, RAS kind, ...)

    def match(self, message: str) -> SignatureMatch | None:
        m = self.pattern.search(message)
        if m is None:
            return None
        if self.classify is not None:
            severity, detail = self.classify(m)
        else:
            severity, detail = self.severity, ""
        return SignatureMatch(self.name, severity, self.category, detail, device_of(message))


# --- device ----------------------------------------------------------------------------------------
# The first PCI address in the line's head: "amdgpu 0000:c5:00.0: ...", "NVRM: Xid (PCI:0000:44:00): ..."
# (no function: .0), "nvidia-nvswitch3: SXid (PCI:0000:04:00.0): ...", "NVRM: GPU at 0000:01:00.0 ...".
_PCI_ADDR = re.compile(
    r"(?<![0-9A-Fa-f])(?<![0-9A-Fa-f]:)([0-9A-Fa-f]{4}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.([0-7])|(?!\.))(?![0-9A-Fa-f])"
)
_DEVICE_HEAD = 240  # the device is named near the start; the search never scans a long record


def device_of(message: str) -> str | None:
    """The PCI address (``dddd:bb:dd.f``, lower case) a kernel message is about, or None."""
    m = _PCI_ADDR.search(message, 0, _DEVICE_HEAD)
    if m is None:
        return None
    dom, bus, dev, fn = m.groups()
    return f"{dom}:{bus}:{dev}.{fn or '0'}".lower()


# --- classifiers -----------------------------------------------------------------------------------
def _xid(m: re.Match[str]) -> tuple[Severity, str]:
    code = int(m.group("code"))
    meaning = XID_MEANING.get(code, "")
    detail = f"Xid {code}" + (f" ({meaning})" if meaning else "") + f" on PCI {m.group('pci')}"
    rest = m.group("rest")
    if re.search(r"\bNonfatal\b|\bNon-fatal\b", rest):
        return WARNING, detail
    if re.search(r"\bFatal\b", rest):
        return FATAL, detail
    return (FATAL if code in XID_FATAL else WARNING), detail


def _sxid(m: re.Match[str]) -> tuple[Severity, str]:
    # nvswitch prints the severity word on the first line of an SXid ("23001, Fatal, Link 12 ...");
    # its "Severity N ..." and "Data {...}" lines carry none: an SXid seen there is a warning.
    kind = m.group("kind")
    detail = f"SXid {m.group('code')} on NVSwitch PCI {m.group('pci')}"
    return (FATAL if kind == "Fatal" else WARNING), detail


def _ras(m: re.Match[str]) -> tuple[Severity, str]:
    kind = m.group("kind")
    return (WARNING if kind == "correctable" else FATAL), f"{m.group('count')} {kind} in {m.group('block')}"


def _aer(m: re.Match[str]) -> tuple[Severity, str]:
    kind = m.group("kind")
    return (FATAL if "(Fatal)" in kind else WARNING), kind


def _port(m: re.Match[str]) -> tuple[Severity, str]:
    state = m.group("state")
    return (FATAL if state == "DOWN" else WARNING), f"port {m.group('port')} {state}"


def _apei(m: re.Match[str]) -> tuple[Severity, str]:
    sev = m.group("sev")
    return (WARNING if sev == "corrected" else FATAL), f"severity {sev}"


def _mce_status(m: re.Match[str]) -> tuple[Severity, str]:
    # IA32_MCi_STATUS / AMD MCA_STATUS: bit 63 VAL, 61 UC (uncorrected), 57 PCC (context corrupt)
    status = int(m.group("status"), 16)
    uc, pcc = bool(status >> 61 & 1), bool(status >> 57 & 1)
    what = "uncorrected" + (", processor context corrupt" if pcc else "") if uc else "corrected"
    return (FATAL if uc else WARNING), f"bank {m.group('bank')} status {m.group('status')} ({what})"


def _edac(m: re.Match[str]) -> tuple[Severity, str]:
    kind = m.group("kind")
    return (FATAL if kind == "UE" else WARNING), f"{m.group('count')} {kind} memory error(s)"


def _re(p: str) -> re.Pattern[str]:
    return re.compile(p)


_PCI = r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
_AER_KIND = r"Corrected|Uncorrect(?:ed|able) \((?:Non-)?Fatal\)"

SIGNATURES: tuple[Signature, ...] = (
    # --- NVIDIA ---------------------------------------------------------------------------------------
    Signature(
        "nvidia_xid",
        "nvidia_gpu",
        FATAL,
        _re(r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F:.]{4,16})\): (?P<code>\d{1,5}),(?P<rest>[^\n]{0,80})"),
        _xid,
    ),
    Signature(
        "nvidia_fallen_off_bus",
        "nvidia_gpu",
        FATAL,
        _re(r"has fallen off the bus|fallen off the bus and is not responding"),
    ),
    Signature(
        "nvidia_init_failed",
        "nvidia_gpu",
        FATAL,
        _re(
            r"NVRM: The NVIDIA probe routine failed|NVRM: None of the NVIDIA devices were initialized"
            r"|RmInitAdapter failed!|PCI I/O region assigned to your NVIDIA device is invalid"
        ),
    ),
    Signature(
        "nvswitch_sxid",
        "nvswitch",
        WARNING,
        _re(
            r"SXid \(PCI:(?P<pci>[0-9a-fA-F:.]{4,16})\): (?P<code>\d{1,6}), "
            r"(?P<kind>Fatal|Non-fatal|Severity|Data)\b"
        ),
        _sxid,
    ),
    # --- AMD GPU --------------------------------------------------------------------------------------
    Signature(
        "amdgpu_ras_xgmi",
        "amd_gpu",
        FATAL,
        _re(
            r"(?<!\S)(?P<count>[1-9]\d{0,18}) (?:new )?(?P<kind>uncorrectable|correctable|deferred) hardware "
            r"errors detected in (?:total in )?(?P<block>xgmi\w{0,40}|wafl\w{0,40}) block"
        ),
        _ras,
    ),
    Signature(
        "amdgpu_ras",
        "amd_gpu",
        FATAL,
        _re(
            r"(?<!\S)(?P<count>[1-9]\d{0,18}) (?:new )?(?P<kind>uncorrectable|correctable|deferred) hardware "
            r"errors detected in (?:total in )?(?P<block>\w{1,40}) block"
        ),
        _ras,
    ),
    Signature(
        "amdgpu_ras_event",
        "amd_gpu",
        FATAL,
        _re(r"uncorrectable hardware error\((?P<event>\w{1,60})\) detected"),
    ),
    Signature(
        "amdgpu_aca",
        "amd_gpu",
        WARNING,
        _re(r"\[Hardware Error\]: Accelerator Check Architecture events logged"),
    ),
    Signature(
        "amdgpu_poison",
        "amd_gpu",
        FATAL,
        _re(r"poison is consumed by client \d+|Poison is created"),
    ),
    Signature("amdgpu_bad_pages", "amd_gpu", FATAL, _re(r"Saved bad pages \d+ reaches threshold")),
    Signature(
        "amdgpu_reset_failed",
        "amd_gpu",
        FATAL,
        _re(r"GPU reset(?:\(\d+\))? failed|[Mm]ode[12] reset failed|Ring \S{1,40} reset failed"),
    ),
    Signature(
        "amdgpu_reset",
        "amd_gpu",
        FATAL,
        _re(r"GPU reset begin|(?:MODE[12]|BACO|pci config) reset$"),
    ),
    Signature("amdgpu_vram_lost", "amd_gpu", FATAL, _re(r"VRAM is lost")),
    Signature(
        "amdgpu_ring_timeout",
        "amd_gpu",
        FATAL,
        _re(r"ring \S{1,40} timeout, signaled seq=\d+, emitted seq=\d+"),
    ),
    Signature(
        "amdgpu_mes",
        "amd_gpu",
        FATAL,
        _re(
            r"MES failed to respon(?:d|se) (?:to )?msg=\w+|MES might be in unrecoverable state"
            r"|failed to add hardware queue to MES"
        ),
    ),
    Signature(
        "amdgpu_kfd_queues",
        "amd_gpu",
        FATAL,
        _re(
            r"Failed to (?:evict|restore) process queues|Failed to (?:quiesce|resume) KFD"
            r"|Queue preemption time out|qcm fence wait loop timeout expired"
        ),
    ),
    Signature("amdgpu_ip_hung", "amd_gpu", FATAL, _re(r"IP block:\S{1,40} is hung!")),
    Signature("amdgpu_ring_test_failed", "amd_gpu", FATAL, _re(r"ring \S{1,40} test failed \(-\d+\)")),
    Signature(
        "amdgpu_vm_fault",
        "amd_gpu",
        FATAL,
        _re(r"\[(?:gfx|mm)hub\d*\] (?:no-)?(?:retry )?page fault"),
    ),
    Signature(
        "amdgpu_init_error",
        "amd_gpu",
        FATAL,
        _re(r"\*ERROR\* (?:hw|sw)_init of IP block|Fatal error during GPU init"),
    ),
    Signature(
        "amdgpu_smu",
        "amd_gpu",
        WARNING,
        _re(r"SMU: I'm not done with your previous command|Failed to export SMU metrics table"),
    ),
    Signature(
        "amdgpu_throttled",
        "amd_gpu",
        WARNING,
        _re(r"GPU is throttled, expect performance decrease|GPU thermal throttling temperature reached"),
    ),
    # --- PCIe -----------------------------------------------------------------------------------------
    Signature(
        "pcie_aer",
        "pcie",
        FATAL,
        _re(rf"AER: (?:Multiple )?(?P<kind>{_AER_KIND}) error (?:received|message received)"),
        _aer,
    ),
    Signature("pcie_bus_error", "pcie", FATAL, _re(rf"PCIe Bus Error: severity=(?P<kind>{_AER_KIND})"), _aer),
    Signature("pcie_recovery_failed", "pcie", FATAL, _re(r"AER: (?:device recovery failed|can't recover)")),
    Signature(
        "pcie_dpc", "pcie", FATAL, _re(r"DPC: containment event|DPC: unmasked uncorrectable error detected")
    ),
    Signature("pcie_link_down", "pcie", FATAL, _re(r"Slot\(\d+\): (?:Link Down|Card not present)")),
    # --- RDMA NICs ------------------------------------------------------------------------------------
    Signature(
        "rdma_port_state",
        "rdma_nic",
        FATAL,
        _re(r"Port: (?P<port>\d+) Link (?P<state>DOWN|INIT|ARMED)\b"),
        _port,
    ),
    Signature(
        "nic_link_down",
        "rdma_nic",
        FATAL,
        _re(rf"^(?:mlx5_core|bnxt_en|bnxt_re|ionic) {_PCI}\b[^\n]{{0,80}}(?:NIC Link is Down|Link down)\b"),
    ),
    Signature(
        "mlx5_health",
        "rdma_nic",
        FATAL,
        _re(r"^mlx5_core [^\n]{0,200}(?:health recovery flow aborted|health compromised)"),
    ),
    Signature(
        "nic_firmware",
        "rdma_nic",
        FATAL,
        _re(
            r"FW heartbeat stalled|hwrm_ring_free type \d+ failed|Resp cmpl intr err msg"
            r"|QPLIB: cmdq\[0x[0-9a-f]{1,8}\]=0x[0-9a-f]{1,8} status 0x[0-9a-f]{1,8}|Failed to create HW CQ"
            r"|opcode \w{1,40} \(\d+\) error \w{1,40} \(\d+\)|Couldn't open port \d+"
        ),
    ),
    Signature(
        "nic_tx_timeout",
        "rdma_nic",
        WARNING,
        _re(
            r"TX timeout detected|TX timeout on queue"
            r"|NETDEV WATCHDOG: [^\n]{0,80}transmit queue \d+ timed out"
        ),
    ),
    Signature("mlx5_cq_error", "rdma_nic", WARNING, _re(r"mlx5_eq_int:\d+:\(pid \d+\): CQ error on CQN")),
    # --- memory / CPU / platform ----------------------------------------------------------------------
    Signature(
        "oom_kill",
        "memory",
        FATAL,
        _re(r"(?:Memory cgroup )?[Oo]ut of memory: Kill(?:ed)? process \d+|invoked oom-killer: "),
    ),
    Signature(
        "mce_uncorrected",
        "hardware",
        FATAL,
        _re(
            r"Machine Check Exception|Machine check: Processor context corrupt"
            r"|MC\d{1,4}_STATUS\[[^\]\n]{0,200}\|UC\|"
        ),
    ),
    Signature(
        "mce_status",
        "hardware",
        WARNING,
        _re(r"Machine Check(?: Event)?: \d+ Bank (?P<bank>\d+): (?P<status>[0-9a-fA-F]{1,16})\b"),
        _mce_status,
    ),
    Signature(
        "mce_corrected", "hardware", WARNING, _re(r"mce: \[Hardware Error\]: Machine check events logged")
    ),
    Signature("edac_memory", "hardware", WARNING, _re(r"EDAC MC\d+: (?P<count>\d+) (?P<kind>CE|UE) "), _edac),
    Signature(
        "apei_hardware_error",
        "hardware",
        FATAL,
        _re(r"\[Hardware Error\]: +event severity: (?P<sev>fatal|recoverable|corrected)"),
        _apei,
    ),
    Signature(
        "apei_hardware_error_source",
        "hardware",
        WARNING,
        _re(r"\[Hardware Error\]: Hardware error from APEI Generic Hardware Error Source"),
    ),
    Signature("kernel_panic", "cpu", FATAL, _re(r"Kernel panic - not syncing")),
    Signature("soft_lockup", "cpu", WARNING, _re(r"BUG: soft lockup - CPU#\d+ stuck for")),
    Signature("hung_task", "cpu", WARNING, _re(r"INFO: task \S{1,80} blocked for more than \d+ seconds")),
    Signature("rcu_stall", "cpu", WARNING, _re(r"rcu_(?:preempt|sched) (?:self-)?detected stalls?")),
    Signature(
        "cpu_thermal_throttle",
        "cpu",
        WARNING,
        _re(r"(?:Core|Package) temperature above threshold, cpu clock throttled"),
    ),
)


def match_message(message: str, signatures: tuple[Signature, ...] = SIGNATURES) -> SignatureMatch | None:
    """The first signature that matches one kernel message, or None."""
    for sig in signatures:
        hit = sig.match(message)
        if hit is not None:
            return hit
    return None
