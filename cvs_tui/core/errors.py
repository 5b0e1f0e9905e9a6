"""Errors that reach the user as clear one-line messages (never a traceback)."""

from __future__ import annotations

from cvs_tui.core.textsafe import sanitize_text


class UserError(Exception):
    """Bad input: a config, cluster file, threshold file, log path or flag the user can fix.

    ``problems`` holds one line per problem (JSON path or file, what is wrong, how to fix it); the CLI
    prints each on its own line and exits with code 2.
    """

    def __init__(self, problems: str | list[str]) -> None:
        given = [problems] if isinstance(problems, str) else list(problems)
        # one line each, whatever a file put into a key or value (a newline, an ESC): found by fuzzing
        self.problems = [sanitize_text(p) for p in given]
        super().__init__("\n".join(self.problems))
