"""Scorers for the world corpus (tests/fixtures/world/): inputs people posted publicly from real clusters.

Each kind has a module here with ``checks() -> list[Check]``: one check per labelled item, comparing
what cvs-tui concludes with what a careful engineer concluded (the label kept beside the input, with
its source). ``benchmarks/world_corpus.py`` prints right/total per kind and every miss; the tests
``tests/world/test_world_*.py`` turn every check into a test.
"""
