"""The launcher on real nodes (sshd on loopback, and a busybox container): exit status, env quoting,
token handling, train-script choice and stopping the trainer's process group.

A small shell script stands in for the trainer: these tests are about launching, not training.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from _runner_infra import infra, infra_only, live_pids_in_group, remove_scratch, scratch_dir, ssh

from cvs_tui.core.errors import UserError
from cvs_tui.core.runner.nodes.containers import (
    ContainerRuntime,
    ContainerSpec,
    DockerRuntime,
    HostRuntime,
    container_name,
)
from cvs_tui.core.runner.nodes.local import LocalTransport
from cvs_tui.core.runner.nodes.script import (
    RC_NO_TRAIN_SCRIPT,
    RC_SETUP_FAILED,
    LaunchSpec,
    build_launcher,
    exit_code_from_log_tail,
    exit_file,
    kill_group_command,
    launch_command,
    parse_exit_status,
    pid_file,
)
from cvs_tui.core.transport import Transport

STEP = (
    "completed step: {i}, seconds: 0.{i}21, TFLOP/s/device: 101.{i}, Tokens/s/device: 2048.5, "
    "total_weights: 8192, loss: {loss}"
)
HOSTILE = {
    "QUOTES": "it's \"double\" and 'single'",
    "SUBST": "$(touch {marker}) `touch {marker}` ${{HOME}}",
    "SEMI": "a; touch {marker}; b && c || d | e",
    "NEWLINES": "line1\nline2\n\nline4 \\n not-a-newline",
    "GLOB": "* ? [a-z] ~ !x #c",
}


def _trainer(body: str) -> str:
    steps = "\n".join(f"echo '{STEP.format(i=i, loss=10 - i)}'" for i in range(5))
    return f"{steps}\necho 'to stderr' >&2\n{body}\n"


@dataclass
class Node:
    t: Transport
    rt: ContainerRuntime
    d: str


@pytest.fixture(params=["host", "docker"])
async def node(request: pytest.FixtureRequest) -> AsyncIterator[Node]:
    t = ssh()
    d = scratch_dir("launch")
    await t.run(f"mkdir -p {d}")
    rt: ContainerRuntime
    if request.param == "host":
        rt = HostRuntime(t)
    else:
        spec = ContainerSpec(
            name=container_name("cvs-test", "tester", uuid.uuid4().hex[:8]),
            image=infra().image,
            args={"network": "none"},
            extra_binds=[f"{d}:{d}"],
        )
        rt = DockerRuntime(t, spec, socket_path=infra().remote_docker_sock)
        await rt.launch()
    try:
        yield Node(t, rt, d)
    finally:
        await rt.teardown(force=True)
        await rt.close()
        remove_scratch(d)
        await t.close()


async def _launch(n: Node, spec: LaunchSpec, trainer: str | None = None) -> str:
    if trainer is not None:
        await n.t.write_file(f"{n.d}/trainer.sh", trainer, 0o755)
    script = f"{n.d}/launcher.sh"
    await n.t.write_file(script, build_launcher(spec), 0o700)
    await n.rt.start_detached(launch_command(script))
    return spec.log_path


async def _wait_exit(n: Node, log: str, timeout: float = 20) -> int:
    for _ in range(int(timeout * 10)):
        try:
            status = parse_exit_status((await n.t.read_file(exit_file(log))).decode())
        except FileNotFoundError:
            status = None
        if status is not None:
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"no exit status in {exit_file(log)} after {timeout} s")


def _spec(n: Node, **kw: object) -> LaunchSpec:
    base: dict[str, object] = {
        "log_path": f"{n.d}/logs/node0.log",
        "config_path": f"{n.d}/maxtext config.yml",
        "train_script_paths": [f"{n.d}/missing_train.py", f"{n.d}/trainer.sh"],
        "python": "sh",
    }
    base.update(kw)
    return LaunchSpec(**base)  # type: ignore[arg-type]


@infra_only
@pytest.mark.parametrize("body,expected", [("exit 0", 0), ("exit 3", 3), ("kill -9 $$", 137)])
async def test_exit_status_recorded(node: Node, body: str, expected: int) -> None:
    log = await _launch(node, _spec(node), _trainer(body))
    assert await _wait_exit(node, log) == expected
    data = await node.t.read_file(log)
    lines = data.decode().splitlines()
    assert lines[:5] == [STEP.format(i=i, loss=10 - i) for i in range(5)]
    assert "to stderr" in lines  # stderr merged into the same log
    assert lines[-1] == f"EXIT_CODE={expected}"
    assert exit_code_from_log_tail(data) == expected


@infra_only
async def test_hostile_values_reach_the_trainer_unchanged(node: Node) -> None:
    marker = f"{node.d}/pwned"
    env = {k: v.format(marker=marker) for k, v in HOSTILE.items()}
    extra = ["per_device_batch_size=1", env["SEMI"], env["NEWLINES"]]
    # the trainer writes each value NUL-terminated, then its arguments
    names = " ".join(f'"${k}"' for k in env)
    seen = f"{shlex.quote(node.d)}/seen.bin"
    trainer = f'printf "%s\\0" {names} > {seen}; printf "%s\\0" "$@" >> {seen}\n'
    spec = _spec(node, env=env, extra_args=extra)
    log = await _launch(node, spec, trainer)
    assert await _wait_exit(node, log) == 0
    seen = (await node.t.read_file(f"{node.d}/seen.bin")).split(b"\0")[:-1]
    assert [s.decode() for s in seen] == [*env.values(), spec.config_path, *extra]
    r = await node.t.run(f"test -e {shlex.quote(marker)}")
    assert r.rc == 1, "a config value was executed"


@infra_only
async def test_hf_token_from_file_never_echoed(node: Node) -> None:
    secret = "hf_" + uuid.uuid4().hex
    tok = f"{node.d}/.hf_token"
    await node.t.write_file(tok, secret + "\n", 0o600)
    trainer = f'[ "$HF_TOKEN" = {secret} ] && echo token-ok || echo token-wrong\n'
    spec = _spec(node, hf_token_file=tok)
    script = build_launcher(spec)
    assert secret not in script
    log = await _launch(node, spec, trainer)
    assert await _wait_exit(node, log) == 0
    text = (await node.t.read_file(log)).decode()
    assert "token-ok" in text and secret not in text


@infra_only
async def test_missing_token_file_fails_the_launch(node: Node) -> None:
    spec = _spec(node, hf_token_file=f"{node.d}/absent_token")
    log = await _launch(node, spec, _trainer("exit 0"))
    assert await _wait_exit(node, log) == RC_SETUP_FAILED
    text = (await node.t.read_file(log)).decode()
    assert "absent_token is not readable" in text and "completed step" not in text


@infra_only
async def test_no_train_script_found(node: Node) -> None:
    spec = _spec(node, train_script_paths=[f"{node.d}/nope1.py", "module:no_such_pkg_cvs.train"])
    log = await _launch(node, spec)
    assert await _wait_exit(node, log) == RC_NO_TRAIN_SCRIPT
    text = (await node.t.read_file(log)).decode()
    assert "none of train_script_paths exist" in text and "nope1.py" in text


@infra_only
async def test_module_entry_runs_as_python_m() -> None:
    """Host only: the busybox image has no Python."""
    t = ssh()
    d = scratch_dir("module")
    n = Node(t, HostRuntime(t), d)
    try:
        await t.write_file(f"{d}/pkg/cvs_fake_trainer/__init__.py", "")
        await t.write_file(
            f"{d}/pkg/cvs_fake_trainer/train.py",
            "import sys\nprint('module-trainer', sys.argv[1:])\n"
            "print('completed step: 0, seconds: 1.0, loss: 9.5')\nsys.exit(5)\n",
        )
        spec = LaunchSpec(
            log_path=f"{d}/node0.log",
            config_path=f"{d}/cfg.yml",
            train_script_paths=[
                f"{d}/absent.py",
                "module:cvs_absent_pkg.train",
                "module:cvs_fake_trainer.train",
            ],
            python="python3",
            env={"PYTHONPATH": f"{d}/pkg"},
            extra_args=["steps=3"],
        )
        log = await _launch(n, spec)
        assert await _wait_exit(n, log) == 5
        text = (await t.read_file(log)).decode()
        assert f"module-trainer ['{d}/cfg.yml', 'steps=3']" in text
    finally:
        remove_scratch(d)
        await t.close()


@infra_only
async def test_kill_group_leaves_nothing_behind(node: Node) -> None:
    # the trainer starts children (and a grandchild) that would outlive a plain kill of the trainer
    trainer = "sleep 300 & (sleep 301 & wait) & echo started\nwait\n"
    log = await _launch(node, _spec(node), trainer)
    for _ in range(100):
        with contextlib.suppress(FileNotFoundError):
            if b"started" in await node.t.read_file(log):
                break
        await asyncio.sleep(0.1)
    pgid = int((await node.t.read_file(pid_file(log))).decode())
    r = await node.rt.exec(kill_group_command(log, grace_s=5), timeout=30)
    assert r.rc == 0, r
    assert await _wait_exit(node, log) == 143  # TERM, as the launcher recorded it
    assert (await node.t.read_file(log)).decode().splitlines()[-1] == "EXIT_CODE=143"
    if isinstance(node.rt, HostRuntime):
        await asyncio.sleep(0.2)
        assert live_pids_in_group(pgid) == []
    else:
        ps = await node.rt.exec("ps -o pgid,stat,args")
        left = [
            ln
            for ln in ps.out.splitlines()[1:]
            if ln.split()[0] == str(pgid) and not ln.split()[1].startswith("Z")
        ]
        assert left == [], ps.out
    # killing again is harmless
    assert (await node.rt.exec(kill_group_command(log, grace_s=1), timeout=30)).rc == 0


def test_bad_env_names_and_module_entries_are_user_errors() -> None:
    with pytest.raises(UserError) as ei:
        build_launcher(
            LaunchSpec(
                log_path="/l",
                config_path="/c",
                train_script_paths=["module:bad name;rm"],
                env={"OK": "1", "BAD-NAME": "x", "$(x)": "y"},
            )
        )
    assert len(ei.value.problems) == 3


def test_script_shape() -> None:
    script = build_launcher(LaunchSpec(log_path="/l", config_path="/c", train_script_paths=["/t.py"]))
    assert "set -o pipefail" in script and 'setsid "$@" >> "$LOG" 2>&1' in script
    assert os.path.basename(exit_file("/x/node0.log")) == "node0.log.exit"


# ---------------------------------------------------------------------------------------------------------
# the local node (no SSH, no container): runs everywhere
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture
async def local_node(tmp_path: Path) -> AsyncIterator[Node]:
    t = LocalTransport()
    yield Node(t, HostRuntime(t), str(tmp_path))


async def test_local_exit_status_and_hostile_values(local_node: Node) -> None:
    n = local_node
    env = {k: v.format(marker=f"{n.d}/pwned") for k, v in HOSTILE.items()}
    names = " ".join(f'"${k}"' for k in env)
    trainer = _trainer(f'printf "%s\\0" {names} > {shlex.quote(n.d)}/seen.bin\nexit 4')
    log = await _launch(n, _spec(n, env=env), trainer)
    assert await _wait_exit(n, log) == 4
    assert Path(log).read_bytes().endswith(b"EXIT_CODE=4\n")
    assert [s.decode() for s in Path(n.d, "seen.bin").read_bytes().split(b"\0")[:-1]] == list(env.values())
    assert not Path(n.d, "pwned").exists()


async def test_local_kill_group(local_node: Node) -> None:
    n = local_node
    log = await _launch(n, _spec(n), "sleep 300 & (sleep 301 & wait) & echo started\nwait\n")
    for _ in range(100):
        if Path(log).exists() and b"started" in Path(log).read_bytes():
            break
        await asyncio.sleep(0.1)
    pgid = int(Path(pid_file(log)).read_text())
    assert len(live_pids_in_group(pgid)) >= 3
    assert (await n.rt.exec(kill_group_command(log, grace_s=5), timeout=30)).rc == 0
    assert await _wait_exit(n, log) == 143
    await asyncio.sleep(0.2)
    assert live_pids_in_group(pgid) == []


async def test_local_exit_status_survives_a_term_to_every_process(local_node: Node) -> None:
    """Slurm's time limit TERMs every process of the step, twice: one that lands while the launcher
    records the status must not kill the ``mv`` that publishes it (a ``.exit.tmp`` was all that was
    left). The ``mv`` here TERMs itself and the launcher first, as the second signal did."""
    n = local_node
    shims = Path(n.d, "bin")
    shims.mkdir()
    mv = shims / "mv"
    real = shlex.quote(shutil.which("mv") or "/bin/mv")
    mv.write_text(f'#!/bin/sh\nkill -TERM $$ $PPID\nexec {real} "$@"\n')
    mv.chmod(0o755)
    log = await _launch(n, _spec(n, env={"PATH": f"{shims}:{os.environ['PATH']}"}), _trainer("exit 5"))
    assert await _wait_exit(n, log, timeout=10) == 5
    assert Path(log).read_bytes().endswith(b"EXIT_CODE=5\n")
