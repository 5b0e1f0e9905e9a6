"""Run history with automatic baselines (`cvs-tui history`): every run folder registered in one SQLite
database, runs grouped by what makes them comparable, each metric judged against its group's past.

* ``store``: the database (path, schema, concurrent writers);
* ``grouping``: series (config, run, GPU, nodes) and stack (compare's fingerprint) -> group;
* ``register``: a run folder's runs into their groups;
* ``metrics``: which figures are checked and which way is better;
* ``noise``: robust level and spread, change points, the verdict of a new value;
* ``check``: a run's metrics against its group's earlier runs;
* ``hosts``: hosts at fault more often than the fleet's base rate;
* ``trend``: what a run's reports show of its history.
"""
