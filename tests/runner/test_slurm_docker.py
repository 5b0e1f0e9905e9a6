"""Docker on Slurm nodes, the Docker socket reached through srun side steps: real cluster, real dockerd.

The two-node Slurm cluster of ``.ci/slurm.sh up`` and the test dockerd of ``.ci/infra.sh up`` (its
socket is a file, so the Slurm nodes, in their own network namespace, reach it). Everything is real:
salloc, srun, squeue, scancel, the bridge on the node, aiodocker, the busybox containers. The trainer
is the stand-in of ``tests/suite_fixtures`` (a test double for MaxText only: these tests are about
launching, following, judging and stopping). Jobs get ``--oversubscribe`` so other tests can share the
nodes; a test cancels only jobs it created.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import aiodocker
import pytest
from _runner_infra import infra, needs_infra
from _slurm_infra import needs_slurm, pids_matching, slurm
from _slurm_suite import (
    SlurmSetup,
    cli_argv,
    cli_env,
    fast_options,
    make_setup,
    processes_with,
    run_suite_async,
    slurm_plan,
    squeue_jobs,
)
from suite_fixtures.helpers import BASE_CONFIG, SLUG, SWEEP, containers_of

from cvs_tui.core.config.loader import load_config
from cvs_tui.core.errors import UserError
from cvs_tui.core.plan import Plan, build_plan, new_run_id
from cvs_tui.core.runner.slurm import target as st
from cvs_tui.core.runner.slurm.client import Allocation, release_allocation, request_allocation
from cvs_tui.core.runner.slurm.docker import SlurmDockerLauncher
from cvs_tui.core.runner.slurm.transport import Bridge, SlurmTransport, bridge_argv, probe_command
from cvs_tui.core.transport import CommandError, CommandTimeout, TransportError

pytestmark = [*needs_slurm, *needs_infra]


_STAGE_ROW = re.compile(r"^\s*\d+\. \[(?:run |skip)\] (\S+)")


def _have_socat() -> bool:
    return shutil.which("socat") is not None


# ---------------------------------------------------------------------------------------------------------
# SlurmTransport on one node of a real allocation
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def alloc() -> Iterator[Allocation]:
    name = f"cvs-sd-t-{uuid.uuid4().hex[:6]}"
    a = asyncio.run(request_allocation(slurm().client(), ["-N", "2", "--oversubscribe", "-J", name], 120))
    try:
        yield a
    finally:
        assert asyncio.run(release_allocation(slurm().client(), a)) == []
        assert not [j for j in squeue_jobs() if name in j]


def _transport(
    a: Allocation, rank: int = 1, *, env_vars: dict[str, str] | None = None, bridge: Bridge = "auto"
) -> SlurmTransport:
    return SlurmTransport(slurm().client(), a.job_id, a.nodes[rank], env_vars=env_vars, bridge=bridge)


def _steps_of(a: Allocation) -> list[str]:
    return slurm().cmd("squeue", "-h", "-s", "-j", a.job_id, "-o", "%i %j").splitlines()


def _side_steps_left(a: Allocation, wait_s: float = 15.0) -> list[str]:
    """Side steps still listed once their sruns ended: slurmctld drops a finished step a moment later
    (seconds on a loaded machine), so a step is "left" only if it is still listed after ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        left = [s for s in _steps_of(a) if "cvs-side" in s]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


async def test_run_on_the_node_with_stdin_env_and_exit_status(alloc: Allocation) -> None:
    t = _transport(alloc, env_vars={"CVS_SD_X": "a b $(no)"})
    try:
        await t.connect()
        r = await t.run(
            'echo "$SLURMD_NODENAME $SLURM_JOB_ID [$CVS_SD_X]"; cat; exit 5', 30, input=b"in\x00put"
        )
        assert r.rc == 5
        assert r.out == f"{alloc.nodes[1]} {alloc.job_id} [a b $(no)]\nin\x00put"
        r = await t.run("echo oops >&2; false", 30)
        assert (r.rc, r.err) == (1, "oops\n")
    finally:
        await t.close()


async def test_binary_file_round_trip_is_byte_identical_and_atomic(alloc: Allocation, tmp_path: Path) -> None:
    t = _transport(alloc)
    data = bytes(range(256)) * 4096 + os.urandom(1 << 20) + b"no newline at the end\r"
    path = str(tmp_path / "sub dir" / "f.bin")
    try:
        await t.write_file(path, data, 0o640)
        assert Path(path).read_bytes() == data  # the nodes share this machine's filesystem
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
        assert [p.name for p in Path(path).parent.iterdir()] == ["f.bin"]  # no temp file left
        assert await t.read_file(path) == data
        assert await t.read_file(path, 1000, 70000) == data[1000:71000]
        assert await t.file_size(path) == len(data)
        assert await t.file_size(path + ".none") is None
        with pytest.raises(FileNotFoundError):
            await t.read_file(path + ".none")
    finally:
        await t.close()


async def test_stream_and_a_long_process_stopped_through_scancel(alloc: Allocation, tmp_path: Path) -> None:
    t = _transport(alloc)
    marker = f"cvs-sd-sleep-{uuid.uuid4().hex[:6]}"
    try:
        chunks = [c async for c in t.stream("for i in 1 2 3; do echo line$i; sleep 0.1; done")]
        assert b"".join(chunks) == b"line1\nline2\nline3\n"
        with pytest.raises(CommandError, match=r"exited 3: bad$"):  # srun's own status line left out
            async for _ in t.stream("echo x; echo bad >&2; exit 3"):
                pass
        # much more stderr than a pipe holds does not stall the stream
        noisy = await t.start_process("head -c 300000 /dev/zero >&2; echo done")
        assert await asyncio.wait_for(noisy.read(), 30) == b"done\n"
        assert await noisy.wait(30) == 0
        assert len(await noisy.read_stderr()) == 65536
        await noisy.close()
        proc = await t.start_process(f"echo started; exec -a {marker} sleep 300")
        assert await proc.read() == b"started\n"
        assert processes_with(marker)
        assert len(t.live_steps) == 1
        await proc.close()  # scancel of its side step, not a signal to srun
        assert processes_with(marker) == []
        assert t.live_steps == []
        assert not _side_steps_left(alloc)
        # a command past its timeout: its side step is cancelled the same way
        with pytest.raises(CommandTimeout):
            await t.run(f"exec -a {marker} sleep 300", 1.0)
        assert processes_with(marker) == []
    finally:
        await t.close()


@pytest.mark.parametrize("bridge", ["python3", "socat"])
async def test_docker_api_through_the_forwarded_socket(alloc: Allocation, bridge: Bridge) -> None:
    if bridge == "socat" and not _have_socat():
        pytest.skip("socat is not installed on the nodes (this machine)")
    t = _transport(alloc, bridge=bridge)
    sock = infra().remote_docker_sock
    local, again = await asyncio.gather(t.forward_unix_socket(sock), t.forward_unix_socket(sock))
    assert again == local  # asked twice at once: one server
    assert stat.S_IMODE(os.stat(os.path.dirname(local)).st_mode) == 0o700
    assert await t.forward_unix_socket(infra().remote_docker_sock) == local  # one socket per path
    d = aiodocker.Docker(url=f"unix://{local}")
    name = f"cvs-sd-{uuid.uuid4().hex[:8]}"
    try:
        t0 = time.monotonic()
        reader, writer = await asyncio.open_unix_connection(local)
        writer.write(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
        raw = await reader.read()  # HTTP/1.0: the daemon closes, the bridge and its side step end
        writer.close()
        assert raw.startswith(b"HTTP/1.0 200") and raw.endswith(b"\r\n\r\nOK"), raw
        first = time.monotonic() - t0
        assert (await d.version())["ApiVersion"]
        t0 = time.monotonic()
        tags = [tag for img in await d.images.list() for tag in img.get("RepoTags") or []]
        pooled = time.monotonic() - t0
        assert infra().image in tags
        print(
            f"first call (new side step + bridge) {first * 1000:.0f} ms, pooled call {pooled * 1000:.1f} ms"
        )
        # a hijacked exec stream (binary frames without newlines) and its exit status, through the bridge
        c = await d.containers.run({"Image": infra().image, "Cmd": ["sleep", "60"]}, name=name)
        ex = await c.exec(["sh", "-c", "printf 'a\\000b'; echo err >&2; exit 4"])
        out = []
        async with ex.start(detach=False) as s:
            while (msg := await s.read_out()) is not None:
                out.append((msg.stream, msg.data))
        assert b"".join(d_ for n, d_ in out if n == 1) == b"a\x00b"
        assert b"".join(d_ for n, d_ in out if n == 2) == b"err\n"
        assert (await ex.inspect())["ExitCode"] == 4
    finally:
        try:
            await d.containers.container(name).delete(force=True)
        except aiodocker.DockerError:
            pass
        await d.close()
        await t.close()
    assert not os.path.exists(local) and not os.path.exists(os.path.dirname(local))
    assert t.live_steps == []
    assert not _side_steps_left(alloc)


async def test_forwarding_a_missing_socket_says_why(alloc: Allocation, tmp_path: Path) -> None:
    t = _transport(alloc)
    try:
        with pytest.raises(TransportError, match=r"no unix socket at .*/none\.sock on"):
            await t.forward_unix_socket(str(tmp_path / "none.sock"))
    finally:
        await t.close()


def test_bridge_commands_quote_the_path() -> None:
    assert bridge_argv("socat", "/var/run/docker.sock") == [
        "socat",
        "-t",
        "0.05",
        "-",
        "UNIX-CONNECT:/var/run/docker.sock",
    ]
    assert bridge_argv("python3", "/a b")[-1] == "/a b"
    # socat parses its address itself: a path with , or : goes to python3 only
    assert "socat" not in probe_command("/x,y:z.sock", "auto").split("printf 'neither")[0]


async def test_probe_quotes_a_hostile_path(alloc: Allocation, tmp_path: Path) -> None:
    t = _transport(alloc)
    hostile = str(tmp_path / 'a\'b $(touch pwned) "c".sock')
    try:
        with pytest.raises(TransportError, match=re.escape(f"no unix socket at {hostile} on")):
            await t.forward_unix_socket(hostile)
        assert not (Path.cwd() / "pwned").exists() and not (Path("/tmp") / "pwned").exists()
    finally:
        await t.close()


# ---------------------------------------------------------------------------------------------------------
# The suite with the docker runtime through Slurm
# ---------------------------------------------------------------------------------------------------------
def _docker_setup(tmp_path: Path, env: dict[str, str] | None = None, steps: int = 8) -> SlurmSetup:
    s = make_setup(tmp_path, env=env, steps=steps)
    cfg = json.loads(s.config.read_text())
    runtime = json.loads(BASE_CONFIG.read_text())["container"]["runtime"]
    runtime["args"]["docker_socket"] = infra().remote_docker_sock
    cfg["container"]["runtime"] = runtime
    s.config.write_text(json.dumps(cfg, indent=2))
    return s


def _node_log(s: SlurmSetup, rank: int) -> Path:
    plan = s.plan()
    node_root = os.path.dirname(plan["runs"][0]["base_output_directory"])
    return Path(node_root) / "cvs-logs" / SLUG / f"node{rank}.log"


def _nothing_left(s: SlurmSetup) -> None:
    plan = s.plan()
    job = plan["slurm"]["job_id"]
    assert not [j for j in squeue_jobs() if j.split()[0] == job], squeue_jobs()
    assert containers_of(plan["run_id"]) == []
    assert processes_with(s.marker()) == []
    assert pids_matching(f"srun --jobid {job} ") == []  # no srun of the run's job left behind


def _run_cli(s: SlurmSetup, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    argv = cli_argv(str(s.config), "--slurm", "--no-ui", "--out", str(s.out), *args)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=cli_env())


def test_plan_shows_docker_reached_through_srun_side_commands(tmp_path: Path) -> None:
    s = _docker_setup(tmp_path)
    argv = cli_argv("plan", str(s.config), "--slurm", "--slurm-args", "-N 2 -p debug")
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=cli_env())
    assert p.returncode == 0, p.stdout + p.stderr
    rows = {m.group(1): line for line in p.stdout.splitlines() if (m := _STAGE_ROW.match(line))}
    sock = infra().remote_docker_sock
    assert "through srun side commands (no SSH)" in rows["preflight"]
    assert f"Docker API at {sock} on each node through a side step" in rows["preflight"]
    assert "`srun --jobid JOB --overlap -w NODE` side commands" in rows["launch_container"]
    assert "remove the containers (per_run) through srun side commands" in rows["teardown"]
    assert "release the allocation" in rows["teardown"]
    assert "salloc --no-shell -N 2 -p debug" in p.stdout


def test_other_runtimes_are_refused_under_slurm(tmp_path: Path) -> None:
    s = _docker_setup(tmp_path)
    plan = _pending_plan(s)
    with pytest.raises(UserError, match=r"container\.runtime\.name 'pyxis' is not supported with --slurm"):
        st.slurm_plan(plan.model_copy(update={"container_runtime": "pyxis"}), None, ["-N", "2"])


def _pending_plan(s: SlurmSetup) -> Plan:
    return build_plan(load_config(s.config), st.pending_cluster(2), out_dir=s.out, run_id=new_run_id())


def test_clean_docker_run_through_slurm_passes(tmp_path: Path) -> None:
    s = _docker_setup(tmp_path)
    p = _run_cli(s, "--slurm-args", "-N 2 --oversubscribe -J cvs-sd-clean")
    assert p.returncode == 0, p.stdout + p.stderr
    plan = s.plan()
    assert plan["launcher"] == "slurm" and plan["slurm"]["owned"] is True
    assert plan["container_runtime"] == "docker"
    rec = s.run_record()
    assert rec["outcome"] == "complete" and rec["status"] == "PASS"
    assert [n["exit_code"] for n in rec["nodes"]] == [0, 0]
    assert [n["last_step"] for n in rec["nodes"]] == [7, 7]
    assert {v["metric"]: v for v in rec["verdicts"]}["training.final_loss"]["actual"] == 6.703
    stages = {x["name"]: x for x in s.results()["stages"]}
    for name in ("preflight", "launch_container", f"run:{SWEEP}", "teardown"):
        assert stages[name]["state"] == "passed", stages[name]
    for rank in (0, 1):
        own = _node_log(s, rank).read_bytes()
        assert s.copied_log(rank).read_bytes() == own
        assert own.endswith(b"EXIT_CODE=0\n")
        # the trainer ran in the container (docker exec), not in a job step of its own
        assert f"NODE_RANK={rank}\n".encode() in own and b"SLURM_JOB_ID=" not in own
    _nothing_left(s)


def test_crash_on_rank_1_is_root_cause_rank_1_and_rank_0_is_stopped(tmp_path: Path) -> None:
    s = _docker_setup(tmp_path, env={"CVS_STANDIN_MODE": "crash", "CVS_STANDIN_FAIL_RANK": "1"})

    async def go() -> SlurmDockerLauncher:
        plan = await slurm_plan(s, ["-N", "2", "--oversubscribe", "-J", "cvs-sd-crash"])
        suite = await run_suite_async(s, plan, fast_options())
        assert isinstance(suite.launcher, SlurmDockerLauncher)
        assert not suite.results_passed()
        return suite.launcher

    la = asyncio.run(go())
    rec = s.run_record()
    assert rec["outcome"] == "failed" and rec["status"] == "FAIL"
    assert rec["root_cause_node"] == 1, rec["reason"]
    assert "node 1 exited with code 3" in rec["reason"], rec["reason"]
    assert rec["nodes"][1]["exit_code"] == 3
    assert _node_log(s, 1).read_bytes().endswith(b"EXIT_CODE=3\n")
    states = [e["state"] for e in s.events() if e["type"] == "NodeStatusEvent" and e["node"] == 0]
    assert "stopped" in states, states
    assert s.stage("teardown")["state"] == "passed", s.stage("teardown")
    assert all(isinstance(t, SlurmTransport) and t.live_steps == [] for t in la.transports)
    _nothing_left(s)  # the allocation cvs-tui requested is released on failure too


def test_ctrl_c_leaves_no_container_no_job_and_no_task(tmp_path: Path) -> None:
    s = _docker_setup(tmp_path, env={"CVS_STANDIN_STEP_SLEEP": "0.05"}, steps=5000)
    argv = cli_argv(
        str(s.config),
        "--slurm",
        "--no-ui",
        "--out",
        str(s.out),
        "--slurm-args",
        "-N 2 --oversubscribe -J cvs-sd-ctrlc",
    )
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=cli_env())
    try:
        end = time.monotonic() + 90
        while not (s.out / "plan.json").exists() or min(_steps(_node_log(s, r)) for r in (0, 1)) < 5:
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < end, "the ranks did not start training"
            time.sleep(0.1)
        assert processes_with(s.marker())
        assert containers_of(s.plan()["run_id"])
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
        print(f"Ctrl-C to exit: {time.monotonic() - t0:.2f} s")
        assert proc.returncode == 130, out
        assert s.run_record()["outcome"] == "interrupted"
        assert s.stage("teardown")["state"] == "passed", s.stage("teardown")
        assert not [j for j in squeue_jobs() if "cvs-sd-ctrlc" in j], squeue_jobs()
        _nothing_left(s)
    finally:
        if proc.poll() is None:  # let cvs-tui tear down what it started, then make sure
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _steps(path: Path) -> int:
    return path.read_bytes().count(b"completed step:") if path.exists() else 0


def test_a_node_without_the_docker_socket_fails_preflight_naming_it(tmp_path: Path) -> None:
    s = _docker_setup(tmp_path)
    missing = str(tmp_path / "no-docker.sock")
    s.config.write_text(s.config.read_text().replace(infra().remote_docker_sock, missing))
    p = _run_cli(s, "--slurm-args", "-N 2 --oversubscribe -J cvs-sd-nosock")
    assert p.returncode == 1, p.stdout + p.stderr
    pre = s.stage("preflight")
    assert pre["state"] == "failed"
    for node in ("node1", "node2"):
        assert f"no unix socket at {missing} on {node}" in pre["detail"], pre["detail"]
    assert "Traceback" not in p.stdout + p.stderr
    _nothing_left(s)


def test_inside_an_allocation_its_nodes_are_used_and_it_stays(alloc: Allocation, tmp_path: Path) -> None:
    """cvs-tui under salloc/sbatch (SLURM_JOB_ID set): no allocation requested, none released."""
    s = _docker_setup(tmp_path)
    env = {**cli_env(), "SLURM_JOB_ID": alloc.job_id, "SLURM_JOB_NODELIST": ",".join(alloc.nodes)}
    argv = cli_argv(str(s.config), "--slurm", "--no-ui", "--out", str(s.out))
    p = subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    sl = s.plan()["slurm"]
    assert (sl["job_id"], sl["owned"], sl["nodes"]) == (alloc.job_id, False, alloc.nodes)
    assert s.run_record()["status"] == "PASS"
    assert [j for j in squeue_jobs() if j.split()[0] == alloc.job_id], "the allocation was released"
    assert not _side_steps_left(alloc)
    assert containers_of(s.plan()["run_id"]) == []
    assert processes_with(s.marker()) == []
    assert pids_matching(f"srun --jobid {alloc.job_id} ") == []
