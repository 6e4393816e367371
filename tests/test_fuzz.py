"""The shipped fuzzer: random calls through the Python layer raise or are right, none dies."""

from __future__ import annotations

import json
import subprocess
import sys

from pyggml import fuzz


def test_a_few_thousand_calls_without_a_death(tmp_path):
    out = tmp_path / "fuzz.json"
    res = subprocess.run([sys.executable, "-m", "pyggml.fuzz", "--calls", "2000", "--seed", "7", "--json", str(out)],
                         capture_output=True, text=True, timeout=900)
    summary = json.loads(out.read_text())
    c = summary["counts"]
    assert c["calls"] == 2000
    assert c.get("death", 0) == 0, res.stdout[-4000:]
    assert c.get("wrong", 0) == 0 and c.get("off-contract", 0) == 0, res.stdout[-4000:]
    assert c.get("computed", 0) > 100 and c.get("raised", 0) > 100  # it builds, computes and refuses
    assert res.returncode == 0


def test_calls_are_reproducible_from_seed_and_index():
    a, b = fuzz.run_one(3, 41, meta=False), fuzz.run_one(3, 41, meta=False)
    assert a == b
    assert a["reproducer"].startswith("import numpy as np")


def test_a_death_is_found_and_its_reproducer_printed(monkeypatch):
    # a child that dies at its third call: the parent counts one death and names the call
    real_spawn = fuzz._spawn

    def dying_spawn(seed, start, count, meta):
        if start == 0:
            records, _ = real_spawn(seed, 0, 2, meta)
            return records, -6
        return real_spawn(seed, start, count, meta)
    monkeypatch.setattr(fuzz, "_spawn", dying_spawn)
    summary = fuzz.fuzz(calls=5, seed=1, batch=5, meta=False, progress=None)
    assert summary["counts"]["death"] == 1
    [death] = [f for f in summary["findings"] if f["outcome"] == "death"]
    assert death["index"] == 2
    assert "ops." in death["reproducer"] and "import pyggml as gg" in death["reproducer"]


def test_bad_arguments_are_refused():
    res = subprocess.run([sys.executable, "-m", "pyggml.fuzz", "--seed", "-1"], capture_output=True, text=True)
    assert res.returncode == 2 and "must be >= 0" in res.stderr
