"""Access to the real two-node Slurm cluster started by ``.ci/slurm.sh up``.

Reads ``$CVS_SLURM_ROOT/env`` (default ``/tmp/cvs-slurm/env``); tests that need the cluster skip,
naming the file, only when it is absent.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from _runner_infra import read_env_file

from cvs_tui.core.runner.slurm.client import SlurmClient

ENV_FILE = Path(os.environ.get("CVS_SLURM_ROOT", "/tmp/cvs-slurm")) / "env"


@dataclass(frozen=True)
class SlurmInfra:
    root: str
    conf: str
    prefix: tuple[str, ...]  # runs a client inside the cluster's network namespace
    nodes: list[str]
    partition: str

    def client(self) -> SlurmClient:
        return SlurmClient(prefix=self.prefix, env={**os.environ, "SLURM_CONF": self.conf})

    def cmd(self, *args: str) -> str:
        """Run a Slurm client command synchronously (test assertions); stdout."""
        env = {**os.environ, "SLURM_CONF": self.conf}
        return subprocess.run(
            [*self.prefix, *args], capture_output=True, text=True, env=env, check=True
        ).stdout


def load() -> SlurmInfra | None:
    env = read_env_file(ENV_FILE)
    if env is None:
        return None
    return SlurmInfra(
        root=env["CVS_SLURM_ROOT"],
        conf=env["SLURM_CONF"],
        prefix=tuple(shlex.split(env["CVS_SLURM_PREFIX"])),
        nodes=env["CVS_SLURM_NODES"].split(),
        partition=env["CVS_SLURM_PARTITION"],
    )


SLURM = load()
needs_slurm = [
    pytest.mark.slow,
    pytest.mark.infra,
    pytest.mark.skipif(
        SLURM is None, reason=f"Slurm cluster not up: {ENV_FILE} is absent (run .ci/slurm.sh up)"
    ),
]


def slurm() -> SlurmInfra:
    assert SLURM is not None
    return SLURM


def pids_matching(pattern: str) -> list[int]:
    """Live processes whose command line matches ``pattern`` (pgrep -f), this test's own excluded."""
    r = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return [int(p) for p in r.stdout.split() if int(p) != os.getpid()]


def stepd_pid(job_step: str, node: str) -> int | None:
    """The slurmstepd of ``job_step`` (``J.S``) on ``node``. The daemons are reparented to PID 1, so the
    node is read from the environment of the task it started (``SLURMD_NODENAME``)."""
    out = subprocess.run(["ps", "-eo", "pid=,ppid=,args="], capture_output=True, text=True, check=True).stdout
    procs = [line.split(None, 2) for line in out.splitlines() if len(line.split(None, 2)) == 3]
    for pid, _, args in procs:
        if not args.startswith(f"slurmstepd: [{job_step}]"):
            continue
        for cpid, ppid, _ in procs:
            if ppid == pid and _env_value(int(cpid), b"SLURMD_NODENAME") == node:
                return int(pid)
    return None


def _env_value(pid: int, name: bytes) -> str | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for kv in env:
        if kv.startswith(name + b"="):
            return kv.split(b"=", 1)[1].decode()
    return None
