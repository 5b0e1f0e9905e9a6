"""Live metrics for Prometheus and node-exporter: the run state as labelled series, read at scrape time.

``live`` folds the event stream into what the series need (the run state without log lines, and when each
node last logged a step); ``series`` names every series once (the collector, the docs, the dashboard and
the alert rules' tests read that table); ``collector`` turns the folded state into metric families when
Prometheus scrapes; ``textfile`` writes the same exposition atomically for node-exporter's textfile
collector. The HTTP endpoint is started by the command line (``cvs_tui/cli/metrics.py``).
"""
