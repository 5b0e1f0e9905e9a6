"""`--metrics-port`, `--metrics-bind` and `--metrics-textfile` for run, `analyze --follow` and attach.

:func:`start_metrics` binds the HTTP endpoint (``/metrics``: the Prometheus text format, or OpenMetrics
when the scraper asks for it in ``Accept``) and writes the textfile once before any run starts, so a port
in use, a bad address or path is one line and exit 2; a thread then rewrites the textfile every few
seconds, whichever view (the TUI or the console) runs the event loop. :meth:`MetricsExport.tap` puts the
exporter on the event stream the view reads; :meth:`MetricsExport.close` writes the textfile one last
time and stops the server.
"""

from __future__ import annotations

import argparse
import errno
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cvs_tui.core.errors import UserError

if TYPE_CHECKING:  # prometheus_client is imported only when an export is asked for (startup cost)
    from cvs_tui.core.events import RunEvent
    from cvs_tui.core.export.exposition import Exposition
    from cvs_tui.core.export.live import LiveRun

DEFAULT_BIND = "127.0.0.1"


def add_metrics_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("live metrics (Prometheus, node-exporter; docs/metrics-export.md)")
    g.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve the live series at http://ADDR:PORT/metrics while this runs (0: any free port)",
    )
    g.add_argument(
        "--metrics-bind",
        default=DEFAULT_BIND,
        metavar="ADDR",
        help=f"the address --metrics-port listens on ({DEFAULT_BIND})",
    )
    g.add_argument(
        "--metrics-textfile",
        metavar="PATH",
        help="rewrite the series into PATH (*.prom, for node-exporter's textfile collector) every few "
        "seconds and at the end",
    )


class MetricsExport:
    """The exporter of one command: its folded state, exposition, HTTP server and textfile."""

    def __init__(self, live: LiveRun, expo: Exposition, textfile: Path | None) -> None:
        self.live = live
        self.expo = expo
        self.textfile = textfile
        self.server: Any = None
        self.address: tuple[str, int] | None = None
        self._warned = False
        self._stop = threading.Event()
        self._writer: threading.Thread | None = None

    def tap(self, source: AsyncIterator[RunEvent]) -> AsyncIterator[RunEvent]:
        """``source``'s events, each folded into the exporter's state on the way."""
        from cvs_tui.core.export.live import tap

        return tap(source, self.live)

    def keep_textfile(self, every: float) -> None:
        """Rewrite the textfile every ``every`` seconds from a thread of its own, until :meth:`close`."""

        def loop() -> None:
            while not self._stop.wait(every):
                self._write_textfile()

        self._writer = threading.Thread(target=loop, name="metrics-textfile", daemon=True)
        self._writer.start()

    def close(self) -> None:
        """The textfile's last write (the final state), then the server's end. Idempotent."""
        self._stop.set()
        if self._writer is not None:
            self._writer.join()
            self._writer = None
            self._write_textfile()
        if self.server is not None:
            server, self.server = self.server, None
            server.shutdown()
            server.server_close()

    def _write_textfile(self) -> None:
        from cvs_tui.core.export.textfile import write_textfile

        assert self.textfile is not None
        try:
            write_textfile(self.expo, self.textfile)
        except OSError as exc:
            self._textfile_failed(exc)

    def _textfile_failed(self, exc: OSError) -> None:
        if not self._warned:  # once: the run goes on, and the next tick tries again
            self._warned = True
            why = exc.strerror or exc
            print(f"cvs-tui: warning: --metrics-textfile {self.textfile}: {why}", file=sys.stderr)


def start_metrics(args: argparse.Namespace, *, config: str) -> MetricsExport | None:
    """The export the options ask for, its endpoint listening and its textfile written once; None when no
    option asks for one. Raises UserError (port in use, bad address or path)."""
    port: int | None = getattr(args, "metrics_port", None)
    textfile: str | None = getattr(args, "metrics_textfile", None)
    if port is None and textfile is None:
        return None
    if port is not None and not 0 <= port <= 65535:
        raise UserError(f"--metrics-port: {port} is not a port number (0-65535)")
    from cvs_tui.core.export.collector import RunCollector
    from cvs_tui.core.export.exposition import Exposition
    from cvs_tui.core.export.live import LiveRun
    from cvs_tui.core.export.textfile import TEXTFILE_SECONDS, check_textfile_path, write_textfile

    live = LiveRun()
    expo = Exposition(RunCollector(live, config=config, public=bool(getattr(args, "public", False))))
    path = Path(textfile) if textfile is not None else None
    if path is not None:
        check_textfile_path(path)
        try:
            write_textfile(expo, path)
        except OSError as exc:
            raise UserError(f"--metrics-textfile: {path}: {exc.strerror or exc}") from None
    export = MetricsExport(live, expo, path)
    if port is not None:
        export.server, export.address = _serve(expo, args.metrics_bind, port)
        host, bound = export.address
        shown = f"[{host}]" if ":" in host else host
        print(f"cvs-tui: metrics at http://{shown}:{bound}/metrics", file=sys.stderr, flush=True)
    if path is not None:
        export.keep_textfile(TEXTFILE_SECONDS)
    return export


def _serve(expo: Exposition, bind: str, port: int) -> tuple[Any, tuple[str, int]]:
    from cvs_tui.core.export.endpoint import serve

    try:
        server = serve(expo, bind, port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            why = f"port {port} is in use on {bind}; pick another --metrics-port (0: any free port)"
        elif exc.errno == errno.EADDRNOTAVAIL:
            why = f"{bind} is not an address of this machine; give one of its addresses to --metrics-bind"
        elif exc.errno == errno.EACCES:
            why = f"port {port} needs privileges on {bind}; pick a port above 1023"
        else:
            why = f"cannot listen on {bind} port {port}: {getattr(exc, 'strerror', None) or exc}"
        raise UserError(f"--metrics-port: {why}") from None
    host, bound = server.server_address[:2]
    return server, (str(host), int(bound))
