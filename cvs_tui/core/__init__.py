"""The core: config, plan, parsing, metrics, verdicts, results, reports and the runner. No UI imports."""
