"""A real Prometheus scraping `cvs-tui --metrics-port` on loopback during a real two-node run.

The run is the suite on the SSH + Docker test nodes (tests/suite_fixtures: the stand-in trainer in a
busybox container on each node) with rank 1 made to lag (a longer pause between its steps). Prometheus
(Debian's package, .ci/prometheus.sh) scrapes every second; its PromQL answers are what is asserted: the
step series rises, the lagging rank is the one behind the median, and the run's state and verdicts land.
The dashboard's every query is run against the same server, and promtool checks a live exposition.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path

from _prometheus import Prometheus, binary, free_port
from _runner_infra import needs_infra
from suite_fixtures.helpers import SWEEP, make_setup, remove_scratch_tree, start_cli

pytestmark = needs_infra

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy/grafana/cvs-tui-dashboard.json"
STEPS = 60


def _dashboard_exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p["targets"]]
    return [e.replace("$config", ".*").replace("$run", ".*") for e in exprs]


def test_prometheus_sees_the_steps_rise_and_the_lagging_node(tmp_path: Path) -> None:
    port = free_port()
    prom = Prometheus(tmp_path / "prometheus", [f"127.0.0.1:{port}"], interval=1.0)
    s = make_setup(
        tmp_path,
        env={"CVS_STANDIN_STEP_SLEEP": "0.1", "CVS_STANDIN_SLOW_RANK": "1", "CVS_STANDIN_SLOW_SLEEP": "0.5"},
        sweeps={SWEEP: {"steps": STEPS}},
    )
    proc = start_cli(s, "--metrics-port", str(port))
    seen: dict[str, list[float]] = {"0": [], "1": []}  # rank -> its step as each query saw it
    lag: dict[str, float] = {}
    exposition = ""
    answered: list[str] | None = None  # dashboard queries with data, asked while the run trains
    try:
        deadline = time.monotonic() + 150
        while proc.poll() is None and time.monotonic() < deadline:
            for rank, step in prom.by_rank(f'cvs_tui_node_last_step{{run="{SWEEP}"}}').items():
                if not seen[rank] or seen[rank][-1] != step:
                    seen[rank].append(step)
            now = prom.by_rank(f'cvs_tui_node_lag_steps{{run="{SWEEP}"}}')
            if now.get("1", 0) > lag.get("1", 0):
                lag = now
            if not exposition and len(seen["1"]) >= 2:  # training: every node series is there
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    exposition = r.read().decode()
            if answered is None and len(seen["1"]) >= 4:
                # every dashboard query is valid PromQL over these series (an error fails prom.query)
                answered = [e for e in _dashboard_exprs() if prom.query(e)]
            time.sleep(1.0)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode in (0, 1), out
        assert f"cvs-tui: metrics at http://127.0.0.1:{port}/metrics" in out, out
        print("rank -> steps as Prometheus saw them:", seen)
        print("largest lag of rank 1 (cvs_tui_node_lag_steps by rank):", lag)
        # the step counter rose, scrape after scrape, on both nodes
        for rank in ("0", "1"):
            assert len(seen[rank]) >= 3 and seen[rank] == sorted(seen[rank]), (rank, seen)
        rose = prom.by_rank(
            f'max_over_time(cvs_tui_node_last_step{{run="{SWEEP}"}}[10m])'
            f' - min_over_time(cvs_tui_node_last_step{{run="{SWEEP}"}}[10m])'
        )
        print("max - min of cvs_tui_node_last_step over the run:", rose)
        assert rose["0"] > 10 and rose["1"] > 3, rose
        # the lagging node is rank 1, behind the median; rank 0 ahead of it
        assert lag["1"] >= 5 and lag["0"] <= -5, lag
        top = prom.query(f'topk(1, max_over_time(cvs_tui_node_lag_steps{{run="{SWEEP}"}}[10m]))')
        print("topk(1, max_over_time(cvs_tui_node_lag_steps[10m])):", top)
        assert [t["metric"]["rank"] for t in top] == ["1"], top
        faster = prom.by_rank(f'max_over_time(rate(cvs_tui_node_last_step{{run="{SWEEP}"}}[5s])[10m:1s])')
        print("fastest step rate seen per rank (steps/s):", faster)
        assert faster["0"] > 2 * faster["1"], faster
        # the run's series (the process has ended: its last scraped values), the nodes' host labels
        started = prom.query(f'last_over_time(cvs_tui_run_start_time_seconds{{run="{SWEEP}"}}[10m])')
        assert started and float(started[0]["value"][1]) > 1.7e9, started
        states = prom.query(f'last_over_time(cvs_tui_run_state{{run="{SWEEP}"}}[10m]) == 1')
        print("run states seen:", sorted(m["metric"]["state"] for m in states))
        assert {m["metric"]["state"] for m in states} >= {"running"}, states
        nodes = prom.query(f'last_over_time(cvs_tui_node_state{{run="{SWEEP}"}}[10m])')
        assert {m["metric"]["host"] for m in nodes} == {"127.0.0.2", "127.0.0.3"}, nodes
        assert answered is not None
        print(f"dashboard queries answered with data: {len(answered)} of {len(_dashboard_exprs())}")
        assert len(answered) >= len(_dashboard_exprs()) // 2, answered
        # the live exposition passes promtool's check and holds the training-time series
        assert "cvs_tui_node_seconds_since_last_step{" in exposition, exposition[:2000]
        check = subprocess.run(
            [binary("promtool"), "check", "metrics"], input=exposition, capture_output=True, text=True
        )
        assert check.returncode == 0, check.stdout + check.stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        prom.stop()
        remove_scratch_tree(s)
