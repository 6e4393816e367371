"""`check --mode perf` (pyggml.testing.engine.perf): each case's graph timed as test-backend-ops times its own,
its rate and the fraction of the backend's measured limits, as a table, JSON and JUnit."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

from pyggml.context import Context
from pyggml.testing.engine import perf


def test_flops_and_bytes_are_counted_as_test_backend_ops_counts_them():
    ctx = Context()
    w, x = ctx.tensor("f32", (24, 64)), ctx.tensor("f32", (5, 64))
    mm = ctx.mul_mat(w, x)  # [24, 5] from k = 64
    assert perf.node_flops(mm.ptr) == 2 * 24 * 5 * 64
    assert perf.node_bytes(mm.ptr) == 4 * (24 * 5 + 24 * 64 + 5 * 64)
    assert perf.node_flops(ctx.add(x, x).ptr) == 0


def test_perf_mode_reports_rates_and_limits(tmp_path):
    xml = tmp_path / "perf.xml"
    cmd = [sys.executable, "-m", "pyggml", "check", "--mode", "perf", "--only", "^(add/f32|mul_mat/f32)$"]
    cmd += ["--backend", "cpu", "--perf-time", "0.05", "-q", "--json", "-", "--junit", str(xml)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    lim = report["limits"]["cpu"]
    assert lim["gbps"] > 0 and lim["gflops_f32"] > 0 and lim["gflops_f16"] > 0
    by = {r["case"]: r for r in report["records"]}
    add, mm = by["add/f32"], by["mul_mat/f32"]
    assert add["status"] == mm["status"] == "pass"
    assert add["gbps"] > 0 and add["gflops"] is None and 0 < add["of_peak"]
    assert mm["gflops"] > 0 and mm["gbps"] is None and mm["flops"] > 0
    # runs: the op repeated in one graph (up to 8192 nodes), computed until the time is spent
    assert add["runs"] >= add["nodes_per_compute"] > 1 and add["us_per_run"] > 0
    assert "add/f32" in res.stderr and "limits measured now" in res.stderr  # the table, on stderr with --json -
    cases = {c.get("name"): c for c in ET.parse(xml).getroot().iter("testcase")}
    assert "us/run" in cases["add/f32"].findtext("system-out", "")
