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
import json
import logging
import re
import shlex
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cvs_tui.core.events import GpuSample, GpuTelemetryEvent
from cvs_tui.core.health.nvidia_smi import (
    NEW_REASONS,
    NVIDIA_FIELDS,
    OLD_REASONS,
    nvidia_query,
    parse_nvidia_smi_csv,
)
from cvs_tui.core.health.smi_values import TelemetryError, _first, _int, _mib, _num
from cvs_tui.core.transport import Transport, TransportError

DEFAULT_INTERVAL_S = 5.0
TOOLS: tuple[str, ...] = ("amd-smi", "rocm-smi", "nvidia-smi")


COMMANDS: dict[str, str] = {
    "amd-smi": "amd-smi metric --json",
    "rocm-smi": "rocm-smi -a --json",
    "nvidia-smi": nvidia_query(),
}


_UNKNOWN_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')
log = logging.getLogger(__name__)


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
