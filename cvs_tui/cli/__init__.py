"""The headless front-end: the `cvs-tui` entry point, one module per subcommand, the console, publishing.

Nothing here imports Textual at module level; `run`, `analyze` and `attach` load ``cvs_tui.tui`` only
when they open the terminal UI.
"""
