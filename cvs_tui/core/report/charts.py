"""Loss and step-time charts as inline SVG, drawn with matplotlib's SVG backend (no pyplot, no global
backend switch), so the report works offline and any results.json can be re-rendered."""

from __future__ import annotations

import html
import io
import re
from typing import TYPE_CHECKING, Any

from matplotlib import rc_context
from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from cvs_tui.core.results import Results, RunRecord

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

# colour-blind-safe palette (Okabe-Ito), node 0 first
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]
_STYLE: dict[RcKeyType, Any] = {
    "svg.fonttype": "none",
    "font.family": "sans-serif",
    "font.sans-serif": ["Inter", "Segoe UI", "Helvetica Neue", "Arial", "DejaVu Sans"],
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.edgecolor": "#9aa4b2",
    "axes.labelcolor": "#334155",
    "xtick.color": "#475569",
    "ytick.color": "#475569",
    "axes.grid": True,
    "grid.color": "#e2e8f0",
    "grid.linestyle": "-",
    "grid.linewidth": 0.8,
    "legend.frameon": False,
}
MAX_NODE_LINES = 8  # beyond this the chart shows the first nodes and says so
MAX_POINTS = 1500  # per series: longer series are thinned so the page stays light
MAX_MARKERS = 200  # per series: beyond this, markers would hide the line


def _thin(pts: list[tuple[int, float]], most: int = MAX_POINTS) -> list[tuple[int, float]]:
    """Every k-th point (plus the last) so a series has at most ``most`` points."""
    if len(pts) <= most:
        return pts
    k = -(-len(pts) // most)
    return pts[::k] + ([pts[-1]] if (len(pts) - 1) % k else [])


def _to_svg(fig: Figure, salt: str) -> str:
    buf = io.StringIO()
    with rc_context({"svg.hashsalt": salt}):
        FigureCanvasSVG(fig).print_svg(buf)
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    # scale with the page: drop the fixed size, keep the viewBox
    text = re.sub(r'<svg([^>]*?)\swidth="[^"]+"\sheight="[^"]+"', r'<svg\1 width="100%"', text, count=1)
    # the salt holds the run key, which comes from the config or results.json: escape it (audit #4)
    label = html.escape(salt, quote=True)
    return text.replace("<svg", f'<svg role="img" aria-label="{label}"', 1)


def loss_chart(run: RunRecord) -> str | None:
    """Training loss per step (first node with steps), eval points, sampled loss-curve points and
    non-finite steps; None when the run logged no loss."""
    node = next((n for n in run.nodes if n.steps), None)
    if node is None:
        return None
    pts = _thin([(p.step, p.loss) for p in node.steps if p.loss is not None])
    samples = list(run.loss_curve.points) if run.loss_curve else []
    evals = _thin([(e.step, e.loss) for e in node.evals if e.loss is not None], MAX_MARKERS)
    bad = [p.step for p in node.steps if p.loss_text is not None]  # a logged NaN/Inf, not a line without one
    if not (pts or samples or evals or bad):  # the step lines carry no loss
        return None
    with rc_context(_STYLE):
        fig = Figure(figsize=(7.2, 3.0), dpi=100, layout="constrained")
        ax = fig.add_subplot()
        if pts:
            ax.plot([s for s, _ in pts], [v for _, v in pts], color=PALETTE[0], lw=1.6, label="training loss")
        if samples:
            ax.plot(
                *zip(*_thin(samples, MAX_MARKERS), strict=True),
                "o",
                ms=4.5,
                mfc="white",
                mec=PALETTE[0],
                mew=1.4,
                label="loss-curve samples",
            )
        if evals:
            ax.plot(*zip(*evals, strict=True), "s", ms=5, color=PALETTE[1], label="eval loss")
        for i, s in enumerate(bad[:20]):
            ax.axvline(s, color="#c62828", lw=1.2, ls="--", label="NaN/Inf loss" if i == 0 else None)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.set_title(f"Loss — {run.key}", loc="left", fontsize=10, color="#0f172a")
        ax.legend(loc="upper right", fontsize=8)
        return _to_svg(fig, f"loss chart {run.key}")


def step_time_chart(run: RunRecord) -> str | None:
    """Seconds per step for each node; steady-state window steps filled, excluded steps hollow grey,
    stalls marked with a red cross."""
    nodes = [n for n in run.nodes if any(p.seconds is not None for p in n.steps)]
    if not nodes:
        return None
    window = run.window.spans()  # every window step (a long window's ``steps`` lists only some)
    with rc_context(_STYLE):
        fig = Figure(figsize=(7.2, 3.0), dpi=100, layout="constrained")
        ax = fig.add_subplot()
        lo, hi = float("inf"), 0.0
        stalled_label = False
        for idx, n in enumerate(nodes[:MAX_NODE_LINES]):
            c = PALETTE[idx % len(PALETTE)]
            pts = [(p.step, p.seconds) for p in n.steps if p.seconds is not None and p.kind == "train"]
            line = _thin(pts)
            xs = [s for s, _ in line]
            ys = [v for _, v in line]
            ax.plot(xs, ys, color=c, lw=1.1, alpha=0.85, label=f"node {n.rank}")
            inside = [(s, v) for s, v in pts if s in window] if len(pts) <= MAX_MARKERS else []
            outside = _thin([(s, v) for s, v in pts if s not in window], MAX_MARKERS * 2)
            if inside:
                ax.plot(*zip(*inside, strict=True), "o", ms=3.5, color=c)
            if outside:
                ax.plot(
                    *zip(*outside, strict=True),
                    "o",
                    ms=4.5,
                    mfc="white",
                    mec="#94a3b8",
                    mew=1.2,
                    label="excluded step" if idx == 0 else None,
                )
            stalls = [(st.step, st.seconds) for st in n.stalls if st.source == "seconds"][:MAX_MARKERS]
            if stalls:
                ax.plot(
                    *zip(*stalls, strict=True),
                    "X",
                    ms=7,
                    color="#c62828",
                    label="stall" if not stalled_label else None,
                )
                stalled_label = True
            for _, v in pts:
                if v > 0:
                    lo, hi = min(lo, v), max(hi, v)
        if hi > 0 and lo < float("inf") and hi / lo > 20:
            ax.set_yscale("log")
        extra = f" (first {MAX_NODE_LINES} of {len(nodes)} nodes)" if len(nodes) > MAX_NODE_LINES else ""
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("step")
        ax.set_ylabel("seconds / step")
        ax.set_title(f"Step time — {run.key}{extra}", loc="left", fontsize=10, color="#0f172a")
        ax.legend(loc="upper right", fontsize=8, ncols=2)
        return _to_svg(fig, f"step time chart {run.key}")


def _losses(run: RunRecord | None) -> list[tuple[int, float]]:
    node = next((n for n in run.nodes if n.steps), None) if run is not None else None
    return [(p.step, p.loss) for p in node.steps if p.loss is not None] if node is not None else []


def resume_chart(results: Results) -> str | None:
    """The checkpoint-resume evidence: the resumed run's (phase 2) loss drawn over the uninterrupted
    reference, or over phase 1 when there is no reference; None without a phase 2 loss."""
    by_kind = {r.kind: r for r in results.runs}
    p2 = _losses(by_kind.get("ckpt_phase2"))
    ref_run = by_kind.get("ckpt_reference") or by_kind.get("ckpt_phase1")
    ref = _losses(ref_run)
    if not p2 or not ref or ref_run is None:
        return None
    p1 = _losses(by_kind.get("ckpt_phase1")) if ref_run.kind == "ckpt_reference" else []
    with rc_context(_STYLE):
        fig = Figure(figsize=(7.2, 3.0), dpi=100, layout="constrained")
        ax = fig.add_subplot()
        ax.plot(*zip(*_thin(ref), strict=True), color="#94a3b8", lw=3.2, label=f"{ref_run.key} (reference)")
        if p1:
            ax.plot(*zip(*_thin(p1), strict=True), color=PALETTE[0], lw=1.4, label="CKPT-1 (before the save)")
        ax.plot(
            *zip(*_thin(p2, MAX_MARKERS), strict=True),
            "o-",
            ms=4,
            lw=1.2,
            color=PALETTE[1],
            label="CKPT-2 (resumed)",
        )
        ax.axvline(p2[0][0] - 0.5, color="#475569", lw=1, ls=":", label="resume")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        title = "Checkpoint resume — resumed loss over the reference"
        ax.set_title(title, loc="left", fontsize=10, color="#0f172a")
        ax.legend(loc="upper right", fontsize=8)
        return _to_svg(fig, "checkpoint resume chart")
