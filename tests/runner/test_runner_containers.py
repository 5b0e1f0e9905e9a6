"""Container runtimes: runtime-arg mapping, and real containers on dockerd, locally and through SSH."""

from __future__ import annotations

import asyncio
import uuid

import aiodocker
import pytest
from _runner_infra import infra, needs_infra, remove_scratch, scratch_dir, ssh

from cvs_tui.core.errors import UserError
from cvs_tui.core.runner.nodes.containers import (
    ContainerError,
    ContainerSpec,
    DockerRuntime,
    HostRuntime,
    LaunchOutcome,
    Lifetime,
    container_name,
    create_config,
    host_config,
    runtime_for,
)
from cvs_tui.core.runner.nodes.local import LocalTransport
from cvs_tui.core.transport import CommandTimeout

# The upstream ROCm line, as far as this machine allows: --privileged and memlock=-1 need
# CAP_SYS_RESOURCE, which the test machine lacks, so the real-container tests use these instead.
RUNNABLE_ARGS = {
    "network": "none",
    "ipc": "private",  # with ipc host Docker ignores shm-size; private makes the size checkable
    "shm-size": "64m",
    "ulimit": ["nofile=1024:2048", "stack=67108864"],
    "cap_add": ["SYS_PTRACE", "IPC_LOCK"],
    "security_opt": ["seccomp=unconfined"],
    "group_add": ["video"],
    "devices": ["/dev/null:/dev/kfd"],
    "env": {"FROM_ARGS": "args-env"},
}


# ---------------------------------------------------------------------------------------------------------
# runtime args -> Docker API (no daemon needed)
# ---------------------------------------------------------------------------------------------------------
def test_upstream_args_map_to_host_config() -> None:
    args = {
        "network": "host",
        "ipc": "host",
        "privileged": True,
        "shm-size": "256G",
        "ulimit": ["nofile=65535:65535", "memlock=-1"],
        "volumes": ["/data:/data", "/tmp/x:/y:ro"],
        "devices": ["/dev/kfd", "/dev/null:/dev/dri:rw"],
        "cap_add": ["SYS_PTRACE", "IPC_LOCK"],
        "security_opt": "seccomp=unconfined",
        "group_add": ["video", 44],
        "env": ["A=1"],
    }
    hc, env = host_config(args)
    assert hc["NetworkMode"] == "host" and hc["IpcMode"] == "host"
    assert hc["Privileged"] is True
    assert hc["ShmSize"] == 256 * 1024**3
    assert hc["Ulimits"] == [
        {"Name": "nofile", "Soft": 65535, "Hard": 65535},
        {"Name": "memlock", "Soft": -1, "Hard": -1},
    ]
    assert hc["Binds"] == ["/data:/data", "/tmp/x:/y:ro"]
    assert hc["Devices"] == [
        {"PathOnHost": "/dev/kfd", "PathInContainer": "/dev/kfd", "CgroupPermissions": "rwm"},
        {"PathOnHost": "/dev/null", "PathInContainer": "/dev/dri", "CgroupPermissions": "rw"},
    ]
    assert hc["CapAdd"] == ["SYS_PTRACE", "IPC_LOCK"]
    assert hc["SecurityOpt"] == ["seccomp=unconfined"]
    assert hc["GroupAdd"] == ["video", "44"]
    assert env == ["A=1"]


def test_create_config_merges_env_binds_and_keeps_privileged() -> None:
    spec = ContainerSpec(
        name="n",
        image="img:1",
        args={"privileged": True, "ulimit": {"memlock": "unlimited"}},
        env={"X": "a b"},
        extra_binds=["/run/dir:/run/dir"],
    )
    cfg = create_config(spec)
    assert cfg["HostConfig"]["Privileged"] is True
    assert cfg["HostConfig"]["Ulimits"] == [{"Name": "memlock", "Soft": -1, "Hard": -1}]
    assert cfg["HostConfig"]["Binds"] == ["/run/dir:/run/dir"]
    assert cfg["HostConfig"]["Init"] is True
    assert cfg["Env"] == ["X=a b"] and cfg["Image"] == "img:1"


def test_bad_args_are_reported_together_with_their_keys() -> None:
    with pytest.raises(UserError) as ei:
        host_config({"shm-size": "lots", "privileged": "yes", "memory": "1g", "ulimit": ["nofile"]})
    text = "\n".join(ei.value.problems)
    for key in ("shm-size", "privileged", "memory", "ulimit"):
        assert f"container.runtime.args.{key}" in text
    assert len(ei.value.problems) == 4


def test_container_name_carries_user_and_run_id() -> None:
    assert container_name("rocm-jax", "alice", "20261130-0712") == "rocm-jax-alice-20261130-0712"
    assert container_name("rocm-jax", "bob smith", "r/1") == "rocm-jax-bob_smith-r_1"
    assert container_name("c", "alice", "r1") != container_name("c", "bob", "r1")


def test_runtime_for_names() -> None:
    t = LocalTransport()
    assert isinstance(runtime_for(t, None, "host"), HostRuntime)
    with pytest.raises(UserError):
        runtime_for(t, None, "podmanx")


# ---------------------------------------------------------------------------------------------------------
# real dockerd: local socket and the node's socket through SSH
# ---------------------------------------------------------------------------------------------------------
def _spec(tag: str, **kw: object) -> ContainerSpec:
    base: dict[str, object] = {
        "name": container_name("cvs-test", "tester", f"{tag}-{uuid.uuid4().hex[:6]}"),
        "image": infra().image,
        "args": RUNNABLE_ARGS,
        "env": {"FROM_CONFIG": "it's $(x); y\nz"},
    }
    base.update(kw)
    return ContainerSpec(**base)  # type: ignore[arg-type]


async def _check_container(rt: DockerRuntime) -> None:
    assert await rt.image_present()
    assert not await rt.image_present("cvs-test/no-such-image:0")
    assert await rt.launch() is LaunchOutcome.STARTED
    assert await rt.is_running()
    r = await rt.exec('printf "%s|%s" "$FROM_CONFIG" "$FROM_ARGS"; exit 3')
    assert r == (3, "it's $(x); y\nz|args-env", "")
    r = await rt.exec(
        'echo "hard_nofile=$(ulimit -Hn)"; echo "groups=$(id -G)"; echo "kfd=$(ls /dev/kfd)"; '
        "echo \"shm_kb=$(df -k /dev/shm | tail -1 | awk '{print $2}')\"; "
        "echo \"cap=$(grep CapEff /proc/self/status | awk '{print $2}')\""
    )
    facts = dict(line.split("=", 1) for line in r.out.splitlines())
    # (the soft nofile limit of an exec'd process is not stable across runc execs; the hard one is)
    assert facts["hard_nofile"] == "2048"
    assert "44" in facts["groups"].split()  # group_add: video
    assert facts["kfd"] == "/dev/kfd"
    assert facts["shm_kb"] == str(64 * 1024)
    # CAP_SYS_PTRACE (bit 19) and CAP_IPC_LOCK (bit 14) added to Docker's default set
    cap_eff = int(facts["cap"], 16)
    assert cap_eff & (1 << 19) and cap_eff & (1 << 14)
    r = await rt.exec("pwd; echo $E1", env={"E1": "v 1"}, workdir="/tmp")
    assert r.out == "/tmp\nv 1\n"


class TestDocker:
    pytestmark = needs_infra

    async def test_local_socket_full_cycle(self) -> None:
        rt = DockerRuntime(LocalTransport(), _spec("local"), socket_path=infra().docker_host)
        try:
            await _check_container(rt)
            with pytest.raises(CommandTimeout):
                await rt.exec("sleep 30; echo never", timeout=0.5)
            # the timed-out command was killed inside the container
            r = await rt.exec("ps -o args | grep -cx 'sleep 30' || true")
            assert r.out.strip() == "0"
            assert await rt.teardown()
            assert not await rt.is_running()
        finally:
            await rt.teardown(force=True)
            await rt.close()

    async def test_through_ssh_forwarded_socket(self) -> None:
        t = ssh(infra().nodes[1])
        rt = DockerRuntime(t, _spec("ssh"), socket_path=infra().remote_docker_sock)
        try:
            await _check_container(rt)
            assert await rt.teardown()
        finally:
            await rt.teardown(force=True)
            await rt.close()
            await t.close()

    async def test_bind_mount_and_detached_start(self) -> None:
        t = ssh()
        d = scratch_dir("bind")
        await t.run(f"mkdir -p {d}")
        rt = DockerRuntime(t, _spec("bind", extra_binds=[f"{d}:{d}"]), socket_path=infra().remote_docker_sock)
        try:
            await rt.launch()
            await rt.start_detached(f"sleep 0.2; echo from-container > {d}/out.txt")
            for _ in range(50):
                r = await t.run(f"cat {d}/out.txt 2>/dev/null")
                if r.out:
                    break
                await asyncio.sleep(0.1)
            assert r.out == "from-container\n"
        finally:
            await rt.teardown(force=True)
            await rt.close()
            remove_scratch(d)
            await t.close()

    async def test_lifetimes(self) -> None:
        t = LocalTransport()
        base = _spec("life")
        persistent = DockerRuntime(
            t,
            ContainerSpec(**{**base.__dict__, "lifetime": Lifetime.PERSISTENT}),
            socket_path=infra().docker_host,
        )
        no_launch = DockerRuntime(
            t, ContainerSpec(**{**base.__dict__, "lifetime": "no_launch"}), socket_path=infra().docker_host
        )
        try:
            with pytest.raises(ContainerError, match="no_launch"):
                await no_launch.launch()
            assert await persistent.launch() is LaunchOutcome.STARTED
            assert await persistent.launch() is LaunchOutcome.ATTACHED
            assert await no_launch.launch() is LaunchOutcome.ATTACHED
            # neither lifetime removes the container at teardown
            assert await persistent.teardown() and await no_launch.teardown()
            assert await persistent.is_running()
        finally:
            await persistent.teardown(force=True)
            await persistent.close()
            await no_launch.close()

    async def test_per_run_replaces_a_leftover_of_the_same_run(self) -> None:
        spec = _spec("again")
        rt = DockerRuntime(LocalTransport(), spec, socket_path=infra().docker_host)
        try:
            await rt.launch()
            await rt.exec("touch /tmp/first")
            assert await rt.launch() is LaunchOutcome.STARTED
            assert (await rt.exec("test -e /tmp/first")).rc == 1
        finally:
            await rt.teardown()
            await rt.close()

    async def test_privileged_reaches_the_daemon(self) -> None:
        """Here refuses --privileged (no CAP_SYS_RESOURCE): the daemon's refusal proves it was sent."""
        rt = DockerRuntime(
            LocalTransport(),
            _spec("priv", args={"privileged": True, "network": "none"}),
            socket_path=infra().docker_host,
        )
        try:
            with pytest.raises(ContainerError) as ei:
                await rt.launch()
            assert "operation not permitted" in str(ei.value)
            async with aiodocker.Docker(url=infra().docker_host) as d:
                with pytest.raises(aiodocker.DockerError):
                    await d.containers.container(rt.spec.name).show()  # failed launch leaves nothing
        finally:
            await rt.teardown(force=True)
            await rt.close()

    async def test_missing_image_launch_names_the_node(self) -> None:
        t = ssh()
        rt = DockerRuntime(
            t, _spec("noimg", image="cvs-test/absent:1"), socket_path=infra().remote_docker_sock
        )
        try:
            assert not await rt.image_present()
            with pytest.raises(ContainerError) as ei:
                await rt.launch()
            assert t.name in str(ei.value)
        finally:
            await rt.close()
            await t.close()
