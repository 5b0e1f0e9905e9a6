"""The node table's status before the first step names the start-up phase (fits the status column), so
a narrow screen that drops the last-line column still says a node is compiling, not just "starting"."""

from __future__ import annotations

from cvs_tui.core import node_phase
from cvs_tui.core.events import NodeState
from cvs_tui.core.state import NodeView
from cvs_tui.tui.widgets.node_cells import status_word
from cvs_tui.tui.widgets.node_table import COLUMNS


def test_phase_words_fit_the_status_column() -> None:
    cap = dict((label, width) for label, width, _ in COLUMNS)["status"]
    for phase in (node_phase.IMPORTING, node_phase.DEVICES, node_phase.RESTORING, node_phase.COMPILING):
        nv = NodeView(rank=0, state=NodeState.STARTING, phase=phase)
        assert len(status_word(nv)) <= cap
    assert status_word(NodeView(rank=0, state=NodeState.STARTING, phase=node_phase.COMPILING)) == "compiling"
    assert status_word(NodeView(rank=0, state=NodeState.STARTING)) == "starting"
    # once training, the state is said, whatever phase was last seen
    assert status_word(NodeView(rank=0, state=NodeState.TRAINING, phase=node_phase.COMPILING)) == "training"
