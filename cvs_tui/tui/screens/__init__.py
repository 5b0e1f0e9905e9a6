"""Textual screens: run dashboard, node log, errors, verdicts, help."""
