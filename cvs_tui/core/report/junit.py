"""junit.xml: one testcase per stage and per run x metric (plus each run's outcome), via ElementTree."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from cvs_tui.core.results import Results
from cvs_tui.core.textsafe import sanitize_text


def _suite(parent: ET.Element, name: str) -> ET.Element:
    return ET.SubElement(parent, "testsuite", name=name)


def _case(suite: ET.Element, classname: str, name: str, seconds: float | None = None) -> ET.Element:
    attrs = {"classname": classname, "name": name}
    if seconds is not None:
        attrs["time"] = f"{max(seconds, 0.0):.3f}"
    return ET.SubElement(suite, "testcase", attrs)


def _finish(suite: ET.Element) -> tuple[int, int, int]:
    cases = suite.findall("testcase")
    fails = sum(1 for c in cases if c.find("failure") is not None)
    skips = sum(1 for c in cases if c.find("skipped") is not None)
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(fails))
    suite.set("errors", "0")
    suite.set("skipped", str(skips))
    return len(cases), fails, skips


def _sanitize_tree(root: ET.Element) -> None:
    """XML 1.0 allows no C0 control but tab/newline/CR: node text with an ESC made the file unreadable to
    every CI parser (audit #5), so every text and attribute value is passed through sanitize_text."""
    for el in root.iter():
        if el.text:
            el.text = sanitize_text(el.text, keep_newlines=True)
        for k, v in el.attrib.items():
            el.set(k, sanitize_text(v, keep_newlines=True))


def render_junit(results: Results) -> str:
    root = ET.Element("testsuites", name=f"cvs-tui {results.config_name}")
    stages = _suite(root, "stages")
    for st in results.stages:
        case = _case(stages, "cvs_tui.stages", st.name, st.seconds)
        if st.state == "failed":
            ET.SubElement(
                case, "failure", message=st.detail or "stage failed", type="StageFailed"
            ).text = st.detail
        elif st.state in ("skipped", "pending"):
            ET.SubElement(case, "skipped", message=st.detail or st.state)
    for run in results.runs:
        suite = _suite(root, f"run {run.key}")
        cls = f"cvs_tui.run.{run.slug}"
        dur = (run.ended_at - run.started_at) if run.started_at and run.ended_at else None
        case = _case(suite, cls, "outcome", dur)
        if run.outcome != "complete":
            msg = f"{run.outcome}: {run.reason}"
            ET.SubElement(case, "failure", message=msg, type="RunFailed").text = msg
        for v in run.verdicts:
            case = _case(suite, cls, v.metric)
            if v.status == "FAIL":
                msg = v.message or f"{v.metric}: expected {v.expected}, actual {v.actual_text}"
                ET.SubElement(
                    case, "failure", message=msg, type="ThresholdFailed"
                ).text = f"expected {v.expected}, actual {v.actual_text} {v.unit}\n{msg}"
            elif v.status == "N/A":
                ET.SubElement(case, "skipped", message=v.message or "not applicable")
            else:
                ET.SubElement(case, "system-out").text = (
                    f"{v.status}: actual {v.actual_text} {v.unit}, expected {v.expected}"
                    + (f"; {v.message}" if v.message else "")
                )
    if results.node_health:
        health = _suite(root, "node health")
        for n in results.node_health:
            case = _case(health, "cvs_tui.health", f"node {n.rank} {n.host}")
            lines = "\n".join(
                f"[{f.severity}] {f.signature} run={f.run} step={f.step}: {f.line}" for f in n.findings
            )
            if n.state == "fail":
                msg = f"node {n.rank} ({n.host}): health FAIL"
                ET.SubElement(case, "failure", message=msg, type="NodeHealthFailed").text = lines
            elif n.state == "not checked":
                ET.SubElement(case, "skipped", message=f"not checked: {n.reason}")
            else:
                ET.SubElement(case, "system-out").text = f"{n.state}" + (f"\n{lines}" if lines else "")
    totals = [0, 0, 0]
    for suite in root.findall("testsuite"):
        for i, count in enumerate(_finish(suite)):
            totals[i] += count
    root.set("tests", str(totals[0]))
    root.set("failures", str(totals[1]))
    root.set("errors", "0")
    root.set("skipped", str(totals[2]))
    _sanitize_tree(root)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
