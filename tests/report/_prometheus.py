"""A real Prometheus server (Debian's `prometheus` package, installed by .ci/prometheus.sh) for the
metrics-export tests: bound to 127.0.0.1 on a free port, a temp data folder, a short scrape interval,
stopped by its PID. And promtool.

Where the binaries are absent, a test skips only off CI on a machine where this user could not install
them (not root); as root or under CI it fails, naming the script that installs them.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

INSTALL = ".ci/prometheus.sh"


def binary(name: str) -> str:
    """The path of ``name`` (prometheus, promtool); skips or fails as the module docstring says."""
    path = shutil.which(name)
    if path is not None:
        return path
    why = f"{name} is not installed (Debian's prometheus package; bash {INSTALL} installs it)"
    if os.geteuid() == 0 or os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class Prometheus:
    """``prometheus`` scraping ``targets`` every ``interval`` seconds, serving its API on 127.0.0.1."""

    def __init__(self, folder: Path, targets: list[str], interval: float = 1.0) -> None:
        self.folder = folder
        self.port = free_port()
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / "prometheus.yml"
        config.write_text(
            "global:\n"
            f"  scrape_interval: {interval:g}s\n"
            f"  scrape_timeout: {interval:g}s\n"
            "scrape_configs:\n"
            "  - job_name: cvs-tui\n"
            "    static_configs:\n"
            f"      - targets: {json.dumps(targets)}\n"
        )
        self.log = (folder / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [
                binary("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited {self.proc.returncode}: {self.logged()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"prometheus not ready after {timeout:g} s: {self.logged()}")

    def logged(self) -> str:
        self.log.flush()
        return (self.folder / "prometheus.log").read_text(errors="replace")[-2000:]

    def api(self, path: str, **params: Any) -> Any:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.load(r)
        except urllib.error.HTTPError as exc:
            body = json.load(exc)
        assert body["status"] == "success", (params, body)
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's samples: [{"metric": {labels}, "value": [t, "v"]}, ...]."""
        return list(self.api("query", query=expr)["result"])

    def by_rank(self, expr: str) -> dict[str, float]:
        return {s["metric"]["rank"]: float(s["value"][1]) for s in self.query(expr)}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
