"""Provenance of a results file: the command line, the config and threshold files' sha256, the image, and
the facts the controller can read about itself (host, CPU model, ROCm / GPU driver when installed here)."""

from __future__ import annotations

import hashlib
import platform
import shlex
import socket
import sys
from pathlib import Path

from cvs_tui.core.results import Provenance

ROCM_VERSION_FILES = ("/opt/rocm/.info/version", "/opt/rocm/.info/version-dev")
NVIDIA_DRIVER_FILE = "/proc/driver/nvidia/version"
AMDGPU_DRIVER_FILE = "/sys/module/amdgpu/version"


def sha256_of(path: str | None) -> str | None:
    """The file's sha256, or None when there is no such readable file."""
    if not path:
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _first_line(path: str) -> str | None:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    return text.splitlines()[0].strip() if text else None


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The CPU model name as /proc/cpuinfo spells it (x86 "model name", else "Hardware"/"Model")."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.processor() or None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Hardware", "Model") and value.strip():
            return value.strip()
    return platform.processor() or None


def gpu_driver() -> str | None:
    """The local GPU driver's version line (amdgpu module or NVIDIA), None when neither is loaded."""
    amd = _first_line(AMDGPU_DRIVER_FILE)
    if amd:
        return f"amdgpu {amd}"
    nv = _first_line(NVIDIA_DRIVER_FILE)
    return nv


def rocm_version() -> str | None:
    return next((v for f in ROCM_VERSION_FILES if (v := _first_line(f))), None)


def _own_command() -> str:
    """The command line when this process is cvs-tui itself; empty inside a library caller (a test)."""
    prog = Path(sys.argv[0]).name if sys.argv else ""
    if prog == "cvs-tui" or sys.argv[0].endswith("cvs_tui/__main__.py"):
        return shlex.join(["cvs-tui", *sys.argv[1:]])
    return ""


def collect(
    *, config_path: str, threshold_path: str | None, image: str | None, argv: list[str] | None = None
) -> Provenance:
    """What the controller knows about this run's origin, read once when the results are created."""
    return Provenance(
        command=shlex.join(["cvs-tui", *argv]) if argv is not None else _own_command(),
        config_sha256=sha256_of(config_path),
        threshold_sha256=sha256_of(threshold_path),
        image=image or None,
        controller_host=socket.gethostname(),
        cpu_model=cpu_model(),
        gpu_driver=gpu_driver(),
        rocm_version=rocm_version(),
        python=platform.python_version(),
    )
