"""What preflight does on a node before its container is created: find its GPU and RDMA devices, and get
the image there (pull it from its registry, or ``docker load`` an ``image_tar`` from the node's disk).

Registry credentials come, in this order, from ``container.runtime.args.registry`` (upstream's
``{username, password_file, server}``: the password is read from a file ON THE NODE) or from the node's own
Docker config (``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json``, inline ``auths`` entries).
A credential is sent to the node's Docker daemon in the ``X-Registry-Auth`` header only; it is never put
in a command line, a log line or an event.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiodocker

from cvs_tui.core.config.host_config import RegistryAuth, Vendor
from cvs_tui.core.transport import Transport, TransportError

ProgressFn = Callable[[str], None]
DOCKER_HUB = "docker.io"
_HUB_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "docker.io", "registry-1.docker.io")
PROGRESS_EVERY_S = 2.0


class ImageError(Exception):
    """The image could not be pulled or loaded. The message names the node and the image."""


@dataclass(frozen=True)
class NodeDevices:
    """What a node has: GPU device nodes and ``/dev/infiniband`` entries (None = no such folder)."""

    kfd: bool = False
    dri: bool = False
    nvidia: bool = False
    infiniband: tuple[str, ...] | None = None

    @property
    def vendor(self) -> Vendor | None:
        return "amd" if self.kfd else "nvidia" if self.nvidia else None


# One line per fact, so a node without a device simply prints nothing for it.
PROBE_DEVICES = (
    "for p in /dev/kfd /dev/dri /dev/nvidiactl; do [ -e $p ] && echo dev:$p; done; "
    "if [ -d /dev/infiniband ]; then echo ib:; "
    'for e in /dev/infiniband/*; do [ -e "$e" ] && echo ib:$e; done; fi; exit 0'
)


def parse_device_probe(text: str) -> NodeDevices:
    lines = text.splitlines()
    devs = {line[4:] for line in lines if line.startswith("dev:")}
    ib = [line[3:] for line in lines if line.startswith("ib:")]
    return NodeDevices(
        kfd="/dev/kfd" in devs,
        dri="/dev/dri" in devs,
        nvidia="/dev/nvidiactl" in devs,
        infiniband=tuple(e for e in ib if e) if ib else None,
    )


async def probe_devices(transport: Transport, timeout: float = 30.0) -> NodeDevices:
    r = await transport.run(PROBE_DEVICES, timeout)
    return parse_device_probe(r.out)


def registry_of(image: str) -> str:
    """The registry host of an image reference (``docker.io`` when it names none), as Docker decides."""
    first, slash, _ = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first
    return DOCKER_HUB


def qualified(image: str) -> str:
    """The reference with its registry host (aiodocker sends credentials only for such a reference)."""
    if registry_of(image) != DOCKER_HUB or image.startswith("docker.io/"):
        return image
    return f"docker.io/{image}"


def _host_of(key: str) -> str:
    k = key.removeprefix("https://").removeprefix("http://")
    return k.split("/", 1)[0]


def auth_from_docker_config(text: str, registry: str) -> dict[str, str] | None:
    """The inline credential for ``registry`` in a Docker ``config.json`` text, or None."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    auths = data.get("auths") if isinstance(data, dict) else None
    if not isinstance(auths, dict):
        return None
    for key, entry in auths.items():
        host = _host_of(key)
        hub = registry == DOCKER_HUB and (key in _HUB_KEYS or host in _HUB_KEYS)
        if not (hub or host == registry) or not isinstance(entry, dict):
            continue
        if isinstance(entry.get("identitytoken"), str):
            return {"identitytoken": entry["identitytoken"], "serveraddress": key}
        raw = entry.get("auth")
        if isinstance(raw, str) and raw:
            try:
                user, _, password = base64.b64decode(raw).decode("utf-8").partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return None
            return {"username": user, "password": password, "serveraddress": key}
    return None


async def registry_credentials(
    transport: Transport, image: str, given: RegistryAuth | None, node: str
) -> dict[str, str] | None:
    """Credentials for pulling ``image`` on this node: the config's registry block, else the node's."""
    registry = registry_of(image)
    if given is not None:
        r = await transport.run(f"cat -- {shlex.quote(given.password_file)}", 30)
        if r.rc != 0:
            raise ImageError(
                f"{node}: container.runtime.args.registry.password_file {given.password_file} is not "
                "readable on this node; create it there (it holds the registry password or token)"
            )
        return {
            "username": given.username,
            "password": r.out.rstrip("\r\n"),
            "serveraddress": given.server or registry,
        }
    r = await transport.run('cat -- "${DOCKER_CONFIG:-$HOME/.docker}/config.json" 2>/dev/null', 30)
    return auth_from_docker_config(r.out, registry) if r.rc == 0 else None


class _Progress:
    """Per-layer byte counts from the pull stream, reported at most every PROGRESS_EVERY_S seconds."""

    def __init__(self, node: str, image: str, report: ProgressFn | None) -> None:
        self.node, self.image, self.report = node, image, report
        self.layers: dict[str, tuple[int, int]] = {}
        self.last = 0.0

    def feed(self, ev: dict[str, Any]) -> None:
        detail = ev.get("progressDetail") or {}
        layer = ev.get("id")
        if isinstance(layer, str) and ev.get("status") == "Downloading" and detail.get("total"):
            self.layers[layer] = (int(detail.get("current") or 0), int(detail["total"]))
        elif isinstance(layer, str) and layer in self.layers and ev.get("status") == "Download complete":
            total = self.layers[layer][1]
            self.layers[layer] = (total, total)
        now = time.monotonic()
        if self.report is not None and now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            self.report(self.line())

    def line(self) -> str:
        done = sum(c for c, _ in self.layers.values()) >> 20
        total = sum(t for _, t in self.layers.values()) >> 20
        return f"{self.node}: pulling {self.image}: {done}/{total} MiB in {len(self.layers)} layer(s)"


async def pull_image(
    docker: aiodocker.Docker,
    image: str,
    *,
    auth: dict[str, str] | None,
    timeout: float,
    node: str,
    progress: ProgressFn | None = None,
) -> None:
    """Pull through the node's Docker API, reporting progress; raises ImageError naming node and image."""
    meter = _Progress(node, image, progress)
    if progress is not None:
        progress(f"{node}: image {image} is missing; pulling it from {registry_of(image)}")

    async def consume() -> None:
        async for ev in docker.images.pull(qualified(image), auth=auth, stream=True):
            if isinstance(ev, dict):
                meter.feed(ev)

    try:
        await asyncio.wait_for(consume(), timeout)
    except TimeoutError:
        raise ImageError(f"{node}: pulling {image} timed out after {timeout:.0f} s") from None
    except aiodocker.DockerError as exc:
        how = "with the registry credentials given" if auth else "without credentials"
        raise ImageError(
            f"{node}: cannot pull {image} ({how}): {exc.message}; check the image name, "
            "container.runtime.args.registry or the node's docker login, or set container.image_tar"
        ) from exc
    if progress is not None:
        progress(f"{node}: pulled {image}")


async def load_image_tar(transport: Transport, socket: str, tar: str, *, timeout: float, node: str) -> None:
    """``docker load -i TAR`` on the node itself: the file never crosses the network."""
    cmd = f"DOCKER_HOST={shlex.quote('unix://' + socket)} docker load -i {shlex.quote(tar)}"
    try:
        r = await transport.run(cmd, timeout)
    except TransportError as exc:
        raise ImageError(f"{node}: loading {tar}: {exc}") from exc
    if r.rc != 0:
        why = (r.err or r.out).strip()[-300:]
        raise ImageError(f"{node}: cannot load container.image_tar {tar}: {why}")
