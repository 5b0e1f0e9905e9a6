"""Bytes in, typed events out: record splitting (incl. flattened logs), MaxText dialects, error signatures."""

from cvs_tui.core.parse import accel
from cvs_tui.core.parse.metrics_file import parse_metrics_file
from cvs_tui.core.parse.parser import NodeLogParser, parse_log_bytes
from cvs_tui.core.parse.records import RECORD_CAP
from cvs_tui.core.parse.signatures import (
    ALWAYS_ON_PATTERNS,
    BENIGN_PATTERNS,
    DEFAULT_ERROR_PATTERNS,
)

__all__ = [
    "ALWAYS_ON_PATTERNS",
    "BENIGN_PATTERNS",
    "DEFAULT_ERROR_PATTERNS",
    "RECORD_CAP",
    "NodeLogParser",
    "accel",
    "parse_log_bytes",
    "parse_metrics_file",
]
