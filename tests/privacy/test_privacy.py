"""The privacy detectors, the denylist built from run context, the scrubber's placeholders and
`cvs-tui check-private` (which never prints a matched value)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _analysis_samples import FIXTURES, write_config
from hypothesis import given, settings
from hypothesis import strategies as st

from cvs_tui.cli.main import main
from cvs_tui.core.cluster import cluster_from_nodes_arg
from cvs_tui.core.config.loader import load_config
from cvs_tui.core.errors import UserError
from cvs_tui.core.privacy import (
    PrivacyContext,
    Scrubber,
    build_context,
    check_files,
    find_private,
    scrub_files,
)


def cats(text: str, ctx: PrivacyContext | None = None, mode: str = "log") -> list[str]:
    return [f.category for f in find_private(text, ctx, mode=mode)]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "category"),
    [
        ("coordinator at 10.20.30.41:12346", "ip"),
        ("peer [fe80::1ff:fe23:4567:890a]:8482", "ip"),
        ("addr 2001:db8::8a2e:370:7334 up", "ip"),
        ("nic aa:bb:cc:dd:ee:ff", "mac"),
        ("contact jdoe@corp.example.com", "email"),
        ("sa 123456789-compute@developer.gserviceaccount.com", "email"),
        ("ckpt gs://team-bucket/ckpts/1", "bucket"),
        ("data s3://bucket-2/x", "bucket"),
        ("az://store/x", "bucket"),
        ("cwd /home/jdoe/work", "home"),
        ("cwd /Users/jdoe/work", "home"),
        ("out /lustre/projx/runs", "path"),
        ("out /gpfs/projx/runs", "path"),
        ("token hf_" + "A" * 34, "token"),
        ("ghp_" + "b" * 36, "token"),
        ("key AKIA" + "C" * 16, "token"),
        ("HF_TOKEN=abcdef123456", "token"),
        ("Authorization: Bearer abc.def-123456", "token"),
        ("SLURM_JOB_ID=123456", "job"),
        ("job id: 98765", "job"),
        ("pod wl-abc-slice-job-0-1 ready", "job"),
        ("srun --nodelist=gpu[01-04] x", "job"),
    ],
)
def test_detectors_find(text: str, category: str) -> None:
    assert category in cats(text)


@pytest.mark.parametrize(
    "text",
    [
        "jax 0.12.0.1 jaxlib 0.12.0.1",
        "ROCm 6.3.1 driver 1.2.3",
        "I1130 07:28:34.238979 139736357583744 metric_logger.py:393] step",
        "absl::Status xla::Shape std::vector",
        "listening on 127.0.0.1:12346 and [::1]:1 and 0.0.0.0:80",
        "tokenizer_path: assets/tokenizer; pad_token: 0; tokens/s: 900",
        "HF_TOKEN=*** (masked)",
        "/tmp/cvs-fixture/out/run and /opt/maxtext-venv/lib",
        "<host-1> <ip-2> <user> <home>/x <bucket-1> <token> <email-1> <job-1>",
    ],
)
def test_detectors_leave_ordinary_text(text: str) -> None:
    assert cats(text) == []


def test_card_mode_is_stricter() -> None:
    assert cats("on 127.0.0.1 and [::]:8482", mode="card") == ["ip", "ip"]
    assert "url" in cats("see https://example.org", mode="card")
    assert "absolute path" in cats("at /workspace/maxtext/x", mode="card")
    assert cats("jax 0.12.0.1 rocm/jax-training:maxtext-v26.4", mode="card") == []


def test_real_fixture_logs_have_no_false_positives() -> None:
    assert check_files([FIXTURES], build_context(environ={})) == []


def test_context_from_config_cluster_and_token_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = "s3cr3t-Value-0987654321"  # no known token format: only the file's value finds it
    (tmp_path / "tok").write_text(token + "\n")

    def mutate(doc: dict) -> None:
        doc["paths"] = {
            "shared_fs": "/srv/teamx/{user-id}",
            "log_dir": "{shared_fs}/runs",
            "models_dir": "{shared_fs}/models",
            "hf_token_file": str(tmp_path / "tok"),
            "temp_dir": "/tmp/{user-id}/x",
        }
        doc["container"]["name"] = "cvs-zed-box"
        doc["container"]["image"] = "rocm/jax-training:maxtext-v26.4"
        doc["container"]["runtime"] = {
            "name": "docker",
            "args": {"volumes": ["/srv/teamx/data:/data", "/dev/kfd:/dev/kfd"]},
        }

    monkeypatch.setenv("CVS_TUI_MAXTEXT_PYTHON", "/opt/x/python")
    loaded = load_config(write_config(tmp_path, mutate=mutate), user="zed")
    cluster = cluster_from_nodes_arg("zed@gpu-a17.dc3.example,10.9.8.7")
    ctx = build_context(loaded=loaded, cluster=cluster, deny_terms=["ProjectX"], environ={})
    values = {t.value for t in ctx.terms}
    assert {
        "gpu-a17.dc3.example",
        "gpu-a17",
        "10.9.8.7",
        "zed",
        "cvs-zed-box",
        "/srv/teamx/data",
        token,
    } <= values
    assert "/dev/kfd" not in values and ctx.terms[0].value == "ProjectX"
    assert token not in repr(ctx) and "zed" not in repr(ctx)
    text = (
        f"node gpu-a17 (gpu-a17.dc3.example, 10.9.8.7) user zed tok {token} in /srv/teamx/zed/runs projectx"
    )
    sc = Scrubber(ctx)
    out = sc.scrub_text(text)
    for v in ("gpu-a17", "10.9.8.7", "zed", token, "/srv/teamx", "projectx"):
        assert v.lower() not in out.lower(), (v, out)
    assert out.startswith("node <host-1> (<host-1>, <ip-1>) user <user> tok <token>"), out
    assert sc.check_text(out) == []


def test_system_users_and_local_hosts_are_not_terms() -> None:
    ctx = build_context(cluster=cluster_from_nodes_arg("localhost,localhost", user="root"), environ={})
    assert ctx.terms == ()
    sc = Scrubber(ctx)
    assert (
        sc.scrub_text('{"root_cause_node": 0, "host": "localhost"}')
        == '{"root_cause_node": 0, "host": "localhost"}'
    )


def test_placeholders_are_stable_and_distinct() -> None:
    sc = Scrubber(build_context(deny_terms=[], environ={}))
    a = sc.scrub_text("10.0.0.1 then 10.0.0.2 then gs://b1/x")
    b = sc.scrub_text("again 10.0.0.2 and 10.0.0.1 and gs://b1/y and gs://b2/z")
    assert a == "<ip-1> then <ip-2> then <bucket-1>/x"
    assert b == "again <ip-2> and <ip-1> and <bucket-1>/y and <bucket-2>/z"
    assert sc.scrub_text("<b>10.0.0.1</b>", markup=True) == "<b>&lt;ip-1&gt;</b>"


def test_check_private_prints_location_not_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "a.log"
    f.write_text("ok line\nrank 0 on nebula-7 from 10.1.2.3\n")
    assert main(["check-private", str(f), "--deny-term", "Nebula-7"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{f}:2:11 term (matched private term #1)", f"{f}:2:25 ip"]
    assert all("nebula" not in line.lower() and "10.1.2.3" not in line for line in out)
    clean = tmp_path / "b.log"
    clean.write_text("nothing here 0.12.0.1\n")
    assert main(["check-private", str(clean)]) == 0
    assert capsys.readouterr().out == ""


def test_check_private_denylist_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    terms = tmp_path / "deny.txt"
    terms.write_text("# site names\nblue-moon\n\norion\n")
    f = tmp_path / "x.md"
    f.write_text("ran at Orion\n")
    assert main(["check-private", str(f), "--denylist", str(terms)]) == 1
    assert capsys.readouterr().out.strip() == f"{f}:1:8 term (matched private term #2)"
    assert main(["check-private", str(f), "--denylist", str(tmp_path / "none.txt")]) == 2
    assert "--denylist: cannot read" in capsys.readouterr().err


def test_scrub_needs_exactly_one_destination(tmp_path: Path) -> None:
    f = tmp_path / "a.log"
    f.write_text("x\n")
    with pytest.raises(UserError, match="exactly one of --out DIR or --in-place"):
        scrub_files([f])
    with pytest.raises(SystemExit):
        main(["scrub", str(f)])
    with pytest.raises(UserError, match="would overwrite its input"):
        scrub_files([f], out_dir=tmp_path)


def test_scrub_in_place_renames_private_file_names(tmp_path: Path) -> None:
    d = tmp_path / "bundle"
    (d / "gpu-a17").mkdir(parents=True)
    (d / "gpu-a17" / "gpu-a17.log").write_text("hello from gpu-a17\n")
    report = scrub_files([d], build_context(deny_terms=["gpu-a17"], environ={}), in_place=True)
    assert report.clean
    files = [p.relative_to(d).as_posix() for p in d.rglob("*")]
    assert files == ["<private-1>", "<private-1>/<private-1>.log"]
    assert (d / "<private-1>" / "<private-1>.log").read_text() == "hello from <private-1>\n"


def test_binary_file_with_a_private_value_is_reported(tmp_path: Path) -> None:
    d = tmp_path / "in"
    d.mkdir()
    (d / "chart.png").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe host 10.4.4.4 \x00")
    # not text: nothing in it can be rewritten safely, so a copy leaves it out and lists it
    report = scrub_files([d], build_context(environ={}), out_dir=tmp_path / "out")
    assert [Path(x).name for x in report.left_out] == ["chart.png"]
    assert not list((tmp_path / "out").rglob("chart.png")) and json.dumps(report.replaced) == "{}"
    # in place it cannot be left out: the re-check names what stays in it
    report = scrub_files([d], build_context(environ={}), in_place=True)
    assert not report.clean and report.leftovers[0].endswith(" ip")


@settings(max_examples=400, deadline=None)
@given(
    ip=st.ip_addresses(v=4).filter(
        lambda a: not (a.is_loopback or a.is_unspecified or str(a).startswith("0."))
    ),
    host=st.from_regex(r"[a-z][a-z0-9]{2,8}-[0-9]{1,3}", fullmatch=True),
    filler=st.text(alphabet="abcdefghij ,;:()=", max_size=40),
)
def test_scrubbed_text_never_keeps_the_value(ip, host: str, filler: str) -> None:
    sc = Scrubber(build_context(deny_terms=[host], environ={}))
    text = f"{filler} {ip} {filler} {host}:{filler} {host.upper()}"
    out = sc.scrub_text(text)
    assert str(ip) not in out and host not in out.lower()
    assert sc.check_text(out) == []
    assert sc.scrub_text(out) == out  # scrubbing is idempotent
