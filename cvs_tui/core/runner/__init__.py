"""Nodes (local, ssh), containers (docker, host), launch files, log tailing and the stage pipeline."""
