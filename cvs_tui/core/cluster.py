"""The nodes a run uses: a CVS-style cluster file, a `--nodes h1,h2` list, or the local machine.

Cluster file (JSON):
    {"username": "alice", "priv_key_file": "~/.ssh/id_ed25519",
     "node_dict": {"10.0.0.1": {"vpc_ip": "..."}, "10.0.0.2": {"port": 2222}},
     "port": 22, "known_hosts": "~/.ssh/known_hosts", "verify_host_keys": true}
or `"nodes": ["h1", "alice@h2:2222", {"host": "h3", "port": 2222}]` instead of `node_dict`.
Rank follows file order; rank 0 is the JAX coordinator. `localhost`/`local` means the local transport
(no SSH) and may repeat: two local entries are two ranks on this machine.

Upstream CVS cluster files load unchanged: `env_vars` (exported before every command on every node and
in the launcher), `password` (SSH password auth; keys are preferred), `head_node_dict` (checked against
rank 0), and `orchestrator`, `container`, `racks` (not used by this suite: a warning says so).
"""

from __future__ import annotations

import getpass
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cvs_tui.core.config.model import is_secret_entry, is_secret_name
from cvs_tui.core.config.problems import Problems, did_you_mean, jpath
from cvs_tui.core.config.thresholds import read_json_object
from cvs_tui.core.errors import UserError

LOCAL_HOSTS = ("localhost", "local")
_ROOT_KEYS = (
    "username",
    "priv_key_file",
    "node_dict",
    "nodes",
    "port",
    "known_hosts",
    "verify_host_keys",
    "env_vars",
    "password",
    "head_node_dict",
)
# Upstream cluster-file keys this suite has no use for: accepted, with a warning naming what decides instead.
_IGNORED_KEYS = {
    "orchestrator": "the config's container.runtime decides where the trainer runs",
    "container": "the config's container block is used (upstream too lets the suite config override it)",
    "racks": "switch-tray targeting is not part of the training suite",
}
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # fullmatch: `$` would let `FOO\n` through (L13)
ENV_VALUE_MAX = 32 * 1024  # one exported value; past this every command line risks E2BIG (L13)
_NODE_KEYS = ("host", "port", "username", "priv_key_file")
_HOST_RE = re.compile(r"^[A-Za-z0-9_.:\-\[\]%]+$")


@dataclass(frozen=True)
class Node:
    host: str
    rank: int
    user: str | None = None
    port: int | None = None
    key_file: str | None = None
    local: bool = False


@dataclass(frozen=True)
class Cluster:
    nodes: list[Node]
    user: str
    source: str
    known_hosts: str | None = None
    verify_host_keys: bool = True
    env_vars: dict[str, str] = field(default_factory=dict)
    password: str | None = field(default=None, repr=False)  # never printed, logged or written
    warnings: list[str] = field(default_factory=list)

    @property
    def coordinator_ip(self) -> str:
        first = self.nodes[0]
        return "127.0.0.1" if first.local else first.host

    @property
    def is_local(self) -> bool:
        return all(n.local for n in self.nodes)


def os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no USER/LOGNAME
        return os.environ.get("USER") or "root"


def local_cluster(n: int = 1) -> Cluster:
    if n < 1:
        raise UserError(f"local cluster: {n} nodes; use at least 1")
    return Cluster(
        nodes=[Node(host="localhost", rank=i, local=True) for i in range(n)], user=os_user(), source="local"
    )


def _parse_target(text: str) -> tuple[str | None, str, int | None]:
    """`[user@]host[:port]` -> (user, host, port); raises ValueError."""
    login, at, rest = text.strip().rpartition("@")
    user = login if at else None
    host, port = rest, None
    if rest.count(":") == 1:  # one colon: host:port (IPv6 literals have several and take no port here)
        host, _, p = rest.partition(":")
        if not p.isdigit() or not 0 < int(p) < 65536:
            raise ValueError(f"bad port in '{text}'")
        port = int(p)
    if not host or not _HOST_RE.match(host):
        raise ValueError(f"bad host name '{text}'")
    if at and not user:
        raise ValueError(f"empty user name in '{text}'")
    return user, host, port


def _port(value: Any, where: str, problems: Problems) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
        problems.add(where, f"not a TCP port: {value!r}", "use a whole number 1-65535")
        return None
    return value


def _file(value: Any, where: str, base: Path, problems: Problems, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        problems.add(where, f"must be a path string, got {value!r}", f"set it to the {what}")
        return None
    p = Path(os.path.expanduser(value))
    p = p if p.is_absolute() else base / p
    try:
        found = p.is_file()
    except (OSError, ValueError):  # a name the OS refuses: too long, a NUL byte (found by fuzzing)
        found = False
    if not found:
        problems.add(where, f"{what} {str(p)[:200]!r} not found", "fix the path")
    return str(p)


def _changeme(node: Any, parts: list[str | int], problems: Problems) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            if "<changeme>" in str(k).lower():
                problems.add(jpath([*parts, k]), "key still tagged <changeme>", "replace it with your value")
            _changeme(v, [*parts, k], problems)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _changeme(v, [*parts, i], problems)
    elif isinstance(node, str) and "<changeme>" in node.lower():
        secret = any(isinstance(p, str) and is_secret_name(p) for p in parts)
        shown = "'***'" if secret else repr(node)
        problems.add(jpath(parts), f"still tagged <changeme> ({shown})", "replace it with your value")


def _finish(nodes: list[Node], problems: Problems, source: str) -> None:
    if not nodes:
        if not problems:  # a bad entry was already reported; "no nodes" would only repeat it
            problems.add(source, "no nodes", "list at least one node")
        return
    local = [n for n in nodes if n.local]
    if local and len(local) != len(nodes):
        problems.add(
            source,
            "mixes local and remote nodes (remote nodes cannot reach the local coordinator at 127.0.0.1)",
            "use only remote host names, or only localhost",
        )
    seen: dict[tuple[str, int | None], int] = {}
    for n in nodes:
        if n.local:
            continue
        key = (n.host, n.port)
        if key in seen:
            problems.add(
                source,
                f"host {n.host} is listed twice (ranks {seen[key]} and {n.rank})",
                "list each remote node once (only localhost may repeat)",
            )
        seen.setdefault(key, n.rank)


def cluster_from_nodes_arg(text: str, *, user: str | None = None) -> Cluster:
    """`--nodes h1,h2` (each `[user@]host[:port]`); SSH user: the given one, else the OS user."""
    problems = Problems()
    default_user = user or os_user()
    nodes: list[Node] = []
    items = [t.strip() for t in text.split(",")]
    for i, item in enumerate(items):
        if not item:
            problems.add("--nodes", f"empty host name at position {i + 1}", "write --nodes h1,h2")
            continue
        try:
            u, host, port = _parse_target(item)
        except ValueError as exc:
            problems.add("--nodes", str(exc), "write each node as [user@]host[:port]")
            continue
        local = host in LOCAL_HOSTS
        nodes.append(
            Node(
                host=host,
                rank=len(nodes),
                user=None if local else (u or default_user),
                port=port,
                local=local,
            )
        )
    _finish(nodes, problems, "--nodes")
    problems.raise_if_any()
    return Cluster(nodes=nodes, user=default_user, source="--nodes")


def load_cluster(path: str | os.PathLike[str]) -> Cluster:
    """Read a cluster file; raises UserError listing every problem."""
    path = Path(path)
    problems = Problems(prefix=f"{path.name}: ")
    read_problems = Problems()
    data = read_json_object(path, "cluster file", read_problems)
    read_problems.raise_if_any()
    assert data is not None
    data = {k: v for k, v in data.items() if not k.startswith("_")}
    _changeme(data, [], problems)
    base = path.parent
    me = os_user()

    def sub(v: Any) -> Any:  # `{user-id}` is the OS user (as CVS resolves its cluster files)
        return v.replace("{user-id}", me) if isinstance(v, str) else v

    warnings = _root_keys(data, path.name, problems)
    env_vars = _env_vars(data.get("env_vars"), problems)
    password = data.get("password")
    if password is not None and (not isinstance(password, str) or not password):
        problems.add("password", "must be a non-empty string", "set it, or remove it to use keys only")
        password = None
    if password:
        warnings.append(
            f"{path.name}: password: SSH password authentication is used; keys are preferred "
            "(priv_key_file), and the file holding a password must be readable only by you"
        )
    username = sub(data.get("username"))
    if username is not None and (not isinstance(username, str) or not username):
        problems.add("username", f"must be a non-empty string, got {username!r}", "set the SSH user")
        username = None
    user = username or me
    key_file = _file(sub(data.get("priv_key_file")), "priv_key_file", base, problems, "SSH private key")
    known_hosts = _file(sub(data.get("known_hosts")), "known_hosts", base, problems, "known_hosts file")
    default_port = _port(data.get("port"), "port", problems)
    verify = data.get("verify_host_keys", True)
    if not isinstance(verify, bool):
        problems.add("verify_host_keys", f"must be true or false, got {verify!r}", "use true or false")
        verify = True

    nodes = _nodes(_node_entries(data, problems), sub, user, default_port, key_file, base, problems)
    if isinstance(data.get("node_dict"), dict) or isinstance(data.get("nodes"), list):
        _finish(nodes, problems, "node_dict" if "node_dict" in data else "nodes")
    warnings += _head_node(sub(_head_ip(data.get("head_node_dict"), problems)), nodes, path.name)
    problems.raise_if_any()
    return Cluster(
        nodes=nodes,
        user=user,
        source=str(path),
        known_hosts=known_hosts,
        verify_host_keys=verify,
        env_vars=env_vars,
        password=password if isinstance(password, str) else None,
        warnings=warnings,
    )


_Entry = tuple[list[str | int], str, dict[str, Any]]  # where in the file, target, keys


def _root_keys(data: dict[str, Any], name: str, problems: Problems) -> list[str]:
    """A warning for each key cvs-tui ignores; a problem for each it does not know."""
    warnings: list[str] = []
    for key in data:
        if key in _IGNORED_KEYS:
            warnings.append(f"{name}: {key}: ignored; {_IGNORED_KEYS[key]}")
        elif key not in _ROOT_KEYS:
            problems.add(
                jpath([key]),
                f"unknown key '{key}'{did_you_mean(key, [*_ROOT_KEYS, *_IGNORED_KEYS])}",
                "remove or rename it",
            )
    return warnings


def _node_entries(data: dict[str, Any], problems: Problems) -> list[_Entry]:
    """Each node of ``node_dict`` (or ``nodes``): where it stands in the file, its target and its keys."""
    entries: list[_Entry] = []
    if "node_dict" in data and "nodes" in data:
        problems.add("nodes", "both node_dict and nodes are given", "keep one of them")
    if "node_dict" in data:
        nd = data["node_dict"]
        if not isinstance(nd, dict):
            problems.add("node_dict", "must map host names to objects", 'write {"host1": {}, "host2": {}}')
        else:
            for host, info in nd.items():
                if info is None:
                    info = {}
                if not isinstance(info, dict):
                    problems.add(
                        jpath(["node_dict", host]), "must be an object", "use {} when there is nothing"
                    )
                    continue
                entries.append((["node_dict", host], host, info))
    elif "nodes" in data:
        nl = data["nodes"]
        if not isinstance(nl, list):
            problems.add("nodes", "must be a list of host names", 'write ["host1", "host2"]')
        else:
            for i, item in enumerate(nl):
                if isinstance(item, str):
                    entries.append((["nodes", i], item, {}))
                elif isinstance(item, dict) and isinstance(item.get("host"), str):
                    entries.append(
                        (["nodes", i], item["host"], {k: v for k, v in item.items() if k != "host"})
                    )
                else:
                    problems.add(
                        jpath(["nodes", i]), f"not a host name or {{'host': ...}} object: {item!r}", "fix it"
                    )
    else:
        problems.add("node_dict", "required key is missing", "list the nodes in node_dict (or nodes)")
    return entries


def _nodes(
    entries: list[_Entry],
    sub: Callable[[Any], Any],
    user: str,
    default_port: int | None,
    key_file: str | None,
    base: Path,
    problems: Problems,
) -> list[Node]:
    """The nodes, ranked in file order: each entry's user, port and key, else the file's."""
    nodes: list[Node] = []
    for parts, target, info in entries:
        where = jpath(parts)
        info = {k: v for k, v in info.items() if not str(k).startswith("_")}
        try:
            u, host, port = _parse_target(sub(target))
        except ValueError as exc:
            problems.add(where, str(exc), "write the node as [user@]host[:port]")
            continue
        for k in info:
            if k not in _NODE_KEYS:
                hint = did_you_mean(k, _NODE_KEYS, cutoff=0.75)
                # other keys (bmc_ip, vpc_ip, ...) are CVS inventory data and are kept out of the way
                if hint:
                    problems.add(jpath([*parts, k]), f"unknown key '{k}'{hint}", "rename it")
        node_user = sub(info.get("username")) or u or user
        if not isinstance(node_user, str):
            problems.add(jpath([*parts, "username"]), f"must be a string, got {node_user!r}", "fix it")
            node_user = user
        nport = _port(info.get("port"), jpath([*parts, "port"]), problems) or port or default_port
        nkey = _file(
            sub(info.get("priv_key_file")), jpath([*parts, "priv_key_file"]), base, problems, "SSH key"
        )
        local = host in LOCAL_HOSTS
        nodes.append(
            Node(
                host=host,
                rank=len(nodes),
                user=None if local else node_user,
                port=None if local else nport,
                key_file=None if local else (nkey or key_file),
                local=local,
            )
        )
    return nodes


def _env_vars(value: Any, problems: Problems) -> dict[str, str]:
    """`env_vars`: {NAME: value}; numbers become strings, `_` keys are comments."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.add("env_vars", "must map names to values", 'write {"NAME": "value"} or {}')
        return {}
    out: dict[str, str] = {}
    for k, v in value.items():
        if k.startswith("_"):
            continue
        if not _ENV_NAME_RE.fullmatch(k):
            problems.add(jpath(["env_vars", k]), "not a valid environment variable name", "rename it")
        elif isinstance(v, bool) or not isinstance(v, str | int | float):
            problems.add(jpath(["env_vars", k]), "must be a string", "write the value in quotes")
        elif "\0" in str(v):
            problems.add(
                jpath(["env_vars", k]), "holds a NUL character, which no command can carry", "remove it"
            )
        elif len(str(v)) > ENV_VALUE_MAX:
            problems.add(
                jpath(["env_vars", k]),
                f"is {len(str(v)):,} characters, more than a command line carries ({ENV_VALUE_MAX:,})",
                "pass large data in a file on the nodes",
            )
        else:
            out[k] = str(v)
    return out


def _head_ip(value: Any, problems: Problems) -> str | None:
    if value is None:
        return None
    ip = value.get("mgmt_ip") if isinstance(value, dict) else None
    if not isinstance(ip, str) or not ip:
        problems.add("head_node_dict", 'expected {"mgmt_ip": "<rank 0 host>"}', "fix it or remove it")
        return None
    return ip


def _head_node(ip: str | None, nodes: list[Node], name: str) -> list[str]:
    """Upstream's head node is rank 0 (the JAX coordinator); say so when head_node_dict names another."""
    if ip is None or not nodes or nodes[0].host == ip:
        return []
    where = next((f"rank {n.rank}" for n in nodes if n.host == ip), "not a listed node")
    return [
        f"{name}: head_node_dict.mgmt_ip {ip} is {where}; the first node ({nodes[0].host}) is rank 0 "
        "and the JAX coordinator; list the head node first to make it the coordinator"
    ]


def cluster_to_dict(cluster: Cluster) -> dict[str, Any]:
    """The cluster as a JSON-ready dict (no secrets: key files are paths, the password and secret-looking
    env_vars are masked)."""
    return {
        "source": cluster.source,
        "user": cluster.user,
        "known_hosts": cluster.known_hosts,
        "verify_host_keys": cluster.verify_host_keys,
        "nodes": [asdict(n) for n in cluster.nodes],
        "env_vars": {k: ("***" if is_secret_entry(k, v) else v) for k, v in cluster.env_vars.items()},
        "password": "***" if cluster.password else None,
    }
