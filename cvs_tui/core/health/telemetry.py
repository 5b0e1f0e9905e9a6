"""GPU telemetry per node: parse ``amd-smi``, ``rocm-smi`` and ``nvidia-smi`` output, sample at an
interval over the node's transport, and diff ECC counters between the start and end of a run.

Tool choice on a node: ``amd-smi metric --json``, else ``rocm-smi -a --json``, else ``nvidia-smi
--query-gpu=... --format=csv,noheader,nounits`` (the first one found on PATH, with ``/opt/rocm/bin``
added because non-login shells often lack it). amd-smi's JSON differs across versions: a list or
``{"gpu_data": [...]}``, values bare or ``{"value", "unit"}``, ``"N/A"`` for what a GPU lacks; all
are read. A value a tool does not report is None, never 0.

nvidia-smi is asked for the fields the straggler's cause needs besides the usual ones: the clock event
reasons (``clocks_event_reasons.*``, named ``clocks_throttle_reasons.*`` before driver 535), the SM
clock's maximum, the PCIe link's generation and width (current and maximum), retired pages and remapped
rows. A driver that does not know a field refuses the whole query (``Field "x" is not a valid field to
query``); the sampler then asks again under the old reason names, or without that field, and every
sample lists the fields it could not ask for in ``unreadable``, with those the GPU answered ``[N/A]`` or
``[Not Supported]``. Recorded ``nvidia-smi -q`` text (its "Clocks Event Reasons"/"Clocks Throttle
Reasons" and "GPU Link Info" sections included) reads the same way (:func:`nvidia_q_rows`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import re
import shlex
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cvs_tui.core.events import GpuSample, GpuTelemetryEvent
from cvs_tui.core.transport import Transport, TransportError

DEFAULT_INTERVAL_S = 5.0
TOOLS: tuple[str, ...] = ("amd-smi", "rocm-smi", "nvidia-smi")
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
)
OLD_REASONS, NEW_REASONS = "clocks_throttle_reasons.", "clocks_event_reasons."
PCIE_GEN_GTS: dict[int, float] = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}


def nvidia_query(fields: Sequence[str] = NVIDIA_FIELDS) -> str:
    return f"nvidia-smi --query-gpu={','.join(fields)} --format=csv,noheader,nounits"


COMMANDS: dict[str, str] = {
    "amd-smi": "amd-smi metric --json",
    "rocm-smi": "rocm-smi -a --json",
    "nvidia-smi": nvidia_query(),
}


_UNKNOWN_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')
log = logging.getLogger(__name__)


class TelemetryError(Exception):
    """A tool's output could not be read; the message names the tool and what was wrong."""


def sampling_interval(hardware: str, configured: float | None = None) -> float | None:
    """The sampling interval for a suite: None (off) for ``hardware: cpu``, else the configured or 5 s."""
    if hardware == "cpu":
        return None
    if configured is not None and configured <= 0:
        raise ValueError("health.telemetry_interval must be > 0 seconds")
    return configured if configured is not None else DEFAULT_INTERVAL_S


# ---------------------------------------------------------------------------------------------------------
# Parsers
# ---------------------------------------------------------------------------------------------------------
_NUM = re.compile(r"^\s*\(?\s*([-+]?\d+(?:\.\d+)?)")


def _num(v: Any) -> float | None:
    """A number from 72, "72", "72.0", "(800Mhz)", {"value": 72, "unit": "%"}; None for N/A & co."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, Mapping):
        return _num(v.get("value"))
    if isinstance(v, str):
        m = _NUM.match(v)
        return float(m.group(1)) if m else None
    return None


def _mib(v: Any) -> float | None:
    """Memory in MiB from an amd-smi ``{"value", "unit"}`` (amd-smi's "MB" are MiB)."""
    n = _num(v)
    if n is None:
        return None
    unit = str(v.get("unit", "MB")).upper() if isinstance(v, Mapping) else "MB"
    return n * {"B": 1 / 2**20, "KB": 1 / 1024, "MB": 1.0, "GB": 1024.0}.get(unit, 1.0)


def _int(v: Any) -> int | None:
    n = _num(v)
    return int(n) if n is not None else None


def _first(d: Mapping[str, Any], *keys: str) -> Any:
    for k in keys:
        if k in d and _num(d[k]) is not None:
            return d[k]
    return None


def _clock(clocks: Any, prefix: str) -> float | None:
    if not isinstance(clocks, Mapping):
        return None
    for key in (f"{prefix}_0", f"{prefix.upper()}_0"):
        c = clocks.get(key)
        if isinstance(c, Mapping):
            return _num(c.get("clk"))
    return None


def parse_amd_smi_metric(text: str) -> list[GpuSample]:
    """``amd-smi metric --json``: a list of GPUs or ``{"gpu_data": [...]}``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TelemetryError(f"amd-smi: output is not JSON ({exc})") from None
    gpus = data.get("gpu_data") if isinstance(data, Mapping) else data
    if not isinstance(gpus, list):
        raise TelemetryError("amd-smi: JSON has neither a GPU list nor gpu_data")
    out = []
    for g in gpus:
        if not isinstance(g, Mapping) or _int(g.get("gpu")) is None:
            continue
        usage = v if isinstance(v := g.get("usage"), Mapping) else {}
        mem = v if isinstance(v := g.get("mem_usage"), Mapping) else {}
        power = v if isinstance(v := g.get("power"), Mapping) else {}
        temp = v if isinstance(v := g.get("temperature"), Mapping) else {}
        ecc = v if isinstance(v := g.get("ecc"), Mapping) else {}
        pcie = v if isinstance(v := g.get("pcie"), Mapping) else {}
        out.append(
            GpuSample(
                gpu=_int(g.get("gpu")) or 0,
                util_pct=_num(usage.get("gfx_activity")),
                mem_used_mib=_mib(mem.get("used_vram")),
                mem_total_mib=_mib(mem.get("total_vram")),
                power_w=_num(_first(power, "socket_power", "average_socket_power", "current_socket_power")),
                temp_c=_num(_first(temp, "hotspot", "edge")),
                gfx_clock_mhz=_clock(g.get("clock"), "gfx"),
                mem_clock_mhz=_clock(g.get("clock"), "mem"),
                ecc_correctable=_int(ecc.get("total_correctable_count")),
                ecc_uncorrectable=_int(ecc.get("total_uncorrectable_count")),
                throttled=_throttled(power.get("throttle_status"), g.get("throttle")),
                pcie_width=_int(pcie.get("width")),
                pcie_speed_gts=_num(pcie.get("speed")),
            )
        )
    return out


def _throttled(status: Any, throttle: Any) -> bool | None:
    """amd-smi's ``power.throttle_status`` ("THROTTLED"/"UNTHROTTLED"), else its ``throttle`` block's
    violation percentages (metrics 1.6+: any above 0 is a throttle); None when neither is reported."""
    if isinstance(status, str) and status.strip().upper() in ("THROTTLED", "UNTHROTTLED"):
        return status.strip().upper() == "THROTTLED"
    if isinstance(throttle, Mapping):
        pcts = [_num(v) for k, v in throttle.items() if "violation" in str(k)]
        seen = [p for p in pcts if p is not None]
        if seen:
            return max(seen) > 0
    return None


def parse_rocm_smi_json(text: str) -> list[GpuSample]:
    """``rocm-smi -a --json``: ``{"card0": {"GPU use (%)": "0", ...}, "system": {...}}``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TelemetryError(f"rocm-smi: output is not JSON ({exc})") from None
    if not isinstance(data, Mapping):
        raise TelemetryError("rocm-smi: JSON is not an object of cards")
    out = []
    for key, card in data.items():
        m = re.fullmatch(r"card(\d+)", str(key))
        if m is None or not isinstance(card, Mapping):
            continue
        used_b = _num(card.get("VRAM Total Used Memory (B)"))
        total_b = _num(card.get("VRAM Total Memory (B)"))
        out.append(
            GpuSample(
                gpu=int(m.group(1)),
                util_pct=_num(card.get("GPU use (%)")),
                mem_used_mib=used_b / 2**20 if used_b is not None else None,
                mem_total_mib=total_b / 2**20 if total_b is not None else None,
                power_w=_num(
                    _first(
                        card,
                        "Average Graphics Package Power (W)",
                        "Current Socket Graphics Package Power (W)",
                    )
                ),
                temp_c=_num(
                    _first(card, "Temperature (Sensor junction) (C)", "Temperature (Sensor edge) (C)")
                ),
                gfx_clock_mhz=_num(card.get("sclk clock speed:")),
                mem_clock_mhz=_num(card.get("mclk clock speed:")),
            )
        )
    return sorted(out, key=lambda s: s.gpu)


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
    )
    return dataclasses.replace(sample, unreadable=tuple(dict.fromkeys(row.unreadable)))


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


PARSERS: dict[str, Callable[[str], list[GpuSample]]] = {
    "amd-smi": parse_amd_smi_metric,
    "rocm-smi": parse_rocm_smi_json,
    "nvidia-smi": parse_nvidia_smi_csv,
}


# ---------------------------------------------------------------------------------------------------------
# ECC start/end comparison
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class EccDelta:
    """How much a GPU's ECC totals rose between two samples; None where either sample lacks them."""

    gpu: int
    correctable: int | None
    uncorrectable: int | None

    @property
    def rose(self) -> bool:
        return bool(self.correctable) or bool(self.uncorrectable)


def _diff(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else max(0, b - a)  # a counter reset (GPU reset) is not negative


def ecc_deltas(start: Sequence[GpuSample], end: Sequence[GpuSample]) -> list[EccDelta]:
    """Per GPU present in both: end minus start of the correctable and uncorrectable totals."""
    first = {s.gpu: s for s in start}
    return [
        EccDelta(
            s.gpu,
            _diff(first[s.gpu].ecc_correctable, s.ecc_correctable),
            _diff(first[s.gpu].ecc_uncorrectable, s.ecc_uncorrectable),
        )
        for s in end
        if s.gpu in first
    ]


# ---------------------------------------------------------------------------------------------------------
# Sampler
# ---------------------------------------------------------------------------------------------------------
class TelemetrySampler:
    """Samples one node's GPUs over its transport every ``interval`` seconds."""

    def __init__(
        self,
        transport: Transport,
        *,
        node: int,
        host: str = "",
        interval: float = DEFAULT_INTERVAL_S,
        tool: str | None = None,
        extra_path: Sequence[str] = ("/opt/rocm/bin",),
        timeout: float = 20.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if tool is not None and tool not in COMMANDS:
            raise ValueError(f"unknown telemetry tool {tool!r}; one of {', '.join(TOOLS)}")
        self.transport = transport
        self.node = node
        self.host = host or transport.name
        self.interval = interval
        self.tool = tool
        self.extra_path = tuple(extra_path)
        self.timeout = timeout
        self.clock = clock
        self.nvidia_fields = list(NVIDIA_FIELDS)
        self.nvidia_unasked: list[str] = []  # fields this node's nvidia-smi does not know
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    def _env(self) -> str:
        if not self.extra_path:
            return ""
        return f'PATH={shlex.quote(":".join(self.extra_path))}:"$PATH" '

    async def detect(self) -> str | None:
        """The first tool on the node's PATH (amd-smi, rocm-smi, nvidia-smi), or None."""
        checks = " || ".join(f"{{ command -v {t} >/dev/null 2>&1 && echo {t}; }}" for t in TOOLS)
        r = await self.transport.run(f"{self._env()}sh -c {shlex.quote(checks)}", timeout=self.timeout)
        found = r.out.strip().splitlines()
        self.tool = found[0] if found and found[0] in COMMANDS else None
        return self.tool

    async def sample(self) -> GpuTelemetryEvent:
        """One sample of every GPU (detects the tool first if needed). Raises TelemetryError."""
        if self.tool is None and await self.detect() is None:
            raise TelemetryError(f"{self.host}: no GPU telemetry tool ({', '.join(TOOLS)}) on PATH")
        assert self.tool is not None
        at = self.clock()
        while True:
            command = nvidia_query(self.nvidia_fields) if self.tool == "nvidia-smi" else COMMANDS[self.tool]
            try:
                r = await self.transport.run(self._env() + command, timeout=self.timeout)
            except TransportError as exc:
                raise TelemetryError(f"{self.host}: {self.tool} failed: {exc}") from exc
            if r.rc == 0 or not self._drop_unknown_field(f"{r.err}\n{r.out}"):
                break
        if r.rc != 0:
            raise TelemetryError(f"{self.host}: {self.tool} exited {r.rc}: {(r.err or r.out).strip()[:200]}")
        if self.tool == "nvidia-smi":
            samples = parse_nvidia_smi_csv(r.out, self.nvidia_fields, self.nvidia_unasked)
        else:
            samples = PARSERS[self.tool](r.out)
        return GpuTelemetryEvent(
            node=self.node, host=self.host, tool=self.tool, samples=tuple(samples), at=at
        )

    def _drop_unknown_field(self, said: str) -> bool:
        """nvidia-smi refused a field this driver does not know: ask for the reasons under their old
        names (drivers before 535), else without that field (it is then listed as unreadable)."""
        m = _UNKNOWN_FIELD.search(said)
        if self.tool != "nvidia-smi" or m is None or m.group(1) not in self.nvidia_fields[1:]:
            return False  # not a field refusal, or the GPU index itself: nothing to ask without
        field = m.group(1)
        if field.startswith(NEW_REASONS):
            self.nvidia_fields = [f.replace(NEW_REASONS, OLD_REASONS, 1) for f in self.nvidia_fields]
        else:
            self.nvidia_fields.remove(field)
            self.nvidia_unasked.append(field)
        log.info("%s: nvidia-smi does not know %s; asking without it", self.host, field)
        return True

    async def samples(self) -> AsyncIterator[GpuTelemetryEvent | TelemetryError]:
        """A sample every ``interval`` s until :meth:`stop`; a failed sample is yielded as its error."""
        while not self._stop.is_set():
            started = self.clock()
            try:
                yield await self.sample()
            except TelemetryError as exc:
                yield exc
            wait = max(0.0, self.interval - (self.clock() - started))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), wait)
