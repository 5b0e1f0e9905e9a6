"""Preflight on real nodes: upstream's container defaults as Docker receives them, the GPU check, and an
image missing on the nodes pulled from a real local registry (Debian's docker-registry) during a run.

The test nodes have no GPU, no RDMA devices and no CAP_SYS_RESOURCE (so --privileged, unlimited memlock
and real /dev/kfd fail at container *start*). The defaults are therefore proven by *creating* the
container through the node's Docker API (over SSH) and reading its HostConfig back with a separate
client: what Docker stored is what was sent. Only the node's device list is a stand-in there
(:class:`NodeDevices`), because the hardware it describes is what this machine lacks.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any, cast

import aiodocker
import pytest
from _runner_infra import ENV_FILE, infra, needs_infra, ssh
from suite_fixtures.helpers import SWEEP, cli, make_setup, remove_scratch_tree

from cvs_tui.core.config.host_config import GpuMode
from cvs_tui.core.runner.nodes.containers import ContainerSpec, DockerRuntime, container_name
from cvs_tui.core.runner.nodes.prep import NodeDevices

pytestmark = needs_infra

IB = ("/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm")


def _registry() -> str | None:
    for line in ENV_FILE.read_text().splitlines() if ENV_FILE.is_file() else []:
        if line.startswith("export CVS_TEST_REGISTRY="):
            return line.split("=", 1)[1].strip()
    return None


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DOCKER_HOST": infra().docker_host}
    return subprocess.run(["docker", *args], env=env, capture_output=True, text=True, timeout=120)


async def _created_host_config(gpu: str, devices: NodeDevices) -> dict[str, Any]:
    """Create (not start) a container with empty runtime.args on node 0; its HostConfig as Docker keeps it."""
    name = container_name("cvs-defaults", "tester", uuid.uuid4().hex[:8])
    spec = ContainerSpec(name=name, image=infra().image, args={}, gpu=cast(GpuMode, gpu))
    t = ssh()
    rt = DockerRuntime(t, spec, socket_path=infra().remote_docker_sock)
    try:
        assert rt.use_devices(devices) == []
        await rt.create()
        async with aiodocker.Docker(url=infra().docker_host) as d:  # an independent client reads it back
            info = await d.containers.container(name).show()
            await d.containers.container(name).delete(force=True)
        return dict(info["HostConfig"])
    finally:
        await rt.close()
        await t.close()


async def test_empty_runtime_args_give_the_amd_defaults_upstream_gives() -> None:
    hc = await _created_host_config("amd", NodeDevices(kfd=True, dri=True, infiniband=IB))
    assert [d["PathOnHost"] for d in hc["Devices"]] == ["/dev/kfd", "/dev/dri", "/dev/infiniband", *IB]
    assert all(
        d["PathInContainer"] == d["PathOnHost"] and d["CgroupPermissions"] == "rwm" for d in hc["Devices"]
    )
    assert set(hc["CapAdd"]) >= {"IPC_LOCK", "SYS_PTRACE", "SYS_ADMIN"}
    assert hc["GroupAdd"] == ["video"]
    assert "seccomp=unconfined" in hc["SecurityOpt"]
    assert {"Name": "memlock", "Soft": -1, "Hard": -1} in hc["Ulimits"]
    assert hc["NetworkMode"] == "host" and hc["IpcMode"] == "host"


async def test_empty_runtime_args_give_nvidia_all_gpus_through_a_device_request() -> None:
    hc = await _created_host_config("nvidia", NodeDevices(nvidia=True))
    (req,) = hc["DeviceRequests"]
    assert req["Count"] == -1 and req["Capabilities"] == [["gpu"]]
    assert not any(d["PathOnHost"] in ("/dev/kfd", "/dev/dri") for d in hc.get("Devices") or [])
    assert hc["NetworkMode"] == "host" and {"Name": "memlock", "Soft": -1, "Hard": -1} in hc["Ulimits"]


@pytest.mark.parametrize(("gpu", "fragment"), [("amd", "/dev/kfd"), ("auto", "no GPU found")])
async def test_preflight_fails_naming_the_node_when_it_has_no_gpu(gpu: str, fragment: str) -> None:
    spec = ContainerSpec(name="unused", image=infra().image, args={}, gpu=cast(GpuMode, gpu))
    t = ssh()
    rt = DockerRuntime(t, spec, socket_path=infra().remote_docker_sock)
    try:
        (problem,) = await rt.prepare()  # the real device probe on a node without GPUs
    finally:
        await rt.close()
        await t.close()
    assert problem.startswith(t.name) and fragment in problem


async def test_an_override_that_leaves_no_gpu_device_fails_preflight() -> None:
    spec = ContainerSpec(name="u", image=infra().image, args={"defaults": False}, gpu="amd")
    rt = DockerRuntime(ssh(), spec, socket_path=infra().remote_docker_sock)
    (problem,) = rt.use_devices(NodeDevices(kfd=True, dri=True))
    assert "no /dev/kfd or /dev/dri device" in problem and problem.startswith(rt.node)


def test_missing_image_is_pulled_from_the_local_registry_during_a_run(tmp_path: Path) -> None:
    registry = _registry()
    if registry is None:
        pytest.skip("the test registry is not up (re-run .ci/infra.sh up)")
    image = f"{registry}/cvs-test/pulled-{uuid.uuid4().hex[:8]}:1"
    assert _docker("tag", infra().image, image).returncode == 0
    push = _docker("push", image)
    assert push.returncode == 0, push.stderr
    assert _docker("rmi", image).returncode == 0
    assert _docker("image", "inspect", image).returncode != 0  # gone from the nodes' daemon
    s = make_setup(tmp_path)
    try:
        cfg = json.loads(s.config.read_text())
        cfg["container"]["image"] = image
        s.config.write_text(json.dumps(cfg))
        p = cli(s)
        assert p.returncode == 0, p.stdout + p.stderr
        assert _docker("image", "inspect", image).returncode == 0
        assert s.run_record(SWEEP)["outcome"] == "complete"
        details = [e.get("detail", "") for e in s.events() if e["type"] == "StageEvent"]
        assert any("pulling it from " + registry in d for d in details), details
        assert any(d.endswith(f"pulled {image}") for d in details), details
    finally:
        remove_scratch_tree(s)
        _docker("rmi", image)


def test_a_missing_image_that_no_registry_has_fails_preflight_naming_node_and_image(tmp_path: Path) -> None:
    registry = _registry()
    if registry is None:
        pytest.skip("the test registry is not up (re-run .ci/infra.sh up)")
    image = f"{registry}/cvs-test/never-pushed-{uuid.uuid4().hex[:8]}:1"
    s = make_setup(tmp_path)
    try:
        cfg = json.loads(s.config.read_text())
        cfg["container"]["image"] = image
        s.config.write_text(json.dumps(cfg))
        p = cli(s)
        assert p.returncode != 0
        pre = s.stage("preflight")
        assert (
            pre["state"] == "failed" and f"cannot pull {image}" in pre["detail"] and "node 0" in pre["detail"]
        )
    finally:
        remove_scratch_tree(s)
