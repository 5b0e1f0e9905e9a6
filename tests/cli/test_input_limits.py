"""Audit 3 M7, M8 and the Slurm-argument lows (L4-L8): every JSON and YAML input is size- and type-checked
before it is parsed; a node count salloc would read differently from the plan, or one past any cluster, is
one line; an allocation without nodes or with thousands of them is planned or refused cleanly."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from _analysis_samples import load_local, sample_results

from cvs_tui.cli.main import main
from cvs_tui.core.cluster import load_cluster, local_cluster
from cvs_tui.core.errors import UserError
from cvs_tui.core.inputfile import InputFileError, read_bytes_capped
from cvs_tui.core.plan import build_plan, secret_values
from cvs_tui.core.results import load_results
from cvs_tui.core.runner.slurm.client import SlurmClient, SlurmError, parse_slurm_args
from cvs_tui.core.runner.slurm.target import MAX_SLURM_NODES, node_addresses, requested_nodes


@pytest.mark.parametrize(
    ("cid", "argv"),
    [
        ("RJ40", ["report", "/dev/zero"]),
        ("RD04", ["card", "/dev/zero"]),
        ("RV11", ["card", "validate", "/dev/zero"]),
    ],
)
def test_dev_zero_as_a_json_or_yaml_input_is_one_line(
    cid: str, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """M8 (RJ40, RD04, RV11): /dev/zero is refused before a byte is read (it read until MemoryError)."""
    assert main(argv) == 2, cid
    err = capsys.readouterr().err
    assert "/dev/zero is not a regular file" in err and err.count("\n") == 1, err


def test_report_of_a_fifo_without_writer_does_not_hang(tmp_path: Path) -> None:
    """RJ41: `report FIFO` with no writer is refused at once (it blocked in open())."""
    fifo = tmp_path / "r.json"
    os.mkfifo(fifo)
    proc = subprocess.run(
        [sys.executable, "-m", "cvs_tui", "report", str(fifo)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "not a regular file" in proc.stderr


def test_an_oversized_input_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """M8: a file larger than any of its kind is refused by its size, not parsed."""
    big = tmp_path / "big.json"
    with big.open("wb") as fh:
        fh.truncate(3 << 20)  # sparse: no disk used
    with pytest.raises(InputFileError, match="more than a file of its kind"):
        read_bytes_capped(big, 1 << 20)
    assert read_bytes_capped(big, 4 << 20) == b"\0" * (3 << 20)


@pytest.mark.parametrize(
    ("cid", "args", "message"),
    [
        ("SL14", "-N 99999999", "more nodes than cvs-tui plans for"),
        ("SL16", "-N 2 -N 3", "given 2 times"),
        ("SL23", "-N 2 --nodes=3", "given 2 times"),
        ("SL20", "-N ２", "give the node count as one number"),
        ("SL21", "-N ²", "give the node count as one number"),
    ],
)
def test_node_counts_salloc_would_read_otherwise(cid: str, args: str, message: str) -> None:
    """M7 (SL14: 10^8 nodes ended in MemoryError), L5 (SL16/SL23: the plan took the first -N, salloc the
    last), L4/L6 (SL20/SL21: `２` passed str.isdigit, `²` raised ValueError)."""
    with pytest.raises(UserError, match=message):
        requested_nodes(parse_slurm_args(args))
    assert requested_nodes(parse_slurm_args(f"-N {MAX_SLURM_NODES}")) == MAX_SLURM_NODES


@pytest.mark.parametrize(("cid", "args"), [("SL07", "-N 2 --jobi=5"), ("SL08", "-N 2 -j5")])
def test_refused_flags_in_getopt_forms(cid: str, args: str) -> None:
    """L4 (SL07, SL08): --jobid abbreviated as getopt allows, and -j with its value attached, are refused."""
    with pytest.raises(UserError, match="is set by cvs-tui"):
        parse_slurm_args(args)


def _fake_scontrol(tmp_path: Path, body: str) -> SlurmClient:
    """A stand-in for Slurm's `scontrol` client (no Slurm controller in this test): a shell script."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "scontrol"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return SlurmClient(env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})


def test_an_allocation_without_node_names_is_an_error(tmp_path: Path) -> None:
    """L7 (SL35): `scontrol show hostnames` printing nothing is a SlurmError (it was an IndexError)."""
    client = _fake_scontrol(tmp_path, "exit 0\n")
    with pytest.raises(SlurmError, match="printed no node name"):
        asyncio.run(client.hostnames("node[1-2]"))


def test_addresses_of_twenty_thousand_nodes(tmp_path: Path) -> None:
    """L8 (SL36): 20 000 node names no longer go into one argv word (over the kernel's 128 KiB)."""
    client = _fake_scontrol(
        tmp_path, 'echo "$4" | tr , "\\n" | while read n; do echo "NodeName=$n NodeAddr=10.$n"; done\n'
    )
    nodes = [f"gpu-node-{i:05d}" for i in range(20000)]
    addrs = asyncio.run(node_addresses(client, nodes))
    assert addrs == [f"10.{n}" for n in nodes]


@pytest.mark.parametrize(
    ("cid", "name", "value", "message"),
    [
        ("EN00", "FOO\n", "v", "not a valid environment variable name"),
        ("EV20", "FOO", "a\0b", "NUL"),
        ("EV17", "FOO", "x" * 200_000, "more than a command line carries"),
    ],
)
def test_env_vars_no_command_can_carry_are_refused(
    cid: str, name: str, value: str, message: str, tmp_path: Path
) -> None:
    """L13 (EN00, EV20, EV17): a name with a newline (`re.match` + `$` let it through), a NUL in a value
    and a 200 KB value are refused when the cluster file loads, not by every command later."""
    key = tmp_path / "id"
    key.write_text("k")
    p = tmp_path / "cluster.json"
    data = {
        "username": "alice",
        "priv_key_file": str(key),
        "node_dict": {"10.0.0.1": {}},
        "env_vars": {name: value},
    }
    p.write_text(json.dumps(data))
    with pytest.raises(UserError) as exc:
        load_cluster(p)
    assert any(message in line for line in exc.value.problems), exc.value.problems


def test_schema_version_true_is_refused(tmp_path: Path) -> None:
    """L9 (RJ06): `"schema_version": true` is no version (it passed as 1)."""
    p = tmp_path / "results.json"
    p.write_text('{"schema_version": true}')
    with pytest.raises(UserError, match="schema_version True is not supported"):
        load_results(p)


def test_a_node_that_exited_with_an_error_is_no_pass(tmp_path: Path) -> None:
    """L10 (RJ25): a results file saying PASS beside a node whose exit code is 1 does not pass."""
    loaded = load_local(tmp_path)
    res = sample_results(loaded)
    assert res.passed
    node = res.runs[0].nodes[0]
    res.runs[0].nodes[0] = node.model_copy(update={"exit_code": 1})
    assert not res.passed


def test_the_ssh_password_is_masked_in_node_output(tmp_path: Path) -> None:
    """L14 (PW03): the cluster's SSH password is among the values masked wherever node output is shown."""
    loaded = load_local(tmp_path)
    cluster = dataclasses.replace(local_cluster(1), password="Sup3r-S3cret-pw")
    plan = build_plan(loaded, cluster, out_dir=tmp_path, run_id="t")
    assert "Sup3r-S3cret-pw" in secret_values(plan)
