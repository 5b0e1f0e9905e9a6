"""Follow a node's kernel log live over its existing transport: ``cat /dev/kmsg``, sequence-numbered.

``/dev/kmsg`` hands out one record per line, ``PRI,SEQ,USEC,FLAGS[,...];MESSAGE`` (continuation lines
start with a space and carry ``KEY=VALUE`` device info). The sequence number is the record's identity
for this boot, which gives the same discipline the trainer-log tailer gets from byte offsets:

* **start at "now"**: :meth:`KernelLogFollower.start` reads the records already buffered (without
  blocking: ``dd iflag=nonblock``) and keeps the last sequence number; only later records count;
* **no loss, no repeats across reconnects**: a re-opened ``cat /dev/kmsg`` replays the whole ring
  buffer, and every record whose sequence number is not above the last one handed out is dropped; a
  jump (the ring buffer overwrote records while we were away) is counted in ``missed``;
* **wall time**: ``USEC`` is the kernel's monotonic clock since boot; the probe reads the node's
  ``/proc/uptime`` and ``date +%s.%N`` together, so ``wall = boot_epoch + usec / 1e6`` (about 10 ms
  accurate: /proc/uptime has two decimals).

Trust: only records the kernel itself logged (facility 0) can become findings. A process that writes to
``/dev/kmsg`` gets facility 1 (user) or higher from the kernel whatever it asks for, so a trainer, a
test or a daemon echoing ``NVRM: Xid ... 79`` there cannot fail a run or blame a healthy node; such
records are counted in :attr:`KernelLogFollower.untrusted` and otherwise ignored.

Devices: the probe also lists ``/sys/bus/pci/devices``. A finding on a PCI address the node does not
have says so in its detail and is a warning (it cannot be about this node's hardware); a fatal line
on a device the node has stays fatal. When the list cannot be read nothing is downgraded.

Access: ``plain`` reads as the SSH user; ``sudo`` prefixes ``sudo -n`` (never prompts). When the log
cannot be read (``dmesg_restrict=1`` and no CAP_SYSLOG, no sudo rule, no /dev/kmsg), the node's state is
``not checked`` with the reason, never ``ok``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal

from cvs_tui.core.events import Severity
from cvs_tui.core.health.incidents import IncidentGrouper
from cvs_tui.core.health.model import HealthFinding, NodeHealth
from cvs_tui.core.health.signatures import SIGNATURES, Signature, match_message
from cvs_tui.core.transport import (
    Backoff,
    CommandError,
    CommandTimeout,
    ConnectError,
    ConnectionLostError,
    HostKeyError,
    NodeProcess,
    Transport,
    TransportError,
)

log = logging.getLogger(__name__)

Access = Literal["plain", "sudo"]

# Facilities whose records can become findings: 0 = the kernel. Anything written from user space
# through /dev/kmsg carries 1 (user) or more (audit M5, cases HK02-HK06).
TRUSTED_FACILITIES: frozenset[int] = frozenset({0})

# PRI,SEQ,USEC,FLAGS[,more fields];MESSAGE. The flags exclude ',' and the optional fields start with
# one, so no two parts can match the same bytes: linear on any line (audit case HL1).
_RECORD = re.compile(rb"^(\d{1,10}),(\d{1,20}),(\d{1,20}),([^;,]*)(?:,[^;]*)?;(.*)$", re.DOTALL)
_DENIED = re.compile(
    r"Operation not permitted|Permission denied|password is required|a terminal is required"
    r"|not in the sudoers|may not run sudo|command not found|No such file or directory|not allowed to execute"
)


@dataclass(frozen=True, slots=True)
class KmsgRecord:
    seq: int
    usec: int  # monotonic microseconds since boot
    level: int  # 0 emerg .. 7 debug
    facility: int  # 0 kernel, 1 user (lines written to /dev/kmsg by a process), 3 daemon, ...
    message: str  # non-printable bytes stay escaped as the kernel wrote them (\xNN)


def parse_record(line: bytes) -> KmsgRecord | None:
    """One kmsg line (without its newline) as a record; None for continuation lines and garbage."""
    m = _RECORD.match(line)
    if m is None:
        return None
    pri = int(m.group(1))
    msg = m.group(5).decode("utf-8", errors="replace")
    return KmsgRecord(int(m.group(2)), int(m.group(3)), pri & 7, pri >> 3, msg)


def _sudo(access: Access) -> str:
    return "sudo -n " if access == "sudo" else ""


def probe_command(access: Access) -> str:
    """Uptime, wall clock, the node's PCI devices, then the last buffered record (or why it is unreadable)."""
    # dd reads one record per read(); EAGAIN ("Resource temporarily unavailable") ends the backlog.
    return (
        "LC_ALL=C; export LC_ALL; cut -d' ' -f1 /proc/uptime; date +%s.%N; "
        "echo \"pci: $(ls /sys/bus/pci/devices 2>/dev/null | tr '\\n' ' ')\"; "
        f"{_sudo(access)}dd if=/dev/kmsg iflag=nonblock bs=65536 status=none 2>&1 | grep -av '^ ' | tail -n 2"
    )


def follow_command(access: Access) -> str:
    return f"LC_ALL=C exec {_sudo(access)}cat /dev/kmsg"


class KernelLogUnreadable(Exception):
    """The node's kernel log cannot be read; the message is the reason shown as ``not checked``."""


@dataclass(frozen=True, slots=True)
class ProbeResult:
    last_seq: int
    boot_epoch: float  # wall time of usec 0
    pci_devices: frozenset[str] | None = None  # addresses in /sys/bus/pci/devices; None = not read


_PCI_LIST = re.compile(r"^pci:(?P<list>[0-9a-fA-F:. ]*)$")
_MAX_EPOCH = 1e11  # year 5138: anything later is not a clock


def parse_probe(out: str, access: Access) -> ProbeResult:
    lines = [ln for ln in out.splitlines() if ln.strip()]
    if len(lines) < 2:
        raise KernelLogUnreadable(f"kernel log probe printed nothing useful: {out.strip()[:200]!r}")
    clock = " ".join(lines[:2])[:200]
    try:
        uptime, now = float(lines[0]), float(lines[1])
    except ValueError:
        raise KernelLogUnreadable(f"cannot read the node's clock: {clock}") from None
    # nan/inf/1e308 parse as floats but every finding's wall time would be non-finite (HK32-HK34)
    if not (math.isfinite(uptime) and math.isfinite(now) and 0 <= uptime < now < _MAX_EPOCH):
        raise KernelLogUnreadable(f"the node's clock is not a time: uptime and date printed {clock!r}")
    last_seq = -1
    pci: frozenset[str] | None = None
    for ln in lines[2:]:
        listed = _PCI_LIST.match(ln.strip())
        if listed is not None:
            found = frozenset(a.lower() for a in listed.group("list").split())
            pci = found or None  # an empty list means /sys was not readable, not "no devices"
            continue
        rec = parse_record(ln.encode())
        if rec is not None:
            last_seq = rec.seq
        elif _DENIED.search(ln) and "temporarily unavailable" not in ln:
            how = "with sudo -n" if access == "sudo" else "as the login user (try health.kernel_log: sudo)"
            raise KernelLogUnreadable(f"cannot read /dev/kmsg {how}: {ln.strip()[:200]}")
    return ProbeResult(last_seq, now - uptime, pci)


class KernelLogFollower:
    """Follows one node's kernel log from "now", yielding new records or matched findings."""

    def __init__(
        self,
        transport: Transport,
        *,
        node: int,
        host: str = "",
        access: Access = "plain",
        signatures: tuple[Signature, ...] = SIGNATURES,
        backoff: Backoff | None = None,
        probe_timeout: float = 30.0,
    ) -> None:
        self.transport = transport
        self.node = node
        self.host = host or transport.name
        self.access: Access = access
        self.signatures = signatures
        self.backoff = backoff or Backoff(attempts=8, initial=0.2, factor=2.0, maximum=5.0)
        self.probe_timeout = probe_timeout
        self.health = NodeHealth(node=node, host=self.host)
        self.last_seq = -1  # the highest sequence number handed out (or skipped at start)
        self.boot_epoch: float | None = None
        self.missed = 0  # records the ring buffer overwrote before we could read them
        self.untrusted = 0  # records written from user space (facility != 0): never findings
        self.pci_devices: frozenset[str] | None = None  # from the probe; None = unknown
        self.incidents = IncidentGrouper()
        self.reconnects = 0
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    def wall_time(self, usec: int) -> float:
        assert self.boot_epoch is not None, "start() first"
        return self.boot_epoch + usec / 1e6

    async def start(self) -> bool:
        """Probe access, clock and the current end of the log; False (``not checked``) if unreadable."""
        try:
            r = await self.transport.run(probe_command(self.access), timeout=self.probe_timeout)
            probe = parse_probe(r.out + r.err, self.access)
        except KernelLogUnreadable as exc:
            self.health.mark_not_checked(str(exc))
            return False
        except TransportError as exc:
            self.health.mark_not_checked(f"kernel log probe failed: {exc}")
            return False
        self.last_seq = probe.last_seq
        self.boot_epoch = probe.boot_epoch
        self.pci_devices = probe.pci_devices
        self.health.mark_checked()
        return True

    async def records(self) -> AsyncIterator[KmsgRecord]:
        """New records in sequence order until :meth:`stop`; reconnects with backoff after a drop."""
        if self.boot_epoch is None:
            raise RuntimeError("KernelLogFollower.start() must succeed before records()")
        failures = 0
        delays = self.backoff.delays()
        while not self._stop.is_set():
            try:
                if failures:
                    await self.transport.connect()
                    self.reconnects += 1
                async for rec in self._follow():
                    failures = 0
                    yield rec
                if self._stop.is_set():
                    return
                raise CommandError(f"{self.transport.name}: cat /dev/kmsg ended", -1)
            except HostKeyError:
                raise
            except (ConnectionLostError, ConnectError, CommandError, CommandTimeout) as exc:
                if failures >= len(delays):
                    self.health.mark_not_checked(f"kernel log lost: {exc}")
                    raise ConnectError(f"{self.transport.name}: gave up following /dev/kmsg: {exc}") from exc
                delay = delays[failures]
                failures += 1
                log.info(
                    "%s: %s; re-reading /dev/kmsg after seq %d in %.1fs", self.host, exc, self.last_seq, delay
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), delay)

    async def findings(self) -> AsyncIterator[HealthFinding]:
        """Findings from new records, recorded in :attr:`health` as they are yielded."""
        async for rec in self.records():
            f = self.finding(rec)
            if f is None:
                continue
            self.health.add(f)
            yield f

    def finding(self, rec: KmsgRecord) -> HealthFinding | None:
        """The finding one record gives (None: no signature, or not logged by the kernel)."""
        if rec.facility not in TRUSTED_FACILITIES:
            if self.untrusted == 0:
                log.info("%s: ignoring records written to /dev/kmsg from user space", self.host)
            self.untrusted += 1
            return None
        hit = match_message(rec.message, self.signatures)
        if hit is None:
            return None
        severity, detail = hit.severity, hit.detail
        if hit.device and hit.device not in detail:
            detail = f"{detail} on PCI {hit.device}" if detail else f"PCI {hit.device}"
        present = None if hit.device is None or self.pci_devices is None else hit.device in self.pci_devices
        if present is False:
            # not this node's hardware (F2): said plainly, and never a reason to fail its runs
            severity = Severity.WARNING
            detail += ": this node has no such PCI device (not in /sys/bus/pci/devices), not counted"
        incident = self.incidents.add(hit, rec.usec / 1e6)
        if incident.lines > 1:  # a later line of one fault: say which (its first line was the finding)
            detail += f"; incident {incident.number}, opened by {incident.first.signature}"
        return HealthFinding(
            node=self.node,
            signature=hit.signature,
            severity=severity,
            line=rec.message,
            kernel_time=rec.usec / 1e6,
            wall_time=self.wall_time(rec.usec),
            host=self.host,
            detail=detail,
            seq=rec.seq,
            device=hit.device,
            incident=incident.number,
        )

    def _accept(self, rec: KmsgRecord) -> bool:
        if rec.seq <= self.last_seq:
            return False  # already handed out (or before "now"): a replay after reconnect
        if self.last_seq >= 0 and rec.seq > self.last_seq + 1:
            self.missed += rec.seq - self.last_seq - 1
        self.last_seq = rec.seq
        return True

    async def _follow(self) -> AsyncIterator[KmsgRecord]:
        proc: NodeProcess = await self.transport.start_process(follow_command(self.access))
        stop_task = asyncio.ensure_future(self._stop.wait())
        buf = b""
        try:
            while True:
                read_task = asyncio.ensure_future(proc.read())
                done, _ = await asyncio.wait({read_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
                if read_task not in done:
                    read_task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await read_task
                    return
                data = read_task.result()
                if not data:
                    err = (await proc.read_stderr()).decode(errors="replace").strip()
                    if _DENIED.search(err):
                        self.health.mark_not_checked(f"cannot read /dev/kmsg: {err[:200]}")
                    raise CommandError(f"{self.transport.name}: cat /dev/kmsg ended: {err[:200]}", -1)
                buf += data
                *lines, buf = buf.split(b"\n")
                for ln in lines:
                    rec = parse_record(ln)
                    if rec is not None and self._accept(rec):
                        yield rec
        finally:
            stop_task.cancel()
            await proc.close()
