"""One streaming reader per node log: follow a file from a byte offset, across disconnects.

:class:`LogTailer` yields raw byte chunks (lines may be split between chunks; the parser copes). Its
``offset`` counts exactly the bytes handed out, so after a dropped connection it resumes at that offset
on a new connection: nothing is lost, nothing is repeated. Two modes:

* ``follow`` (default): ``tail -c +N -F`` on the node, so a new line arrives within ``coalesce`` s;
* ``poll``: a read from the offset every ``poll_interval`` seconds (for nodes without GNU tail).

Either way, reaching the offset costs a seek, not a read of the whole file: a poll on a 1 GB log costs
what it costs on a 1 kB one.

Following coalesces, within a latency budget of ``coalesce`` seconds: the node's tail sends what was
written every ``coalesce`` seconds in one write (see :func:`follow_command`). A tail without that option
(one write per line) shows itself by two chunks that come less than half a budget apart: from then
on this side waits half the budget after each chunk before the next read, so that tail's lines come
in at most two chunks per ``coalesce`` seconds. A tail that coalesces is read without that wait (a
timer and a wake-up per chunk less; its next write finds the read already waiting). A busy node costs
one SSH packet and one read (one chunk, one parse, one batch of events) per ``coalesce`` seconds
instead of one of each per line.

That cost is per packet (see benchmarks/fanout.py: decrypting a packet, which the OpenSSH client does
in C for a follower over SSH (:meth:`Transport.start_follow`), waking the reader, a parse), so a run
that follows many nodes gives each a larger budget, from
:func:`coalesce_for`: 0.15 s up to 85 nodes, then what keeps the packets of all nodes together near
``PACKETS_PER_S`` a second (0.45 s at 256 nodes), at most 0.5 s (from 285 nodes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import shlex
from collections.abc import AsyncIterator
from typing import Literal

from cvs_tui.core.transport import (
    Backoff,
    CommandError,
    CommandTimeout,
    ConnectError,
    ConnectionLostError,
    HostKeyError,
    NodeProcess,
    Transport,
)

log = logging.getLogger(__name__)

Mode = Literal["follow", "poll"]
COALESCE_S = 0.15  # the latency budget of a busy stream (see above) while few are followed
PACKETS_PER_S = 570  # with more streams, their budgets keep their packets together about this rate
MAX_COALESCE_S = 0.5  # ... but never wait longer than this
PROBE_TIMEOUT_S = 10.0  # after a drop: a node that answers no command in this long is still down


def _why(exc: Exception, name: str) -> str:
    """What was lost, in the transport's words, without the node's name (the caller names the node)."""
    text = str(exc)
    return text[len(name) + 2 :] if text.startswith(f"{name}: ") else text


def coalesce_for(streams: int) -> float:
    """The latency budget of each of ``streams`` streams followed at once (see above)."""
    return min(MAX_COALESCE_S, max(COALESCE_S, streams / PACKETS_PER_S))


def follow_command(path: str, offset: int, interval: float = 0.0) -> str:
    """``tail`` from byte ``offset`` (0-based), following the name (the file may appear later).

    With ``interval``, GNU tail looks every ``interval`` seconds instead of on every write and sends
    what it found in one write: one SSH packet per interval, not one per line, which is what the
    launcher's SSH client pays for. A tail without that option (busybox) follows on every write.
    """
    q, start = shlex.quote(path), f"-c +{offset + 1}"
    plain = f"exec tail {start} -F -- {q} 2>/dev/null"
    if interval <= 0:
        return plain
    polled = f"exec tail ---disable-inotify -s {interval:g} {start} -F -- {q} 2>/dev/null"
    return f"if tail ---disable-inotify --version >/dev/null 2>&1; then {polled}; else {plain}; fi"


class LogTailer:
    """Follows one file on one node from ``offset``; reconnects with backoff after a drop."""

    def __init__(
        self,
        transport: Transport,
        path: str,
        *,
        offset: int = 0,
        mode: Mode = "follow",
        poll_interval: float = 0.5,
        chunk_size: int = 1 << 20,
        coalesce: float = COALESCE_S,
        backoff: Backoff | None = None,
        probe_timeout: float = PROBE_TIMEOUT_S,
    ) -> None:
        self.transport = transport
        self.path = path
        self.offset = offset
        self.mode: Mode = mode
        self.poll_interval = poll_interval
        self.chunk_size = chunk_size
        self.coalesce = coalesce
        self.backoff = backoff or Backoff(attempts=8, initial=0.2, factor=2.0, maximum=5.0)
        self.reconnects = 0  # how many times the stream was re-opened after a drop
        # why the node cannot be followed now (its stream dropped and it has not answered since), None
        # while it can: the watchdog calls a node lost when this lasts (watchdog.lost_reason)
        self.down: str | None = None
        self._first_down = ""
        self.probe_timeout = probe_timeout
        self._stop = asyncio.Event()
        self._reading: asyncio.Task[object] | None = None  # the task waiting in a follow read
        self._stop_cancels = False  # stop() cancelled that task's read

    def stop(self) -> None:
        """End :meth:`chunks` at the next opportunity (the data already yielded stays counted)."""
        self._stop.set()
        if self._reading is not None and not self._stop_cancels:
            # ends the read (the task goes on, see _follow); hands out nothing: the offset counts only
            # what was handed out, and what the read had not taken yet is read again from there
            self._stop_cancels = True
            self._reading.cancel()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    async def chunks(self) -> AsyncIterator[bytes]:
        """Byte chunks as they are appended, until :meth:`stop`.

        Raises ConnectError when the node stays unreachable through every backoff step.
        """
        failures = 0
        delays = self.backoff.delays()
        while not self._stop.is_set():
            try:
                if failures:
                    # one attempt per backoff step: a command's round trip, which also reconnects (the
                    # connection may look open while the node no longer answers)
                    await self.transport.run(":", self.probe_timeout)
                    self.down = None
                    self.reconnects += 1
                gen = self._follow() if self.mode == "follow" else self._poll()
                async for data in gen:
                    failures, self.down = 0, None
                    self.offset += len(data)
                    yield data
                if self._stop.is_set():
                    return
            except HostKeyError:
                raise  # a different machine answers now: never resume on it
            except (ConnectionLostError, ConnectError, CommandError, CommandTimeout) as exc:
                # CommandError: tail itself stopped (e.g. the node's shell was killed); resume the same way.
                if not isinstance(exc, CommandError) or self.down is not None:
                    why = _why(exc, self.transport.name)
                    # what was lost first, and what the latest attempt to get it back met
                    first = self._first_down = self._first_down if self.down is not None else why
                    self.down = first if why == first else f"{first}; then {why}"
                if failures >= len(delays):
                    raise ConnectError(
                        f"{self.transport.name}: gave up following {self.path} after "
                        f"{failures} retries: {exc}"
                    ) from exc
                delay = delays[failures]
                failures += 1
                log.info(
                    "%s: %s; resuming %s at byte %d in %.1fs",
                    self.transport.name,
                    exc,
                    self.path,
                    self.offset,
                    delay,
                )
                if await self._sleep_or_stop(delay):
                    return

    async def _sleep_or_stop(self, delay: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), delay)
        return self._stop.is_set()

    async def _follow(self) -> AsyncIterator[bytes]:
        proc: NodeProcess = await self.transport.start_follow(
            follow_command(self.path, self.offset, self.coalesce)
        )
        loop, last, eager = asyncio.get_running_loop(), -math.inf, False  # when the last chunk came
        task = asyncio.current_task()
        assert task is not None
        try:
            while not self._stop.is_set():
                # a read that stop() can end: it cancels this task while it waits here, and the cancel
                # is taken back below (cheaper than a task per read, or waiting on the read and the
                # stop event together, which hundreds of streams would pay for every chunk)
                self._reading = task
                try:
                    data = await proc.read(self.chunk_size)
                except asyncio.CancelledError:
                    if self._stop_cancels and task.uncancel() == 0:
                        return  # stop() alone cancelled: the stream ends
                    raise  # cancelled by someone else too: that cancel goes on
                finally:
                    self._reading = None
                if not data:
                    raise CommandError(f"{self.transport.name}: tail of {self.path} ended", -1)
                now = loop.time()
                eager, last = eager or now - last < self.coalesce / 2, now  # stays so: one tail, one kind
                yield data
                if eager and self.coalesce > 0 and not self._stop.is_set():
                    # a tail that writes every line: what arrives meanwhile waits in the channel's
                    # buffer, and the next read takes all of it
                    await asyncio.sleep(self.coalesce / 2)
        finally:
            await proc.close()

    async def _poll(self) -> AsyncIterator[bytes]:
        while not self._stop.is_set():
            try:
                data = await self.transport.read_file(self.path, self.offset, self.chunk_size)
            except FileNotFoundError:
                data = b""
            if data:
                yield data
                continue
            if await self._sleep_or_stop(self.poll_interval):
                return

    async def read_rest(self) -> bytes:
        """Everything after ``offset`` now (the final drain after the trainer exited); advances ``offset``."""
        parts = []
        while True:
            try:
                data = await self.transport.read_file(self.path, self.offset, self.chunk_size)
            except FileNotFoundError:
                break
            if not data:
                break
            self.offset += len(data)
            parts.append(data)
        return b"".join(parts)
