"""Node health beside training: kernel-log signatures and a live follower per node, GPU telemetry,
findings attributed to the run and step they happened in, and the ``health.*`` metrics.

The runner wires it in (one :class:`KernelLogFollower` and one :class:`TelemetrySampler` per node over
that node's transport); everything here is usable on its own and never imports a UI library.
"""

from cvs_tui.core.health.kmsg import (
    KernelLogFollower,
    KernelLogUnreadable,
    KmsgRecord,
    parse_record,
)
from cvs_tui.core.health.model import (
    THRESHOLDS,
    Attribution,
    HealthFinding,
    NodeHealth,
    RunWindow,
    attribute,
    fails_run,
    failure_reason,
    health_metrics,
)
from cvs_tui.core.health.nvidia_smi import parse_nvidia_smi_csv, parse_nvidia_smi_q
from cvs_tui.core.health.signatures import SIGNATURES, Signature, SignatureMatch, match_message
from cvs_tui.core.health.smi_values import TelemetryError
from cvs_tui.core.health.telemetry import (
    EccDelta,
    TelemetrySampler,
    ecc_deltas,
    parse_amd_smi_metric,
    parse_rocm_smi_json,
    sampling_interval,
)

__all__ = [
    "SIGNATURES",
    "THRESHOLDS",
    "Attribution",
    "EccDelta",
    "HealthFinding",
    "KernelLogFollower",
    "KernelLogUnreadable",
    "KmsgRecord",
    "NodeHealth",
    "RunWindow",
    "Signature",
    "SignatureMatch",
    "TelemetryError",
    "TelemetrySampler",
    "attribute",
    "ecc_deltas",
    "fails_run",
    "failure_reason",
    "health_metrics",
    "match_message",
    "parse_amd_smi_metric",
    "parse_nvidia_smi_csv",
    "parse_nvidia_smi_q",
    "parse_record",
    "parse_rocm_smi_json",
    "sampling_interval",
]
