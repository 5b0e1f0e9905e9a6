"""The kernel-log follower on the real kernel log: lines written through /dev/kmsg as root are read
back locally and over SSH (test nodes share this machine's kernel, so every line carries a nonce)."""

from __future__ import annotations

import asyncio

import pytest
from _health_kmsg import (
    RESET,
    collecting,
    inject,
    needs_kmsg_writer,
    nonce,
    sudo_kmsg_rule,
    trust_injected,  # noqa: F401 (a fixture, used by name)
)
from _runner_infra import infra, kill_ssh_connection, needs_infra, ssh

from cvs_tui.core.events import HealthState, Severity
from cvs_tui.core.health.kmsg import (
    KernelLogFollower,
    KernelLogUnreadable,
    parse_probe,
    parse_record,
)
from cvs_tui.core.runner.nodes.local import LocalTransport


def test_parse_record_and_continuation() -> None:
    r = parse_record(b"12,338,477312854,-;cvs-tui-probe: amdgpu: GPU reset begin")
    assert r is not None and (r.seq, r.usec, r.level, r.facility) == (338, 477312854, 4, 1)
    assert r.message == "cvs-tui-probe: amdgpu: GPU reset begin"
    assert parse_record(b" SUBSYSTEM=pci") is None  # continuation line
    r2 = parse_record(b"3,9,100,-,caller=T1;NVRM: a\\x0ab")
    assert r2 is not None and r2.message == "NVRM: a\\x0ab" and r2.seq == 9


def test_probe_reasons() -> None:
    ok = parse_probe(
        "123.45\n1700000123.450000000\n6,77,1,-;hello\ndd: error reading '/dev/kmsg': "
        "Resource temporarily unavailable\n",
        "plain",
    )
    assert ok.last_seq == 77 and abs(ok.boot_epoch - 1700000000.0) < 1e-6
    with pytest.raises(KernelLogUnreadable, match=r"as the login user.*Operation not permitted"):
        parse_probe("1.0\n2.0\ndd: failed to open '/dev/kmsg': Operation not permitted\n", "plain")
    with pytest.raises(KernelLogUnreadable, match=r"with sudo -n: sudo: a password is required"):
        parse_probe("1.0\n2.0\nsudo: a password is required\n", "sudo")


@needs_kmsg_writer
@pytest.mark.usefixtures("trust_injected")
async def test_local_root_follower_reads_new_lines_only() -> None:
    before = nonce()
    inject(RESET.format(tag=before))
    f = KernelLogFollower(LocalTransport(name="local#0"), node=0, host="local")
    assert await f.start(), f.health.reason
    assert f.health.state is HealthState.OK
    async with collecting(f) as c:
        tag = nonce()
        inject(f"cvs-tui benign line {tag}")  # no signature: no finding
        written = inject(RESET.format(tag=tag))
        (hit,) = await c.wait_for(tag)
        assert hit.signature == "amdgpu_reset" and hit.severity is Severity.FATAL
        assert hit.node == 0 and hit.host == "local"
        assert abs(hit.wall_time - written) < 1.0  # kmsg monotonic stamp mapped to wall time
        assert c.with_nonce(before) == []  # logged before "now": not counted
    assert f.health.state is HealthState.FAIL


@needs_kmsg_writer
async def test_hk02_user_space_record_on_the_real_log_is_not_a_finding() -> None:
    """A line written into /dev/kmsg from user space (the kernel gives it facility 1) never fails a run."""
    f = KernelLogFollower(LocalTransport(name="local#0"), node=0, host="local")
    assert await f.start(), f.health.reason
    async with collecting(f) as c:
        tag = nonce()
        inject(RESET.format(tag=tag))
        inject(f"NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus. {tag}")
        for _ in range(100):  # both records read (and ignored) within a few seconds
            if f.untrusted >= 2:
                break
            await asyncio.sleep(0.05)
        assert f.untrusted >= 2 and c.with_nonce(tag) == []
    assert f.health.state is HealthState.OK


@pytest.mark.slow
@pytest.mark.infra
@needs_infra[2]
async def test_ssh_user_without_access_is_not_checked() -> None:
    t = ssh()
    try:
        f = KernelLogFollower(t, node=1, access="plain")
        assert not await f.start()
        assert f.health.state is HealthState.NOT_CHECKED
        assert "Operation not permitted" in f.health.reason and "health.kernel_log: sudo" in f.health.reason
        f2 = KernelLogFollower(t, node=1, access="sudo")
        if not await f2.start():  # sudo missing or no rule: still never ok
            assert f2.health.state is HealthState.NOT_CHECKED and "sudo" in f2.health.reason
    finally:
        await t.close()


@needs_kmsg_writer
@pytest.mark.slow
@pytest.mark.infra
@needs_infra[2]
@pytest.mark.usefixtures("trust_injected")
async def test_ssh_sudo_follower_two_nodes_and_reconnect() -> None:
    i = infra()
    with sudo_kmsg_rule(i.user):
        ts = [ssh(h) for h in i.nodes[:2]]
        fs = [
            KernelLogFollower(t, node=n, host=h, access="sudo")
            for n, (t, h) in enumerate(zip(ts, i.nodes, strict=False))
        ]
        try:
            for f in fs:
                assert await f.start(), f.health.reason
            async with collecting(fs[0]) as c0, collecting(fs[1]) as c1:
                tag = nonce()
                written = inject(RESET.format(tag=tag))
                (a,) = await c0.wait_for(tag)
                (b,) = await c1.wait_for(tag)
                assert (a.node, a.host, b.node, b.host) == (0, i.nodes[0], 1, i.nodes[1])
                assert a.seq == b.seq and c0.arrived[a.seq] - written < 1.0
                # drop node 0's connection: the follower re-opens /dev/kmsg, replays nothing twice
                kill_ssh_connection(ts[0])
                tag2 = nonce()
                inject(RESET.format(tag=tag2))
                await c0.wait_for(tag2, timeout=20)
                await asyncio.sleep(0.2)
                assert len(c0.with_nonce(tag)) == 1 and len(c0.with_nonce(tag2)) == 1
                assert fs[0].reconnects >= 1
                seqs = [x.seq for x in c0.found]
                assert seqs == sorted(set(seqs))
        finally:
            for t in ts:
                await t.close()
