"""The SSH transport: one node over one reused asyncssh connection.

Key auth, ``~/.ssh/config`` host aliases (asyncssh reads it), known_hosts verification on unless
``verify_host_keys=False`` is passed explicitly, connect and command timeouts, keepalives, at most
``max_channels`` concurrent channels (OpenSSH allows 10 sessions per connection by default), and a
reconnect with exponential backoff after the connection is lost. Log followers go through the OpenSSH
client where they can (:mod:`.openssh`).

Long because connecting, the channel limit, keepalives and reconnecting share the one connection's state.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import signal
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncssh

from cvs_tui.core.transport import (
    READ_CHUNK,
    Backoff,
    CommandError,
    CommandResult,
    CommandTimeout,
    ConnectError,
    ConnectionLostError,
    HostKeyError,
    NodeProcess,
    TransportError,
    decode_output,
    export_prefix,
    read_command,
    read_result,
    remote_file_size,
    stream_output,
    write_command,
)

log = logging.getLogger(__name__)
# A node that answers no keepalive for KEEPALIVE_S x KEEPALIVE_COUNT seconds has dropped its connection
# (before: 15 s x 3, longer than a hang budget's floor, so a lost node was called hung first)
KEEPALIVE_S = 5.0
KEEPALIVE_COUNT = 3


class _SSHProcess:
    def __init__(
        self,
        transport: SSHTransport,
        proc: asyncssh.SSHClientProcess[bytes],
        cmd: str,
        release: Callable[[], None],
    ):
        self._t = transport
        self._proc = proc
        self._cmd = cmd
        self._release = release
        self._closed = False

    async def read(self, n: int = READ_CHUNK) -> bytes:
        try:
            data = await self._proc.stdout.read(n)
        except (asyncssh.ConnectionLost, asyncssh.DisconnectError, OSError) as exc:
            self._t._mark_lost()
            raise ConnectionLostError(f"{self._t.name}: connection lost: {exc}") from exc
        if not data and self._t._lost():
            # EOF because the connection dropped, not because the command ended
            raise ConnectionLostError(f"{self._t.name}: connection lost while reading `{self._cmd}`")
        return data

    async def read_stderr(self) -> bytes:
        with contextlib.suppress(asyncssh.Error, OSError):
            return await self._proc.stderr.read()
        return b""

    async def wait(self, timeout: float | None = None) -> int:
        try:
            await asyncio.wait_for(self._proc.wait_closed(), timeout)
        except TimeoutError:
            raise CommandTimeout(f"{self._t.name}: `{self._cmd}` still running after {timeout} s") from None
        return _ssh_status(self._t, self._proc, self._cmd)

    def terminate(self) -> None:
        with contextlib.suppress(asyncssh.Error, OSError):
            self._proc.terminate()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._proc.exit_status is None and self._proc.exit_signal is None:
                self.terminate()  # refused for root sessions by OpenSSH; closing the channel follows
            self._proc.close()
            with contextlib.suppress(TimeoutError, asyncssh.Error, OSError):
                await asyncio.wait_for(self._proc.wait_closed(), 5)
        finally:
            self._release()


def _ssh_status(t: SSHTransport, proc: asyncssh.SSHClientProcess, cmd: str) -> int:
    if proc.exit_status is not None and proc.exit_status >= 0:
        return proc.exit_status
    if proc.exit_signal:
        sig = getattr(signal, f"SIG{proc.exit_signal[0]}", None)
        return 128 + (int(sig) if sig is not None else 1)
    raise ConnectionLostError(f"{t.name}: no exit status for `{cmd}` (connection lost?)")


# AES-GCM first (then asyncssh's defaults, so any server still agrees on one): asyncssh's
# chacha20-poly1305 builds cipher contexts for every packet, and a streamed log line is a packet.
_FAST_CIPHERS = "^aes128-gcm@openssh.com,aes256-gcm@openssh.com"
_CIPHERS_LINE = re.compile(r"^\s*ciphers\b", re.IGNORECASE | re.MULTILINE)


def _config_sets_ciphers(paths: list[str]) -> bool:
    """Whether an SSH config file names its own ciphers (then its choice stands, not ours)."""
    for p in paths:
        try:
            if _CIPHERS_LINE.search(Path(p).expanduser().read_text(errors="replace")):
                return True
        except OSError:
            continue
    return False


def known_hosts_arg(given: str | None) -> str | tuple[list[Any], list[Any], list[Any]]:
    """Always an explicit known_hosts for asyncssh (audit #16): left out, asyncssh takes
    ``UserKnownHostsFile`` from ~/.ssh/config, and ``none`` there silently turns verification off.
    The default is ~/.ssh/known_hosts; when that file does not exist no key is trusted (empty lists),
    so an unknown node fails with "host key not trusted", as before."""
    path = os.path.expanduser(given or "~/.ssh/known_hosts")
    if given is None and not os.path.exists(path):
        return ([], [], [])
    return path


class SSHTransport:
    """One node over SSH: a single connection, reused by every command and stream, re-opened after a drop."""

    def __init__(
        self,
        host: str,
        *,
        port: int | None = None,
        user: str | None = None,
        key_file: str | None = None,
        known_hosts: str | None = None,
        verify_host_keys: bool = True,
        ssh_config: list[str] | None = None,
        connect_timeout: float = 10.0,
        keepalive_interval: float = KEEPALIVE_S,
        keepalive_count_max: int = KEEPALIVE_COUNT,
        max_channels: int = 8,
        backoff: Backoff | None = None,
        name: str | None = None,
        password: str | None = None,
        env_vars: dict[str, str] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.user = user
        self.key_file = key_file
        self.known_hosts = known_hosts
        self.verify_host_keys = verify_host_keys
        self.ssh_config = ssh_config
        self.connect_timeout = connect_timeout
        self.keepalive_interval = keepalive_interval
        self.keepalive_count_max = keepalive_count_max
        self.backoff = backoff or Backoff()
        self.name = name or (f"{host}:{port}" if port else host)
        self._conn: asyncssh.SSHClientConnection | None = None
        self._conn_lock = asyncio.Lock()
        self._channels = asyncio.Semaphore(max_channels)
        self._ever_connected = False
        self._closed = False
        self.generation = 0  # bumps on every new connection (forwarded sockets must be re-opened)
        self._forward_dir: str | None = None
        self._forwards: dict[str, asyncssh.SSHListener] = {}
        self._password = password  # never logged: not in name, repr or any message
        self._prefix = export_prefix(env_vars)  # the cluster file's env_vars, before every command
        self._openssh_unusable = False  # ssh failed where asyncssh works: follow on asyncssh
        self.follow_client = ""  # what the last log stream went through: "ssh" or "asyncssh"
        self.stream_pids: set[int] = set()  # the ssh client processes of this node's live streams

    # -- connection --------------------------------------------------------------------------------------
    def _options(self) -> dict[str, Any]:
        # Only what was given: anything left out comes from ~/.ssh/config (alias, user, port, key).
        opts: dict[str, Any] = {
            "connect_timeout": self.connect_timeout,
            "keepalive_interval": self.keepalive_interval,
            "keepalive_count_max": self.keepalive_count_max,
        }
        if not _config_sets_ciphers(self.ssh_config or ["~/.ssh/config"]):
            opts["encryption_algs"] = _FAST_CIPHERS
        if self.port is not None:
            opts["port"] = self.port
        if self.user is not None:
            opts["username"] = self.user
        if self.key_file is not None:
            opts["client_keys"] = [self.key_file]
        if self._password is not None:
            opts["password"] = self._password
        if self.ssh_config is not None:
            opts["config"] = self.ssh_config
        if not self.verify_host_keys:
            opts["known_hosts"] = None  # explicit opt-out only
        else:
            opts["known_hosts"] = known_hosts_arg(self.known_hosts)
        return opts

    async def _open(self) -> asyncssh.SSHClientConnection:
        try:
            return await asyncssh.connect(self.host, **self._options())
        except asyncssh.HostKeyNotVerifiable as exc:
            where = self.known_hosts or "~/.ssh/known_hosts"
            raise HostKeyError(
                f"{self.name}: host key not trusted ({exc.reason}); add the node's key to {where} "
                "or pass the explicit opt-out to skip host-key checks"
            ) from exc
        except asyncssh.PermissionDenied as exc:
            raise ConnectError(
                f"{self.name}: SSH authentication failed ({exc.reason}); check user and key"
            ) from exc
        except (TimeoutError, asyncssh.Error, OSError) as exc:
            raise ConnectError(f"{self.name}: cannot connect: {exc or type(exc).__name__}") from exc
        except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError, ValueError) as exc:
            # e.g. a passphrase-protected key: asyncssh raises these (ValueErrors) while loading it
            raise ConnectError(
                f"{self.name}: cannot load key {self.key_file or '(default keys)'}: {exc}"
            ) from exc

    def _lost(self) -> bool:
        return self._conn is None or self._conn.is_closed()

    def _mark_lost(self) -> None:
        if self._conn is not None and not self._conn.is_closed():
            self._conn.abort()

    async def connect(self) -> None:
        """Open the connection (one attempt) unless it is already open."""
        async with self._conn_lock:
            if self._closed:
                raise TransportError(f"{self.name}: transport closed")
            if not self._lost():
                return
            self._conn = await self._open()
            self._ever_connected = True
            self.generation += 1
            self._forwards.clear()

    async def reconnect(self) -> None:
        """Re-open a dropped connection with exponential backoff; host-key and auth errors stop at once."""
        last: Exception | None = None
        for delay in [0.0, *self.backoff.delays()]:
            if delay:
                await asyncio.sleep(delay)
            try:
                await self.connect()
                return
            except HostKeyError:
                raise
            except ConnectError as exc:
                if isinstance(exc.__cause__, asyncssh.PermissionDenied):
                    raise
                last = exc
        raise ConnectError(f"{self.name}: reconnect failed after {self.backoff.attempts} retries: {last}")

    async def _connection(self) -> asyncssh.SSHClientConnection:
        # One attempt: a caller that must persist (the log follower) retries with :meth:`reconnect` or
        # its own backoff; nesting backoffs here would stretch "node unreachable" to minutes.
        if self._lost():
            await self.connect()
        assert self._conn is not None
        return self._conn

    async def close(self) -> None:
        async with self._conn_lock:
            self._closed = True
            for lst in self._forwards.values():
                lst.close()
            self._forwards.clear()
            if self._conn is not None:
                self._conn.close()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._conn.wait_closed(), 5)
            self._conn = None
            if self._forward_dir:
                with contextlib.suppress(OSError):
                    for f in os.listdir(self._forward_dir):
                        os.unlink(os.path.join(self._forward_dir, f))
                    os.rmdir(self._forward_dir)
                self._forward_dir = None

    # -- commands ----------------------------------------------------------------------------------------
    async def _create(self, cmd: str, *, stdin_data: bytes | None) -> _SSHProcess:
        await self._channels.acquire()
        try:
            proc = await self._open_channel(cmd)
        except BaseException:
            self._channels.release()
            raise
        if stdin_data:
            proc.stdin.write(stdin_data)
        proc.stdin.write_eof()
        return _SSHProcess(self, proc, cmd, self._channels.release)

    async def _open_channel(self, cmd: str) -> asyncssh.SSHClientProcess:
        # A channel that could not be opened never ran the command, so one retry on a fresh
        # connection is safe (the drop may have happened just before, unnoticed).
        for attempt in (1, 2):
            conn = await self._connection()
            try:
                return await conn.create_process(self._prefix + cmd, encoding=None)
            except (
                asyncssh.ConnectionLost,
                asyncssh.DisconnectError,
                OSError,
                asyncssh.ChannelOpenError,
            ) as exc:
                reason = getattr(exc, "reason", None) or str(exc)
                if isinstance(exc, asyncssh.ChannelOpenError) and not conn.is_closed():
                    raise TransportError(f"{self.name}: cannot open a session: {reason}") from exc
                self._mark_lost()
                if attempt == 2:
                    raise ConnectionLostError(f"{self.name}: connection lost: {reason}") from exc
        raise AssertionError("unreachable")

    async def run(
        self, cmd: str, timeout: float | None = None, *, input: bytes | None = None
    ) -> CommandResult:
        p = await self._create(cmd, stdin_data=input)
        try:
            out, err = await asyncio.wait_for(self._collect(p), timeout)
        except TimeoutError:
            raise CommandTimeout(f"{self.name}: `{cmd}` timed out after {timeout} s") from None
        finally:
            await p.close()
        return CommandResult(_ssh_status(self, p._proc, cmd), decode_output(out), decode_output(err))

    async def _collect(self, p: _SSHProcess) -> tuple[bytes, bytes]:
        try:
            out, err = await asyncio.gather(p._proc.stdout.read(), p._proc.stderr.read())
            await p._proc.wait_closed()
        except (asyncssh.ConnectionLost, asyncssh.DisconnectError, OSError) as exc:
            self._mark_lost()
            raise ConnectionLostError(f"{self.name}: connection lost: {exc}") from exc
        return out, err

    async def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        raw = data.encode() if isinstance(data, str) else data
        r = await self.run(write_command(path, mode), timeout=60 + len(raw) / 1e6, input=raw)
        if r.rc != 0:
            raise CommandError(f"{self.name}: cannot write {path}: {r.err.strip()}", r.rc)

    async def read_file(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        p = await self._create(read_command(path, offset, length), stdin_data=None)
        try:
            out, err = await asyncio.wait_for(self._collect(p), 120)
        except TimeoutError:
            raise CommandTimeout(f"{self.name}: reading {path} timed out") from None
        finally:
            await p.close()
        return read_result(self.name, path, _ssh_status(self, p._proc, path), out, err)

    async def file_size(self, path: str) -> int | None:
        return await remote_file_size(self, path)

    async def start_process(self, cmd: str) -> NodeProcess:
        return await self._create(cmd, stdin_data=None)

    async def start_follow(self, cmd: str) -> NodeProcess:
        """Through the OpenSSH client where it can reach the node as this connection does (C crypto:
        a fraction of asyncssh's CPU per packet, see openssh.py), else on this connection."""
        from cvs_tui.core.runner.nodes import openssh

        argv = (
            None
            if self._openssh_unusable
            else openssh.openssh_argv(self, self._prefix + cmd, openssh.find_ssh())
        )
        if argv is None:
            self.follow_client = "asyncssh"
            return await self.start_process(cmd)
        if self._lost():
            await self.connect()  # the node must answer here first: a refused key or host key says so
        try:
            proc = await openssh.spawn(argv)
        except OSError as exc:
            self._openssh_failed(f"cannot start ssh: {exc}")
            self.follow_client = "asyncssh"
            return await self.start_process(cmd)
        self.follow_client = "ssh"
        self.stream_pids.add(proc.pid)
        return openssh.OpenSSHProcess(
            self.name,
            proc,
            cmd,
            self._openssh_failed,
            lambda: self.stream_pids.discard(proc.pid),
            keepalive=(self.keepalive_interval, self.keepalive_count_max)
            if self.keepalive_interval > 0
            else None,
        )

    def _openssh_failed(self, reason: str) -> None:
        """``ssh`` failed before any byte came: while this connection is up that is the client's
        problem, not the node's, so this node's streams go through asyncssh from now on."""
        if self._lost() or self._openssh_unusable:
            return
        self._openssh_unusable = True
        log.warning(
            "%s: ssh cannot follow logs (%s); following them on the asyncssh connection", self.name, reason
        )

    @property
    def password_set(self) -> bool:
        return self._password is not None

    def known_hosts_file(self) -> str | None:
        """The known_hosts file this connection verifies against (None: none exists, nothing trusted)."""
        given = known_hosts_arg(self.known_hosts)
        return given if isinstance(given, str) else None

    def stream(self, cmd: str) -> AsyncIterator[bytes]:
        return stream_output(self, cmd)

    async def forward_unix_socket(self, remote_path: str) -> str:
        """A private local socket path that reaches ``remote_path`` on the node over this connection."""
        conn = await self._connection()
        if remote_path in self._forwards:
            return self._forwards_path(remote_path)
        if self._forward_dir is None:
            self._forward_dir = tempfile.mkdtemp(prefix="cvs-tui-fwd-")  # mode 0700: only us
        local = self._forwards_path(remote_path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(local)
        try:
            self._forwards[remote_path] = await conn.forward_local_path(local, remote_path)
        except (asyncssh.Error, OSError) as exc:
            raise TransportError(f"{self.name}: cannot forward {remote_path}: {exc}") from exc
        return local

    def _forwards_path(self, remote_path: str) -> str:
        assert self._forward_dir is not None
        return os.path.join(self._forward_dir, hashlib.sha1(remote_path.encode()).hexdigest()[:16] + ".sock")
