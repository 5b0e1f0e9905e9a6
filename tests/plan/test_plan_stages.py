"""The plan layer plans the stage rows; the runner's registry runs the same stages in the same order.

Also: no import cycle between the plan and the runner (the plan imports nothing from the runner, at
run time or for annotations), checked on the real import graph with grimp.
"""

from __future__ import annotations

import grimp

from cvs_tui.core.plan import ORDER
from cvs_tui.core.runner.stages import STAGES, registered


def test_plan_order_is_the_runner_registry() -> None:
    assert [name for name, _ in ORDER] == [s.name for s in registered()]
    assert len(ORDER) == len(STAGES)


def test_closing_stages_come_last() -> None:
    flags = [s.closing for s in registered()]
    first_closing = flags.index(True)
    assert all(flags[first_closing:]), "a closing stage must not be followed by an ordinary one"


def test_plan_and_runner_form_no_cycle() -> None:
    g = grimp.build_graph("cvs_tui", include_external_packages=False)
    plan_mods = {m for m in g.modules if m == "cvs_tui.core.plan" or m.startswith("cvs_tui.core.plan.")}
    for m in plan_mods:
        for imported in g.find_upstream_modules(m):
            assert not imported.startswith("cvs_tui.core.runner"), f"{m} reaches {imported}"
