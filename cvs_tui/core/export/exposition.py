"""The collector's series as the Prometheus text format or OpenMetrics, each label set escaped once.

prometheus_client's encoders escape and validate every label of every sample on every scrape: at 512
nodes (6,000 samples, five labels each) that is most of a scrape's cost. :class:`Exposition` writes the
same bytes (tests/report/test_metrics_export.py holds it to both of prometheus_client's encoders) from the
same metric families, keeping each sample's ``name{labels}`` prefix from one scrape to the next: a node's
labels do not change while it runs, so only its values are formatted again
(``benchmarks/metrics_exporter.py``). The label names are the fixed ones of ``series.py``, valid as they
are; only the values need escaping.
"""

from __future__ import annotations

from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

MAX_PREFIXES = 1 << 16  # kept sample prefixes; past this (runs after runs) they are built anew


def _value(text: str) -> str:
    """A label value as both formats write it."""
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class Exposition:
    """Renders ``collector``'s families; :meth:`render` is called once per scrape."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        self._prefixes: dict[str, dict[tuple[str, ...], str]] = {}  # name -> label values -> prefix
        self._kept = 0

    def render(self, openmetrics: bool = False) -> bytes:
        if self._kept > MAX_PREFIXES:
            self._prefixes.clear()
            self._kept = 0
        out: list[str] = []
        put = out.append
        for metric in self.collector.collect():
            name = metric.name
            doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
            if openmetrics:
                doc = doc.replace('"', r"\"")
            put(f"# HELP {name} {doc}\n# TYPE {name} {metric.type}\n")
            prefixes = self._prefixes.setdefault(name, {})
            for s in metric.samples:
                key = tuple(s.labels.values())
                prefix = prefixes.get(key)
                if prefix is None:
                    inner = ",".join(f'{k}="{_value(v)}"' for k, v in sorted(s.labels.items()))
                    prefix = prefixes[key] = f"{s.name}{{{inner}}} " if inner else f"{s.name} "
                    self._kept += 1
                put(prefix + floatToGoString(s.value) + "\n")
        if openmetrics:
            put("# EOF\n")
        return "".join(out).encode("utf-8")
