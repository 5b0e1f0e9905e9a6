"""Access to the real test infrastructure started by ``.ci/infra.sh up`` (dockerd + loopback sshd nodes).

Reads ``$CVS_TEST_ROOT/env`` (default ``/tmp/cvs-ci/env``); tests that need it skip, naming the file,
only when that file is absent.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from cvs_tui.core.runner.nodes.ssh import SSHTransport

ENV_FILE = Path(os.environ.get("CVS_TEST_ROOT", "/tmp/cvs-ci")) / "env"


@dataclass(frozen=True)
class Infra:
    root: str
    docker_host: str
    image: str
    user: str
    key: str
    known_hosts: str
    wrong_known_hosts: str
    port: int
    nodes: list[str]
    remote_docker_sock: str
    scratch: str  # a folder on every node the test user can write (and root can read)
    user2: str | None = None  # a second node user with the same key (None: infra from before it existed)


def read_env_file(path: Path) -> dict[str, str] | None:
    """The ``export NAME=value`` lines a CI script wrote (values shell-unquoted); None when it is absent."""
    if not path.is_file():
        return None
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^export ([A-Z0-9_]+)=(.*)$", line.strip())
        if m:
            env[m.group(1)] = " ".join(shlex.split(m.group(2)))
    return env


def load_infra() -> Infra | None:
    env = read_env_file(ENV_FILE)
    if env is None:
        return None
    return Infra(
        root=env["CVS_TEST_ROOT"],
        docker_host=env["DOCKER_HOST"],
        image=env["CVS_TEST_IMAGE"],
        user=env["CVS_TEST_SSH_USER"],
        key=env["CVS_TEST_SSH_KEY"],
        known_hosts=env["CVS_TEST_SSH_KNOWN_HOSTS"],
        wrong_known_hosts=env["CVS_TEST_SSH_WRONG_KNOWN_HOSTS"],
        port=int(env["CVS_TEST_SSH_PORT"]),
        nodes=env["CVS_TEST_NODES"].split(),
        remote_docker_sock=env["CVS_TEST_REMOTE_DOCKER_SOCK"],
        scratch=env["CVS_TEST_NODE_SCRATCH"],
        user2=env.get("CVS_TEST_USER2"),
    )


INFRA = load_infra()
needs_infra = [
    pytest.mark.slow,
    pytest.mark.infra,
    pytest.mark.skipif(
        INFRA is None, reason=f"test infrastructure not up: {ENV_FILE} is absent (run .ci/infra.sh up)"
    ),
]


def infra() -> Infra:
    assert INFRA is not None
    return INFRA


def ssh(host: str | None = None, **kw: object) -> SSHTransport:
    i = infra()
    opts: dict[str, object] = {
        "port": i.port,
        "user": i.user,
        "key_file": i.key,
        "known_hosts": i.known_hosts,
    }
    opts.update(kw)
    return SSHTransport(host or i.nodes[0], **opts)  # type: ignore[arg-type]


def scratch_dir(tag: str) -> str:
    """A fresh folder path under the nodes' shared scratch (not created)."""
    return f"{infra().scratch}/{tag}-{uuid.uuid4().hex[:8]}"


def kill_ssh_connection(t: SSHTransport) -> list[int]:
    """Drop ``t``'s connections from the server side: SIGKILL the sshd processes serving its asyncssh
    connection and the ``ssh`` clients following its logs (core/runner/nodes/openssh.py), by pid."""
    sockname = t._conn.get_extra_info("sockname") if t._conn is not None else None
    if not sockname:
        return []
    lports = [sockname[1]]
    if t.stream_pids:  # the local ports of the ssh clients' connections
        mine = subprocess.run(
            ["ss", "-Htnp", "state", "established", f"( dport = :{infra().port} )"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for line in mine.splitlines():
            if any(f"pid={p}," in line for p in t.stream_pids):
                lports.append(int(line.split()[2].rsplit(":", 1)[1]))
    out = "".join(
        subprocess.run(
            ["ss", "-Htnp", "state", "established", f"( sport = :{infra().port} and dport = :{lport} )"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for lport in lports
    )
    pids = sorted({int(p) for p in re.findall(r"pid=(\d+)", out)})  # none: it is already gone
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):  # the pair's other process may take it down first
            os.kill(pid, signal.SIGKILL)
    return pids


def live_pids_in_group(pgid: int) -> list[int]:
    """Processes (not zombies) on this machine whose process group is ``pgid``."""
    out = subprocess.run(["ps", "-eo", "pid=,pgid=,stat="], capture_output=True, text=True, check=True).stdout
    live = []
    for line in out.splitlines():
        pid, pg, stat = line.split()[:3]
        if int(pg) == pgid and not stat.startswith("Z"):
            live.append(int(pid))
    return live


def infra_only(fn):  # type: ignore[no-untyped-def]
    """Mark one test as needing the real infrastructure (slow, infra, skipped when it is not up)."""
    for mark in needs_infra:
        fn = mark(fn)
    return fn


def remove_scratch(path: str) -> None:
    """Remove a scratch folder. The loopback nodes share this machine's filesystem, and containers
    write as root, so the test process (root) removes it directly."""
    shutil.rmtree(path, ignore_errors=True)
