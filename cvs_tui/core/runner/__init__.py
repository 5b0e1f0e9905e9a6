"""The live run: the suite and its stages, the launcher seam and the nodes launcher (transport, containers,
launch scripts, log tailing), the watchdog."""
