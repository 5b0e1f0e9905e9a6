"""Where the trainer runs on a node: inside a Docker container (aiodocker) or on the node itself (``host``).

:class:`DockerRuntime` talks to the node's Docker API: the local socket for a local node, or the node's
socket forwarded over that node's SSH connection (asyncssh ``forward_local_path``), so no Docker port is
ever opened on the network. Every ``container.runtime.args`` key is honoured or rejected with a message
naming it (upstream silently ignored ``shm-size`` and any other key it did not know).

Lifetimes (as the CVS reference describes them):

* ``per_run``: launch fresh (removing a leftover of the same name, which can only be ours because the
  name carries the user and the run id), remove at teardown;
* ``persistent``: reuse the container when it is running, start it when absent; never removed;
* ``no_launch``: the container must already run; never started or removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

import aiodocker
import aiohttp

from cvs_tui.core.errors import UserError
from cvs_tui.core.runner.transport import CommandResult, CommandTimeout, LocalTransport, Transport

DEFAULT_DOCKER_SOCKET = "/var/run/docker.sock"
_NAME_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


class ContainerError(Exception):
    """A container could not be created, found, started or used. The message names the node."""


class Lifetime(StrEnum):
    PER_RUN = "per_run"
    PERSISTENT = "persistent"
    NO_LAUNCH = "no_launch"


class LaunchOutcome(StrEnum):
    STARTED = "started"  # created and started now
    ATTACHED = "attached"  # persistent / no_launch: already running, reused
    NONE = "none"  # host runtime: nothing to launch


def container_name(prefix: str, user: str, run_id: str) -> str:
    """``<prefix>-<user>-<run id>``, reduced to Docker's name alphabet: two users never share a name."""
    raw = f"{prefix}-{user}-{run_id}"
    name = _NAME_BAD.sub("_", raw).strip("_.-")
    if not name or not name[0].isalnum():
        name = "c" + name
    return name[:200]


@dataclass(frozen=True)
class ContainerSpec:
    """What to launch on every node. ``args`` is ``container.runtime.args`` as written in the config."""

    name: str
    image: str
    args: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    lifetime: Lifetime | str = Lifetime.PER_RUN
    extra_binds: Sequence[str] = ()  # e.g. the run's scratch folder, same path inside and out
    command: Sequence[str] = ("sleep", "infinity")
    labels: Mapping[str, str] = field(default_factory=dict)
    init: bool = True  # tini as PID 1: stops in milliseconds and reaps zombies


# ---------------------------------------------------------------------------------------------------------
# runtime args -> Docker API HostConfig
# ---------------------------------------------------------------------------------------------------------
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([bkmgt]?)b?\s*$", re.I)
_SIZE_MULT = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
SUPPORTED_ARGS = (
    "network",
    "ipc",
    "pid",
    "privileged",
    "shm-size",
    "shm_size",
    "ulimit",
    "ulimits",
    "volumes",
    "devices",
    "cap_add",
    "cap_drop",
    "security_opt",
    "group_add",
    "env",
    "init",
)


def parse_size(value: Any, where: str) -> int:
    """``"256G"`` / ``"1024m"`` / ``1073741824`` -> bytes."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    m = _SIZE.match(str(value))
    if not m:
        raise UserError(f"{where}: {value!r} is not a size; use e.g. 16g, 512m or a byte count")
    return int(float(m.group(1)) * _SIZE_MULT[m.group(2).lower()])


def _limit(v: Any, where: str) -> int:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("unlimited", "-1"):
        return -1
    if s.isdigit():
        return int(s)
    raise UserError(f"{where}: {v!r} is not a limit; use a number, -1 or unlimited")


def parse_ulimits(value: Any, where: str) -> list[dict[str, Any]]:
    """``["nofile=65535:65535", "memlock=-1"]`` or ``{"memlock": -1, "stack": "8192:8192"}`` -> Ulimits."""
    items: list[tuple[str, Any]] = []
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, str | list | tuple):
        for entry in [value] if isinstance(value, str) else value:
            name, sep, lim = str(entry).partition("=")
            if not sep or not name.strip():
                raise UserError(f"{where}: {entry!r} is not name=soft[:hard] (e.g. nofile=65535:65535)")
            items.append((name.strip(), lim))
    else:
        raise UserError(f'{where}: expected a list like ["nofile=65535:65535"] or a map name -> limit')
    out = []
    for name, lim in items:
        if isinstance(lim, Mapping):
            soft, hard = lim.get("soft"), lim.get("hard", lim.get("soft"))
        else:
            soft, _, hard = str(lim).partition(":") if not isinstance(lim, int) else (lim, "", lim)
            hard = hard if hard != "" else soft
        out.append(
            {"Name": name, "Soft": _limit(soft, f"{where}.{name}"), "Hard": _limit(hard, f"{where}.{name}")}
        )
    return out


def parse_devices(value: Any, where: str) -> list[dict[str, str]]:
    """``"/dev/kfd"`` or ``"/dev/null:/dev/kfd[:rwm]"`` entries -> Devices."""
    out = []
    for entry in _str_list(value, where):
        parts = entry.split(":")
        if not parts[0] or len(parts) > 3:
            raise UserError(f"{where}: {entry!r} is not host[:container[:permissions]]")
        host = parts[0]
        cont = parts[1] if len(parts) > 1 and parts[1] else host
        perms = parts[2] if len(parts) > 2 else "rwm"
        out.append({"PathOnHost": host, "PathInContainer": cont, "CgroupPermissions": perms})
    return out


def _str_list(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple) and all(isinstance(v, str | int) for v in value):
        return [str(v) for v in value]
    raise UserError(f"{where}: expected a string or a list of strings")


def _env_list(env: Any, where: str) -> list[str]:
    if isinstance(env, Mapping):
        items = [(str(k), "" if v is None else str(v)) for k, v in env.items()]
    else:
        items = []
        for e in _str_list(env, where):
            k, sep, v = e.partition("=")
            if not sep:
                raise UserError(f"{where}: {e!r} is not NAME=value")
            items.append((k, v))
    for k, _ in items:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise UserError(f"{where}: {k!r} is not a valid environment variable name")
    return [f"{k}={v}" for k, v in items]


def host_config(
    args: Mapping[str, Any], *, where: str = "container.runtime.args"
) -> tuple[dict[str, Any], list[str]]:
    """Map runtime args to a Docker ``HostConfig`` plus ``Env`` entries. Unknown keys are an error."""
    hc: dict[str, Any] = {}
    env: list[str] = []
    problems: list[str] = []
    for key, value in args.items():
        w = f"{where}.{key}"
        try:
            if key == "network":
                hc["NetworkMode"] = str(value)
            elif key == "ipc":
                hc["IpcMode"] = str(value)
            elif key == "pid":
                hc["PidMode"] = str(value)
            elif key == "privileged":
                if not isinstance(value, bool):
                    raise UserError(f"{w}: expected true or false, got {value!r}")
                hc["Privileged"] = value
            elif key == "init":
                if not isinstance(value, bool):
                    raise UserError(f"{w}: expected true or false, got {value!r}")
                hc["Init"] = value
            elif key in ("shm-size", "shm_size"):
                hc["ShmSize"] = parse_size(value, w)
            elif key in ("ulimit", "ulimits"):
                hc.setdefault("Ulimits", []).extend(parse_ulimits(value, w))
            elif key == "volumes":
                vols = _str_list(value, w)
                for v in vols:
                    if ":" not in v:
                        raise UserError(f"{w}: {v!r} is not host_path:container_path[:ro]")
                hc.setdefault("Binds", []).extend(vols)
            elif key == "devices":
                hc["Devices"] = parse_devices(value, w)
            elif key == "cap_add":
                hc["CapAdd"] = _str_list(value, w)
            elif key == "cap_drop":
                hc["CapDrop"] = _str_list(value, w)
            elif key == "security_opt":
                hc["SecurityOpt"] = _str_list(value, w)
            elif key == "group_add":
                hc["GroupAdd"] = _str_list(value, w)
            elif key == "env":
                env.extend(_env_list(value, w))
            else:
                raise UserError(f"{w}: unknown runtime arg; supported: {', '.join(SUPPORTED_ARGS)}")
        except UserError as exc:
            problems.extend(exc.problems)
    if problems:
        raise UserError(problems)
    return hc, env


def create_config(spec: ContainerSpec) -> dict[str, Any]:
    """The Docker ``containers/create`` body for ``spec`` (runtime args, env, binds, labels)."""
    hc, env = host_config(spec.args)
    hc.setdefault("Init", spec.init)
    if spec.extra_binds:
        hc["Binds"] = [*hc.get("Binds", []), *spec.extra_binds]
    env = env + _env_list(dict(spec.env), "container.env")
    return {
        "Image": spec.image,
        "Cmd": list(spec.command),
        "Env": env,
        "Labels": {"cvs-tui": "1", **dict(spec.labels)},
        "HostConfig": hc,
    }


# ---------------------------------------------------------------------------------------------------------
# The runtime protocol
# ---------------------------------------------------------------------------------------------------------
@runtime_checkable
class ContainerRuntime(Protocol):
    """Run commands where the trainer runs on one node (a container, or the node itself)."""

    node: str

    async def image_present(self, image: str | None = None) -> bool: ...

    async def launch(self) -> LaunchOutcome: ...

    async def is_running(self) -> bool: ...

    async def exec(
        self,
        cmd: str,
        *,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        timeout: float | None = None,
    ) -> CommandResult: ...

    async def start_detached(self, cmd: str) -> None: ...

    async def teardown(self, *, force: bool = False) -> bool: ...

    async def close(self) -> None: ...


def _env_prefix(env: Mapping[str, str] | None, workdir: str | None) -> str:
    parts = []
    for k, v in (env or {}).items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise UserError(f"env: {k!r} is not a valid environment variable name")
        parts.append(f"export {k}={shlex.quote(v)};")
    if workdir:
        parts.append(f"cd {shlex.quote(workdir)} &&")
    return " ".join(parts)


class HostRuntime:
    """No container: commands run on the node itself through its transport."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.node = transport.name

    async def image_present(self, image: str | None = None) -> bool:
        return True

    async def launch(self) -> LaunchOutcome:
        return LaunchOutcome.NONE

    async def is_running(self) -> bool:
        return True

    async def exec(
        self,
        cmd: str,
        *,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        timeout: float | None = None,
    ) -> CommandResult:
        prefix = _env_prefix(env, workdir)
        return await self.transport.run(f"{prefix} {cmd}" if prefix else cmd, timeout)

    async def start_detached(self, cmd: str) -> None:
        # Own session, no terminal, streams closed: the command outlives the SSH channel that started it.
        r = await self.transport.run(
            f"nohup setsid sh -c {shlex.quote(cmd)} >/dev/null 2>&1 </dev/null &", 30
        )
        if r.rc != 0:
            raise ContainerError(f"{self.node}: cannot start `{cmd}`: {r.err.strip()}")

    async def teardown(self, *, force: bool = False) -> bool:
        return True

    async def close(self) -> None:
        return None


class DockerRuntime:
    """One node's container through the Docker API (local socket, or the node's socket over SSH)."""

    def __init__(self, transport: Transport, spec: ContainerSpec, *, socket_path: str | None = None) -> None:
        self.transport = transport
        self.spec = spec
        self.node = transport.name
        self.lifetime = Lifetime(spec.lifetime)
        self._socket = _socket_path(socket_path, local=isinstance(transport, LocalTransport))
        self._docker: aiodocker.Docker | None = None
        self._generation = -1

    async def _client(self) -> aiodocker.Docker:
        gen = getattr(self.transport, "generation", 0)
        if self._docker is not None and gen == self._generation:
            return self._docker
        if self._docker is not None:  # the SSH connection was re-opened: forward the socket again
            with contextlib.suppress(Exception):
                await self._docker.close()
        local = await self.transport.forward_unix_socket(self._socket)
        self._docker = aiodocker.Docker(url=f"unix://{local}")
        self._generation = getattr(self.transport, "generation", 0)
        return self._docker

    async def _call(self, what: str, fn: Any) -> Any:
        try:
            return await fn(await self._client())
        except aiodocker.DockerError as exc:
            raise ContainerError(f"{self.node}: {what}: {exc.message}") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise ContainerError(
                f"{self.node}: {what}: Docker API not reachable at {self._socket}: {exc}"
            ) from exc

    async def image_present(self, image: str | None = None) -> bool:
        img = image or self.spec.image

        async def go(d: aiodocker.Docker) -> bool:
            try:
                await d.images.inspect(img)
            except aiodocker.DockerError as exc:
                if exc.status == 404:
                    return False
                raise
            return True

        return bool(await self._call(f"inspect image {img}", go))

    async def daemon_id(self) -> str:
        """The Docker daemon's ID: nodes that report the same one share a daemon (and its containers)."""

        async def go(d: aiodocker.Docker) -> str:
            info = await d.system.info()
            return str(info.get("ID") or "")

        return str(await self._call("docker info", go))

    async def _state(self, d: aiodocker.Docker) -> dict[str, Any] | None:
        try:
            info = await d.containers.container(self.spec.name).show()
        except aiodocker.DockerError as exc:
            if exc.status == 404:
                return None
            raise
        return info.get("State") or {}

    async def is_running(self) -> bool:
        async def go(d: aiodocker.Docker) -> bool:
            st = await self._state(d)
            return bool(st and st.get("Running"))

        return bool(await self._call(f"inspect container {self.spec.name}", go))

    async def launch(self) -> LaunchOutcome:
        name = self.spec.name
        config = create_config(self.spec)  # bad args fail before anything is touched

        async def go(d: aiodocker.Docker) -> LaunchOutcome:
            st = await self._state(d)
            if self.lifetime is Lifetime.NO_LAUNCH:
                if not (st and st.get("Running")):
                    raise ContainerError(
                        f"{self.node}: container {name} is not running; "
                        "lifetime no_launch needs it started beforehand"
                    )
                return LaunchOutcome.ATTACHED
            if self.lifetime is Lifetime.PERSISTENT and st is not None:
                if st.get("Running"):
                    return LaunchOutcome.ATTACHED
                await d.containers.container(name).start()
                return LaunchOutcome.STARTED
            if st is not None:  # per_run leftover with our user + run id in the name
                await d.containers.container(name).delete(force=True)
            c = await d.containers.create(config=config, name=name)
            try:
                await c.start()
            except aiodocker.DockerError:
                with contextlib.suppress(aiodocker.DockerError):
                    await c.delete(force=True)
                raise
            return LaunchOutcome.STARTED

        return await self._call(f"launch container {name} from {self.spec.image}", go)

    async def exec(
        self,
        cmd: str,
        *,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        timeout: float | None = None,
    ) -> CommandResult:
        """Run ``sh -c cmd`` in the container. On timeout the command's process is killed inside it."""
        pid_file = f"/tmp/.cvs-exec-{uuid.uuid4().hex}.pid"
        # Record the shell's pid first so a timeout can kill exactly this command inside the container.
        wrapped = f"echo $$ > {pid_file}; {cmd}"
        environment = _env_list(dict(env), "env") if env else None

        async def go(d: aiodocker.Docker) -> CommandResult:
            c = d.containers.container(self.spec.name)
            ex = await c.exec(["sh", "-c", wrapped], environment=environment, workdir=workdir)
            out: list[bytes] = []
            err: list[bytes] = []

            async def pump() -> None:
                async with ex.start(detach=False) as stream:
                    while (msg := await stream.read_out()) is not None:
                        (out if msg.stream == 1 else err).append(msg.data)

            try:
                await asyncio.wait_for(pump(), timeout)
            except TimeoutError:
                await self._exec_simple(d, kill_tree_command(pid_file))
                raise CommandTimeout(
                    f"{self.node}: `{cmd}` timed out after {timeout} s in {self.spec.name}"
                ) from None
            finally:
                await self._exec_simple(d, f"rm -f {pid_file}")
            info = await ex.inspect()
            rc = info.get("ExitCode")
            return CommandResult(
                -1 if rc is None else int(rc),
                b"".join(out).decode("utf-8", "replace"),
                b"".join(err).decode("utf-8", "replace"),
            )

        return await self._call(f"exec in {self.spec.name}", go)

    async def _exec_simple(self, d: aiodocker.Docker, cmd: str) -> None:
        with contextlib.suppress(aiodocker.DockerError, aiohttp.ClientError, OSError):
            ex = await d.containers.container(self.spec.name).exec(["sh", "-c", cmd])
            async with ex.start(detach=False) as stream:
                while await stream.read_out() is not None:
                    pass

    async def start_detached(self, cmd: str) -> None:
        async def go(d: aiodocker.Docker) -> None:
            ex = await d.containers.container(self.spec.name).exec(
                ["sh", "-c", cmd], stdout=False, stderr=False
            )
            await ex.start(detach=True)

        await self._call(f"start `{cmd}` in {self.spec.name}", go)

    async def teardown(self, *, force: bool = False) -> bool:
        """Remove the container when its lifetime says so (per_run) or ``force``; True when none is left."""
        if self.lifetime is not Lifetime.PER_RUN and not force:
            return True

        async def go(d: aiodocker.Docker) -> bool:
            with contextlib.suppress(aiodocker.DockerError):
                await d.containers.container(self.spec.name).delete(force=True)
            return await self._state(d) is None

        return bool(await self._call(f"remove container {self.spec.name}", go))

    async def close(self) -> None:
        if self._docker is not None:
            with contextlib.suppress(Exception):
                await self._docker.close()
            self._docker = None


def kill_tree_command(pid_file: str) -> str:
    """SIGKILL the process in ``pid_file`` and all its descendants, found through /proc (no pkill needed)."""
    tree = (
        "{par[$1]=$2} END {want[root]=1; more=1; "
        "while (more) {more=0; for (c in par) if (!(c in want) && (par[c] in want)) {want[c]=1; more=1}} "
        "for (x in want) print x}"
    )
    return (
        f"p=$(cat {shlex.quote(pid_file)} 2>/dev/null) || exit 0; "
        "pids=$(cat /proc/[0-9]*/stat 2>/dev/null "
        "| sed 's/^\\([0-9]*\\) (.*) [A-Za-z] \\([0-9]*\\) .*/\\1 \\2/' "
        f'| awk -v root="$p" {shlex.quote(tree)}); kill -KILL $pids 2>/dev/null; exit 0'
    )


def _socket_path(given: str | None, *, local: bool) -> str:
    """A socket path from ``unix:///x``, ``/x`` or, for the local machine, ``$DOCKER_HOST``."""
    value = given or (os.environ.get("DOCKER_HOST") if local else None) or DEFAULT_DOCKER_SOCKET
    if value.startswith("unix://"):
        value = value[len("unix://") :]
    if not value.startswith("/"):
        raise UserError(
            f"docker socket: {value!r} is not a unix socket path (use unix:///path/to/docker.sock)"
        )
    return value


def runtime_for(
    transport: Transport, spec: ContainerSpec | None, runtime_name: str, **kw: Any
) -> ContainerRuntime:
    """``docker`` -> :class:`DockerRuntime`, ``host`` -> :class:`HostRuntime`."""
    if runtime_name == "host":
        return HostRuntime(transport)
    if runtime_name == "docker":
        if spec is None:
            raise ValueError("a docker runtime needs a ContainerSpec")
        return DockerRuntime(transport, spec, **kw)
    raise UserError(f"container.runtime.name: {runtime_name!r} is not docker or host")
