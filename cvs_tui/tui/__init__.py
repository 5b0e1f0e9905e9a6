"""Front-ends: the CLI entry point, the headless console and the Textual app."""
