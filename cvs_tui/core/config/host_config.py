"""`container.runtime.args` -> the Docker API ``HostConfig`` a container is created with (pure, no I/O).

Two steps, both pure so that `config validate` and `plan` show exactly what a run will send:

* :func:`parse_runtime_args` validates the args at config load (unknown keys and bad types are config
  errors naming the key) and returns :class:`RuntimeArgs`;
* :func:`effective_host_config` adds the defaults upstream CVS gives every container unless the args say
  otherwise (``DEFAULT_CONTAINER_ARGS`` in upstream's container orchestrator): on AMD the ROCm and RDMA
  devices, the ``video`` group, IPC_LOCK/SYS_PTRACE/SYS_ADMIN, seccomp and AppArmor unconfined,
  unlimited memlock, host network and IPC; on NVIDIA all GPUs through a device request instead of the
  ROCm devices and group. As upstream, list args (devices, cap_add, security_opt, group_add, ulimit)
  add to the defaults and scalars (network, ipc, privileged) replace them; ``"defaults": false`` turns
  the defaults off. ``hardware: cpu`` configs (vendor ``None``) get no defaults: they need no GPU or RDMA.

Node facts (is ``/dev/infiniband`` there, which entries it has, which vendor when ``gpu_name`` does not
say) are known only at preflight; :func:`effective_host_config` takes them when the caller has them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from cvs_tui.core.errors import UserError

Vendor = Literal["amd", "nvidia"]
# amd / nvidia: upstream's GPU defaults for that vendor; auto: the vendor the node has; none: no
# defaults and no GPU check (hardware cpu, or gpu_name cpu).
GpuMode = Literal["amd", "nvidia", "auto", "none"]
WHERE = "container.runtime.args"
INFINIBAND = "/dev/infiniband"
AMD_GPU_DEVICES = ("/dev/kfd", "/dev/dri")
DEFAULT_CAPS = ("SYS_PTRACE", "IPC_LOCK", "SYS_ADMIN")
DEFAULT_SECURITY_OPT = ("seccomp=unconfined", "apparmor=unconfined")
MEMLOCK_UNLIMITED = {"Name": "memlock", "Soft": -1, "Hard": -1}
# `docker run --gpus all` as the API receives it.
ALL_GPUS_REQUEST = {"Driver": "", "Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]], "Options": {}}

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
    "docker_socket",
    "registry",
    "defaults",
)
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([bkmgt]?)b?\s*$", re.I)
_SIZE_MULT = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NVIDIA = re.compile(r"nvidia|^(gb|[abhl])\d{2,3}|^rtx|^v100|^t4$|^dgx|^gh200", re.I)
_AMD = re.compile(r"^mi\d|^mi3xx|amd|instinct|^radeon", re.I)


@dataclass(frozen=True)
class RegistryAuth:
    """`runtime.args.registry` as upstream documents it: the password is read from a file ON THE NODE."""

    username: str
    password_file: str
    server: str = ""


@dataclass(frozen=True)
class RuntimeArgs:
    """Validated runtime args: the HostConfig they set explicitly, plus what is not a HostConfig field."""

    host_config: dict[str, Any] = field(default_factory=dict)
    env: list[str] = field(default_factory=list)
    docker_socket: str | None = None
    registry: RegistryAuth | None = None
    defaults: bool = True


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
    for entry in str_list(value, where):
        parts = entry.split(":")
        if not parts[0] or len(parts) > 3:
            raise UserError(f"{where}: {entry!r} is not host[:container[:permissions]]")
        host = parts[0]
        cont = parts[1] if len(parts) > 1 and parts[1] else host
        perms = parts[2] if len(parts) > 2 else "rwm"
        out.append({"PathOnHost": host, "PathInContainer": cont, "CgroupPermissions": perms})
    return out


def device(path: str) -> dict[str, str]:
    return {"PathOnHost": path, "PathInContainer": path, "CgroupPermissions": "rwm"}


def str_list(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple) and all(
        isinstance(v, str | int) and not isinstance(v, bool) for v in value
    ):
        return [str(v) for v in value]
    raise UserError(f"{where}: expected a string or a list of strings")


def env_list(env: Any, where: str) -> list[str]:
    """``{"A": "1"}`` or ``["A=1"]`` -> ``["A=1"]``, names checked."""
    if isinstance(env, Mapping):
        items = [(str(k), "" if v is None else str(v)) for k, v in env.items()]
    else:
        items = []
        for e in str_list(env, where):
            k, sep, v = e.partition("=")
            if not sep:
                raise UserError(f"{where}: {e!r} is not NAME=value")
            items.append((k, v))
    for k, _ in items:
        if not _ENV_NAME.fullmatch(k):
            raise UserError(f"{where}: {k!r} is not a valid environment variable name")
    return [f"{k}={v}" for k, v in items]


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise UserError(f"{where}: expected true or false, got {value!r}")
    return value


def _registry(value: Any, where: str) -> RegistryAuth:
    if not isinstance(value, Mapping):
        raise UserError(f'{where}: expected {{"username": ..., "password_file": ..., "server": ...}}')
    problems = []
    for k in value:
        if k not in ("username", "password_file", "server") and not str(k).startswith("_"):
            problems.append(f"{where}.{k}: unknown key; use username, password_file and server")
    user, pfile, server = value.get("username"), value.get("password_file"), value.get("server", "")
    if not isinstance(user, str) or not user:
        problems.append(f"{where}.username: required, a string")
    if not isinstance(pfile, str) or not pfile.startswith("/"):
        problems.append(
            f"{where}.password_file: required, an absolute path on every node to a file holding the "
            "password or token (the credential itself never goes in the config)"
        )
    if not isinstance(server, str):
        problems.append(f"{where}.server: expected a registry host name (empty for Docker Hub)")
    if problems:
        raise UserError(problems)
    return RegistryAuth(username=str(user), password_file=str(pfile), server=str(server))


def _one_arg(key: str, value: Any, w: str, hc: dict[str, Any], out: dict[str, Any]) -> None:
    """Apply one runtime arg to ``hc`` (HostConfig) or ``out`` (everything else); raises UserError."""
    if key in ("network", "ipc", "pid"):
        if not isinstance(value, str) or not value:
            raise UserError(f"{w}: expected a string such as host, got {value!r}")
        hc[{"network": "NetworkMode", "ipc": "IpcMode", "pid": "PidMode"}[key]] = value
    elif key in ("privileged", "init"):
        hc["Privileged" if key == "privileged" else "Init"] = _bool(value, w)
    elif key in ("shm-size", "shm_size"):
        hc["ShmSize"] = parse_size(value, w)
    elif key in ("ulimit", "ulimits"):
        hc.setdefault("Ulimits", []).extend(parse_ulimits(value, w))
    elif key == "volumes":
        vols = str_list(value, w)
        for v in vols:
            if ":" not in v:
                raise UserError(f"{w}: {v!r} is not host_path:container_path[:ro]")
        hc.setdefault("Binds", []).extend(vols)
    elif key == "devices":
        hc["Devices"] = parse_devices(value, w)
    elif key in ("cap_add", "cap_drop", "security_opt", "group_add"):
        name = {"cap_add": "CapAdd", "cap_drop": "CapDrop", "security_opt": "SecurityOpt"}
        hc[name.get(key, "GroupAdd")] = str_list(value, w)
    elif key == "env":
        out["env"] = env_list(value, w)
    elif key == "docker_socket":
        if not isinstance(value, str) or not value.strip():
            raise UserError(f"{w}: {value!r} is not a socket path; use e.g. /var/run/docker.sock")
        out["docker_socket"] = value.strip()
    elif key == "registry":
        out["registry"] = _registry(value, w)
    elif key == "defaults":
        out["defaults"] = _bool(value, w)
    else:
        raise UserError(f"{w}: unknown runtime arg; supported: {', '.join(SUPPORTED_ARGS)}")


def parse_runtime_args(args: Mapping[str, Any], *, where: str = WHERE) -> RuntimeArgs:
    """Validate every key at once; raises UserError with one line per bad key."""
    hc: dict[str, Any] = {}
    out: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in args.items():
        if key.startswith("_"):
            continue
        try:
            _one_arg(key, value, f"{where}.{key}", hc, out)
        except UserError as exc:
            problems.extend(exc.problems)
    if problems:
        raise UserError(problems)
    return RuntimeArgs(host_config=hc, **out)


def vendor_from_gpu_name(gpu_name: str) -> Vendor | None:
    """``mi300x``/``mi3xx``/``amd ...`` -> amd; ``h100``/``a100``/``gb200``/``nvidia ...`` -> nvidia."""
    name = gpu_name.strip()
    if _AMD.search(name):
        return "amd"
    if _NVIDIA.search(name):
        return "nvidia"
    return None


def gpu_mode(gpu_name: str, *, cpu_only: bool) -> GpuMode:
    """How a config's container gets its GPU: from ``gpu_name``, else from the node (``auto``)."""
    if cpu_only or gpu_name.strip().lower() == "cpu":
        return "none"
    return vendor_from_gpu_name(gpu_name) or "auto"


def _merge_list(default: Sequence[Any], given: Sequence[Any] | None) -> list[Any]:
    out = list(default)
    for v in given or ():
        if v not in out:
            out.append(v)
    return out


def effective_host_config(
    args: RuntimeArgs,
    vendor: Vendor | None,
    *,
    infiniband: Sequence[str] | None = (),
) -> dict[str, Any]:
    """The HostConfig sent to Docker: the args plus upstream's defaults for ``vendor``.

    ``infiniband``: the node's ``/dev/infiniband`` entries when known (each is added, as upstream's
    per-host ``--device`` loop does); ``()`` = not probed yet (the folder is listed, as upstream does);
    ``None`` = the node has no ``/dev/infiniband`` (nothing RDMA is added).
    """
    hc = dict(args.host_config)
    if vendor is None or not args.defaults:
        return hc
    devices: list[dict[str, str]] = []
    if vendor == "amd":
        devices += [device(p) for p in AMD_GPU_DEVICES]
    if infiniband is not None:
        devices += [device(p) for p in (INFINIBAND, *infiniband)]
    given = hc.get("Devices") or []
    hc["Devices"] = devices + [d for d in given if d not in devices]
    if vendor == "nvidia" and not hc.get("DeviceRequests"):
        hc["DeviceRequests"] = [dict(ALL_GPUS_REQUEST)]
    hc["CapAdd"] = _merge_list(DEFAULT_CAPS, hc.get("CapAdd"))
    hc["SecurityOpt"] = _merge_list(DEFAULT_SECURITY_OPT, hc.get("SecurityOpt"))
    if vendor == "amd":
        hc["GroupAdd"] = _merge_list(["video"], hc.get("GroupAdd"))
    ulimits = list(hc.get("Ulimits") or [])
    if not any(u.get("Name") == "memlock" for u in ulimits):
        ulimits.insert(0, dict(MEMLOCK_UNLIMITED))
    hc["Ulimits"] = ulimits
    hc.setdefault("NetworkMode", "host")
    hc.setdefault("IpcMode", "host")
    return hc


def gpu_device_problem(host_config: Mapping[str, Any], vendor: Vendor) -> str | None:
    """Why a container with ``host_config`` would see no GPU, or None when it would see one."""
    if host_config.get("Privileged"):
        return None  # every host device is visible
    if vendor == "nvidia":
        if host_config.get("DeviceRequests"):
            return None
        return "no GPU device request (NVIDIA GPUs reach a container through --gpus)"
    inside = {d.get("PathInContainer") for d in host_config.get("Devices") or []}
    missing = [p for p in AMD_GPU_DEVICES if p not in inside]
    if missing:
        return f"no {' or '.join(missing)} device (ROCm needs both)"
    return None
