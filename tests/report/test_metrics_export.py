"""The live metrics export (cvs_tui/core/export, cvs_tui/cli/metrics.py): the series a folded event
stream gives, the HTTP endpoint's two formats, the textfile, --public pseudonyms and bad input.

The Prometheus server side (a real scrape during a two-node run) is tests/report/test_metrics_prometheus.py.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from _analysis_samples import FIXTURES, write_config
from _prometheus import binary
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from cvs_tui.cli.main import main
from cvs_tui.cli.metrics import start_metrics
from cvs_tui.core.bus import encode_event
from cvs_tui.core.events import (
    ErrorHit,
    HealthFindingEvent,
    LogLinesEvent,
    NodeLogEvent,
    NodeState,
    NodeStatusEvent,
    RunEndEvent,
    RunEvent,
    RunOutcome,
    RunStartEvent,
    Severity,
    StepEvent,
    SuiteEndEvent,
    VerdictEvent,
)
from cvs_tui.core.export.collector import RunCollector
from cvs_tui.core.export.exposition import Exposition
from cvs_tui.core.export.live import LiveRun, tap
from cvs_tui.core.export.series import MAX_SERIES_PER_NODE, SERIES, SERIES_PER_NODE

RUN = "BS=2,PRECISION=BF16,SL=128"
HOSTS = ("gpu-a17.site.example", "gpu-a18.site.example", "gpu-a19.site.example")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _step(node: int, step: int, seconds: float = 0.5) -> NodeLogEvent:
    return NodeLogEvent(
        "r", node, StepEvent(step=step, loss=3.0, line=step + 1, seconds=seconds, tokens_per_device=900.0)
    )


def _stream() -> list[RunEvent]:
    """Three nodes: rank 2 lags (step 2 against 5), logs a fatal error; rank 1 has a fatal kernel finding."""
    evs: list[RunEvent] = [RunStartEvent("r", total_steps=10, nodes=HOSTS, at=1_700_000_000.0)]
    evs += [NodeStatusEvent("r", n, HOSTS[n], NodeState.STARTING) for n in range(3)]
    evs += [_step(n, s) for s in range(6) for n in (0, 1)] + [_step(2, s, 1.5) for s in range(3)]
    evs.append(LogLinesEvent("r", 0, 1, ("a line no series needs",)))
    fatal = ErrorHit("nccl", Severity.FATAL, "NCCL error", 9, "builtin")
    evs.append(NodeLogEvent("r", 2, fatal))
    evs.append(NodeLogEvent("r", 2, ErrorHit("warn", Severity.WARNING, "slow", 10, "benign")))
    evs.append(HealthFindingEvent(1, HOSTS[1], "xid-79", Severity.FATAL, "NVRM: Xid 79", 5.0, 1.7e9))
    evs += [
        VerdictEvent("r", f"m{i}", st, "", 1.0, "") for i, st in enumerate(("PASS", "PASS", "FAIL", "N/A"))
    ]
    return evs


def _samples(registry: CollectorRegistry) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def _value(samples: dict, name: str, **labels: str) -> float | None:
    want = set(labels.items())
    found = [v for (n, ls), v in samples.items() if n == name and want <= ls]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else None


def _registry(live: LiveRun, public: bool = False) -> CollectorRegistry:
    reg = CollectorRegistry()
    reg.register(RunCollector(live, config="c.json", public=public))
    return reg


def test_the_series_of_a_folded_stream() -> None:
    clock = Clock()
    live = LiveRun(clock)
    for ev in _stream():
        live.apply(ev)
    clock.now += 7.0
    reg = _registry(live)
    s = _samples(reg)
    assert _value(s, "cvs_tui_node_last_step", rank="0", run="r", config="c.json", host=HOSTS[0]) == 5
    assert _value(s, "cvs_tui_node_last_step", rank="2") == 2
    assert _value(s, "cvs_tui_node_lag_steps", rank="2") == 3  # the median node is at step 5
    assert _value(s, "cvs_tui_node_lag_steps", rank="0") == 0
    assert _value(s, "cvs_tui_node_steps_per_second", rank="0") == 2.0
    assert _value(s, "cvs_tui_node_steps_per_second", rank="2") == pytest.approx(1 / 1.5)
    assert _value(s, "cvs_tui_node_step_seconds_p95", rank="2") == 1.5
    assert _value(s, "cvs_tui_node_tokens_per_second", rank="1") == 900.0
    assert _value(s, "cvs_tui_node_seconds_since_last_step", rank="0") == 7.0
    assert _value(s, "cvs_tui_node_state", rank="0", state="training") == 1
    assert _value(s, "cvs_tui_node_error_hits", rank="2", severity="fatal") == 1
    assert _value(s, "cvs_tui_node_error_hits", rank="2", severity="warning") == 1
    assert _value(s, "cvs_tui_node_error_hits", rank="0", severity="fatal") == 0
    assert _value(s, "cvs_tui_node_health_findings", rank="1", severity="fatal", host=HOSTS[1]) == 1
    assert _value(s, "cvs_tui_run_state", run="r", state="running") == 1
    assert _value(s, "cvs_tui_run_verdicts", status="PASS") == 2
    assert _value(s, "cvs_tui_run_verdicts", status="FAIL") == 1
    assert _value(s, "cvs_tui_run_verdicts", status="RECORD") == 0
    assert _value(s, "cvs_tui_run_start_time_seconds") == 1_700_000_000.0
    assert _value(s, "cvs_tui_run_end_time_seconds") is None
    # at most 12 series per node, and exactly what the series table says for a node with health
    per_rank = sum(1 for (_n, ls) in s if ("rank", "1") in ls)
    assert per_rank == SERIES_PER_NODE <= MAX_SERIES_PER_NODE
    assert {n for n, _ in s} <= {x.name for x in SERIES}

    live.apply(RunEndEvent("r", RunOutcome.FAILED, "node 2 fatal", 2, at=1_700_000_060.0))
    for n in range(3):
        live.apply(NodeStatusEvent("r", n, HOSTS[n], NodeState.FAILED if n == 2 else NodeState.STOPPED))
    live.apply(VerdictEvent("r", "training.goodput_pct", "RECORD", "", 87.5, "%"))
    s = _samples(reg)
    assert _value(s, "cvs_tui_run_state", state="failed") == 1
    assert _value(s, "cvs_tui_run_state", state="running") is None  # one state at a time
    assert _value(s, "cvs_tui_run_end_time_seconds") == 1_700_000_060.0
    assert _value(s, "cvs_tui_run_goodput_ratio") == 0.875
    assert _value(s, "cvs_tui_node_seconds_since_last_step", rank="0") is None  # no longer training
    assert _value(s, "cvs_tui_node_state", rank="2", state="failed") == 1


def test_public_labels_are_the_scrubbers_pseudonyms() -> None:
    live = LiveRun(Clock())
    for ev in _stream():
        live.apply(ev)
    text = generate_latest(_registry(live, public=True)).decode()
    assert not any(h in text for h in HOSTS)
    hosts = {
        s.labels["host"]
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if "host" in s.labels
    }
    assert hosts == {"<host-1>", "<host-2>", "<host-3>"}


def test_exposition_writes_the_bytes_prometheus_clients_encoders_write() -> None:
    """The fast exposition against the library's two encoders, on awkward host names, scrape after scrape
    (the kept prefixes must not freeze a value or a label)."""
    odd = ('gpu"7\\x', "line\nbreak", "nœud-ü")
    live = LiveRun(Clock())
    for ev in _stream():
        live.apply(ev)
    live.apply(RunStartEvent("r2", total_steps=4, nodes=odd, at=1_700_000_100.0))
    reg = _registry(live)
    expo = Exposition(reg)
    for round_ in range(3):
        for n in range(3):
            live.apply(_step(n, 6 + round_))
            live.apply(NodeLogEvent("r2", n, StepEvent(step=round_, loss=1.0, line=1, seconds=0.25)))
        assert expo.render() == generate_latest(reg)
        assert expo.render(openmetrics=True) == generate_openmetrics(reg)
    text = expo.render().decode()
    assert 'host="gpu\\"7\\\\x"' in text and 'host="line\\nbreak"' in text and "nœud-ü" in text
    assert 'cvs_tui_node_last_step{config="c.json",host="line\\nbreak",rank="1",run="r2"} 2.0' in text


async def test_tap_passes_every_event_on_in_order() -> None:
    evs = _stream()

    async def source():  # type: ignore[no-untyped-def]
        for ev in evs:
            yield ev

    live = LiveRun(Clock())
    out = [ev async for ev in tap(source(), live)]
    assert out == evs
    assert live.state.runs["r"].nodes[0].step == 5


def _args(**kw: object) -> argparse.Namespace:
    base: dict[str, object] = {
        "metrics_port": None,
        "metrics_bind": "127.0.0.1",
        "metrics_textfile": None,
        "public": False,
    }
    return argparse.Namespace(**(base | kw))


def _get(url: str, accept: str | None = None) -> tuple[str, str]:
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.headers["Content-Type"], r.read().decode()


def test_endpoint_negotiates_openmetrics_and_promtool_accepts_it(capsys: pytest.CaptureFixture[str]) -> None:
    export = start_metrics(_args(metrics_port=0), config="c.json")
    assert export is not None and export.address is not None
    try:
        for ev in _stream():
            export.live.apply(ev)
        url = f"http://127.0.0.1:{export.address[1]}/metrics"
        assert f"cvs-tui: metrics at {url}" in capsys.readouterr().err
        kind, text = _get(url)
        assert kind.startswith("text/plain") and "version=0.0.4" in kind
        assert (
            'cvs_tui_node_lag_steps{config="c.json",host="gpu-a19.site.example",rank="2",run="r"} 3.0' in text
        )
        kind, om = _get(url, "application/openmetrics-text; version=1.0.0,text/plain;q=0.5")
        assert kind.startswith("application/openmetrics-text")
        assert om.rstrip().endswith("# EOF") and "cvs_tui_node_lag_steps" in om
        check = subprocess.run(
            [binary("promtool"), "check", "metrics"], input=text, capture_output=True, text=True
        )
        assert check.returncode == 0, check.stdout + check.stderr
        with pytest.raises(urllib.error.HTTPError) as nf:
            _get(url.replace("/metrics", "/other"))
        assert nf.value.code == 404
    finally:
        export.close()
    with pytest.raises(urllib.error.URLError):
        _get(url)


def _attach_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "events.jsonl").write_text(encode_event(SuiteEndEvent(passed=True)) + "\n")
    return folder


def test_port_in_use_and_bad_addresses_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _attach_folder(tmp_path)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        rc = main(["attach", str(folder), "--no-ui", "--metrics-port", str(port)])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1, err
        assert f"--metrics-port: port {port} is in use on 127.0.0.1" in err
    for extra, says in (
        (["--metrics-port", "70000"], "--metrics-port: 70000 is not a port number"),
        (
            ["--metrics-port", "0", "--metrics-bind", "192.0.2.7"],
            "192.0.2.7 is not an address of this machine",
        ),
        (
            ["--metrics-port", "0", "--metrics-bind", "no-such-host.invalid"],
            "cannot listen on no-such-host.invalid",
        ),
        (["--metrics-textfile", str(tmp_path / "m.txt")], "must end in .prom"),
        (["--metrics-textfile", str(tmp_path / "nope" / "m.prom")], "is not a folder"),
    ):
        rc = main(["attach", str(folder), "--no-ui", *extra])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and says in err, (extra, err)
        assert "Traceback" not in err


def test_analyze_without_follow_refuses_the_live_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path, steps=20, runs=[RUN])
    rc = main(["analyze", str(cfg), "--logs", str(FIXTURES / "single_20steps.log"), "--metrics-port", "0"])
    err = capsys.readouterr().err
    assert rc == 2 and "--metrics-port: only with --follow" in err, err


def test_follow_writes_the_textfile_and_attach_exports_the_same_run(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, steps=20, runs=[RUN])
    out, prom = tmp_path / "out", tmp_path / "follow.prom"
    log = (FIXTURES / "single_20steps.log").read_bytes()
    cmd = [sys.executable, "-m", "cvs_tui", "analyze", str(cfg), "--follow", "--logs", "-", "--no-ui"]
    cmd += ["--out", str(out), "--metrics-port", "0", "--metrics-textfile", str(prom)]
    p = subprocess.run(cmd, input=log, capture_output=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    text = prom.read_text()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    [state] = [s for s in fams["cvs_tui_run_state"].samples if s.value == 1]
    assert state.labels == {"run": RUN, "config": cfg.name, "state": "complete"}
    [last] = fams["cvs_tui_node_last_step"].samples
    assert last.value == 19 and last.labels["host"] == "stdin"
    assert not [p for p in tmp_path.glob(".follow.prom.*")]  # the atomic write left no temp file
    check = subprocess.run(
        [binary("promtool"), "check", "metrics"], input=text, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    # attach reads the run folder back: its textfile holds the same run series
    again = tmp_path / "attach.prom"
    rc = main(["attach", str(out), "--no-ui", "--no-follow", "--metrics-textfile", str(again)])
    assert rc == 0
    runs = {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for f in text_string_to_metric_families(again.read_text())
        for s in f.samples
        if s.name.startswith("cvs_tui_run_") and "time" not in s.name
    }
    assert runs == {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for f in fams.values()
        for s in f.samples
        if s.name.startswith("cvs_tui_run_") and "time" not in s.name
    }


def test_a_scrape_that_fails_is_a_500_naming_why(capfd: pytest.CaptureFixture[str]) -> None:
    from prometheus_client.registry import Collector

    from cvs_tui.core.export.endpoint import serve

    class Broken(Collector):
        def collect(self):  # type: ignore[no-untyped-def]
            raise ValueError("torn state")

    server = serve(Exposition(Broken()), "127.0.0.1", 0)
    try:
        with pytest.raises(urllib.error.HTTPError) as err:
            _get(f"http://127.0.0.1:{server.server_address[1]}/metrics")
        assert err.value.code == 500
        assert err.value.read().decode() == "cvs-tui: the series could not be read: ValueError: torn state\n"
    finally:
        server.shutdown()
        server.server_close()
    assert "Traceback" not in capfd.readouterr().err  # nothing on the screen the view draws


def test_the_textfile_is_rewritten_while_it_runs_and_a_failed_write_is_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from cvs_tui.core.export import textfile

    monkeypatch.setattr(textfile, "TEXTFILE_SECONDS", 0.05)
    folder = tmp_path / "textfile"
    folder.mkdir()
    path = folder / "cvs-tui.prom"
    export = start_metrics(_args(metrics_textfile=str(path)), config="c.json")
    assert export is not None
    try:
        assert "cvs_tui_node_last_step{" not in path.read_text()  # written once before any event
        for ev in _stream():
            export.live.apply(ev)
        deadline = time.monotonic() + 10
        while "cvs_tui_node_last_step{" not in path.read_text():
            assert time.monotonic() < deadline, "the textfile was not rewritten"
            time.sleep(0.02)
        path.unlink()
        folder.rmdir()  # the folder is gone: writes fail from now on
        time.sleep(0.3)
    finally:
        export.close()
    err = capsys.readouterr().err
    assert err.count("cvs-tui: warning: --metrics-textfile") == 1, err
    assert "No such file or directory" in err and "Traceback" not in err
