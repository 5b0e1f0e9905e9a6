"""``nvidia-smi``: the fields asked for, and its ``--query-gpu`` CSV and recorded ``-q`` text read into
one :class:`GpuSample` per GPU.

The clock event reasons are named ``clocks_throttle_reasons.*`` before driver 535 and
``clocks_event_reasons.*`` after; both are read, and so is the ``active`` bitmask. A value the GPU or
driver cannot give (``[N/A]``, ``[Not Supported]`` ...) is None and its field is listed in the sample's
``unreadable``, never 0.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

from cvs_tui.core.events import GpuSample
from cvs_tui.core.health.smi_values import TelemetryError, _int, _num

# the thermal and power clock event reasons (nvml.h nvmlClocksEventReason*, with their bits in
# ``clocks_event_reasons.active``); idle, applications clocks, sync boost and display clocks are no fault
NVIDIA_SLOWDOWNS: dict[str, tuple[str, int]] = {
    "sw_power_cap": ("SW power cap", 0x4),
    "hw_slowdown": ("HW slowdown", 0x8),
    "sw_thermal_slowdown": ("SW thermal slowdown", 0x20),
    "hw_thermal_slowdown": ("HW thermal slowdown", 0x40),
    "hw_power_brake_slowdown": ("HW power brake slowdown", 0x80),
}
NVIDIA_FIELDS: tuple[str, ...] = (
    "index",
    "utilization.gpu",
    "memory.used",
    "memory.total",
    "power.draw",
    "temperature.gpu",
    "clocks.sm",
    "clocks.mem",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
    "clocks.max.sm",
    *(f"clocks_event_reasons.{r}" for r in NVIDIA_SLOWDOWNS),
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "retired_pages.single_bit_ecc.count",
    "retired_pages.double_bit.count",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    # Yes/No flags (NVML nvmlDeviceGetRetiredPagesPendingStatus, nvmlDeviceGetRemappedRows isPending,
    # failureOccurred): a repair that waits for a GPU reset, and a row remap that ever failed
    "retired_pages.pending",
    "remapped_rows.pending",
    "remapped_rows.failure",
)
OLD_REASONS, NEW_REASONS = "clocks_throttle_reasons.", "clocks_event_reasons."
PCIE_GEN_GTS: dict[int, float] = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}


def nvidia_query(fields: Sequence[str] = NVIDIA_FIELDS) -> str:
    return f"nvidia-smi --query-gpu={','.join(fields)} --format=csv,noheader,nounits"


# what nvidia-smi prints for a value it cannot give: the GPU lacks it, the driver does not, or it failed
_NOT_READ = re.compile(
    r"^\[?(N/A|Not Supported|Unknown Error|Insufficient Permissions|GPU is lost|Not Found)\]?$"
)


class _Row:
    """One GPU's cells by field name; a cell nvidia-smi could not give is None and its field is noted."""

    def __init__(self, cells: Mapping[str, str], unasked: Sequence[str] = ()) -> None:
        self.cells = cells
        self.unreadable: list[str] = list(unasked)

    def get(self, *names: str) -> str | None:
        """The first of ``names`` asked for (old and new spellings); None, noted, if it was not read."""
        for name in names:
            if name in self.cells:
                v = self.cells[name].strip()
                if _NOT_READ.match(v) or not v:
                    self.unreadable.append(name)
                    return None
                return v
        return None

    def num(self, *names: str) -> float | None:
        v = self.get(*names)
        n = _num(v.rstrip("x")) if v is not None else None  # -q prints widths as "16x"
        if v is not None and n is None:
            self.unreadable.append(names[0])
        return n

    def flag(self, name: str) -> bool | None:
        """A Yes/No field (``1``/``0`` from some tools); anything else is noted as unreadable."""
        v = self.get(name)
        if v is None:
            return None
        yes = {"yes": True, "1": True, "no": False, "0": False}.get(v.lower())
        if yes is None:
            self.unreadable.append(name)
        return yes

    def count(self, *names: str) -> int | None:
        """The sum of counters; None when none of them was read."""
        got = [n for name in names if (n := self.num(name)) is not None]
        return int(sum(got)) if got else None


def _reasons(row: _Row) -> tuple[str, ...] | None:
    """The active thermal/power clock event reasons (either spelling, or the ``active`` bitmask)."""
    seen: list[str] = []
    read = False
    for key, (label, _bit) in NVIDIA_SLOWDOWNS.items():
        v = row.get(NEW_REASONS + key, OLD_REASONS + key)
        if v is None:
            continue
        if v not in ("Active", "Not Active"):
            row.unreadable.append(NEW_REASONS + key)
            continue
        read = True
        if v == "Active":
            seen.append(label)
    mask = row.get(NEW_REASONS + "active", OLD_REASONS + "active")
    if mask is not None and re.fullmatch(r"0x[0-9A-Fa-f]+", mask):
        read = True
        bits = int(mask, 16)
        seen += [lbl for lbl, bit in NVIDIA_SLOWDOWNS.values() if bits & bit and lbl not in seen]
    return tuple(seen) if read else None


def _any_flag(*flags: bool | None) -> bool | None:
    """True if any flag is; False if every flag read says no; None when none could be read."""
    read = [f for f in flags if f is not None]
    return any(read) if read else None


def _gts(gen: float | None) -> float | None:
    return PCIE_GEN_GTS.get(int(gen)) if gen is not None else None


def nvidia_row_sample(cells: Mapping[str, str], unasked: Sequence[str] = ()) -> GpuSample:
    """One GPU's sample from its nvidia-smi cells by field name (``--query-gpu`` or :func:`nvidia_q_rows`);
    ``unasked``: fields this driver did not know, listed as unreadable."""
    row = _Row(cells, unasked)
    idx = _int(row.get("index"))
    if idx is None:
        raise TelemetryError(f"nvidia-smi: no GPU index in {dict(cells)!r:.200}")
    reasons = _reasons(row)
    gen, gen_max = row.num("pcie.link.gen.current"), row.num("pcie.link.gen.max")
    width, width_max = row.num("pcie.link.width.current"), row.num("pcie.link.width.max")
    sample = GpuSample(
        gpu=idx,
        util_pct=row.num("utilization.gpu"),
        mem_used_mib=row.num("memory.used"),
        mem_total_mib=row.num("memory.total"),
        power_w=row.num("power.draw"),
        temp_c=row.num("temperature.gpu"),
        gfx_clock_mhz=row.num("clocks.sm", "clocks.current.sm"),
        mem_clock_mhz=row.num("clocks.mem", "clocks.current.memory"),
        ecc_correctable=row.count("ecc.errors.corrected.volatile.total"),
        ecc_uncorrectable=row.count("ecc.errors.uncorrected.volatile.total"),
        throttled=bool(reasons) if reasons is not None else None,
        pcie_width=int(width) if width is not None else None,
        pcie_speed_gts=_gts(gen),
        throttle_reasons=reasons,
        gfx_clock_max_mhz=row.num("clocks.max.sm"),
        pcie_width_max=int(width_max) if width_max is not None else None,
        pcie_speed_max_gts=_gts(gen_max),
        retired_pages=row.count("retired_pages.single_bit_ecc.count", "retired_pages.double_bit.count"),
        remapped_rows=row.count("remapped_rows.correctable", "remapped_rows.uncorrectable"),
        repair_pending=_any_flag(row.flag("retired_pages.pending"), row.flag("remapped_rows.pending")),
        remap_failed=row.flag("remapped_rows.failure"),
    )
    return dataclasses.replace(
        sample, unreadable=tuple(dict.fromkeys(row.unreadable)), refused=tuple(dict.fromkeys(unasked))
    )


def parse_nvidia_smi_csv(
    text: str, fields: Sequence[str] = NVIDIA_FIELDS, unasked: Sequence[str] = ()
) -> list[GpuSample]:
    """``nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits``: one line per GPU."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(fields):
            raise TelemetryError(
                f"nvidia-smi: expected {len(fields)} fields, got {len(cells)}: {line[:200]!r}"
            )
        out.append(nvidia_row_sample(dict(zip(fields, cells, strict=True)), unasked))
    return out


# ``nvidia-smi -q`` headings per query field; the first heading path present is read
_Q_PATHS: dict[str, tuple[tuple[str, ...], ...]] = {
    "index": (("Minor Number",),),
    "utilization.gpu": (("Utilization", "Gpu"),),
    "memory.used": (("FB Memory Usage", "Used"),),
    "memory.total": (("FB Memory Usage", "Total"),),
    "power.draw": (("GPU Power Readings", "Power Draw"), ("Power Readings", "Power Draw")),
    "temperature.gpu": (("Temperature", "GPU Current Temp"),),
    "clocks.sm": (("Clocks", "SM"),),
    "clocks.mem": (("Clocks", "Memory"),),
    "clocks.max.sm": (("Max Clocks", "SM"),),
    "pcie.link.gen.current": (("PCI", "GPU Link Info", "PCIe Generation", "Current"),),
    "pcie.link.gen.max": (("PCI", "GPU Link Info", "PCIe Generation", "Max"),),
    "pcie.link.width.current": (("PCI", "GPU Link Info", "Link Width", "Current"),),
    "pcie.link.width.max": (("PCI", "GPU Link Info", "Link Width", "Max"),),
    "retired_pages.single_bit_ecc.count": (("Retired Pages", "Single Bit ECC"),),
    "retired_pages.double_bit.count": (("Retired Pages", "Double Bit ECC"),),
    "remapped_rows.correctable": (("Remapped Rows", "Correctable Error"),),
    "remapped_rows.uncorrectable": (("Remapped Rows", "Uncorrectable Error"),),
    "retired_pages.pending": (("Retired Pages", "Pending Page Blacklist"), ("Retired Pages", "Pending")),
    "remapped_rows.pending": (("Remapped Rows", "Pending"),),
    "remapped_rows.failure": (("Remapped Rows", "Remapping Failure Occurred"),),
}
_Q_REASONS = {
    "sw_power_cap": ("SW Power Cap",),
    "hw_slowdown": ("HW Slowdown",),
    "hw_thermal_slowdown": ("HW Slowdown", "HW Thermal Slowdown"),
    "hw_power_brake_slowdown": ("HW Slowdown", "HW Power Brake Slowdown"),
    "sw_thermal_slowdown": ("SW Thermal Slowdown",),
}
_Q_GPU = re.compile(r"^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")


def _q_tree(lines: Sequence[str]) -> dict[tuple[str, ...], str]:
    """``Heading : value`` lines under their parents (by indentation) as path -> value."""
    out: dict[tuple[str, ...], str] = {}
    stack: list[tuple[int, str]] = []
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        key, sep, value = line.strip().partition(":")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = (*(k for _, k in stack), key.strip())
        if sep:
            out.setdefault(path, value.strip())
        stack.append((indent, key.strip()))
    return out


def nvidia_q_rows(text: str) -> list[dict[str, str]]:
    """Recorded ``nvidia-smi -q`` text as the cells ``--query-gpu`` would print per GPU (units dropped,
    ``N/A`` as ``[N/A]``): a heading the output lacks is ``[N/A]``, never 0."""
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if _Q_GPU.match(line.rstrip()):
            blocks.append([])
        elif blocks and line.startswith("    "):
            blocks[-1].append(line[4:])
    if not blocks:
        raise TelemetryError("nvidia-smi -q: no GPU section (a line like 'GPU 00000000:06:00.0')")
    rows = []
    for lines in blocks:
        tree = _q_tree(lines)

        def cell(*paths: tuple[str, ...], tree: dict[tuple[str, ...], str] = tree) -> str:
            for p in paths:
                if p in tree:
                    v = tree[p]
                    if not v or _NOT_READ.match(v):
                        return f"[{v or 'N/A'}]"
                    return v.split()[0] if v[0].isdigit() else v  # "210 MHz" -> 210, "Not Active" stays
            return "[N/A]"

        row = {f: cell(*paths) for f, paths in _Q_PATHS.items()}
        volatile = {p[-1]: v for p, v in tree.items() if p[:2] == ("ECC Errors", "Volatile")}
        for kind, want in (("corrected", "Correctable"), ("uncorrected", "Uncorrectable")):
            known = [n for k, v in volatile.items() if want in k.split() and (n := _num(v)) is not None]
            row[f"ecc.errors.{kind}.volatile.total"] = str(int(sum(known))) if known else "[N/A]"
        for section, prefix in (
            ("Clocks Event Reasons", NEW_REASONS),
            ("Clocks Throttle Reasons", OLD_REASONS),
        ):
            if any(p[0] == section for p in tree):
                for key, sub in _Q_REASONS.items():
                    row[prefix + key] = cell((section, *sub))
        rows.append(row)
    return rows


def parse_nvidia_smi_q(text: str) -> list[GpuSample]:
    """Recorded ``nvidia-smi -q`` text, read as the same fields as the ``--query-gpu`` query."""
    return [nvidia_row_sample(row) for row in nvidia_q_rows(text)]
