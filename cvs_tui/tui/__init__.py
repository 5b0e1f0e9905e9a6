"""The Textual front-end: the app, its screens and widgets (the CLI and console live in cvs_tui.cli)."""
