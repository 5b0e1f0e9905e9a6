"""The section-aware hang budget in a live two-node run over SSH (loopback test nodes): a pause the log
announces as a checkpoint save is not a hang, the same pause unannounced is, and the hang names the node,
its host and the last line it wrote. The trainer is the sh double of tests/_fault_infra.py; the budgets
are shortened (training 3 s, sections 10 s) so each run takes seconds."""

from __future__ import annotations

from pathlib import Path

import pytest
from _fault_infra import fault_setup
from _runner_infra import infra, needs_infra
from suite_fixtures.helpers import fast_options, remove_scratch_tree, run_suite

pytestmark = needs_infra

SAVE = 'info checkpointing.py:100 "Saving checkpoint at step 10"\n'


@pytest.mark.parametrize("announced", [True, False])
def test_an_announced_save_is_not_a_hang_and_an_unannounced_pause_is(tmp_path: Path, announced: bool) -> None:
    body = "header\nsteps 0 10\n" + (SAVE if announced else "") + "sleep 6\nsteps 10 20\nexit 0\n"
    s = fault_setup(tmp_path, body, steps=20, env={"CVS_FAULT_SLEEP": "0.05"})
    try:
        opts = fast_options(hang_min_s=3.0, hang_factor=1.0, section_min_s=10.0)
        run_suite(s, opts)
        rec = s.run_record()
        if announced:
            assert rec["outcome"] == "complete", rec["reason"]
        else:
            assert rec["outcome"] == "hung", rec
            reason = rec["reason"]
            host = infra().nodes[rec["root_cause_node"]]
            assert reason.startswith(f"node {rec['root_cause_node']} ({host}): no progress for 3 s"), reason
            assert "while training; last line " in reason and "completed step: 9," in reason, reason
    finally:
        remove_scratch_tree(s)
