"""Widgets of the Textual front-end: header, stage list, node table, log pane, loss plot."""
