"""Bytes in, typed events out: record splitting (incl. flattened logs), MaxText dialects, error signatures."""
