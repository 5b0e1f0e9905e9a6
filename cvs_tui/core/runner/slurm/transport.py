"""One node of a Slurm allocation as a :class:`~.transport.Transport`, through side steps only (no SSH).

Every command is one side step ``srun --jobid J --overlap -w NODE -N1 -n1 bash -c CMD`` (see
:func:`~.slurm.side_run`): files travel through its stdin and stdout (``-u`` where bytes must arrive as
written), a stream is a long-lived side step whose stdout is the stream, and stopping one is
``scancel`` of that step, never a signal to srun (srun would SIGKILL the task).

``forward_unix_socket(path)`` gives a local unix socket in a private (0700) folder: every connection
accepted there starts one side step that bridges bytes to ``path`` on the node, with ``socat`` when the
node has it, else a small ``python3`` bridge. aiodocker then talks to the node's Docker daemon exactly
as it does through an SSH-forwarded socket. :meth:`SlurmTransport.close` cancels every side step it
started and removes the socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import shlex
import tempfile
from collections.abc import AsyncIterator
from typing import Literal

from cvs_tui.core.runner.slurm.client import SlurmClient, SlurmError
from cvs_tui.core.runner.slurm.steps import (
    cancel_named_step,
    end_side_step,
    side_argv,
    side_run,
    side_step_name,
)
from cvs_tui.core.transport import (
    CommandError,
    CommandResult,
    CommandTimeout,
    ConnectError,
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

Bridge = Literal["auto", "socat", "python3"]
_CHUNK = 65536
_HALF_CLOSE_GRACE_S = 5.0  # the client hung up: the daemon closes its side, else the step is cancelled

# stdin -> socket in a thread, socket -> stdout here; exits when the daemon closes the connection.
# Raw os.read/os.write: no Python buffering, bytes pass as they are.
BRIDGE_PY = """import os,socket,sys,threading
s=socket.socket(socket.AF_UNIX,socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1])
except OSError as e:
    sys.stderr.write("cvs-tui bridge: %s: %s\\n"%(sys.argv[1],e));os._exit(3)
def up():
    try:
        while True:
            d=os.read(0,65536)
            if not d:break
            s.sendall(d)
    except OSError:pass
    try:s.shutdown(socket.SHUT_WR)
    except OSError:pass
threading.Thread(target=up,daemon=True).start()
try:
    while True:
        d=s.recv(65536)
        if not d:break
        v=memoryview(d)
        while v:v=v[os.write(1,v):]
except OSError:pass
os._exit(0)
"""
# socat reads its address itself: only paths its address syntax cannot misread go to it
_SOCAT_SAFE = re.compile(r"[A-Za-z0-9_./-]+")


def bridge_argv(tool: Literal["socat", "python3"], remote_path: str) -> list[str]:
    """The side step's command that joins its stdin/stdout to the unix socket ``remote_path``."""
    if tool == "socat":
        # After one side's EOF socat lingers -t s (0.5 by default) and srun's stdout ends only when socat
        # exits: the daemon closing a connection (the end of a docker exec) must end the step at once.
        # The client never half-closes (aiohttp), so no response is cut short.
        return ["socat", "-t", "0.05", "-", f"UNIX-CONNECT:{remote_path}"]
    return ["python3", "-c", BRIDGE_PY, remote_path]


def probe_command(remote_path: str, bridge: Bridge) -> str:
    """Prints the bridge tool to use on the node, or a reason and a non-zero exit."""
    q = shlex.quote(remote_path)
    tools = {"auto": ["socat", "python3"], "socat": ["socat"], "python3": ["python3"]}[bridge]
    if not _SOCAT_SAFE.fullmatch(remote_path):
        tools = [t for t in tools if t != "socat"]
    find = "; ".join(f"command -v {t} >/dev/null 2>&1 && {{ echo {t}; exit 0; }}" for t in tools)
    needed = shlex.quote(" nor ".join(tools) or "python3 (socat cannot parse this path)")
    host = '"${SLURMD_NODENAME:-$(hostname)}"'
    return (
        f"test -S {q} || {{ printf 'no unix socket at %s on %s\\n' {q} {host}; exit 3; }}; "
        f"test -r {q} -a -w {q} || {{ printf '%s on %s is not readable and writable by %s\\n' {q} "
        f'{host} "$(id -un)"; exit 3; }}; '
        f"{find}; "
        f"printf 'neither %s on %s (one is needed to reach %s)\\n' {needed} {host} {q}; exit 4"
    )


def _without_srun_status(err: bytes, node: str) -> bytes:
    """``err`` less srun's own line about the task's end (it comes with --quiet too, anywhere in err)."""
    line = re.compile(
        rb"^srun: error: " + re.escape(node.encode()) + rb": task 0: [A-Z][^\n]*\n", re.MULTILINE
    )
    found = list(line.finditer(err))
    if not found:
        return err
    m = found[-1]
    return err[: m.start()] + err[m.end() :]


class _SideProcess:
    """A long-lived side step (a :class:`~.transport.NodeProcess`): srun's stdout is the command's."""

    def __init__(self, t: SlurmTransport, proc: asyncio.subprocess.Process, name: str, cmd: str) -> None:
        self._t = t
        self._proc = proc
        self._name = name
        self._cmd = cmd
        # drained all along (only the end kept): a full stderr pipe would stall srun, and the stream with it
        self._err = bytearray()
        self._err_task = asyncio.ensure_future(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        assert self._proc.stderr is not None
        while data := await self._proc.stderr.read(_CHUNK):
            self._err += data
            del self._err[:-_CHUNK]

    async def read(self, n: int = _CHUNK) -> bytes:
        assert self._proc.stdout is not None
        return await self._proc.stdout.read(n)

    async def read_stderr(self) -> bytes:
        """The end of stderr (its last 64 KiB), once srun closed it."""
        with contextlib.suppress(Exception):
            await asyncio.shield(self._err_task)
        return _without_srun_status(bytes(self._err), self._t.node)

    async def wait(self, timeout: float | None = None) -> int:
        try:
            rc = await asyncio.wait_for(self._proc.wait(), timeout)
        except TimeoutError:
            raise CommandTimeout(f"{self._t.name}: `{self._cmd}` still running after {timeout} s") from None
        return rc if rc >= 0 else 128 - rc

    def terminate(self) -> None:
        """Cancel the side step (scancel), in the background."""
        if self._proc.returncode is None:
            fut = asyncio.ensure_future(
                cancel_named_step(self._t.client, self._t.job_id, self._name, wait_s=2.0)
            )
            self._t._cancels.add(fut)
            fut.add_done_callback(self._t._cancels.discard)

    async def close(self) -> None:
        await asyncio.shield(self._t._end(self._name, self._proc))
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(self._err_task), 5)
        self._err_task.cancel()


class SlurmTransport:
    """One Slurm node of job ``job_id``, reached only through ``srun --overlap`` side steps."""

    def __init__(
        self,
        client: SlurmClient,
        job_id: str,
        node: str,
        *,
        name: str | None = None,
        env_vars: dict[str, str] | None = None,
        connect_timeout: float = 60.0,
        bridge: Bridge = "auto",
    ) -> None:
        self.client = client
        self.job_id = job_id
        self.node = node
        self.name = name or f"{node} (slurm job {job_id})"
        self.connect_timeout = connect_timeout
        self.bridge: Bridge = bridge
        self._prefix = export_prefix(env_vars)  # the cluster's env_vars, before every command
        self._live: dict[str, asyncio.subprocess.Process] = {}  # side step name -> its srun
        self._bridges: set[asyncio.Task[None]] = set()  # one per accepted connection
        self._cancels: set[asyncio.Future[bool]] = set()  # terminate(): scancel in the background
        self._servers: dict[str, tuple[asyncio.Server, str]] = {}  # remote path -> (server, local path)
        self._forward_dir: str | None = None
        self._forward_lock = asyncio.Lock()
        self._closed = False

    # -- the Transport surface ---------------------------------------------------------------------------
    async def connect(self) -> None:
        """One side step that must answer: the node is in the job and runs commands."""
        try:
            r = await self.run("echo cvs-tui-ok", self.connect_timeout)
        except CommandTimeout as exc:
            raise ConnectError(f"{self.name}: no answer from srun: {exc}") from exc
        if r.rc != 0 or r.out.strip() != "cvs-tui-ok":
            why = (r.err or r.out).strip()[-300:] or f"srun exited {r.rc}"
            raise ConnectError(f"{self.name}: cannot run a side step: {why}")

    async def reconnect(self) -> None:
        await self.connect()

    async def run(
        self, cmd: str, timeout: float | None = None, *, input: bytes | None = None
    ) -> CommandResult:
        rc, out, err = await self._run_bytes(cmd, timeout, input=input)
        return CommandResult(rc, decode_output(out), decode_output(err))

    async def _run_bytes(
        self, cmd: str, timeout: float | None, *, input: bytes | None = None, unbuffered: bool = False
    ) -> tuple[int, bytes, bytes]:
        if self._closed:
            raise TransportError(f"{self.name}: transport closed")
        try:
            rc, out, err = await side_run(
                self.client,
                self.job_id,
                self.node,
                ["bash", "-c", self._prefix + cmd],
                timeout,
                input=input,
                unbuffered=unbuffered,
                what=cmd,
            )
        except CommandTimeout as exc:
            raise CommandTimeout(f"{self.name}: {exc}") from None
        except (SlurmError, OSError) as exc:
            raise ConnectError(f"{self.name}: srun: {exc}") from exc
        # srun's own line about the task's status (also with --quiet): the command's stderr is the caller's
        return rc, out, _without_srun_status(err, self.node) if rc != 0 else err

    async def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        """Atomic (temp file + rename on the node); the bytes travel through the side step's stdin."""
        raw = data.encode() if isinstance(data, str) else data
        rc, _, err = await self._run_bytes(write_command(path, mode), 60 + len(raw) / 1e6, input=raw)
        if rc != 0:
            raise CommandError(f"{self.name}: cannot write {path}: {decode_output(err).strip()}", rc)

    async def read_file(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        rc, out, err = await self._run_bytes(read_command(path, offset, length), 120, unbuffered=True)
        return read_result(self.name, path, rc, out, err)

    async def file_size(self, path: str) -> int | None:
        return await remote_file_size(self, path)

    async def start_process(self, cmd: str) -> NodeProcess:
        name, proc = await self._spawn(["bash", "-c", self._prefix + cmd], stdin=False)
        return _SideProcess(self, proc, name, cmd)

    async def start_follow(self, cmd: str) -> NodeProcess:
        return await self.start_process(cmd)

    def stream(self, cmd: str) -> AsyncIterator[bytes]:
        return stream_output(self, cmd)

    async def forward_unix_socket(self, remote_path: str) -> str:
        """A private local socket path; each connection to it is bridged to ``remote_path`` on the node."""
        async with self._forward_lock:  # one server per path, also when asked twice at once
            if remote_path not in self._servers:
                self._servers[remote_path] = await self._serve(remote_path)
            return self._servers[remote_path][1]

    async def _serve(self, remote_path: str) -> tuple[asyncio.Server, str]:
        r = await self.run(probe_command(remote_path, self.bridge), self.connect_timeout)
        tool = r.out.strip().splitlines()[-1] if r.out.strip() else ""
        if r.rc != 0 or tool not in ("socat", "python3"):
            why = tool or r.err.strip()[-200:] or f"exit {r.rc}"
            raise TransportError(f"{self.name}: cannot forward {remote_path}: {why}")
        if self._forward_dir is None:
            self._forward_dir = tempfile.mkdtemp(prefix="cvs-tui-srun-")  # mode 0700: only us
        digest = hashlib.sha1(remote_path.encode()).hexdigest()[:16]
        local = os.path.join(self._forward_dir, f"{digest}.sock")
        argv = bridge_argv("socat" if tool == "socat" else "python3", remote_path)

        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.ensure_future(self._bridge(argv, reader, writer))
            self._bridges.add(task)
            try:
                # ends cancelled when close() cancels the bridge: not an error of the server
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            finally:
                self._bridges.discard(task)

        server = await asyncio.start_unix_server(accepted, path=local)
        os.chmod(local, 0o600)
        return server, local

    async def close(self) -> None:
        """Stop accepting, cancel every side step still running, remove the local sockets."""
        self._closed = True
        for server, _ in self._servers.values():
            server.close()
        bridges, cancels = list(self._bridges), list(self._cancels)
        for b in bridges:
            b.cancel()
        for c in cancels:
            c.cancel()
        await asyncio.gather(*bridges, *cancels, return_exceptions=True)
        await self._cancel_live()
        for _, local in self._servers.values():
            with contextlib.suppress(OSError):
                os.unlink(local)
        self._servers.clear()
        if self._forward_dir is not None:
            with contextlib.suppress(OSError):
                os.rmdir(self._forward_dir)
            self._forward_dir = None

    @property
    def live_steps(self) -> list[str]:
        """Names of the side steps this transport runs now (their srun has not ended)."""
        return [n for n, p in self._live.items() if p.returncode is None]

    # -- internals ---------------------------------------------------------------------------------------
    async def _spawn(self, argv: list[str], *, stdin: bool) -> tuple[str, asyncio.subprocess.Process]:
        if self._closed:
            raise TransportError(f"{self.name}: transport closed")
        name = side_step_name()
        try:
            proc = await self.client.spawn(
                side_argv(self.job_id, self.node, name, argv, unbuffered=True), stdin_pipe=stdin
            )
        except OSError as exc:
            raise ConnectError(f"{self.name}: cannot start srun: {exc}") from exc
        self._live[name] = proc
        return name, proc

    async def _end(self, name: str, proc: asyncio.subprocess.Process, grace: float = 0.0) -> None:
        """End one side step: after ``grace`` s for srun to end on its own, scancel it."""
        if grace > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), grace)
        try:
            await end_side_step(self.client, self.job_id, name, proc)
        finally:
            if proc.returncode is not None:
                self._live.pop(name, None)

    async def _cancel_live(self) -> None:
        """One squeue for all, then scancel each step still listed; srun then ends on its own."""
        live = {n: p for n, p in self._live.items() if p.returncode is None}
        if live:
            steps = await self.client.steps(self.job_id)
            for sid, n in steps.items():
                if n in live:
                    await self.client.run(["scancel", sid])
        await asyncio.gather(*(self._end(n, p) for n, p in live.items()), return_exceptions=True)
        self._live = {n: p for n, p in self._live.items() if p.returncode is None}

    async def _bridge(
        self, argv: list[str], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """One accepted connection <-> one side step running the bridge on the node."""
        try:
            name, proc = await self._spawn(argv, stdin=True)
        except BaseException:
            writer.close()
            raise
        assert proc.stdin is not None and proc.stdout is not None
        stdin, stdout = proc.stdin, proc.stdout

        async def up() -> None:  # client -> node
            try:
                while data := await reader.read(_CHUNK):
                    stdin.write(data)
                    await stdin.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                with contextlib.suppress(ConnectionError, OSError):
                    stdin.close()

        async def down() -> None:  # node -> client
            try:
                while data := await stdout.read(_CHUNK):
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, OSError):
                pass

        up_task, down_task = asyncio.ensure_future(up()), asyncio.ensure_future(down())
        try:
            done, _ = await asyncio.wait({up_task, down_task}, return_when=asyncio.FIRST_COMPLETED)
            if down_task not in done:  # the client hung up: the daemon normally closes its side now
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(down_task), _HALF_CLOSE_GRACE_S)
        finally:
            for t in (up_task, down_task):
                t.cancel()
            await asyncio.gather(up_task, down_task, return_exceptions=True)
            with contextlib.suppress(ConnectionError, OSError):
                writer.close()
            await asyncio.shield(self._end(name, proc, grace=2.0))
