"""Kernel-log health signatures: which kernel messages mean a node is unhealthy, and how badly.

Each :class:`Signature` is matched against one kernel record's message (the text after the kmsg
prefix, no timestamp). The first signature in :data:`SIGNATURES` that matches a record wins, so one
record gives at most one finding (an ``NVRM: Xid ... 79, ... GPU has fallen off the bus`` line is one
Xid finding, not also a "fallen off the bus" one).

The shapes are those the drivers print (format strings in the Linux/NVIDIA drivers, real lines in
``tests/fixtures/health/kernel_lines.tsv`` with their sources). AMD's node-scraper dmesg table was
read for coverage (RAS counts, poison, bad-page threshold, throttling, AER, MCE); its package is not a
dependency (it analyses whole dmesg text in batches and brings pydantic/paramiko; it has no
NVIDIA Xid, RDMA link or hung-task signatures).

Severity: ``fatal`` fails the run that was active when the line was logged; ``warning`` is recorded
and shown, never fails a run.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from cvs_tui.core.events import Severity

FATAL = Severity.FATAL
WARNING = Severity.WARNING

# NVIDIA Xid codes that mean the GPU (or its memory) can no longer be trusted for the running job.
# The rest (13 graphics exception, 31 MMU fault, 43 reset channel, 63 row remap pending, 94 contained
# ECC, ...) are application-level or already contained: shown as warnings.
XID_FATAL: frozenset[int] = frozenset({48, 62, 64, 74, 79, 92, 95, 109, 119, 120, 123, 140, 143, 154})
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
    154: "GPU recovery action changed",
}


@dataclass(frozen=True, slots=True)
class SignatureMatch:
    """A record that matched: which signature, how severe, and a short detail for the finding."""

    signature: str
    severity: Severity
    category: str
    detail: str


Classifier = Callable[[re.Match[str]], tuple[Severity, str]]


@dataclass(frozen=True, slots=True)
class Signature:
    name: str
    category: str  # amd_gpu, nvidia_gpu, pcie, rdma_nic, memory, cpu, hardware
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
        return SignatureMatch(self.name, severity, self.category, detail)


def _xid(m: re.Match[str]) -> tuple[Severity, str]:
    code = int(m.group("code"))
    meaning = XID_MEANING.get(code, "")
    detail = f"Xid {code}" + (f" ({meaning})" if meaning else "") + f" on PCI {m.group('pci')}"
    return (FATAL if code in XID_FATAL else WARNING), detail


def _ras(m: re.Match[str]) -> tuple[Severity, str]:
    kind = m.group("kind")
    return (WARNING if kind == "correctable" else FATAL), f"{m.group('count')} {kind} in {m.group('block')}"


def _aer(m: re.Match[str]) -> tuple[Severity, str]:
    kind = m.group("kind")
    return (FATAL if kind == "Uncorrected (Fatal)" else WARNING), kind


def _port(m: re.Match[str]) -> tuple[Severity, str]:
    state = m.group("state")
    return (FATAL if state == "DOWN" else WARNING), f"port {m.group('port')} {state}"


def _apei(m: re.Match[str]) -> tuple[Severity, str]:
    sev = m.group("sev")
    return (WARNING if sev == "corrected" else FATAL), f"severity {sev}"


def _re(p: str) -> re.Pattern[str]:
    return re.compile(p)


_PCI = r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"

SIGNATURES: tuple[Signature, ...] = (
    # --- NVIDIA ---------------------------------------------------------------------------------------
    Signature(
        "nvidia_xid",
        "nvidia_gpu",
        FATAL,
        _re(r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F:.]+)[^)]*\): (?P<code>\d+),"),
        _xid,
    ),
    Signature(
        "nvidia_fallen_off_bus",
        "nvidia_gpu",
        FATAL,
        _re(r"GPU has fallen off the bus|NVRM: fallen off the bus and is not responding"),
    ),
    # --- AMD GPU --------------------------------------------------------------------------------------
    Signature(
        "amdgpu_ras_xgmi",
        "amd_gpu",
        FATAL,
        _re(
            r"(?<!\S)(?P<count>[1-9]\d*) (?:new )?(?P<kind>uncorrectable|correctable|deferred) hardware "
            r"errors detected in (?:total in )?(?P<block>xgmi\w*|wafl\w*) block"
        ),
        _ras,
    ),
    Signature(
        "amdgpu_ras",
        "amd_gpu",
        FATAL,
        _re(
            r"(?<!\S)(?P<count>[1-9]\d*) (?:new )?(?P<kind>uncorrectable|correctable|deferred) hardware "
            r"errors detected in (?:total in )?(?P<block>\w+) block"
        ),
        _ras,
    ),
    Signature(
        "amdgpu_poison",
        "amd_gpu",
        FATAL,
        _re(r"poison is consumed by client \d+|Poison is created"),
    ),
    Signature("amdgpu_bad_pages", "amd_gpu", FATAL, _re(r"Saved bad pages \d+ reaches threshold")),
    Signature(
        "amdgpu_reset_failed", "amd_gpu", FATAL, _re(r"GPU reset(?:\(\d+\))? failed|[Mm]ode[12] reset failed")
    ),
    Signature("amdgpu_reset", "amd_gpu", FATAL, _re(r"GPU reset begin")),
    Signature(
        "amdgpu_ring_timeout",
        "amd_gpu",
        FATAL,
        _re(r"ring \S+ timeout, signaled seq=\d+, emitted seq=\d+"),
    ),
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
        _re(r"AER: (?P<kind>Corrected|Uncorrected \((?:Non-)?Fatal\)) error (?:received|message received)"),
        _aer,
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
        _re(rf"^(?:mlx5_core|bnxt_en|bnxt_re|ionic) {_PCI}\b.*(?:NIC Link is Down|Link down)\b"),
    ),
    Signature(
        "mlx5_health",
        "rdma_nic",
        FATAL,
        _re(r"^mlx5_core .*(?:health recovery flow aborted|health compromised|device's health compromised)"),
    ),
    # --- memory / CPU / platform ----------------------------------------------------------------------
    Signature(
        "oom_kill", "memory", FATAL, _re(r"(?:Memory cgroup )?[Oo]ut of memory: Kill(?:ed)? process \d+")
    ),
    Signature(
        "mce_uncorrected",
        "hardware",
        FATAL,
        _re(r"Machine Check Exception|Machine check: Processor context corrupt|MC\d+_STATUS\[[^\]]*\|UC\|"),
    ),
    Signature(
        "mce_corrected",
        "hardware",
        WARNING,
        _re(r"mce: \[Hardware Error\]: (?:Machine check events logged|CPU \d+: Machine Check: )"),
    ),
    Signature(
        "apei_hardware_error",
        "hardware",
        FATAL,
        _re(r"\[Hardware Error\]: +event severity: (?P<sev>fatal|recoverable|corrected)"),
        _apei,
    ),
    Signature("kernel_panic", "cpu", FATAL, _re(r"Kernel panic - not syncing")),
    Signature("soft_lockup", "cpu", WARNING, _re(r"BUG: soft lockup - CPU#\d+ stuck for")),
    Signature("hung_task", "cpu", WARNING, _re(r"INFO: task \S+:\d+ blocked for more than \d+ seconds")),
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
