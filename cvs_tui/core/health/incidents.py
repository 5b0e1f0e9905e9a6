"""One incident from the many kernel lines a fault prints.

A GPU fault prints a burst: ``ring gfx timeout``, ``MES failed to respond``, ``Failed to evict process
queues``, ``GPU reset begin!``, ``MODE2 reset``, ``VRAM is lost``. Those are one incident, caught by its
first line; its severity is the worst of its lines. Grouping, per node:

* a line that names a device (PCI address) joins the open incident on that device;
* a line that names none (``amdgpu: Failed to quiesce KFD``, ``[drm] VRAM is lost``) joins the latest
  open incident of the same kind (amd_gpu, nvidia_gpu, ...), and a device-less incident adopts the
  first device a later line of its kind names;
* PCIe AER/DPC lines are one incident per burst whatever device prints them (the root port reports,
  the endpoint's driver answers); host lines (machine checks, APEI, OOM, hung tasks) group by kind;
* an incident stays open while its lines keep coming within :data:`WINDOW_S` of each other.

Pure data: no I/O, no clock (the caller passes each line's time).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cvs_tui.core.events import Severity
from cvs_tui.core.health.signatures import SignatureMatch

WINDOW_S = 30.0  # a fault's burst (reset, resume, KFD restore) spans seconds; a new one after 30 s of quiet
_BY_KIND = frozenset({"pcie", "hardware", "memory", "cpu"})  # grouped by kind, not by device


@dataclass(slots=True)
class Incident:
    """Lines of one fault on one device (or one host-level kind), in the order they came."""

    number: int  # 1, 2, ... per grouper (per node)
    category: str
    first: SignatureMatch
    start: float
    last: float
    severity: Severity
    device: str | None = None
    devices: set[str] = field(default_factory=set)
    lines: int = 1

    def add(self, hit: SignatureMatch, t: float) -> None:
        self.last = max(self.last, t)
        self.lines += 1
        if hit.severity is Severity.FATAL:
            self.severity = Severity.FATAL
        if hit.device:
            self.devices.add(hit.device)
            if self.device is None:
                self.device = hit.device


class IncidentGrouper:
    """Assigns each finding of one node to an incident (see the module docstring)."""

    def __init__(self, window: float = WINDOW_S) -> None:
        self.window = window
        self.incidents: list[Incident] = []
        self.opened = 0  # incidents opened so far (numbers them)

    def _open(self, t: float) -> list[Incident]:
        return [i for i in self.incidents if t - i.last <= self.window]

    def add(self, hit: SignatureMatch, t: float) -> Incident:
        """The incident ``hit`` (logged at ``t`` seconds) belongs to; a new one if none is open."""
        open_ = self._open(t)
        same_kind = [i for i in open_ if i.category == hit.category]
        target: Incident | None = None
        if hit.category in _BY_KIND:
            target = same_kind[-1] if same_kind else None
        elif hit.device:
            on_device = [i for i in same_kind if hit.device in i.devices]
            deviceless = [i for i in same_kind if not i.devices]
            candidates = on_device or deviceless
            target = candidates[-1] if candidates else None
        elif same_kind:
            target = same_kind[-1]
        if target is None:
            self.opened += 1
            target = Incident(
                number=self.opened,
                category=hit.category,
                first=hit,
                start=t,
                last=t,
                severity=hit.severity,
                device=hit.device,
                devices={hit.device} if hit.device else set(),
            )
            self.incidents.append(target)
            # bounded: incidents that closed long ago are no longer needed for grouping
            if len(self.incidents) > 256:
                self.incidents = self._open(t)[-64:]
            return target
        target.add(hit, t)
        return target


__all__ = ["WINDOW_S", "Incident", "IncidentGrouper"]
