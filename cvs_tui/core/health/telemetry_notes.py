"""What a node's latest GPU sample says besides its figures, as health notes (warnings, never failures):
the fields its tool could not give, the clock throttle reasons active now, and a PCIe link below its
maximum. One implementation for the screen, report.html, summary.md and ``analyze``: they all read the
latest sample per GPU (live: the last :class:`GpuSample`; afterwards: ``telemetry_last``), so the same
run says the same lines everywhere.

A link's speed below its maximum counts only on a busy GPU: NVIDIA GPUs lower the PCIe generation while
idle to save power, so an idle GPU at Gen1 is no fault; a width below its maximum counts always.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from cvs_tui.core.health.nvidia_smi import NEW_REASONS, NVIDIA_FIELDS, OLD_REASONS

BUSY_PCT = 50.0  # a GPU at least this busy keeps its link at full speed

# every field name a sample may list as unreadable, both spellings of the clock event reasons
_KNOWN: tuple[str, ...] = (
    *NVIDIA_FIELDS,
    *(f.replace(NEW_REASONS, OLD_REASONS, 1) for f in NVIDIA_FIELDS if f.startswith(NEW_REASONS)),
)


class SampleLike(Protocol):
    """A GPU's sample as the live state (GpuSample) and results.json (GpuSampleRecord) both hold it."""

    @property
    def gpu(self) -> int: ...
    @property
    def util_pct(self) -> float | None: ...
    @property
    def pcie_width(self) -> int | None: ...
    @property
    def pcie_speed_gts(self) -> float | None: ...
    @property
    def pcie_width_max(self) -> int | None: ...
    @property
    def pcie_speed_max_gts(self) -> float | None: ...
    @property
    def throttle_reasons(self) -> Sequence[str] | None: ...
    @property
    def unreadable(self) -> Sequence[str]: ...
    @property
    def refused(self) -> Sequence[str]: ...


def grouped_fields(fields: Sequence[str]) -> list[str]:
    """Field names with a family the tool asks for wholly unreadable shortened to ``family.*``
    (``remapped_rows.correctable`` and ``remapped_rows.uncorrectable`` -> ``remapped_rows.*``)."""
    got = list(dict.fromkeys(fields))
    out: list[str] = []
    for f in got:
        parts = f.split(".")
        name = f
        for i in range(1, len(parts)):  # the widest family with more than one member, all unreadable
            family = ".".join(parts[:i])
            members = [k for k in _KNOWN if k.startswith(family + ".")]
            if len(members) > 1 and all(m in got for m in members):
                name = f"{family}.*"
                break
        if name not in out:
            out.append(name)
    return out


def _gpus(ids: Sequence[int]) -> str:
    return ("GPU " if len(ids) == 1 else "GPUs ") + ", ".join(str(i) for i in ids)


def unreadable_notes(label: str, tool: str | None, samples: Sequence[SampleLike]) -> list[str]:
    """``not readable on node 2: pcie.link.gen.max, remapped_rows.* (GPU says N/A or Not Supported)``:
    one line per set of fields and why (the GPU's answer, or a driver that does not know the field),
    naming the GPUs when not every GPU lacks them."""
    name = tool or "the GPU tool"
    whys = (f"GPU says N/A or Not Supported to {name}", f"{name} of this driver does not know them")
    by_set: dict[tuple[str, tuple[str, ...]], list[int]] = {}
    for s in samples:
        refused = set(s.refused)
        answered = [f for f in s.unreadable if f not in refused]
        for why, fields in zip(whys, (answered, [f for f in s.unreadable if f in refused]), strict=True):
            if fields:
                by_set.setdefault((why, tuple(grouped_fields(fields))), []).append(s.gpu)
    out = []
    for (why, names), ids in by_set.items():
        where = label if len(ids) == len(samples) else f"{label} {_gpus(ids)}"
        out.append(f"not readable on {where}: {', '.join(names)} ({why})")
    return out


def _link(speed: float | None, width: int | None) -> str:
    parts = [f"{speed:g} GT/s" if speed is not None else "", f"x{width}" if width is not None else ""]
    return " ".join(p for p in parts if p)


def throttle_notes(label: str, samples: Sequence[SampleLike]) -> list[str]:
    """``node 2 GPU 3: clocks throttled now (SW power cap, HW slowdown)``, GPUs with the same reasons
    on one line."""
    by_reasons: dict[tuple[str, ...], list[int]] = {}
    for s in samples:
        if s.throttle_reasons:
            by_reasons.setdefault(tuple(s.throttle_reasons), []).append(s.gpu)
    return [f"{label} {_gpus(ids)}: clocks throttled ({', '.join(why)})" for why, ids in by_reasons.items()]


def pcie_notes(label: str, samples: Sequence[SampleLike]) -> list[str]:
    """``node 2 GPU 1: PCIe link 8 GT/s x8, below its maximum 32 GT/s x16``."""
    out = []
    for s in samples:
        narrow = s.pcie_width is not None and s.pcie_width_max is not None and s.pcie_width < s.pcie_width_max
        busy = s.util_pct is not None and s.util_pct >= BUSY_PCT
        slow = (
            busy
            and s.pcie_speed_gts is not None
            and s.pcie_speed_max_gts is not None
            and s.pcie_speed_gts < s.pcie_speed_max_gts
        )
        if narrow or slow:
            now, top = (
                _link(s.pcie_speed_gts, s.pcie_width),
                _link(s.pcie_speed_max_gts, s.pcie_width_max),
            )
            out.append(f"{label} GPU {s.gpu}: PCIe link {now}, below its maximum {top}")
    return out


def telemetry_notes(label: str, tool: str | None, samples: Sequence[SampleLike]) -> list[str]:
    """Every note for one node's latest sample: throttling, PCIe links, then what could not be read."""
    return [
        *throttle_notes(label, samples),
        *pcie_notes(label, samples),
        *unreadable_notes(label, tool, samples),
    ]
