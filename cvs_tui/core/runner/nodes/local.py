"""The local transport: commands in a local shell (asyncio subprocesses), for `localhost`/`local` nodes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from cvs_tui.core.transport import (
    READ_CHUNK,
    CommandResult,
    CommandTimeout,
    NodeProcess,
    decode_output,
    export_prefix,
    stream_output,
)


class _LocalProcess:
    """A local command in its own session, so stopping it stops everything it started."""

    def __init__(self, proc: asyncio.subprocess.Process, cmd: str) -> None:
        self._proc = proc
        self._cmd = cmd

    async def read(self, n: int = READ_CHUNK) -> bytes:
        assert self._proc.stdout is not None
        return await self._proc.stdout.read(n)

    async def read_stderr(self) -> bytes:
        assert self._proc.stderr is not None
        return await self._proc.stderr.read()

    async def wait(self, timeout: float | None = None) -> int:
        try:
            rc = await asyncio.wait_for(self._proc.wait(), timeout)
        except TimeoutError:
            raise CommandTimeout(f"local: `{self._cmd}` still running after {timeout} s") from None
        return rc if rc >= 0 else 128 - rc

    def _signal_group(self, sig: int) -> None:
        if self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, sig)

    def terminate(self) -> None:
        self._signal_group(signal.SIGTERM)

    async def close(self) -> None:
        if self._proc.returncode is None:
            self._signal_group(signal.SIGTERM)
            try:
                await asyncio.wait_for(self._proc.wait(), 2)
            except TimeoutError:
                self._signal_group(signal.SIGKILL)
                await self._proc.wait()


class LocalTransport:
    """This machine, through ``/bin/sh``. Each command runs in its own session (killable as a group)."""

    def __init__(self, name: str = "localhost", *, env_vars: dict[str, str] | None = None) -> None:
        self.name = name
        self._forward_dir: str | None = None
        self._prefix = export_prefix(env_vars)  # the cluster file's env_vars, before every command

    async def connect(self) -> None:
        return None

    async def reconnect(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def _spawn(self, cmd: str, stdin: int | None) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_shell(
            self._prefix + cmd,
            stdin=stdin,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )

    async def run(
        self, cmd: str, timeout: float | None = None, *, input: bytes | None = None
    ) -> CommandResult:
        proc = await self._spawn(
            cmd, asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(input), timeout)
        except TimeoutError:
            await _LocalProcess(proc, cmd).close()
            raise CommandTimeout(f"{self.name}: `{cmd}` timed out after {timeout} s") from None
        except BaseException:
            await _LocalProcess(proc, cmd).close()
            raise
        rc = proc.returncode if proc.returncode is not None else -1
        return CommandResult(rc if rc >= 0 else 128 - rc, decode_output(out), decode_output(err))

    async def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        raw = data.encode() if isinstance(data, str) else data
        await asyncio.to_thread(_write_local, path, raw, mode)

    async def read_file(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        return await asyncio.to_thread(_read_local, path, offset, length)

    async def file_size(self, path: str) -> int | None:
        try:
            return (await asyncio.to_thread(os.stat, path)).st_size
        except FileNotFoundError:
            return None

    async def start_process(self, cmd: str) -> NodeProcess:
        return _LocalProcess(await self._spawn(cmd, asyncio.subprocess.DEVNULL), cmd)

    async def start_follow(self, cmd: str) -> NodeProcess:
        return await self.start_process(cmd)

    def stream(self, cmd: str) -> AsyncIterator[bytes]:
        return stream_output(self, cmd)

    async def forward_unix_socket(self, remote_path: str) -> str:
        return remote_path  # the "remote" socket is already on this machine


def _write_local(path: str, data: bytes, mode: int) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _read_local(path: str, offset: int, length: int | None) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read() if length is None else f.read(length)
