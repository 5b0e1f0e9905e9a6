"""Where the trainer runs on a node: inside a Docker container (aiodocker) or on the node itself (``host``).

Long because it holds one class per runtime, and the Docker one owns its whole container life (preflight
devices and image, create, exec with timeouts, teardown); splitting it would scatter that.

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
import copy
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

from cvs_tui.core.config.host_config import (
    AMD_GPU_DEVICES,
    GpuMode,
    Vendor,
    effective_host_config,
    env_list,
    gpu_device_problem,
    parse_runtime_args,
)
from cvs_tui.core.config.host_config import SUPPORTED_ARGS as SUPPORTED_ARGS
from cvs_tui.core.config.host_config import parse_devices as parse_devices
from cvs_tui.core.config.host_config import parse_size as parse_size
from cvs_tui.core.config.host_config import parse_ulimits as parse_ulimits
from cvs_tui.core.errors import UserError
from cvs_tui.core.runner.nodes.local import LocalTransport
from cvs_tui.core.runner.nodes.prep import (
    ImageError,
    NodeDevices,
    ProgressFn,
    load_image_tar,
    probe_devices,
    pull_image,
    registry_credentials,
)
from cvs_tui.core.transport import CommandResult, CommandTimeout, Transport, TransportError

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
    gpu: GpuMode = "none"  # see host_config.GpuMode; ignored when `host_config` is given
    host_config: Mapping[str, Any] | None = None  # a fixed HostConfig, sent as is (no node facts)
    image_tar: str | None = None  # `docker load` this file on the node when the image is missing
    pull_timeout_s: float = 1800.0


# ---------------------------------------------------------------------------------------------------------
# runtime args -> Docker API HostConfig (the pure part lives in core/config/host_config.py)
# ---------------------------------------------------------------------------------------------------------
def host_config(
    args: Mapping[str, Any], *, where: str = "container.runtime.args"
) -> tuple[dict[str, Any], list[str]]:
    """Map runtime args to a Docker ``HostConfig`` plus ``Env`` entries. Unknown keys are an error."""
    parsed = parse_runtime_args(args, where=where)
    return dict(parsed.host_config), list(parsed.env)


def create_config(spec: ContainerSpec, effective: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The Docker ``containers/create`` body for ``spec`` (runtime args, env, binds, labels).

    ``effective`` (else ``spec.host_config``), when given, is the whole HostConfig (the args plus
    upstream's defaults, see :func:`cvs_tui.core.config.host_config.effective_host_config`), sent as is.
    """
    hc, env = host_config(spec.args)
    fixed = effective if effective is not None else spec.host_config
    if fixed is not None:
        hc = copy.deepcopy(dict(fixed))
    hc.setdefault("Init", spec.init)
    if spec.extra_binds:
        hc["Binds"] = [*hc.get("Binds", []), *spec.extra_binds]
    env = env + env_list(dict(spec.env), "container.env")
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

    async def prepare(self, progress: ProgressFn | None = None) -> list[str]: ...

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

    async def prepare(self, progress: ProgressFn | None = None) -> list[str]:
        return []

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
        self._args = parse_runtime_args(spec.args)  # bad args fail before any node is touched
        self._host_config: dict[str, Any] | None = None  # set by prepare() from the node's devices

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

    # -- preflight: devices and image ----------------------------------------------------------------
    async def prepare(self, progress: ProgressFn | None = None) -> list[str]:
        """Preflight on this node: its GPU devices (a GPU config) and the image (pulled or loaded).

        Returns problem lines naming the node; nothing is created.
        """
        creates = self.lifetime is not Lifetime.NO_LAUNCH and self.spec.host_config is None
        if creates and self.spec.gpu != "none":
            try:
                devices = await probe_devices(self.transport)
            except TransportError as exc:
                return [f"{self.node}: cannot list its devices: {exc}"]
            problems = self.use_devices(devices)
            if problems:
                return problems
        try:
            await self.ensure_image(progress)
        except (ImageError, ContainerError) as exc:
            return [str(exc)]
        return []

    def use_devices(self, devices: NodeDevices) -> list[str]:
        """Fix this node's HostConfig from what it has; problem lines when the container would get no GPU."""
        vendor = devices.vendor if self.spec.gpu == "auto" else _fixed_vendor(self.spec.gpu)
        if vendor is None:
            return [
                f"{self.node}: no GPU found (no /dev/kfd, no /dev/nvidiactl) but the config trains on GPUs; "
                "use a GPU node, or set maxtext_config.hardware to cpu"
            ]
        have = devices.kfd and devices.dri if vendor == "amd" else devices.nvidia
        if not have:
            what = ", ".join(AMD_GPU_DEVICES) if vendor == "amd" else "/dev/nvidiactl"
            return [
                f"{self.node}: no {vendor.upper()} GPU: {what} not found on the node "
                f"(gpu_name says {vendor}); "
                "check the driver (amdgpu / nvidia) on the node, or fix gpu_name"
            ]
        hc = effective_host_config(self._args, vendor, infiniband=devices.infiniband)
        why = gpu_device_problem(hc, vendor)
        if why is not None:
            return [
                f"{self.node}: the container would get {why}; remove the override from "
                "container.runtime.args (devices, defaults) or add the GPU devices there"
            ]
        self._host_config = hc
        return []

    def effective_host_config(self) -> dict[str, Any] | None:
        """The HostConfig the container is created with (None: the args alone, no defaults)."""
        if self._host_config is not None:
            return self._host_config
        vendor = _fixed_vendor(self.spec.gpu)
        return effective_host_config(self._args, vendor) if vendor is not None else None

    async def ensure_image(self, progress: ProgressFn | None = None) -> str:
        """``present``, or ``loaded`` / ``pulled`` after getting a missing image; raises ImageError."""
        image = self.spec.image
        if await self.image_present():
            return "present"
        if self.spec.image_tar:
            if progress is not None:
                progress(f"{self.node}: image {image} is missing; loading {self.spec.image_tar}")
            await load_image_tar(
                self.transport,
                self._socket,
                self.spec.image_tar,
                timeout=self.spec.pull_timeout_s,
                node=self.node,
            )
            how = "loaded"
        else:
            try:
                auth = await registry_credentials(self.transport, image, self._args.registry, self.node)
            except TransportError as exc:
                raise ImageError(f"{self.node}: reading registry credentials: {exc}") from exc

            async def go(d: aiodocker.Docker) -> None:
                await pull_image(
                    d, image, auth=auth, timeout=self.spec.pull_timeout_s, node=self.node, progress=progress
                )

            await self._call(f"pull {image}", go)
            how = "pulled"
        if not await self.image_present():
            raise ImageError(f"{self.node}: image {image} is still missing after it was {how}")
        return how

    async def create(self) -> str:
        """Create (not start) the container; its id. Used by launch, and to read back what is sent."""
        config = create_config(self.spec, self.effective_host_config())

        async def go(d: aiodocker.Docker) -> str:
            c = await d.containers.create(config=config, name=self.spec.name)
            return str(c.id)

        return str(await self._call(f"create container {self.spec.name} from {self.spec.image}", go))

    async def launch(self) -> LaunchOutcome:
        name = self.spec.name
        config = create_config(self.spec, self.effective_host_config())

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
        environment = env_list(dict(env), "env") if env else None

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


def _fixed_vendor(mode: GpuMode) -> Vendor | None:
    return "amd" if mode == "amd" else "nvidia" if mode == "nvidia" else None


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
