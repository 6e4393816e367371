"""`check --junit FILE`: JUnit XML with a testsuite per backend and a testcase per case."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pyggml.__main__ as cli
from pyggml.runner import Runner
from pyggml.testing.check import available_backends
from pyggml.testing.engine import cases
from pyggml.testing.engine.cases import Case, Mismatch
from pyggml.testing.engine.junit import junit_tree, write_junit
from pyggml.testing.engine.verdict import Record, run_case

# the attributes Jenkins' JUnit schema (junit-10.xsd, which GitLab and GitHub reporters read too) allows
SUITES_ATTRS = {"name", "time", "tests", "failures", "disabled", "errors"}
SUITE_ATTRS = {
    "name",
    "tests",
    "failures",
    "errors",
    "time",
    "disabled",
    "skipped",
    "timestamp",
    "hostname",
    "id",
    "package",
    "file",
    "log",
    "url",
    "version",
}
CASE_ATTRS = {"name", "assertions", "time", "classname", "status"}


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "pyggml", *args], capture_output=True, text=True, timeout=600)


def _check_schema(root: ET.Element) -> None:
    """The element and attribute structure CI readers expect; totals add up over the suites."""
    assert set(root.attrib) <= SUITES_ATTRS | {"skipped"}  # skipped on <testsuites>: pytest writes it too
    suites = root.findall("testsuite")
    assert [c.tag for c in root] == ["testsuite"] * len(suites)
    for key in ("tests", "failures", "errors", "skipped"):
        assert int(root.attrib[key]) == sum(int(s.attrib[key]) for s in suites)
    for suite in suites:
        assert set(suite.attrib) <= SUITE_ATTRS and {"name", "tests", "timestamp", "hostname"} <= set(suite.attrib)
        assert float(suite.attrib["time"]) >= 0 and len(suite.attrib["timestamp"]) == 19  # YYYY-MM-DDThh:mm:ss
        for case in suite:
            assert case.tag == "testcase" and set(case.attrib) <= CASE_ATTRS and case.get("name")
            assert len(case) <= 1 and all(c.tag in ("failure", "error", "skipped") for c in case)
            assert all(set(c.attrib) <= {"message", "type"} for c in case)


def test_check_writes_junit_that_matches_its_records(tmp_path):
    backends = ["cpu"] + [b for b in available_backends() if b == "vulkan0"]
    junit, records = tmp_path / "check.xml", tmp_path / "check.json"
    args = ["check", "--only", "^(add/f32|pool_2d_back)", "-q", "--junit", str(junit), "--json", str(records)]
    res = _cli(*args, *[a for b in backends for a in ("--backend", b)])
    assert res.returncode == 0, res.stdout + res.stderr
    recs = json.loads(records.read_text())
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites" and int(root.get("tests")) == len(recs) > len(backends)
    suites = root.findall("testsuite")
    _check_schema(root)
    assert [s.get("name") for s in suites] == [f"pyggml.check.{b}" for b in backends]
    for suite, backend in zip(suites, backends):
        mine = [r for r in recs if r["backend"] == backend]
        cases = suite.findall("testcase")
        assert [c.get("name") for c in cases] == [r["case"] for r in mine]
        assert int(suite.get("tests")) == len(cases)
        skipped = [c for c in cases if c.find("skipped") is not None]
        assert int(suite.get("skipped")) == len(skipped) == sum(r["status"] in ("unsupported", "skipped") for r in mine)
        assert int(suite.get("failures")) == int(suite.get("errors")) == 0
        assert all(c.get("classname") in (f"pyggml.add.{backend}", f"pyggml.pool_2d_back.{backend}") for c in cases)
        assert all(float(c.get("time")) >= 0 for c in cases)
    if "vulkan0" in backends:  # lavapipe does not compute POOL_2D_BACK: skipped, with the reason
        vk = [c for c in suites[1].findall("testcase") if c.get("name").startswith("pool_2d_back")]
        assert vk and all("not supported" in c.find("skipped").get("message") for c in vk)


def test_fail_and_error_carry_their_figures_and_xml_safe_messages(tmp_path):
    class Broken(Case):
        name = "broken/f32"

        def execute(self, runner):
            raise Mismatch("rollback != rerun on cpu: 3 element(s) differ")

        def expected(self):
            return []

    failed, _ = run_case(Broken(), Runner("cpu"), "cpu")
    records = [
        failed,
        Record(
            "add/f32",
            "cpu",
            "fail",
            error=3.2e-4,
            bound=1e-6,
            message="largest error 0.5 at (1, 2)",
            cross={"vulkan0": 2.0e-4},
        ),
        Record("mul_mat/q8_0", "cpu", "error", message="OpError: mul_mat: ggml said \x01\x1b[31mno\x00"),
        Record("conv/f16", "vulkan0", "unsupported", message="not supported: CONV_2D"),
        Record("rope/f32", "vulkan0", "known", message="known: docs/findings.md 7 (NMSE 1e-3 > 1e-7)"),
        Record("add/f32", "vulkan0", "pass", error=0.0, bound=1e-6, seconds=0.25),
    ]
    path = tmp_path / "r.xml"
    write_junit(records, str(path))
    root = ET.parse(path).getroot()  # parses: the control characters were replaced
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) == ("6", "2", "1", "2")
    cpu, vk = root.findall("testsuite")
    broken, fail, error = cpu.findall("testcase")
    assert "rollback != rerun" in broken.find("failure").get("message")
    text = fail.find("failure").text
    assert "NMSE against the oracle 0.00032 (bound 1e-06)" in text and "NMSE against vulkan0: 0.0002" in text
    assert error.find("error").get("type") == "OpError" and "\x01" not in error.find("error").text
    assert "\ufffd" in error.find("error").text
    conv, rope, ok = vk.findall("testcase")
    assert conv.find("skipped").get("message") == "not supported: CONV_2D"
    assert rope.find("skipped").get("message") == "known: docs/findings.md 7 (NMSE 1e-3 > 1e-7)"
    assert list(ok) == [] and ok.get("time") == "0.250000"
    assert junit_tree([]).getroot().get("tests") == "0"


def test_an_unwritable_junit_path_fails_before_the_run(tmp_path):
    res = _cli("check", "--only", "add/f32", "--backend", "cpu", "-q", "--junit", str(tmp_path / "no" / "x.xml"))
    assert res.returncode == 2 and "cannot write the JUnit report" in res.stderr


def test_grad_mode_writes_junit(tmp_path):
    path = tmp_path / "grad.xml"
    res = _cli("check", "--mode", "grad", "--backend", "cpu", "--only", "^mul_mat", "-q", "--junit", str(path))
    assert res.returncode == 0, res.stdout + res.stderr
    root = ET.parse(path).getroot()
    assert root.get("name") == "pyggml.check.grad" and int(root.get("tests")) >= 1 and root.get("failures") == "0"


class WrongOracle(Case):
    """add/f32 computed by ggml, against an oracle that is off by 1% (a bad oracle, not a bad kernel)."""

    name = "junit_wrong_oracle/f32"

    def __init__(self, inner: Case):
        self.inner = inner

    def execute(self, runner):
        return self.inner.execute(runner)

    def expected(self):
        return [e * 1.01 for e in self.inner.expected()]


def test_an_oracle_mismatch_is_a_failure_with_its_figures(tmp_path, monkeypatch):
    cases.select("^add/f32$")  # loads the registry
    monkeypatch.setitem(cases.REGISTRY, WrongOracle.name, WrongOracle(cases.REGISTRY["add/f32"]))
    path, records = tmp_path / "r.xml", tmp_path / "r.json"
    rc = cli.main(
        [
            "check",
            "--backend",
            "cpu",
            "--only",
            "^(junit_wrong_oracle|add/f32$)",
            "-q",
            "--junit",
            str(path),
            "--json",
            str(records),
            "-j",
            "0",  # the case is registered in this process only
        ]
    )
    assert rc == 1
    root = ET.parse(path).getroot()
    _check_schema(root)
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("2", "1", "0")
    ok, wrong = root.find("testsuite").findall("testcase")
    assert ok.get("name") == "add/f32" and list(ok) == []
    assert wrong.get("classname") == "pyggml.junit_wrong_oracle.cpu"
    failure = wrong.find("failure")
    [rec] = [r for r in json.loads(records.read_text()) if r["status"] == "fail"]
    assert failure.get("message") == rec["message"] and failure.get("message").startswith("NMSE")
    assert f"NMSE against the oracle {rec['error']:.3g} (bound 1e-07)" in failure.text


def test_grad_figures_are_named_as_such():
    rec = Record("mul/same_shape", "cpu", "fail", error=0.25, bound=1e-3)  # grad's failures carry no message
    tree = junit_tree([rec], "pyggml.check.grad", "relative gradient error against finite differences")
    failure = tree.getroot().find("testsuite/testcase/failure")
    expected = "relative gradient error against finite differences 0.25 (bound 0.001)"
    assert failure.get("message") == failure.text == expected
