"""Follow mode in the Textual view (Pilot): two real MaxText node logs are appended to files in chunks
while the view runs; the view shows each node's steps as they arrive and a stall before the first one;
stopping judges the copies exactly as `analyze` judges the original logs."""

from __future__ import annotations

import asyncio
import io
import json
import re
from collections.abc import Callable
from pathlib import Path

from _analysis_samples import FIXTURES, LOCAL_2PROC, write_config
from rich.console import Console

from cvs_tui.cli.console import run_console
from cvs_tui.cli.follow import follow_plan
from cvs_tui.core.bus import EventBus
from cvs_tui.core.config.loader import load_config
from cvs_tui.core.events import NodeState
from cvs_tui.core.feed import EventFeed
from cvs_tui.core.results import load_results
from cvs_tui.core.run_folder import RunFolder
from cvs_tui.core.sources.follow import FollowSession
from cvs_tui.core.sources.inputs import run_key_for
from cvs_tui.core.sources.offline import analyze_paths
from cvs_tui.core.watch.followers import FileFollower
from cvs_tui.core.watch.options import RunOptions
from cvs_tui.tui.app import CvsApp
from cvs_tui.tui.screens.quit_dialog import QuitDialog
from cvs_tui.tui.widgets.node_table import NodeTable

LOGS = [FIXTURES / "twoproc_node0.log", FIXTURES / "twoproc_node1.log"]
STEP_LINE = re.compile(rb"completed step: (\d+),")


def cut_points(data: bytes, every: int) -> list[tuple[int, int]]:
    """(byte offset, last step logged before it): cuts one line after every ``every``-th step line,
    plus one in the middle of a line (a writer's partial flush)."""
    cuts: list[tuple[int, int]] = []
    for m in STEP_LINE.finditer(data):
        if int(m.group(1)) % every == every - 1:
            end = data.index(b"\n", m.end()) + 1
            nxt = data.find(b"\n", end)
            end = nxt + 1 if nxt >= 0 else len(data)
            cuts.append((end, max(int(x) for x in STEP_LINE.findall(data[:end]))))
    first = cuts[0][0]
    cuts.insert(0, (first // 2, -1))  # mid-line, before any step
    return cuts


async def until(cond: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not cond():
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def row_text(app: CvsApp, rank: int) -> str:
    app.refresh_now()
    table = app.dashboard.query_one(NodeTable)
    return table.render_line(1 + rank).text  # row 0 is the header


async def test_pilot_view_follows_growing_files_then_stop_judges(tmp_path: Path) -> None:
    doc = json.loads(LOCAL_2PROC.read_text())
    key = doc["runs"][0]
    loaded = load_config(write_config(tmp_path, source=LOCAL_2PROC, steps=20, runs=[key]))
    out = tmp_path / "run"
    plan = follow_plan(loaded, 2, out)
    run_key = run_key_for(plan, None)
    folder = RunFolder(out)
    out.mkdir()
    folder.write_plan(plan)
    files = [tmp_path / "pod-0.log", tmp_path / "pod-1.log"]
    bus = EventBus(folder.events_path)
    session = FollowSession(
        plan,
        run_key,
        [FileFollower(str(f), poll_interval=0.02) for f in files],
        out,
        emit=bus.publish,
        options=RunOptions(compile_allowance_s=0.5),  # a stall shows before the first step arrives
        tick_s=0.05,
    )
    feed = EventFeed(bus.subscribe())
    app = CvsApp(feed, title="cvs-tui follow test", live=True, following=True, run_dir=out)
    task = asyncio.create_task(session.follow())
    task.add_done_callback(lambda _t: bus.close())
    datas = [p.read_bytes() for p in LOGS]
    async with app.run_test(size=(180, 40)) as pilot:
        nodes = lambda: app.view.runs[run_key].nodes  # noqa: E731
        await until(lambda: run_key in app.view.runs and len(nodes()) == 2, "the run to start")
        # nothing written yet (the files do not even exist): past the allowance each node is stalled
        await until(lambda: all(n.state is NodeState.STALLED for n in nodes().values()), "a stall")
        assert "no progress for" in row_text(app, 0) and "stalled" in row_text(app, 1)
        written = [0, 0]
        assert all(len(cut_points(data, 5)) == 5 for data in datas)
        for i in range(5):
            for rank, data in enumerate(datas):
                end, step = cut_points(data, 5)[i]
                with files[rank].open("ab") as fh:
                    fh.write(data[written[rank] : end])
                written[rank] = end
                if step < 0:
                    continue
                await until(lambda r=rank, s=step: nodes()[r].step == s, f"node {rank} at step {step}")
                assert nodes()[rank].state is NodeState.TRAINING
                assert f"{step + 1}/20" in row_text(app, rank)  # steps completed: index + 1
                assert "no progress" not in row_text(app, rank)
        for rank, data in enumerate(datas):  # the rest of each log
            with files[rank].open("ab") as fh:
                fh.write(data[written[rank] :])
        await until(lambda: all(n.step == 19 for n in nodes().values()), "both nodes at step 19")
        assert app.view.runs[run_key].outcome is None  # still following: files never end by themselves
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, QuitDialog)
        # a follower offers to stop following, never to stop trainers or remove containers
        said = " ".join(str(w.render()) for w in app.screen.query("Static"))
        assert "nothing on the nodes is stopped" in said and "remove containers" not in said
        await pilot.press("s")  # stop: judge what was followed
        await pilot.pause()
    assert app.return_value == "stop"
    session.stop()  # what the command's on_quit does
    results = await asyncio.wait_for(task, 30)
    buf = io.StringIO()
    view = await run_console(feed, console=Console(file=buf, width=200))  # the command's headless rest
    printed = buf.getvalue()
    assert "suite PASSED" in printed and view.suite_end is not None and view.suite_end.passed
    assert view.runs[run_key].nodes[0].state is NodeState.DONE

    # the copies are the followed bytes, and the verdicts are analyze's on the original logs
    for rank, p in enumerate(LOGS):
        assert folder.node_log(plan.run(run_key).slug, rank).read_bytes() == p.read_bytes()
    for name in ("results.json", "report.html", "junit.xml", "summary.md", "events.jsonl", "plan.json"):
        assert (out / name).is_file(), name
    saved = load_results(out / "results.json")
    direct = analyze_paths(plan, LOGS, run_key)
    assert saved.passed and results.passed and direct.passed
    assert [(v.metric, v.status, v.actual) for v in saved.runs[0].verdicts] == [
        (v.metric, v.status, v.actual) for v in direct.runs[0].verdicts
    ]
    assert saved.runs[0].window.steps == direct.runs[0].window.steps
