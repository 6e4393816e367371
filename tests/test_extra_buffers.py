"""Weights in a CPU extra buffer type (CPU_REPACK: llama.cpp puts Q4_0, Q4_K, IQ4_NL ... weights there on x86 and
ARM). ggml implements no get_tensor for them: reading one back called a NULL function and killed the process
(`check --model` on any Q4_0 or Q4_K_M model died so). Now a read is refused before the call, with the reason,
and the node checker reads such a weight's values from where they came from (the model file), or counts the
node unread, saying why."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import numpy as np
import pytest

import pyggml as gg
from pyggml import ffi, lib, types
from pyggml.testing.engine.nodes import UNREADABLE, NodeChecker, observing
from pyggml.transport import extra_buffer_types, unreadable

M, K, N = 64, 128, 8  # rows CPU_REPACK interleaves 8 at a time, blocks of 32 along K


def _features() -> dict[str, str]:
    return sys.modules["pyggml.backend"].backend_features().get("CPU", {})


@pytest.fixture
def repacked() -> Iterator[tuple[gg.Tensor, np.ndarray]]:
    """A Q4_0 weight [M, K] in the CPU_REPACK buffer type, and its bytes as Q4_0 encodes them."""
    bufts = {name: address for address, name in extra_buffer_types().items()}
    if "CPU_REPACK" not in bufts or _features().get("AVX2") != "1":
        pytest.skip("this build's CPU has no CPU_REPACK buffer type for Q4_0 (x86 with AVX2, or ARM)")
    wctx = gg.Context()
    w = wctx.tensor("q4_0", (M, K), "blk.0.ffn_up.weight")
    buf = lib.ggml_backend_alloc_ctx_tensors_from_buft(
        wctx.ptr, ffi.cast("ggml_backend_buffer_type_t", bufts["CPU_REPACK"])
    )
    assert buf != ffi.NULL
    values = np.random.default_rng(0).standard_normal((M, K)).astype(np.float32)
    raw = types.encode(types.Type.Q4_0, values)
    w.set_raw(raw)  # the buffer repacks it
    yield w, raw
    lib.ggml_backend_buffer_free(buf)


def test_the_repack_buffer_is_listed_and_a_read_is_refused_before_the_call(repacked):
    w, _ = repacked
    assert "CPU_REPACK" in unreadable(w.ptr.buffer)
    for read in (w.numpy, w.raw_bytes):
        with pytest.raises(ValueError, match="CPU_REPACK buffer type.*cannot read back"):
            read()
    assert unreadable(ffi.NULL) is None


def _product(w: gg.Tensor) -> tuple[gg.Graph, gg.Tensor, gg.Tensor]:
    ctx = gg.Context()
    x = ctx.tensor("f32", (N, K), "x", input=True)
    y = ctx.mul_mat(w, x).set_name("y")
    return gg.Graph(ctx).build_forward_expand(y), x, y


def test_the_checker_reads_a_repacked_weight_from_the_given_bytes_and_checks_the_product(repacked):
    w, raw = repacked
    graph, x, y = _product(w)
    runner = gg.Runner("cpu")
    X = np.random.default_rng(1).standard_normal((N, K)).astype(np.float32)
    with observing(runner, NodeChecker(weights={w.name: raw}.get)) as checker:
        out = runner.run(graph, {x: X}, y)
    [v] = checker.verdicts
    assert v.kind == "MUL_MAT" and not v.unread and v.comparison is not None and v.ok, v
    # and the product itself is right: the repacked kernel against the weight's own values
    W = types.decode(types.Type.Q4_0, raw, (M, K)).astype(np.float64)
    ref = X.astype(np.float64) @ W.T
    assert float(((out - ref) ** 2).sum() / (ref**2).sum()) < 1e-4


def test_without_the_bytes_the_node_is_unread_with_the_reason_and_the_run_goes_on(repacked):
    w, raw = repacked
    graph, x, y = _product(w)
    runner = gg.Runner("cpu")
    X = np.ones((N, K), np.float32)
    for weights in (None, {}.get, {w.name: raw[:-1]}.get):  # none, not that name, the wrong size
        with observing(runner, NodeChecker(weights=weights)) as checker:
            runner.run(graph, {x: X}, y)
        [v] = checker.verdicts
        assert v.unread and v.error.startswith(UNREADABLE) and "CPU_REPACK" in v.error and w.name in v.error


VERDICTS = """
import json, sys
from pyggml.testing.engine import model_check
from pyggml.transport import extra_buffer_types
out = {"bufts": sorted(extra_buffer_types().values())}
for on in (True, False):
    run = model_check.run_model(sys.argv[1], "cpu", n_tokens=8, extra_bufts=on)
    out[str(on)] = {"error": run.error, "verdicts": [(v.kind, v.name, v.ok, v.unread) for v in run.verdicts]}
print(json.dumps(out))
"""


@pytest.mark.rebuild  # a portable pyggml (tests/builds.py): CPU_REPACK, the layout of most machines
@pytest.mark.parametrize("file_type", ["q4_0", "q4_k_m", "iq4_nl"])
def test_verdicts_with_the_cpus_extra_buffers_equal_those_without(tmp_path_factory, file_type):
    """llama.cpp puts these weights in CPU_REPACK by default; the checker reads them from the model file. Every
    node gets the same verdict with the extra buffer types on and off, and none is unread."""
    import json
    import os
    import site
    import subprocess

    from builds import pyggml_without_patches

    from pyggml import llama
    from pyggml.models import llama_archs

    folder = tmp_path_factory.mktemp("repack")
    portable = pyggml_without_patches(tmp_path_factory.mktemp("portable"))
    f32 = llama_archs.generate("qwen35", folder / "f32.gguf", seed=0)
    path = folder / f"{file_type}.gguf"
    llama.quantize(f32, path, file_type)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(portable), *site.getsitepackages()]))
    res = subprocess.run(
        [sys.executable, "-S", "-c", VERDICTS, str(path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=folder,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    if "CPU_REPACK" not in out["bufts"]:
        pytest.skip("this CPU has no CPU_REPACK buffer type (x86 with AVX2, or ARM)")
    on, off = out["True"], out["False"]
    assert not on["error"] and not off["error"], (on["error"], off["error"])
    assert on["verdicts"] == off["verdicts"]
    assert all(ok and not unread for _, _, ok, unread in on["verdicts"])


AMX_RUN = """
import json, logging, sys
from pyggml.testing.engine import model_check
lines = []
class Keep(logging.Handler):
    def emit(self, record):
        lines.append(record.getMessage())
logging.getLogger().addHandler(Keep())
logging.getLogger().setLevel(logging.DEBUG)
run = model_check.run_model(sys.argv[1], "cpu", n_tokens=8, extra_bufts=True)
print(json.dumps({
    "amx_weights": any("AMX model buffer size" in ln for ln in lines),
    "error": run.error,
    "verdicts": [(v.kind, v.name, v.ok, v.unread) for v in run.verdicts],
}))
"""


@pytest.mark.parametrize("file_type", ["q4_0", "q8_0", "q4_k_m"])
def test_products_with_weights_in_the_amx_buffer_compute_and_pass(tmp_path, file_type):
    """docs/findings.md 37: on a CPU with AMX, every product whose weight llama.cpp put in the AMX buffer type
    killed the process (GCC 12 dropped the tile configuration's rows, ggml patch 0037). Decoded in a child
    process, so that a death fails this test instead of the run: the weights are in the AMX buffer, and every
    node passes its oracle."""
    import json
    import subprocess

    from pyggml import llama
    from pyggml.models import llama_archs

    if "AMX" not in extra_buffer_types().values():
        pytest.skip("no AMX buffer type here (a CPU without AMX, or a build without ggml's AMX kernels)")
    f32 = llama_archs.generate("llama", tmp_path / "f32.gguf", seed=0)
    path = tmp_path / f"{file_type}.gguf"
    llama.quantize(f32, path, file_type)
    res = subprocess.run([sys.executable, "-c", AMX_RUN, str(path)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"the decode died ({res.returncode}): {res.stderr[-2000:]}"
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["amx_weights"], "llama.cpp put no weight in the AMX buffer type: nothing ran on AMX"
    assert not out["error"], out["error"]
    products = [v for v in out["verdicts"] if v[0] == "MUL_MAT"]
    assert products and all(ok and not unread for _, _, ok, unread in out["verdicts"]), out["verdicts"]


def test_the_amx_reproducer_loads_the_tile_configuration_as_patched(tmp_path):
    """scripts/amx_tile_config.c, the death outside pyggml: compiled here, the configuration loaded as ggml patch
    0037 loads it keeps its rows and the tile product is right (exit 0; 2 where the machine has no AMX)."""
    import shutil
    import subprocess
    from pathlib import Path

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or sys.platform != "linux" or not Path("/proc/cpuinfo").exists():
        pytest.skip("needs a C compiler on Linux")
    if "amx_int8" not in Path("/proc/cpuinfo").read_text():
        pytest.skip("this CPU has no AMX")
    source = Path(__file__).resolve().parent.parent / "scripts" / "amx_tile_config.c"
    exe = tmp_path / "amx_tile_config"
    subprocess.run([cc, "-O2", "-mamx-tile", "-mamx-int8", "-o", str(exe), str(source)], check=True)
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    if res.returncode == 2:
        pytest.skip(f"Linux or the machine offers no AMX here: {res.stdout[-500:]}")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "rows read back: 8 8 16 16 16 16 16 16" in res.stdout


BATCHED_RUN = """
import json, sys
import numpy as np
import pyggml as gg
from pyggml import ffi, lib, types
from pyggml.transport import extra_buffer_types

bufts = {name: address for address, name in extra_buffer_types().items()}
rng = np.random.default_rng(0)
W = rng.standard_normal((64, 256)).astype(np.float32)
out = []
with gg.Runner("cpu") as runner:
    for t in ("q4_0", "q8_0", "q4_k"):
        raw = types.encode(types.Type[t.upper()], W)
        weight = types.decode(types.Type[t.upper()], raw, W.shape).astype(np.float64)
        for shape in [(2, 6, 256), (2, 1, 256), (3, 4, 256), (2, 32, 256)]:  # CPU_REPACK asserts ne13 == 1: 3-D only
            X = rng.standard_normal(shape).astype(np.float32)
            want = X.astype(np.float64) @ weight.T
            for where, address in bufts.items():
                ctx, wctx = gg.Context(), gg.Context()
                a = wctx.tensor(t, W.shape, "a")
                b = ctx.tensor("f32", shape, "b", input=True)
                y = ctx.mul_mat(a, b)
                buf = lib.ggml_backend_alloc_ctx_tensors_from_buft(wctx.ptr, ffi.cast("ggml_backend_buffer_type_t", address))
                if a.ptr.extra == ffi.NULL:  # no layout of this type in this buffer type here
                    lib.ggml_backend_buffer_free(buf)
                    continue
                a.set_raw(raw)
                got = runner.run(gg.Graph(ctx).build_forward_expand(y), {b: X}, y).astype(np.float64)
                lib.ggml_backend_buffer_free(buf)
                rows = got.reshape(-1, shape[-2], 64), want.reshape(-1, shape[-2], 64)
                errs = [float(np.linalg.norm(g - w) / np.linalg.norm(w)) if np.isfinite(g).all() else float("inf")
                        for g, w in zip(*rows)]
                out.append([t, list(shape), where, errs])
print(json.dumps(out))
"""


def test_a_batched_product_with_the_weight_in_an_extra_buffer_computes_every_batch(tmp_path):
    """docs/findings.md 47: with the weight in the AMX buffer type, a product of a 3-D src1 (two sequences of a
    hybrid model) computed its first batch and read the others' weight past the end of the 2-D weight (ggml patch
    0038): zeros, garbage, or glibc's heap check ended the process. In a child process, each batch against the
    float64 product of the weight's values."""
    import json
    import subprocess

    if not extra_buffer_types():
        pytest.skip("no CPU extra buffer type in this build or on this CPU")
    res = subprocess.run([sys.executable, "-c", BATCHED_RUN], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"the products died ({res.returncode}): {res.stderr[-2000:]}"
    runs = json.loads(res.stdout.strip().splitlines()[-1])
    assert runs, "no weight had a layout in any extra buffer type"
    wrong = [r for r in runs if max(r[3]) > 2e-2]  # activations rounded to 8 bits: about 7e-3
    assert not wrong, wrong
