"""How commands reach a node: the surface every transport offers, its errors and the helpers they share.

The transports themselves live with the launcher that uses them: a local shell and one reused SSH
connection in :mod:`cvs_tui.core.runner.nodes` (``local``, ``ssh``), ``srun`` steps in
:mod:`cvs_tui.core.runner.slurm.transport`. Everything above them (containers, launcher scripts, tailing,
node health, the stage pipeline) is written once against :class:`Transport`:

* ``run(cmd, timeout)`` -> :class:`CommandResult` ``(rc, out, err)``; a timeout kills the command and
  raises :class:`CommandTimeout`.
* ``write_file(path, data, mode)`` (atomic: temp file + rename) and ``read_file(path, offset, length)``
  (seeks to ``offset``: the cost does not grow with the file's size).
* ``start_process(cmd)`` -> :class:`NodeProcess` (read stdout as bytes, wait, terminate),
  ``start_follow(cmd)`` (the same, for a log follower that lives as long as the run) and ``stream(cmd)``
  (an async iterator of stdout byte chunks).
* ``forward_unix_socket(remote_path)`` -> a local socket path reaching ``remote_path`` on the node
  (the node's Docker socket, for aiodocker).

Commands are shell command lines; every value the caller puts in one must go through ``shlex.quote``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shlex
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

# Remote helper exit statuses that mean "no such file" (chosen outside the range tail/head use).
RC_NO_FILE = 44
READ_CHUNK = 65536
log = logging.getLogger(__name__)


_VAR_REF = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def expanding_quote(value: str) -> str:
    """Quote ``value`` for sh, except ``$NAME`` / ``${NAME}`` references, which expand.

    Upstream CVS exports cluster ``env_vars`` through the shell, and its own template shows
    ``"PATH": "/opt/rocm/bin:$PATH"``. Only plain variable references are left to the shell; every other
    character (``$(...)``, backquotes, ``;``, quotes, newlines) is single-quoted and never executed.
    """
    out: list[str] = []
    pos = 0
    for m in _VAR_REF.finditer(value):
        if m.start() > pos:
            out.append(shlex.quote(value[pos : m.start()]))
        out.append('"${' + (m.group(1) or m.group(2)) + '}"')
        pos = m.end()
    if pos < len(value):
        out.append(shlex.quote(value[pos:]))
    return "".join(out) or "''"


def export_prefix(env: dict[str, str] | None) -> str:
    """``export A=...; export B=...; `` for ``env`` (names checked, values through expanding_quote)."""
    parts = []
    for k, v in (env or {}).items():
        if not _ENV_NAME.fullmatch(k):
            raise ValueError(f"env_vars: {k!r} is not a valid environment variable name")
        parts.append(f"export {k}={expanding_quote(v)}; ")
    return "".join(parts)


class CommandResult(NamedTuple):
    """Exit status and decoded output of one command (UTF-8, undecodable bytes replaced)."""

    rc: int
    out: str
    err: str


class TransportError(Exception):
    """A node could not be reached or a command could not be carried out. The message names the node."""


class ConnectError(TransportError):
    """Connecting failed (unreachable, refused, timed out, authentication)."""


class HostKeyError(ConnectError):
    """The node's host key is not in known_hosts or does not match it."""


class ConnectionLostError(TransportError):
    """An established connection dropped while a command was running."""


class CommandTimeout(TransportError):
    """A command ran longer than its timeout and was stopped."""


class CommandError(TransportError):
    """A helper command failed (non-zero exit)."""

    def __init__(self, message: str, rc: int) -> None:
        super().__init__(message)
        self.rc = rc


@dataclass(frozen=True)
class Backoff:
    """Reconnect schedule: ``attempts`` tries, ``initial`` s apart, then x``factor``, at most ``maximum``."""

    attempts: int = 6
    initial: float = 0.2
    factor: float = 2.0
    maximum: float = 5.0

    def delays(self) -> list[float]:
        out, d = [], self.initial
        for _ in range(self.attempts):
            out.append(min(d, self.maximum))
            d *= self.factor
        return out


def decode_output(data: bytes | str | None) -> str:
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    return data.decode("utf-8", errors="replace")


def read_command(path: str, offset: int, length: int | None) -> str:
    # `tail -c +N` seeks on a regular file, so reading the end of a huge log costs the same as a small one.
    q = shlex.quote(path)
    cmd = f"test -e {q} || exit {RC_NO_FILE}; tail -c +{offset + 1} -- {q}"
    if length is not None:
        cmd += f" | head -c {int(length)}"
    return cmd


def write_command(path: str, mode: int) -> str:
    q = shlex.quote(path)
    parent = shlex.quote(os.path.dirname(path) or ".")
    tmp = shlex.quote(f"{path}.cvs-tmp") + "$$"
    return (
        f"umask 077 && mkdir -p -- {parent} && cat > {tmp} && chmod {mode:o} {tmp} "
        f"&& mv -f -- {tmp} {q} || {{ rc=$?; rm -f {tmp}; exit $rc; }}"
    )


@runtime_checkable
class NodeProcess(Protocol):
    """A command running on a node, started by :meth:`Transport.start_process`."""

    async def read(self, n: int = READ_CHUNK) -> bytes:
        """Up to ``n`` bytes of stdout; ``b""`` at end of output. Raises ConnectionLostError on a drop."""
        ...

    async def read_stderr(self) -> bytes:
        """All of stderr (after the process ended)."""
        ...

    async def wait(self, timeout: float | None = None) -> int:
        """The exit status (128+N for a signal N); raises CommandTimeout after ``timeout`` s."""
        ...

    def terminate(self) -> None:
        """Ask the command to stop (SIGTERM)."""
        ...

    async def close(self) -> None:
        """Stop the command if still running and release its channel/pipes."""
        ...


@runtime_checkable
class Transport(Protocol):
    """One node: commands, files, processes and socket forwarding."""

    name: str

    async def connect(self) -> None: ...

    async def close(self) -> None: ...

    async def run(
        self, cmd: str, timeout: float | None = None, *, input: bytes | None = None
    ) -> CommandResult: ...

    async def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None: ...

    async def read_file(self, path: str, offset: int = 0, length: int | None = None) -> bytes: ...

    async def file_size(self, path: str) -> int | None: ...

    async def start_process(self, cmd: str) -> NodeProcess: ...

    async def start_follow(self, cmd: str) -> NodeProcess:
        """A long-lived process whose stdout is read as it comes (a log follower): as start_process,
        by the cheapest way this transport has for many such streams at once."""
        ...

    def stream(self, cmd: str) -> AsyncIterator[bytes]: ...

    async def forward_unix_socket(self, remote_path: str) -> str: ...

    async def reconnect(self) -> None: ...


async def stream_output(transport: Transport, cmd: str) -> AsyncIterator[bytes]:
    """Shared ``stream``: yield stdout chunks until EOF; a non-zero exit raises CommandError."""
    proc = await transport.start_process(cmd)
    try:
        while True:
            data = await proc.read()
            if not data:
                break
            yield data
        rc = await proc.wait(timeout=10)
        if rc != 0:
            err = decode_output(await proc.read_stderr()).strip()
            raise CommandError(f"{transport.name}: `{cmd}` exited {rc}: {err[-300:]}", rc)
    finally:
        await proc.close()


def read_result(node: str, path: str, rc: int, out: bytes, err: bytes) -> bytes:
    """What a ``read_command`` on ``node`` printed, or the error its exit status means."""
    if rc == RC_NO_FILE:
        raise FileNotFoundError(f"{node}: {path}")
    if rc != 0:
        raise CommandError(f"{node}: cannot read {path}: {decode_output(err).strip()}", rc)
    return out


async def remote_file_size(t: Transport, path: str) -> int | None:
    """The size of ``path`` on the node through a command (None when it is absent)."""
    r = await t.run(f"stat -c %s -- {shlex.quote(path)} 2>/dev/null || echo none", timeout=30)
    s = r.out.strip()
    return None if s == "none" or not s.isdigit() else int(s)


async def connect_all(transports: list[Transport], *, timeout: float | None = None) -> list[Exception | None]:
    """Connect every transport concurrently; one entry per transport: None or the error that stopped it."""

    async def one(t: Transport) -> Exception | None:
        try:
            await asyncio.wait_for(t.connect(), timeout)
        except TimeoutError:
            return ConnectError(f"{t.name}: connect timed out after {timeout} s")
        except TransportError as exc:
            return exc
        return None

    return list(await asyncio.gather(*(one(t) for t in transports)))


async def gather_nodes(calls: list[Awaitable[Any]]) -> list[Any]:
    """Await per-node calls concurrently, returning each result or the exception it raised."""
    return list(await asyncio.gather(*calls, return_exceptions=True))
