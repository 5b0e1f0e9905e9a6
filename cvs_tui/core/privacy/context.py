"""The denylist for one export: private values the run context knows (hosts, users, paths, secrets).

Sources: the cluster file (read leniently: only host names and users are needed, so a missing SSH key
file is no error), the config (`paths`, volume sources, container name, the HF token file's value),
plan.json/results.json of a run folder, the local user, $HOME, secret-named environment variables and
known token files (their values are compared in memory only, never written), plus caller terms.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cvs_tui.core.errors import UserError
from cvs_tui.core.privacy.placeholder import PLACEHOLDER
from cvs_tui.core.run_folder import RunFolder

# Account names every machine has: not private, and too common as words ("root_cause_node") to scrub.
SYSTEM_USERS = frozenset(
    {"root", "admin", "user", "ubuntu", "nobody", "runner", "centos", "ec2-user", "jovyan", "debian"}
)
# Host sides of volumes that are system locations, not private storage.
_SYSTEM_PREFIXES = (
    "/dev",
    "/usr",
    "/lib",
    "/lib64",
    "/sys",
    "/proc",
    "/etc",
    "/opt",
    "/bin",
    "/sbin",
    "/run",
)
LOCAL_HOSTS = frozenset({"localhost", "local", "127.0.0.1", "::1", "localhost.localdomain"})
# An environment variable whose value is a secret: *TOKEN*, *SECRET*, *PASSWORD*, *API_KEY*, ...
_SECRET_ENV = re.compile(
    r"(?i)(?:token(?!iz)|secret|passw(?:or)?d|api_?key|access_?key|private_?key|credential|auth(?!or))"
)
_NOT_A_VALUE_ENV = re.compile(r"(?i)_(?:file|path|dir|url|type|id|name|region)$")


@dataclass(frozen=True)
class DenyTerm:
    """One private value. ``group`` ties aliases (short host name and FQDN) to one placeholder;
    ``learned`` marks a value found in the text itself (a short host name, an expanded node list)."""

    value: str
    category: str
    group: str = ""
    learned: bool = False


@dataclass(frozen=True)
class PrivacyContext:
    """The denylist for one export. Build it with ``build_context``; ``terms`` never leave memory.
    ``hosts_known`` is True when a cluster file or a plan listed the nodes: without it, host and user
    names that match no pattern cannot be known, and the commands say so."""

    terms: tuple[DenyTerm, ...] = ()
    hosts_known: bool = False

    def merged(self, other: PrivacyContext) -> PrivacyContext:
        seen = {t.value.lower() for t in self.terms}
        extra = tuple(t for t in other.terms if t.value.lower() not in seen)
        return PrivacyContext(self.terms + extra, self.hosts_known or other.hosts_known)

    def __repr__(self) -> str:  # the values are private: never in a repr, log or traceback
        return f"PrivacyContext({len(self.terms)} terms)"


def is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return False
    return True


def path_term(path: str) -> str | None:
    """A private path worth denylisting: absolute, not the root or a system location, no placeholder."""
    p = path.strip().rstrip("/")
    if not p.startswith("/") or "{" in p or len(p) < 3:
        return None
    if any(p == s or p.startswith(s + "/") for s in _SYSTEM_PREFIXES) or p in ("/tmp", "/home", "/workspace"):
        return None
    return p


def read_terms_file(path: str | os.PathLike[str]) -> list[str]:
    """Caller terms, one per line; blank lines and `#` comments are skipped."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"--denylist: cannot read {p} ({exc.strerror or exc}); pass a text file") from None
    except UnicodeDecodeError:
        raise UserError(f"--denylist: {p} is not UTF-8 text; one term per line") from None
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def _token_value(token_file: str | None, home: str | None = None) -> str | None:
    if not token_file or "{" in token_file:
        return None
    if token_file.startswith("~") and home:
        token_file = home + token_file[1:]
    try:
        with open(os.path.expanduser(token_file), "rb") as fh:
            value = fh.read(4096).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return value if len(value) >= 8 and "\n" not in value else None


class Terms:
    """An ordered, de-duplicated list of deny terms being built."""

    def __init__(self) -> None:
        self.items: list[DenyTerm] = []
        self._seen: set[str] = set()

    def know(self, values: Iterable[str]) -> None:
        """Values already known elsewhere: an ``add`` of one of them adds nothing."""
        self._seen.update(v.strip().lower() for v in values)

    def add(self, value: Any, category: str, group: str = "", *, learned: bool = False) -> None:
        if not isinstance(value, str):
            return
        v = value.strip()
        if len(v) < 2 or v.lower() in self._seen or PLACEHOLDER.fullmatch(v):
            return
        if category == "user" and v.lower() in SYSTEM_USERS:
            return
        if category == "host":
            if v.lower() in LOCAL_HOSTS:
                return
            if is_ip(v):
                category = "ip"
        self._seen.add(v.lower())
        self.items.append(DenyTerm(v, category, group or v.lower(), learned))

    def host(self, name: Any, *, learned: bool = False) -> None:
        if not isinstance(name, str) or not name.strip():
            return
        h = name.strip().strip("[]")
        self.add(h, "host", learned=learned)
        short = h.split(".", 1)[0]
        if "." in h and not is_ip(h) and len(short) >= 3:
            self.add(
                short, "host", group=h.lower(), learned=learned
            )  # the short name: the FQDN's placeholder


def build_context(
    *,
    loaded: Any = None,
    cluster: Any = None,
    plan: Mapping[str, Any] | None = None,
    results: Any = None,
    deny_terms: Sequence[str] = (),
    denylist_files: Sequence[str | os.PathLike[str]] = (),
    environ: Mapping[str, str] | None = None,
) -> PrivacyContext:
    """The denylist for an export from whatever run context is at hand.

    ``loaded`` (LoadedConfig): `paths`, volume sources, container name, the HF token file's value.
    ``cluster`` (Cluster, or the mapping ``read_cluster_hosts`` returns): hosts, users, key/known-hosts
    paths. ``plan`` (a plan.json dict): the same facts as a live run recorded them. ``results`` (Results):
    hosts. ``environ``: the local user, $HOME, secret-named variables and the HF token file (default
    os.environ; pass {} to leave the local machine out). Caller terms come first, so their numbers in
    findings match the order they were given.
    """
    env = os.environ if environ is None else environ
    t = Terms()
    for term in deny_terms:
        t.add(term, "term")
    for f in denylist_files:
        for term in read_terms_file(f):
            t.add(term, "term")
    token_files: list[str] = []
    hosts_known = False
    if isinstance(cluster, Mapping):
        _cluster_map_terms(cluster, t)
        hosts_known = True
    elif cluster is not None:
        hosts_known = True
        t.add(getattr(cluster, "user", None), "user")
        for node in getattr(cluster, "nodes", []):
            if not getattr(node, "local", False):
                t.host(node.host)
            t.add(getattr(node, "user", None), "user")
            t.add(path_term(getattr(node, "key_file", None) or ""), "path")
        t.add(path_term(getattr(cluster, "known_hosts", None) or ""), "path")
    if plan is not None:
        hosts_known = hosts_known or bool(plan.get("nodes"))
        token_files += _plan_terms(plan, t)
    if loaded is not None:
        cfg = loaded.config
        for v in cfg.paths.as_dict().values():
            t.add(path_term(v), "path")
        token_files.append(cfg.paths.hf_token_file)
        t.add(cfg.container.name, "container")
        _volume_terms(cfg.container.runtime.args.get("volumes"), t)
        t.add(path_term(str(Path(loaded.path).parent)), "path")
    if results is not None:
        for h in getattr(results, "hosts", []) or []:
            if isinstance(h, str) and not h.endswith(".log"):  # analyze without a plan: log file names
                t.host(h)
    token_files += _env_terms(env, t)
    for tf in token_files:
        t.add(_token_value(tf, env.get("HOME")), "token")  # compared in memory only; never written
    return PrivacyContext(tuple(t.items), hosts_known)


def _env_terms(env: Mapping[str, str], t: Terms) -> list[str]:
    """Secret-named variables' values, the local user and $HOME; returns the token files env points to."""
    for name, value in env.items():
        if _SECRET_ENV.search(name) and not _NOT_A_VALUE_ENV.search(name):
            v = value.strip()
            if len(v) >= 8 and not any(c.isspace() for c in v) and not v.startswith(("/", "~")):
                t.add(v, "token")
    if not env:
        return []
    t.add(env.get("USER") or env.get("LOGNAME"), "user")
    t.add(path_term(env.get("HOME", "")), "home")
    files = [env.get("HF_TOKEN_PATH", "")]
    if env.get("HF_HOME"):
        files.append(os.path.join(env["HF_HOME"], "token"))
    if env.get("HOME"):
        files.append(os.path.join(env["HOME"], ".cache", "huggingface", "token"))
    return [f for f in files if f]


def _plan_terms(plan: Mapping[str, Any], t: Terms) -> list[str]:
    t.add(plan.get("user"), "user")
    for node in plan.get("nodes") or []:
        if isinstance(node, Mapping):
            t.host(node.get("host"))
            t.add(node.get("user"), "user")
    coord = plan.get("coordinator")
    if isinstance(coord, str):
        t.host(coord)
    token_files: list[str] = []
    paths = plan.get("paths") or {}
    if isinstance(paths, Mapping):
        for v in paths.values():
            t.add(path_term(v) if isinstance(v, str) else None, "path")
        token_files.append(str(paths.get("hf_token_file") or ""))
    t.add(plan.get("container_name"), "container")
    args = plan.get("container_args") or {}
    if isinstance(args, Mapping):
        _volume_terms(args.get("volumes"), t)
    return token_files


def _volume_terms(volumes: Any, t: Terms) -> None:
    if isinstance(volumes, str):
        volumes = [volumes]
    for v in volumes or []:
        if isinstance(v, str) and ":" in v:
            t.add(path_term(v.split(":", 1)[0]), "path")


def _split_target(target: str) -> tuple[str | None, str]:
    """`[user@]host[:port]` -> (user, host); `[v6]:port` keeps the address."""
    user, _, rest = target.rpartition("@")
    host = rest
    if rest.startswith("["):
        host = rest[1 : rest.find("]")] if "]" in rest else rest
    elif rest.count(":") == 1:
        host = rest.split(":", 1)[0]
    return (user or None), host


def read_cluster_hosts(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Host names, users and file paths of a CVS cluster file, for the denylist only.

    Unlike ``load_cluster`` this never checks that the SSH key or known_hosts file exists: scrubbing needs
    the names, not a connection. Returns {"hosts": [...], "users": [...], "paths": [...]}; a file that is
    not a JSON object is a UserError."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(
            f"--cluster: cannot read {p} ({exc.strerror or exc}); pass the cluster file"
        ) from None
    except (ValueError, RecursionError):
        raise UserError(f"--cluster: {p} is not valid JSON; fix the cluster file") from None
    if not isinstance(data, dict):
        raise UserError(f"--cluster: {p} must hold a JSON object with node_dict or nodes")
    me = os.environ.get("USER") or os.environ.get("LOGNAME") or ""

    def s(v: Any) -> str | None:
        return v.replace("{user-id}", me) if isinstance(v, str) else None

    hosts: list[str] = []
    users = [u for u in (s(data.get("username")),) if u]
    paths = [x for x in (s(data.get("priv_key_file")), s(data.get("known_hosts"))) if x]
    entries: list[tuple[str, Any]] = []
    for key in ("node_dict", "head_node_dict"):
        if isinstance(data.get(key), dict):
            entries += list(data[key].items())
    nodes = data.get("nodes")
    for item in nodes if isinstance(nodes, list) else []:
        if isinstance(item, str):
            entries.append((item, {}))
        elif isinstance(item, dict) and isinstance(item.get("host"), str):
            entries.append((item["host"], item))
    for target, info in entries:
        user, host = _split_target(s(target) or "")
        hosts.append(host)
        users.append(user or "")
        if isinstance(info, dict):
            users.append(s(info.get("username")) or "")
            paths.append(s(info.get("priv_key_file")) or "")
            # CVS inventory data: management and VPC addresses of the same node
            hosts += [v for k, v in info.items() if isinstance(v, str) and k.endswith(("_ip", "_host"))]
    return {"hosts": hosts, "users": [u for u in users if u], "paths": [x for x in paths if x]}


def _cluster_map_terms(cluster: Mapping[str, Any], t: Terms) -> None:
    for u in cluster.get("users", []):
        t.add(u, "user")
    for h in cluster.get("hosts", []):
        t.host(h)
    for pth in cluster.get("paths", []):
        t.add(path_term(os.path.expanduser(pth)), "path")


def context_from_run_folder(
    run_dir: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None
) -> PrivacyContext:
    """The denylist a run folder carries itself: plan.json's nodes, user, paths and container facts, and
    results.json's hosts."""
    folder = RunFolder(run_dir)
    plan = _read_json(folder.plan_path)
    results = _read_json(folder.results_path)
    ctx = build_context(plan=plan if isinstance(plan, dict) else None, environ=environ)
    if isinstance(results, dict):
        t = Terms()
        for h in results.get("hosts") or []:
            if isinstance(h, str) and not h.endswith(".log"):
                t.host(h)
        ctx = ctx.merged(PrivacyContext(tuple(t.items)))
    return ctx


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
