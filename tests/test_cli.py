"""The command line refuses bad arguments with one clear line, never a traceback."""

from __future__ import annotations

import subprocess
import sys


def run(*args):
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=600)


def test_check_only_with_a_pattern_that_is_not_a_regex():
    res = run("pyggml", "check", "--only", "[", "--backend", "cpu", "-q")
    assert "Traceback" not in res.stderr
    assert res.returncode == 2 and "no case matches '['" in res.stderr


def test_check_json_path_unwritable_is_found_before_the_run(tmp_path):
    res = run("pyggml", "check", "--backend", "cpu", "--json", str(tmp_path / "no" / "such" / "dir.json"), "-q")
    assert "Traceback" not in res.stderr
    assert res.returncode == 2 and "cannot write the JSON report" in res.stderr
    assert "pass:" not in res.stdout  # refused before running


def test_meta_fuzz_refuses_a_negative_seed():
    res = run("pyggml.testing.meta_fuzz", "--seed", "-1")
    assert "Traceback" not in res.stderr and res.returncode == 2 and "must be >= 0" in res.stderr


def test_meta_fuzz_counts_only_ggml_refusals_as_unsplittable():
    from pyggml.testing import meta_fuzz
    res = run("pyggml.testing.meta_fuzz", "--trials", "6", "--seed", "3")
    assert "Traceback" not in res.stderr
    # a trial whose child fails for any other reason is a failure
    record = meta_fuzz.run_in_child({"seed": 0, "K": 4, "M": 4, "P": 4, "N": 4, "steps": [{"op": "nonsense"}]},
                                    "cpu,cpu")
    assert record["status"] == "fail"
