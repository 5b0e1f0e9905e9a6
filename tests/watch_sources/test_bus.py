"""The event bus's events.jsonl: the same JSON as ``event_to_dict``, log events batched, nothing lost.

The fast path of ``encode_event`` (a parsed step) is checked against the general encoder on every event
type and on generated steps (NaN, infinities, None, odd strings, extras), and decoded back."""

from __future__ import annotations

import asyncio
import json
import math
import os
import typing
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cvs_tui.core import bus as bus_mod
from cvs_tui.core.bus import EventBus, encode_event, plain_event
from cvs_tui.core.event_codec import event_from_dict, event_to_dict
from cvs_tui.core.events import (
    CheckpointAction,
    CheckpointEvent,
    DevicesEvent,
    ErrorHit,
    EvalDialect,
    EvalEvent,
    EvalStartEvent,
    ExitCodeEvent,
    GpuSample,
    GpuTelemetryEvent,
    HealthFindingEvent,
    HealthState,
    LogEvent,
    LogLinesEvent,
    MemoryEstimateEvent,
    MemStatsEvent,
    MetricsFileStep,
    NodeHealthEvent,
    NodeLogEvent,
    NodeState,
    NodeStatusEvent,
    NonFiniteAbortEvent,
    ParamsEvent,
    ProcessCountEvent,
    ProfilerMarkEvent,
    RunEndEvent,
    RunEvent,
    RunOutcome,
    RunStartEvent,
    Severity,
    StageEvent,
    StageState,
    StallsEvent,
    StepEvent,
    StepKind,
    SuiteEndEvent,
    SystemInfoEvent,
    TflopsPerStepEvent,
    VerdictEvent,
)
from cvs_tui.core.parse import NodeLogParser

EVENTS: list[RunEvent] = [
    NodeLogEvent(
        run="r", node=3, event=StepEvent(step=7, loss=math.nan, line=12, seconds=0.5, extras={"lm_loss": 2.5})
    ),
    NodeLogEvent(
        run="r",
        node=0,
        event=ErrorHit(name="oom", severity=Severity.FATAL, text="x", line=9, origin="builtin"),
    ),
    NodeStatusEvent(run="r", node=1, host="h1", state=NodeState.TRAINING, detail="", at=1.5),
    RunStartEvent(run="r", total_steps=10, nodes=("a", "b"), at=2.0),
    StageEvent(stage="train", state=StageState.PASSED, detail="ok", at=3.0),
]


def _dump(d: object) -> str:
    return json.dumps(d, default=str, allow_nan=True)


def test_plain_event_writes_the_same_json_as_event_to_dict() -> None:
    for ev in EVENTS:
        assert _dump(plain_event(ev)) == _dump(event_to_dict(ev)), ev


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_log_events_wait_for_the_timer_other_events_are_written_at_once(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"

    async def main() -> None:
        bus = EventBus(path)
        bus.publish(EVENTS[0])
        bus.publish(EVENTS[1])
        assert _lines(path) == []  # buffered: log events are written in batches
        await asyncio.sleep(bus_mod.FLUSH_S + 0.2)
        assert len(_lines(path)) == 2  # the timer wrote them
        bus.publish(EVENTS[0])
        bus.publish(EVENTS[2])  # a node state: written at once, with the log event before it, in order
        assert [json.loads(x)["type"] for x in _lines(path)[2:]] == ["NodeLogEvent", "NodeStatusEvent"]
        bus.publish(EVENTS[0])
        bus.close()  # the rest is written at close
        assert len(_lines(path)) == 5
        assert bus.write_error is None

    asyncio.run(main())


def test_without_a_loop_every_event_is_written_at_once(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    bus = EventBus(path)
    for ev in EVENTS:
        bus.publish(ev)
    assert [json.loads(x) for x in _lines(path)] == [json.loads(_dump(event_to_dict(e))) for e in EVENTS]
    bus.close()


# one of every log event and every run event (the nested log events inside NodeLogEvent)
LOG_EVENTS: list[LogEvent] = [
    StepEvent(step=7, loss=math.nan, line=12, seconds=0.5, extras={"lm_loss": 2.5}),
    StepEvent(
        step=3,
        loss=-math.inf,
        line=1,
        kind=StepKind.RAMPUP,
        seconds=math.inf,
        tflops_per_device=1e300,
        tokens_per_device=1234.5,
        total_weights=256.0,
        live_slices=2,
        extras={"perplexity": math.nan, "mtp_loss": -0.0, 'ünï "q"': 1e-7},
        timestamp=1764504000.123456,
        source="metric_logger.py:265",
    ),
    StepEvent(step=0, loss=3.0, line=2, kind=StepKind.PROFILER),
    StepEvent(step=71, loss=None, line=1, seconds=30.309, tflops_per_device=207.973, extras={"MFU": 8.32}),
    MetricsFileStep(step=1, loss=None, step_time_seconds=0.25, values={"a": 1.0}, line=1),
    TflopsPerStepEvent(total_tflops=10.5, weight_pct=None, attention_pct=3.0, line=4),
    SystemInfoEvent(key="jax", value="0.4.35", line=5),
    DevicesEvent(num_devices=8, mesh_shape=(1, 8), line=6),
    ProcessCountEvent(processes=16, exact=True, line=6),
    ProfilerMarkEvent(what="nsys capture started", line=6),
    ParamsEvent(billions=1.1, line=7),
    MemoryEstimateEvent(
        total_gb=70.0, output_gb=None, temp_gb=1.0, argument_gb=2.0, host_temp_gb=None, line=8
    ),
    MemStatsEvent(label="after init", used_gb=1.5, limit_gb=192.0, device="gpu:0", line=9),
    EvalStartEvent(step=10, line=10),
    EvalEvent(step=10, loss=2.0, dialect=EvalDialect.CURRENT, line=11, perplexity=7.4),
    CheckpointEvent(action=CheckpointAction.SAVE_DONE, line=12, step=10, seconds=1.5, dialect="orbax-new"),
    ErrorHit(
        name="oom", severity=Severity.FATAL, text="out of memory \x1b[31m\u2603", line=13, origin="builtin"
    ),
    NonFiniteAbortEvent(value="nan", line=14),
    ExitCodeEvent(code=1, line=15),
]
SAMPLE = GpuSample(gpu=0, util_pct=99.0, mem_used_mib=1.0, ecc_correctable=2)
RUN_EVENTS: list[RunEvent] = [
    *(NodeLogEvent(run="r", node=i, event=e) for i, e in enumerate(LOG_EVENTS)),
    StageEvent(stage="run:a", state=StageState.RUNNING, detail="d", at=1.0),
    NodeStatusEvent(run="r", node=1, host="h1", state=NodeState.HUNG, detail="x", at=1.5),
    LogLinesEvent(run="r", node=0, first_line=1, lines=("a", "b")),
    RunStartEvent(run="r", total_steps=10, nodes=("a", "b"), at=2.0),
    RunEndEvent(run="r", outcome=RunOutcome.FAILED, reason="why", root_cause_node=1, at=3.0),
    VerdictEvent(run="r", metric="m", status="PASS", expected=">= 1", actual=None, unit="s"),
    StallsEvent(run="r", node=0, steps=(1, 2), seconds=(3.0, 4.0), causes=("a", "b")),
    SuiteEndEvent(passed=True, results_path="/x/results.json"),
    HealthFindingEvent(
        node=0, host="h", signature="xid", severity=Severity.WARNING, line="l", kernel_time=1.0, wall_time=2.0
    ),
    NodeHealthEvent(node=0, host="h", state=HealthState.NOT_CHECKED, reason="r"),
    GpuTelemetryEvent(node=0, host="h", tool="amd-smi", samples=(SAMPLE, GpuSample(gpu=1))),
]


# values of other types than the parser makes: the same text either way (not read back the same: the
# decoder makes floats of float fields)
ODD_STEPS = [
    StepEvent(step=0, loss=3, line=2, kind=StepKind.PROFILER),  # an int loss
    StepEvent(step=True, loss=1.0, line=3),  # a bool: left to the general encoder (true)
    StepEvent(step=1, loss=1.0, line=4, extras=typing.cast(dict[str, float], {1: 2.0})),  # a non-str key
    StepEvent(step=1, loss=1.0, line=4, extras=typing.cast(dict[str, float], [])),  # not a dict
]


def test_there_is_a_sample_of_every_event_type() -> None:
    assert {type(e) for e in LOG_EVENTS} == set(typing.get_args(LogEvent))
    assert {type(e) for e in RUN_EVENTS} == set(typing.get_args(RunEvent))


def test_encode_event_writes_what_the_general_encoder_writes_for_every_event_type() -> None:
    for ev in RUN_EVENTS:
        line = encode_event(ev)
        assert line == _dump(event_to_dict(ev)) == _dump(plain_event(ev)), ev
        back = event_from_dict(json.loads(line))  # and reads back as the same event (NaN: by its text)
        assert type(back) is type(ev)
        assert encode_event(back) == line
    for step in ODD_STEPS:
        ev = NodeLogEvent(run="r", node=0, event=step)
        assert encode_event(ev) == _dump(event_to_dict(ev)), ev


def test_the_fast_path_takes_the_parsed_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    # the fast path must be the one writing parser-made steps, or the speed-up is gone unnoticed
    ev = RUN_EVENTS[0]
    assert isinstance(ev, NodeLogEvent)
    assert bus_mod._encode_step(ev, typing.cast(StepEvent, ev.event)) == _dump(event_to_dict(ev))
    native = bus_mod._native_step
    if native is None:
        if os.environ.get("CVS_TUI_ALLOW_PURE_PARSER") == "1":
            pytest.skip("cvs_tui.core._eventjson is not built; CVS_TUI_ALLOW_PURE_PARSER=1 allows that")
        pytest.fail("cvs_tui.core._eventjson was not built (`pip install -e .` builds it with a C compiler)")
    calls: list[str] = []

    def counted(head: str, e: StepEvent) -> str | None:
        calls.append(head)
        return native(head, e)

    monkeypatch.setattr(bus_mod, "_native_step", counted)
    steps = NodeLogParser().feed(
        b"I1130 12:00:00.000000 1 metric_logger.py:265] completed step: 7, seconds: 0.050, "
        b"TFLOP/s/device: 1.0, Tokens/s/device: 1000.0, total_weights: 256, loss: 3.000, lm_loss: 3.000\n"
    )
    for e in steps:
        line = encode_event(NodeLogEvent(run="r", node=3, event=e))
        assert line == _dump(event_to_dict(NodeLogEvent(run="r", node=3, event=e)))
    assert calls == ['{"run": "r", "node": 3, "event": {"step": ']


def test_the_c_encoder_leaves_what_it_does_not_write_to_the_general_one() -> None:
    """Every odd step (a bool, an int subclass, a float subclass, bytes, a non-dict extras, a non-str
    key): the C encoder answers None, and the line is still the general encoder's."""
    if bus_mod._native_step is None:
        pytest.skip(
            "cvs_tui.core._eventjson is not built (test_the_fast_path_takes_the_parsed_steps says so)"
        )

    class F(float):
        pass

    class I(int):  # noqa: E742
        pass

    odd = [
        *ODD_STEPS,
        StepEvent(step=1, loss=F(1.5), line=4),
        StepEvent(step=I(1), loss=1.0, line=4),
        StepEvent(step=1, loss=1.0, line=4, source=typing.cast(str, b"x.py:1")),
        StepEvent(step=1, loss=1.0, line=4, extras={"a": typing.cast(float, "1")}),
    ]
    declined = 0
    for step in odd:
        ev = NodeLogEvent(run="r", node=0, event=step)
        general = _dump(event_to_dict(ev))
        out = bus_mod._native_step('{"run": "r", "node": 0, "event": {"step": ', step)
        assert out is None or out == general, step
        declined += out is None
        assert encode_event(ev) == general
    assert declined == len(odd) - 1  # all but the int loss, which both write alike
    # a run or node of another type than the parser makes never takes a cached head
    for run, node in (("r", True), ("r", 1.0), (b"r", 0)):
        ev = NodeLogEvent(run=typing.cast(str, run), node=typing.cast(int, node), event=ODD_STEPS[0])
        assert encode_event(ev) == _dump(event_to_dict(ev))


_finite_or_not = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(2**70), 2**70))
_opt = st.one_of(st.none(), _finite_or_not)


@settings(max_examples=300, deadline=None)
@given(
    run=st.text(),
    node=st.integers(0, 4096),
    step=st.integers(-(2**63), 2**63),
    loss=_finite_or_not,
    line=st.integers(1, 2**40),
    kind=st.sampled_from(list(StepKind)),
    seconds=_opt,
    tf=_opt,
    tok=_opt,
    tw=_opt,
    slices=st.one_of(st.none(), st.integers(0, 64)),
    extras=st.dictionaries(st.text(), _finite_or_not, max_size=5),
    stamp=_opt,
    source=st.one_of(st.none(), st.text()),
)
def test_generated_steps_encode_the_same_either_way(
    run: str,
    node: int,
    step: int,
    loss: float,
    line: int,
    kind: StepKind,
    seconds: float | None,
    tf: float | None,
    tok: float | None,
    tw: float | None,
    slices: int | None,
    extras: dict[str, float],
    stamp: float | None,
    source: str | None,
) -> None:
    e = StepEvent(step, loss, line, kind, seconds, tf, tok, tw, slices, extras, stamp, source)
    ev = NodeLogEvent(run=run, node=node, event=e)
    assert bus_mod._encode_step(ev, e) == encode_event(ev) == _dump(event_to_dict(ev))
