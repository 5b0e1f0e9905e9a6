"""A node's log stream through the OpenSSH client: ``ssh`` reads, decrypts and hands over the bytes.

A live run follows one log per node for hours, and at hundreds of nodes what that costs on the launcher
host is mostly per SSH packet. In asyncssh each packet is decrypted, checked and dispatched in Python
(about 180 us of CPU a packet here); the OpenSSH client does the same in C and this process only reads
a pipe. ``benchmarks/fanout.py --transport-only`` at 256 nodes: 23.6 % of a core with asyncssh, 16 %
with ``ssh`` (this process and the ``ssh`` processes together).

Only the follow streams go this way (:meth:`SSHTransport.start_follow`); commands, file transfers and
socket forwards stay on the one asyncssh connection per node. The ``ssh`` command is built from the same
settings as that connection: host, port, user, key (only that key), the same known_hosts file with
strict checking (or the explicit opt-out), the same ssh_config file, keepalives, batch mode (never a
prompt). Where those cannot be expressed (a password, several ssh_config files) or there is no ``ssh``
binary, asyncssh follows the log as before; so does a transport whose ``ssh`` failed before any byte
came while its asyncssh connection was up (say, a key only asyncssh can use): once, with a warning, and
from then on. The ``ssh`` processes stay in cvs-tui's process group, so a terminal's Ctrl-C or hang-up
reaches them too, and an ``ssh`` left behind by a killed cvs-tui ends at its next write to the closed pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import shutil
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING

from cvs_tui.core.transport import CommandTimeout, ConnectionLostError

if TYPE_CHECKING:
    from cvs_tui.core.runner.nodes.ssh import SSHTransport

log = logging.getLogger(__name__)

FD_LIMIT = 65536  # the soft open-file limit a run with OpenSSH streams asks for (2 pipes per node)


def openssh_argv(t: SSHTransport, remote_cmd: str, ssh: str | None) -> list[str] | None:
    """The ``ssh`` command line that runs ``remote_cmd`` on ``t``'s node as its asyncssh connection
    would reach it, or None where the client cannot be told the same (see the module docstring)."""
    if ssh is None or t.password_set or (t.ssh_config is not None and len(t.ssh_config) != 1):
        return None
    # LogLevel INFO: why a connection ended ("Timeout, server HOST not responding.", "Connection to
    # HOST closed by remote host.") is logged at INFO; a few lines per connection, read when ssh exits
    argv = [ssh, "-T", "-n", "-a", "-x", "-o", "BatchMode=yes", "-o", "LogLevel=INFO"]
    argv += ["-o", "ControlMaster=no"]  # never leave a shared master process behind
    argv += ["-o", f"ConnectTimeout={max(1, round(t.connect_timeout))}"]
    if t.keepalive_interval > 0:
        argv += ["-o", f"ServerAliveInterval={max(1, round(t.keepalive_interval))}"]
        argv += ["-o", f"ServerAliveCountMax={t.keepalive_count_max}"]
    if t.ssh_config is not None:
        argv += ["-F", os.path.expanduser(t.ssh_config[0])]
    if t.port is not None:
        argv += ["-p", str(t.port)]
    if t.user is not None:
        argv += ["-l", t.user]
    if t.key_file is not None:
        argv += ["-i", os.path.expanduser(t.key_file), "-o", "IdentitiesOnly=yes"]
    if t.verify_host_keys:
        known = t.known_hosts_file() or os.devnull  # no file: no key is trusted, as in asyncssh
        argv += ["-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known}"]
        argv += ["-o", "GlobalKnownHostsFile=" + os.devnull]
    else:
        argv += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=" + os.devnull]
    return [*argv, "--", t.host, remote_cmd]


def find_ssh() -> str | None:
    return shutil.which("ssh")


_raised = False


def raise_fd_limit() -> None:
    """Two pipes per followed node: lift the soft open-file limit towards the hard one, once."""
    global _raised
    if _raised:
        return
    _raised = True
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = FD_LIMIT if hard == resource.RLIM_INFINITY else min(FD_LIMIT, hard)
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


async def spawn(argv: list[str]) -> asyncio.subprocess.Process:
    raise_fd_limit()
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


class OpenSSHProcess:
    """A :class:`NodeProcess` whose bytes come through an ``ssh`` client process.

    ``ssh`` exits 255 for its own failures (connection refused or dropped, authentication, host key)
    and with the remote command's status otherwise: 255 becomes :class:`ConnectionLostError` with
    ssh's own words, so the tailer resumes at its offset exactly as after an asyncssh drop.
    ``on_unusable`` is called when ``ssh`` failed before any byte came (the transport may then
    follow with asyncssh instead)."""

    def __init__(
        self,
        name: str,
        proc: asyncio.subprocess.Process,
        cmd: str,
        on_unusable: Callable[[str], None],
        on_closed: Callable[[], None],
        keepalive: tuple[float, int] | None = None,
    ) -> None:
        self._name = name
        self._keepalive = keepalive  # (interval s, count): what a keepalive timeout waited for
        self._on_closed = on_closed
        self._proc = proc
        self._cmd = cmd
        self._on_unusable = on_unusable
        self._got = False
        self._closed = False

    async def read(self, n: int = 65536) -> bytes:
        assert self._proc.stdout is not None
        data = await self._proc.stdout.read(n)
        if data:
            self._got = True
            return data
        rc = await self._proc.wait()
        if rc == 255:
            why = (await self.read_stderr()).decode("utf-8", "replace").strip().splitlines()
            reason = why[-1] if why else "ssh exited 255"
            if not self._got:
                self._on_unusable(reason)
            what = "connection lost"
            if self._keepalive is not None and reason.startswith("Timeout, server"):
                every, count = self._keepalive
                what += f": no answer to {count} keepalives {every:g} s apart"
            raise ConnectionLostError(f"{self._name}: {what} (ssh: {reason})")
        return b""

    async def read_stderr(self) -> bytes:
        if self._proc.stderr is None:
            return b""
        with contextlib.suppress(OSError):
            return await self._proc.stderr.read()
        return b""

    async def wait(self, timeout: float | None = None) -> int:
        try:
            rc = await asyncio.wait_for(self._proc.wait(), timeout)
        except TimeoutError:
            raise CommandTimeout(f"{self._name}: `{self._cmd}` still running after {timeout} s") from None
        if rc == 255:
            raise ConnectionLostError(f"{self._name}: connection lost (ssh exited 255)")
        return rc if rc >= 0 else 128 - rc

    def terminate(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self._proc.send_signal(signal.SIGTERM)

    async def close(self) -> None:
        """Ends ``ssh`` (its connection closes the remote command's channel) and reaps it."""
        if self._closed:
            return
        self._closed = True
        if self._proc.returncode is None:
            self.terminate()
            try:
                await asyncio.wait_for(self._proc.wait(), 5)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self._proc.kill()
                await self._proc.wait()
        self._on_closed()
