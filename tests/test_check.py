"""The differential suite's own machinery: the comparison, selection, listing, progress, coverage."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np

from pyggml.testing.check import Progress
from pyggml.testing.coverage import op_kinds, wrappers_of
from pyggml.testing.engine import cases, verdict


def test_one_wrong_element_fails_although_nmse_passes():
    expected = np.linspace(-1, 1, 100_000).astype(np.float32)
    actual = expected.copy()
    actual[1234] += 0.05  # NMSE ~ 7e-9, under the F32 bound
    assert verdict.nmse(actual, expected) < cases.NMSE_F32
    v = verdict.compare(actual, expected, cases.NMSE_F32, 30 * cases.NMSE_F32**0.5)
    assert not v.ok and "largest error" in v.message and "(1234,)" in v.message


def test_float32_figures_in_c_are_the_float64_ones():
    """compare() reduces float32 values in one C pass (pyggml_compare_f32); its NMSE and largest error are
    those of the float64 path, for strided, empty and scaled inputs alike."""
    rng = np.random.default_rng(5)
    e = (rng.normal(size=(300, 257)) * 3).astype(np.float32)
    a = (e + rng.normal(scale=1e-3, size=e.shape)).astype(np.float32)
    for x, y in ((a, e), (a.T, e.T), (a[::3], e[::3]), (a[:0], e[:0]), (a * 0, e * 0)):
        c = verdict.compare(x, y, 1.0, 1.0)
        ref = verdict.compare(x.astype(np.float64), y.astype(np.float64), 1.0, 1.0)
        assert c.ok == ref.ok and np.isclose(c.nmse, ref.nmse, rtol=1e-9, atol=0), (c, ref)
        assert c.max_error == ref.max_error
    v = verdict.compare(a, e, 1e-9, 1.0)
    assert not v.ok and v.message.startswith("NMSE")


def test_nan_and_inf_positions_must_match():
    e = np.array([1.0, np.nan, np.inf, -2.0], np.float32)
    assert verdict.compare(e.copy(), e, 1e-7, 1e-3).ok
    for bad in ([1.0, 0.0, np.inf, -2.0], [1.0, np.nan, -np.inf, -2.0], [np.nan, np.nan, np.inf, -2.0]):
        v = verdict.compare(np.array(bad, np.float32), e, 1e-7, 1e-3)
        assert not v.ok and "position" in v.message


def test_exact_cases_compare_bits():
    e = np.arange(6, dtype=np.int32)
    assert verdict.compare(e.copy(), e, 0.0, 0.0).ok
    a = e.copy()
    a[3] += 1
    assert not verdict.compare(a, e, 0.0, 0.0).ok


def test_inputs_are_reproducible_from_the_name():
    cases._load_all()
    c = cases.REGISTRY["add/f32"]
    first = {k: v.copy() for k, v in c.values().items()}
    c._values = None
    again = c.values()
    assert all(np.array_equal(first[k], again[k]) for k in first)


def test_select_by_op_and_type():
    add = cases.select(None, ["add"])
    assert add and all(c.op == "add" for c in add)
    f16 = cases.select(None, None, ["f16"])
    assert f16 and all("f16" in c.types for c in f16)
    assert not cases.select("^add/", None, ["q4_0"])


def test_progress_bar_on_a_terminal_and_lines_elsewhere():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    bar = Progress(tty, 4)
    for status in ("pass", "fail", "pass", "pass"):
        bar.step("x", status)
    bar.close()
    assert "\r[" in tty.getvalue() and "4/4" in tty.getvalue() and "1 failing" in tty.getvalue()
    log = io.StringIO()
    bar = Progress(log, 500, every=250)
    for _ in range(500):
        bar.step("x", "pass")
    assert log.getvalue().splitlines() == ["[250/500] 0 failing", "[500/500] 0 failing"]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "pyggml", *args], capture_output=True, text=True, timeout=600)


def test_check_list_and_filters():
    res = _cli("check", "--list", "--op", "mul_mat", "--type", "q8_0")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert lines[-1].endswith("cases") and int(lines[-1].split()[0]) == len(lines) - 1 >= 1
    assert all(line.split()[1] == "mul_mat" for line in lines[:-1])
    assert _cli("check", "--list", "--op", "no_such_op").returncode == 2


def test_coverage_counts_kinds_from_ggml_tables():
    kinds = op_kinds()
    assert len(kinds) == len(set(kinds)) and {"ADD", "SWIGLU", "GELU", "FLASH_ATTN_EXT"} <= set(kinds)
    assert not {"NONE", "UNARY", "GLU", "CUSTOM"} & set(kinds)
    w = wrappers_of(kinds)
    assert "rope_ext" in w["ROPE"] and "view_2d" in w["VIEW"] and "set_rows" in w["SET_ROWS"]
    assert "set_rows" not in w["SET"]


def test_coverage_cli_json():
    res = _cli("coverage", "--backend", "cpu", "--json")
    assert res.returncode == 0, res.stderr
    # it says up front that it runs the suite, how much of it and where, then shows progress
    n = len(cases.select())
    assert f"running the whole suite to see which op kinds each case computes: {n} cases on cpu" in res.stderr
    assert "coverage --from FILE" in res.stderr and f"[{n}/{n}]" in res.stderr
    report = json.loads(res.stdout)
    t = report["totals"]
    assert t["kinds"] == len(report["rows"]) == len(op_kinds())
    assert t["covered"] == sum(1 for r in report["rows"] if r["wrappers"] and r["cases"])
    assert t["cpu"]["fail"] == 0 and t["cpu"]["error"] == 0
    add = next(r for r in report["rows"] if r["kind"] == "ADD")
    assert add["cases"] >= 1 and add["backends"]["cpu"].get("pass", 0) >= 1


def test_check_grad_mode_cli():
    res = _cli("check", "--mode", "grad", "--backend", "cpu", "--only", "^mul_mat", "-q")
    assert res.returncode == 0, res.stdout + res.stderr
    summary = res.stdout.strip().splitlines()[-1]
    assert summary.startswith("pass: ") and "fail" not in summary and "error" not in summary.split("(")[0], summary


def test_a_property_mismatch_is_a_failure_not_an_error():
    """A case that checks a property on the backend itself (delta_net: rollback == rerun) and finds it
    broken is a `fail` with its message, like a disagreement with the oracle."""
    from pyggml.runner import Runner
    from pyggml.testing.check import run_case
    from pyggml.testing.engine.cases import Case, Mismatch

    class Broken(Case):
        name = "broken/f32"

        def execute(self, runner):
            raise Mismatch("rollback != rerun of the accepted tokens on cpu: decode: 3 element(s) differ")

        def expected(self):
            return []

    rec, out = run_case(Broken(), Runner("cpu"), "cpu")
    assert rec.status == "fail" and "rollback != rerun" in rec.message and out is None


def test_delta_net_cases_are_listed():
    out = subprocess.run(
        [sys.executable, "-m", "pyggml", "check", "--list", "--op", "delta_net"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "delta_net/f16/K8/n10/kv2x2" in out and "delta_net/f32/K4/n6/qwen35" in out
    assert out.strip().endswith("74 cases")  # 64 in the grouped layout, 10 in llama.cpp's two


def test_closest_names_for_typos():
    from pyggml.testing.check import OP_ALIASES, closest

    ops = ["mul", "mul_mat", "mul_mat_id", "soft_max", "soft_max_ext", "rms_norm", "norm"]
    assert closest("matmul", ops, OP_ALIASES)[0] == "mul_mat"
    assert closest("softmax", ops)[:2] == ["soft_max", "soft_max_ext"]
    assert closest("rmsnorm", ops)[0] == "rms_norm"
    assert closest("q4", ["q4_0", "q4_1", "q4_k", "q8_0", "iq4_nl"])[:3] == ["q4_0", "q4_1", "q4_k"]


def test_listing_does_not_probe_types_it_leaves_out():
    """`check --list` took seconds in ggml_quantize_init: matmul's cases probed IQ2_S (whose grid tables take
    about 2 s to build) only to leave it out."""
    code = (
        "import pyggml.types as T\n"
        "seen = []\n"
        "orig = T._quantize_chunk_writes\n"
        "T._quantize_chunk_writes = lambda t: seen.append(t) or orig(t)\n"
        "from pyggml.testing.engine import cases\n"
        "assert len(cases.select()) > 1000\n"
        "assert T.Type.IQ2_S not in seen, seen\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr


def test_iq_inputs_are_drawn_as_blocks_never_quantized(monkeypatch):
    """ggml builds IQ2_S/IQ3_S/IQ3_XXS quantization tables for seconds at a process's first quantization:
    those inputs are random codes under drawn scales, reproducible, with values of magnitude about 1."""
    from pyggml import types

    def no_quantizing(t, values):
        assert types.as_type(t) not in cases.DRAWN_AS_BLOCKS, "an IQ input went through the quantizer"
        return encode(t, values)

    encode = types.encode
    monkeypatch.setattr(types, "encode", no_quantizing)
    chosen = cases.select(None, None, ["iq2_s", "iq3_s", "iq3_xxs"])
    assert len(chosen) >= 9
    for c in chosen:
        c._values = None
        vals = c.values()
        for k, spec in c.inputs.items():
            if types.as_type(spec.type) in cases.DRAWN_AS_BLOCKS:
                assert 0.3 < np.abs(vals[k]).max() <= 1.0 + 1e-3
        again = c.raw_values()
        c._values = None
        assert all(np.array_equal(again[k], c.raw_values()[k]) for k in again)
