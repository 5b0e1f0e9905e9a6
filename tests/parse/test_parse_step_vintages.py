"""Step lines of every MaxText vintage and harness, as posted publicly (sources in
tests/fixtures/world/), read field by field by both scanners."""

from __future__ import annotations

import math

import pytest

from cvs_tui.core.events import ErrorHit, StepEvent
from cvs_tui.core.parse import NodeLogParser, parse_log_bytes
from cvs_tui.core.parse.dialects import step_fields

ABSL = b"I0811 21:55:06.119312 138304841739136 metric_logger.py:226] "


def step(line: bytes) -> StepEvent | None:
    evs = [e for e in parse_log_bytes(line + b"\n") if isinstance(e, StepEvent)]
    assert len(evs) <= 1
    return evs[0] if evs else None


@pytest.mark.parametrize(
    ("line", "want"),
    [
        # MaxText 2023: `TFLOP/s` was per device before the suffix was added
        (b"completed step: 15107, seconds: 2.167, TFLOP/s: 36.722, loss: 2.191", (2.167, 36.722, None, None)),
        # 2024 (A3 H100 runs): no Tokens/s/device, no total_weights
        (
            b"completed step: 3, seconds: 0.771, TFLOP/s/device: 178.149, loss: 322.881",
            (0.771, 178.149, None, None),
        ),
        # mid-2024 (PR #761): Tokens/s/device, still no total_weights
        (
            b"completed step: 9, seconds: 1.341, TFLOP/s/device: 257.929, Tokens/s/device: 36653.244, "
            b"loss: 0.000",
            (1.341, 257.929, 36653.244, None),
        ),
        # the full current line with appended losses
        (
            ABSL
            + b"completed step: 2, seconds: 10.228, TFLOP/s/device: 350.869, Tokens/s/device: 19222.175, "
            b"total_weights: 1572864, loss: 12.980, lm_loss: 12.980, perplexity: 433463.719",
            (10.228, 350.869, 19222.175, 1572864.0),
        ),
        # AMD maxtext-slurm's stream wrapper inserts MFU after TFLOP/s; srun -l prefixes the task
        (
            b" 8: completed step: 71, seconds: 30.309, TFLOP/s/device: 207.973, MFU: 8.32%, "
            b"Tokens/s/device: 889.7, total_weights: 7304679, loss: 6.548",
            (30.309, 207.973, 889.7, 7304679.0),
        ),
        # MaxDiffusion-style extra rates
        (
            b"completed step: 18, seconds: 11.716, TFLOP/s/device: 348.750, Tokens/s/device: 6760.245, "
            b"Samples/s/device: 0.0854, Frames/s/device: 7.255, loss: 1.540",
            (11.716, 348.75, 6760.245, None),
        ),
        # a rampup step: the rates are left out
        (
            b"[Rampup Batch Size Phase], completed step: 4, seconds: 0.5, total_weights: 64, loss: 7.1",
            (0.5, None, None, 64.0),
        ),
    ],
)
def test_step_line_vintages(
    line: bytes, want: tuple[float, float | None, float | None, float | None]
) -> None:
    ev = step(line)
    assert ev is not None
    assert (ev.seconds, ev.tflops_per_device, ev.tokens_per_device, ev.total_weights) == want


def test_inserted_fields_are_kept_as_extras() -> None:
    ev = step(
        b"completed step: 71, seconds: 30.309, TFLOP/s/device: 207.973, MFU: 8.32%, loss: 6.548, "
        b"lm_loss: 6.5, moe_lb_loss: 0.000, lr: 3.000e-04, grad_norm: 1.234e+01, note: n/a"
    )
    assert ev is not None and ev.loss == 6.548
    assert ev.extras == {"MFU": 8.32, "lm_loss": 6.5, "moe_lb_loss": 0.0, "lr": 3e-4, "grad_norm": 12.34}


@pytest.mark.parametrize("native", [True, False], ids=["native", "pure"])
def test_a_line_without_a_loss_is_a_step_without_one(native: bool) -> None:
    """AMD maxtext-slurm's README cuts the step line before its loss: the step, its time and rates are
    read; the loss is None (no NaN)."""
    line = b" 8: completed step: 71, seconds: 30.309, TFLOP/s/device: 207.973, MFU: 8.32%\n"
    parser = NodeLogParser(native=native)
    evs = parser.feed(line) + parser.finish()
    got = [e for e in evs if isinstance(e, StepEvent)]
    assert len(got) == 1
    ev = got[0]
    assert (ev.step, ev.loss, ev.seconds, ev.tflops_per_device) == (71, None, 30.309, 207.973)
    assert ev.extras == {"MFU": 8.32}
    assert not [e for e in evs if isinstance(e, ErrorHit)]  # no NaN-loss finding


def test_a_line_with_a_bad_known_field_is_not_a_step() -> None:
    assert step(b"completed step: 5, seconds: 0.2, total_weights: x, loss: 1.0") is None
    assert step(b"completed step: 5, seconds: 0.2, live slice count: 2.5, loss: 1.0") is None
    assert step(b"completed step: 5, seconds: x, loss: 1.0") is None


def test_first_of_a_key_wins_and_nan_is_kept() -> None:
    fields = step_fields(b", loss: nan, loss: 2.0, TFLOP/s: 3, TFLOP/s/device: 4")
    assert fields is not None
    loss, tf, tok, tw, sl, extras = fields
    assert math.isnan(loss) and tf == 3.0 and (tok, tw, sl, extras) == (None, None, None, {})
