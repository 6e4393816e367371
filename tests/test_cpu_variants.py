"""ggml's CPU variants (pyggml.cpu_variants): built with the module, scored by ggml on this machine, each a
backend that computes with its own kernels (`cpu:x64`, `cpu:zen4`, `cpu:best`, `check --backend cpu:all`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pyggml as gg
from pyggml import cpu_features, cpu_variants

_needs_variants = pytest.mark.skipif(
    not cpu_variants.runnable(), reason=f"this build has no CPU variant this machine runs: {cpu_variants.BUILD_HINT}"
)


def run(*args):
    return subprocess.run([sys.executable, "-m", "pyggml", *args], capture_output=True, text=True, timeout=600)


@_needs_variants
def test_an_editable_build_has_ggmls_baseline_and_the_best_variant_for_this_machine():
    built = cpu_variants.built()
    best = cpu_variants.best()
    assert "x64" in built and best is not None
    # the best ggml scores here is one whose features this machine has, all of them
    assert best.lacking() in ([], None) and all(v.score <= best.score for v in cpu_variants.runnable())


def features_of(name: str) -> dict[str, str]:
    """What the variant's own registry says it was built with (ggml_backend_get_features)."""
    from pyggml._native import cstr, ffi, lib

    reg = lib.ggml_backend_dev_backend_reg(cpu_variants.device_ptr("cpu:" + name))
    fn = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_get_features")
    feats = ffi.cast("ggml_backend_get_features_t", fn)(reg)
    out, i = {}, 0
    while feats[i].name != ffi.NULL:
        out[cstr(feats[i].name)] = cstr(feats[i].value)
        i += 1
    return out


@_needs_variants
def test_each_variant_is_its_own_kernels():
    # x64 is ggml's baseline without SIMD: its registry says so, the best variant's lists its extensions
    assert not {"AVX", "AVX2", "AVX512"} & set(features_of("x64"))
    best = cpu_variants.best()
    if "AVX2" in best.features:
        assert "AVX2" in features_of(best.name)


@_needs_variants
@pytest.mark.parametrize("name", ["cpu:x64", "cpu:best"])
def test_a_variant_runs_a_graph_with_the_threads_it_is_given(name):
    with gg.Runner(name, n_threads=1) as runner:
        assert runner.backends == [runner.backend] and runner.backend.n_threads == 1
        ctx = gg.Context()
        a = ctx.tensor("q8_0", (16, 64), "a", input=True)
        b = ctx.tensor("f32", (3, 64), "b", input=True)
        y = ctx.mul_mat(a, b)
        A = np.random.default_rng(0).uniform(-1, 1, (16, 64))
        B = np.random.default_rng(1).uniform(-1, 1, (3, 64))
        out = runner.run(gg.Graph(ctx).build_forward_expand(y), {a: A, b: B}, y)
        assert np.allclose(out, B @ A.T, atol=0.05)


@_needs_variants
def test_check_cpu_all_runs_every_variant_this_machine_runs(tmp_path):
    report = tmp_path / "r.json"
    res = run("check", "--backend", "cpu:all", "--only", "mul_mat/q4_0", "--json", str(report), "-q")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    records = json.loads(report.read_text())
    ran = {r["backend"] for r in records}
    assert ran == {"cpu:" + v.name for v in cpu_variants.runnable()}
    assert all(r["status"] == "pass" for r in records)


@_needs_variants
def test_check_model_runs_on_a_variant(tmp_path):
    model = tmp_path / "m.gguf"
    assert run("make-model", "llama", str(model)).returncode == 0
    res = run("check", "--model", str(model), "--backend", "cpu:x64")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "logits of m.gguf on cpu:x64 against cpu" in res.stdout


@_needs_variants
def test_info_lists_the_variants_those_this_machine_runs_and_the_one_in_use():
    res = run("info")
    assert res.returncode == 0
    built = cpu_variants.built()
    assert f"CPU variants built ({len(built)}): {', '.join(built)}" in res.stdout
    assert f"cpu:best, the one ggml would load here: {cpu_variants.best().name}" in res.stdout
    assert "in use as cpu (and libllama's CPU): " in res.stdout
    data = json.loads(run("info", "--json").stdout)["cpu_variants"]
    assert data["best"] == cpu_variants.best().name and set(data["built"]) == set(built)


def test_a_variant_this_cpu_cannot_run_is_refused_naming_what_it_lacks(monkeypatch):
    fake = cpu_variants.Variant("sapphirerapids", ("AVX512", "AMX_TILE", "AMX_INT8"), 0, Path("nowhere.so"))
    have = {**cpu_variants.built(), fake.name: fake}
    monkeypatch.setattr(cpu_variants, "built", lambda: have)
    flags = cpu_features.machine_flags()
    why = cpu_variants.error("cpu:sapphirerapids")
    assert why is not None and "this CPU cannot run the sapphirerapids variant" in why
    if flags is not None and "amx_tile" not in flags:
        assert "it lacks" in why and "AMX_TILE" in why
    with pytest.raises(ValueError, match="cannot run the sapphirerapids variant"):
        gg.Runner("cpu:sapphirerapids")


@_needs_variants
def test_cpu_all_is_not_one_backend():
    with pytest.raises(ValueError, match="every variant this machine runs, not one backend"):
        gg.Runner("cpu:all")


def test_features_are_read_from_cpuinfo_flags():
    flags = {"sse4_2", "avx", "f16c", "fma", "avx2", "bmi2"}
    assert cpu_features.lacking(["AVX2", "FMA"], flags) == []
    assert cpu_features.lacking(["AVX2", "AVX512"], flags) == ["AVX512"]
    assert cpu_features.lacking(["NOT_A_FEATURE"], flags) is None


def in_child(code: str, **env):
    import os

    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env={**os.environ, **env}
    )


@_needs_variants
def test_a_variant_made_the_process_cpu_is_what_llama_cpp_and_cpu_compute_with(tmp_path):
    # ggml patch 0036: libllama asks ggml's registry for the CPU (ggml_backend_dev_by_type); before it, the
    # registry gave the linked-in CPU backend whatever pyggml chose
    model = tmp_path / "m.gguf"
    assert run("make-model", "llama", str(model)).returncode == 0
    code = f"""
import numpy as np
import pyggml as gg
from pyggml import cpu_variants, llama
from pyggml._native import ffi, lib
v = cpu_variants.in_use()
assert v is not None and v.name == "x64", v
dev = lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_CPU)
assert dev == cpu_variants.device_ptr("cpu:x64")
assert [d.name for d in gg.devices()].count("CPU") == 1
with gg.Runner("cpu") as r:
    assert lib.ggml_backend_get_device(r.backend.ptr) == dev
m = llama.Model.load({str(model)!r}, n_gpu_layers=0, devices=[])
with llama.Context(m, n_ctx=32) as ctx:
    ctx.decode([1, 2, 3])
print("ok")
"""
    res = in_child(code, PYGGML_CPU_VARIANT="x64")
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-3000:]
    res = run("check", "--model", str(model), "--backend", "cpu")
    assert res.returncode == 0


def test_a_variant_named_in_the_environment_that_is_not_built_is_refused():
    res = in_child("import pyggml", PYGGML_CPU_VARIANT="nehalem")
    assert res.returncode != 0 and "ValueError: PYGGML_CPU_VARIANT=nehalem" in res.stderr
    assert "not one of the CPU variants built" in res.stderr


@_needs_variants
def test_the_probe_is_kept_per_build_and_machine_and_a_dying_variant_is_not_best(monkeypatch, tmp_path):
    monkeypatch.setenv("PYGGML_CACHE_DIR", str(tmp_path))
    cpu_variants.probe.cache_clear()
    try:
        assert cpu_variants.probe("x64") is None
        kept = json.loads((tmp_path / "cpu-variant-probes.json").read_text())
        assert list(kept.values()) == [None] and "libggml-cpu-x64.so" in next(iter(kept))
        # a probe that dies (as AMX kernels killed the process, docs/findings.md 37) says how
        monkeypatch.setattr(cpu_variants, "_PROBE", "import os; os.abort()")
        cpu_variants.probe.cache_clear()
        (tmp_path / "cpu-variant-probes.json").unlink()
        why = cpu_variants.probe("x64")
        assert why is not None and "died: signal 6" in why
    finally:
        cpu_variants.probe.cache_clear()
    top = max(cpu_variants.runnable(), key=lambda v: v.score)
    monkeypatch.setattr(cpu_variants, "probe", lambda name: "died: signal 4" if name == top.name else None)
    chosen = cpu_variants.best()
    assert chosen is None if len(cpu_variants.runnable()) == 1 else chosen.name != top.name


@_needs_variants
def test_the_probe_runs_the_products_in_each_extra_buffer_type_of_the_variant():
    """The AMX kernels died only on weights in the AMX buffer type (docs/findings.md 37): a probe of plain products
    passed over them. Each variant's probe computes in its extra buffer types too, where they take the weight."""
    env = {**__import__("os").environ, "PYGGML_CPU_VARIANT": "builtin"}
    for v in cpu_variants.runnable():
        res = subprocess.run(
            [sys.executable, "-c", cpu_variants._PROBE, v.name], capture_output=True, text=True, timeout=300, env=env
        )
        assert res.returncode == 0, (v.name, res.stdout, res.stderr[-2000:])
        passed = res.stdout.splitlines()
        assert {"passed: q4_0 ", "passed: q8_0 ", "passed: f16 ", "passed: f32 "} <= set(passed)
        if "AMX_INT8" in v.features:
            assert {"passed: q4_0 AMX", "passed: q8_0 AMX"} <= set(passed), (v.name, passed)
        if "AVX2" in v.features:
            assert "passed: q4_0 CPU_REPACK" in passed, (v.name, passed)


@_needs_variants
def test_a_variant_named_before_the_workers_fork_leaves_vulkan_to_them():
    # ggml patch 0036 notes the variant until ggml's registry is made: making it at import made ggml-vulkan's
    # Vulkan instance before check forked its workers, which then died (SIGSEGV) on their first Vulkan case
    from pyggml.testing.engine.session import backend_error

    if backend_error("vulkan0"):
        pytest.skip("no vulkan0 here")
    res = subprocess.run(
        [sys.executable, "-m", "pyggml", "check", "--backend", "cpu", "--backend", "vulkan0", "--only", "^add/f32$"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**__import__("os").environ, "PYGGML_CPU_VARIANT": "x64"},
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]


def test_a_failure_on_cpu_names_the_variant_cpu_is(monkeypatch):
    from pyggml.testing.engine.session import table
    from pyggml.testing.engine.verdict import Record, Status

    records = [Record("add/f32", "cpu", Status.FAIL, 1.0, 1e-7, "wrong"), Record("add/f32", "cpu:x64", Status.PASS)]
    assert "FAIL: add/f32 on cpu: wrong" in table(records)
    fake = cpu_variants.Variant("zen4", ("AVX512",), 1, Path("nowhere.so"))
    monkeypatch.setattr(cpu_variants, "in_use", lambda: fake)
    assert "FAIL: add/f32 on cpu (ggml's zen4 CPU variant): wrong" in table(records)


def test_a_build_without_variants_says_how_to_build_them(monkeypatch):
    monkeypatch.setattr(cpu_variants, "built", lambda: {})
    why = cpu_variants.error("cpu:haswell")
    assert why is not None and "this build has no CPU variants" in why
    assert 'CMAKE_ARGS="-DPYGGML_CPU_VARIANTS=all" pip install -e .' in why
    assert cpu_variants.best() is None and cpu_variants.names_for("cpu:all") == []


def test_a_variant_checked_as_a_model_backend_runs_as_the_childs_cpu(monkeypatch):
    # check --model on cpu:zen4 compared a run without the CPU's repacked weights (the variant loaded as a device)
    # with cpu's repacked one: a published Gemma 3 Q4_K_M read logits NMSE 1.1e-3 with every node passing; in its
    # child the variant is the CPU, repacked weights and all (the same logits as cpu's: 0)
    from pyggml import llama
    from pyggml.testing.engine.model_check import child_env

    assert child_env("cpu:zen4")["PYGGML_CPU_VARIANT"] == "zen4" and "PYGGML_CPU_VARIANT" not in child_env("cpu")
    loads = []
    monkeypatch.setattr(llama.Model, "load", classmethod(lambda cls, path, **kw: loads.append(kw)))
    monkeypatch.setattr(cpu_variants, "in_use", lambda: cpu_variants.Variant("zen4", (), 1, Path("x.so")))
    llama.Model.for_backend("m.gguf", "cpu:zen4")
    llama.Model.for_backend("m.gguf", "cpu")
    assert loads[0] == loads[1] == {"n_gpu_layers": 0, "devices": [], "use_extra_bufts": True}


def test_the_q8_rounding_modelled_is_each_cpus_own(monkeypatch):
    """ggml converts a product's activations to Q8_0 with 127 / max|x| and ties to even where the CPU has AVX,
    with 1 / (max|x| / 127) and roundf where it has not (ggml's x64 and sse42 variants: quantize_row_q8_0_ref, which
    ggml's own quantizer runs too). The two differ in some values of most rows; the oracle had only the first, and
    the x64 variant's Q5_0 products of a trained Gemma failed their element bounds by thousands of units."""
    from pyggml import types
    from pyggml.testing.engine.oracles import dot_rounding

    x = np.random.default_rng(3).standard_normal((2048, 1024)).astype(np.float32) * 3  # 4 values differ
    ggml_ref = types.decode("Q8_0", types.encode("Q8_0", x), x.shape)
    monkeypatch.setattr(dot_rounding, "q8_scheme", lambda: "reference")
    assert np.array_equal(dot_rounding.as_dot_type(x, "Q8_0"), ggml_ref)
    monkeypatch.setattr(dot_rounding, "q8_scheme", lambda: "avx")
    assert (dot_rounding.as_dot_type(x, "Q8_0") != ggml_ref).sum() > 0


@_needs_variants
def test_a_variant_without_avx_has_its_q8_products_judged_by_its_own_rounding():
    """A Q5_0 product computed by the x64 variant, judged element by element in its own process."""
    code = """
import sys
import numpy as np
import pyggml as gg
from pyggml._native import lib
from pyggml.testing.engine.nodes import NodeChecker, observing
from pyggml.testing.engine.oracles import dot_rounding
assert dot_rounding.q8_scheme() == "reference", dot_rounding.q8_scheme()
if sys.argv[1:] == ["avx"]:  # the rounding modelled before: this very product failed its element bounds
    dot_rounding.q8_scheme = lambda: "avx"
rng = np.random.default_rng(0)
wctx = gg.Context()
w = wctx.tensor("q5_0", (64, 640), "w")
runner = gg.Runner("cpu")
runner.backend.alloc_tensors(wctx)
lib.ggml_backend_buffer_set_usage(w.ptr.buffer, lib.GGML_BACKEND_BUFFER_USAGE_WEIGHTS)
w.set(rng.standard_normal((64, 640)).astype(np.float32))
ctx = gg.Context()
x = ctx.tensor("f32", (4096, 640), "x", input=True)
y = ctx.mul_mat(w, x)
g = gg.Graph(ctx).build_forward_expand(y)
checker = NodeChecker()
with observing(runner, checker):
    runner.run(g, {x: rng.standard_normal((4096, 640)).astype(np.float32) * 4}, y)
bad = [v.comparison.message for v in checker.verdicts if not v.ok]
assert checker.verdicts and not bad, bad
print("ok")
"""
    res = in_child(code, PYGGML_CPU_VARIANT="x64")
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-3000:]
