"""The fuzzer itself: a run ends with a parsable summary, a death leaves a standalone reproducer,
calls are deterministic from the seed; and what CI holds the Python layer to: a few thousand
calls with no death, no wrong result and no exception outside the contract."""

from __future__ import annotations

import json
import re
import subprocess
import sys

SUMMARY = re.compile(r"^summary: (.*)$", re.M)
KEYS = ("calls", "built", "computed", "checked", "raised", "off-contract", "wrong", "deaths")


def fuzz(*args, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "pyggml", "fuzz", *args], capture_output=True, text=True, timeout=timeout
    )


def parse_summary(stdout: str) -> dict:
    m = SUMMARY.search(stdout)
    assert m, stdout[-2000:]
    return {k: float(v) if "." in v else int(v) for k, v in re.findall(r"([\w-]+): (\S+)", m.group(1))}


def test_a_run_ends_with_a_parsable_summary(tmp_path):
    out = tmp_path / "fuzz.json"
    res = fuzz("--calls", "300", "--seed", "1", "--json", str(out))
    assert "Traceback" not in res.stderr, res.stderr[-2000:]
    summary = parse_summary(res.stdout)
    assert set(KEYS) <= set(summary)
    assert summary["calls"] == 300
    assert summary["built"] > 0 and summary["computed"] > 0 and summary["checked"] > 0
    assert summary["internal"] == 0  # the fuzzer's own programs are sound
    bad = summary["deaths"] + summary["wrong"] + summary["off-contract"]
    assert res.returncode == (1 if bad else 0)
    data = json.loads(out.read_text())
    assert {k: data["summary"][k] for k in KEYS} == {k: summary[k] for k in KEYS}
    assert len(data["findings"]) == bad


def test_a_death_is_printed_as_a_standalone_reproducer(tmp_path):
    res = fuzz("--calls", "3", "--seed", "1", "--no-meta", "--selftest-death", "1")
    assert res.returncode == 1
    assert parse_summary(res.stdout)["deaths"] >= 1
    block = res.stdout[res.stdout.index("=== DEATH") :]
    assert "# calls: 1" in block
    script = block.split("\n", 3)[3].split("\n\n")[0]
    assert script.startswith("import numpy as np") and script.rstrip().endswith("os.abort()")
    # the reproducer alone kills a fresh interpreter the same way
    path = tmp_path / "repro.py"
    path.write_text(script + "\n")
    alone = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120)
    assert alone.returncode < 0


def test_calls_are_deterministic_from_the_seed():
    from pyggml.testing.engine import child
    from pyggml.testing.fuzzers.fuzz import run_calls

    runs = [child.run(run_calls, (7, 0, 25, False, None, []), timeout=300) for _ in range(2)]
    assert [r.status for r in runs] == ["returned", "returned"], runs[0].stderr[-2000:]
    code = [[ln for ln in r.stdout.splitlines() if ln.startswith(("@call", "@code"))] for r in runs]
    assert code[0] and code[0] == code[1]


def test_bad_arguments_are_refused_by_argparse():
    for args in (["--calls", "0"], ["--seed", "-1"], ["--batch", "x"]):
        res = fuzz(*args)
        assert res.returncode == 2 and "Traceback" not in res.stderr and "error:" in res.stderr


def test_an_unwritable_json_path_is_refused_before_the_run(tmp_path):
    res = fuzz("--calls", "5", "--json", str(tmp_path / "no" / "such" / "f.json"))
    assert res.returncode == 2 and "cannot write --json" in res.stderr and "summary:" not in res.stdout


def test_a_few_thousand_calls_raise_or_are_right(tmp_path):
    """What CI holds the Python layer to: no death, no wrong result, no exception off the contract."""
    res = fuzz("--calls", "3000", "--seed", "11", timeout=900)
    summary = parse_summary(res.stdout)
    assert summary["calls"] == 3000 and summary["computed"] > 500
    assert (summary["deaths"], summary["wrong"], summary["off-contract"]) == (0, 0, 0), res.stdout[-6000:]
    assert res.returncode == 0


def test_an_allocators_internal_bookkeeping_is_not_its_api(tmp_path):
    """Lender's read check took a C tensor and was public: the fuzzer's `sched.check_current(1, -inf)` (seed 0)
    raised AttributeError, an exception off every contract. The fuzzer's internal errors over those calls: none."""
    res = fuzz("--calls", "800", "--seed", "0", timeout=900)
    summary = parse_summary(res.stdout)
    assert summary["internal"] == 0, res.stdout[-6000:]
    from pyggml.backend import Scheduler

    assert not any(hasattr(Scheduler, m) for m in ("check_current", "computing", "compute_failed"))
