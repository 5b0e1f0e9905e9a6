"""Fuzzing the scrubber: random text with private values embedded (addresses, host names, JobSet pods,
buckets, e-mails, tokens, key blocks, Slurm ids, home paths, caller terms). The scrubbed output holds none
of them, re-checks clean, is stable under a second scrub and is valid UTF-8; nothing raises. Random bytes
as files never make `scrub`/`check-private` raise anything but a one-line UserError.

The fast subset runs in every run. The nightly run (>= 20 000 examples) is marked `fuzz` and runs only
when selected: `pytest -m fuzz tests/privacy/test_privacy_fuzz.py` (CVS_FUZZ_EXAMPLES overrides the count)."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cvs_tui.core.errors import UserError
from cvs_tui.core.privacy import Scrubber, build_context, check_files, scrub_files

FAST = 300
NIGHTLY = int(os.environ.get("CVS_FUZZ_EXAMPLES", "20000"))

_label = st.from_regex(r"[a-z][a-z0-9]{1,6}(-[a-z0-9]{1,5}){0,2}", fullmatch=True)
# first octet 10..109: never 127 (loopback addresses stay readable in logs by design)
_ipv4 = st.tuples(*[st.integers(1, 254)] * 4).map(lambda t: f"{10 + t[0] % 100}.{t[1]}.{t[2]}.{t[3]}")
_fqdn = st.builds(
    lambda a, b, tld: f"{a}.{b}.{tld}",
    _label,
    _label,
    st.sampled_from(["com", "net", "internal", "local", "corp"]),
)
_svc = st.builds(lambda a, ns: f"{a}-0.{a}.{ns}.svc.cluster.local", _label, _label)
_jobset = st.builds(lambda js, i: f"{js}-x9-slice-job-0-{i}.{js}-x9:8482", _label, st.integers(0, 63))
_bucket = st.builds(lambda s, b: f"{s}://{b}-data", st.sampled_from(["gs", "s3", "az"]), _label)
_email = st.builds(lambda u, d: f"{u}@{d}.example.com", _label, _label)
_token = st.from_regex(r"hf_[A-Za-z0-9]{34}", fullmatch=True)
_key_body = st.from_regex(r"[A-Za-z0-9+/]{40,64}", fullmatch=True)
_key = _key_body.map(lambda b: f"-----BEGIN OPENSSH PRIVATE KEY-----\n{b}\n-----END OPENSSH PRIVATE KEY-----")
_slurm = st.integers(100000, 99999999).map(lambda n: f"SLURM_JOB_ID={n}")
_home = st.from_regex(r"[a-z]{3,8}[0-9]{0,2}", fullmatch=True).map(lambda u: f"/home/{u}")
TERM = "ZephyrLab"  # a caller term, embedded in random case

# (strategy, what must be gone from the output: a function of the embedded value)
_VALUES = [
    (_ipv4, lambda v: v),
    (_fqdn, lambda v: v),
    (_svc, lambda v: v.split(".")[0]),
    (_jobset, lambda v: v.split("-slice-job-")[0]),
    (_bucket, lambda v: v.split("://")[1]),
    (_email, lambda v: v),
    (_token, lambda v: v),
    (_key, lambda v: v.split("\n")[1]),
    (_slurm, lambda v: v.split("=")[1]),
    (_home, lambda v: v),
    (st.sampled_from([TERM, TERM.lower(), TERM.upper()]), lambda v: v),
]
_filler = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8", exclude_characters="\r"),
        st.sampled_from(list("abcxyz019.-_:/ =")),
    ),
    max_size=30,
)
_sep = st.sampled_from([" ", "\n", "\t", ", ", " (", ") ", "; ", " '", "' ", ' "', '" ', " = "])


@st.composite
def documents(draw: st.DrawFn) -> tuple[str, list[str]]:
    parts: list[str] = []
    secrets: list[str] = []
    for _ in range(draw(st.integers(1, 5))):
        i = draw(st.integers(0, len(_VALUES) - 1))
        strategy, gone = _VALUES[i]
        value = draw(strategy)
        parts += [draw(_filler), draw(_sep), value, draw(_sep)]
        secrets.append(gone(value))
    parts.append(draw(_filler))
    return "".join(parts), secrets


def _check(doc: tuple[str, list[str]]) -> None:
    text, secrets = doc
    sc = Scrubber(build_context(deny_terms=[TERM], environ={}))
    out = sc.scrub_text(text)
    for s in secrets:  # as a token: random filler may hold `099999999` around a job id `99999999`
        assert not re.search(rf"(?<![A-Za-z0-9]){re.escape(s)}(?![A-Za-z0-9])", out, re.I), (s, text, out)
    out.encode("utf-8")
    assert sc.check_text(out) == [], out
    assert sc.scrub_text(out) == out


@settings(max_examples=FAST, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_scrubbed_text_keeps_no_embedded_value(doc: tuple[str, list[str]]) -> None:
    _check(doc)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400), st.sampled_from([b"", b"\xff\xfe", b"\xfe\xff", b"\xef\xbb\xbf"]))
def test_random_bytes_never_crash_scrub_or_check(data: bytes, bom: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in" / "x.log"
        src.parent.mkdir()
        src.write_bytes(bom + data)
        try:
            check_files([src])
            report = scrub_files([src], build_context(environ={}), out_dir=Path(tmp) / "out")
        except UserError:
            return
        if report.clean and str(src) in report.files:  # written as text: it decodes and re-checks clean
            assert check_files([Path(report.files[str(src)])]) == []
        else:  # not text: left out of the copy, never written
            assert report.left_out or not report.clean


@pytest.mark.fuzz
def test_nightly_scrubber_fuzz(request: pytest.FixtureRequest) -> None:
    if "fuzz" not in (request.config.option.markexpr or ""):
        pytest.skip("nightly: select it with -m fuzz")
    run = settings(max_examples=NIGHTLY, deadline=None, suppress_health_check=list(HealthCheck))(
        given(documents())(_check)
    )
    run()
