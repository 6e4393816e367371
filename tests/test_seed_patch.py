"""The seed's two halves, with and without them.

ggml's patch 0001 (the seed's meta change) is needed: without it, the seed's graph aborts on the meta
backend with "view of permuted tensor not implemented". llama.cpp's patch 0001 (the seed itself) writes
the conv windows with one set_rows whose index llama.cpp fills on the host; without it llama.cpp builds
K copies, and rollback gives the same logits and the same written slots.

A second, CPU-only pyggml is built with both patches left out (build/without-seed-cpython-3XX, one per
interpreter, reused by later runs) and the same programs run in child processes on each build. That build
takes minutes on 2 cores: its tests are opt-in (PYGGML_REBUILD_TESTS=1, tests/conftest.py), and CI runs them
(scripts/python_versions.sh).
"""

import json
import os
import site
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest
from builds import LEFT_OUT, pyggml_without_patches

ROOT = Path(__file__).resolve().parent.parent
PATCHES = LEFT_OUT["seed"]
SEED_GRAPH = textwrap.dedent("""
    import pyggml as gg
    from pyggml.testing.engine.cases.conv_state import ConvStateCase
    case = ConvStateCase("host_index", "f32", 4)
    got = case.execute(gg.Runner("meta:cpu,cpu"))
    assert all((g == w).all() for g, w in zip(got, case.expected()))
    print("seed graph ran on meta:cpu,cpu")
""")


@pytest.fixture(scope="module")
def pyggml_without_patch(tmp_path_factory) -> Path:
    return pyggml_without_patches(tmp_path_factory.mktemp("without-seed"))


def run_seed_graph(pythonpath: Path | None, program: str = SEED_GRAPH) -> subprocess.CompletedProcess:
    env = os.environ.copy()
    cmd = [sys.executable, "-c", program]
    if pythonpath is not None:
        # -S: no .pth files, so an installed pyggml cannot shadow the one in pythonpath
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), *site.getsitepackages()])
        cmd.insert(1, "-S")
    # run outside the repository: `python -c` puts the working folder first on sys.path
    return subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=300, cwd=pythonpath or tempfile.gettempdir()
    )


@pytest.mark.rebuild  # a second pyggml without the patches (tests/conftest.py: opt-in, CI runs it)
def test_the_seed_graph_needs_the_seed_patch(pyggml_without_patch):
    without = run_seed_graph(pyggml_without_patch)
    assert without.returncode != 0
    assert "view of permuted tensor not implemented" in without.stderr
    # refused in-process before compute (patch 0009), no longer a ggml abort
    assert "Unsplittable" in without.stderr and "ggml aborted" not in without.stderr
    with_patch = run_seed_graph(None)
    assert with_patch.returncode == 0, with_patch.stderr[-2000:]
    assert "seed graph ran on meta:cpu,cpu" in with_patch.stdout


# llama.cpp's delta-net rollback on a tiny qwen35 file: the conv-cache writes the graph makes, then a
# draft of 3 rolled back by 2 and a step; prints them as JSON
LLAMA_ROLLBACK = textwrap.dedent("""
    import json, sys, tempfile
    import numpy as np
    from pyggml import llama
    from pyggml.models.make_model import make_model
    path = tempfile.mkdtemp() + "/q.gguf"
    make_model("qwen35", path)
    writes = []
    from pyggml._native import ffi
    def watch(t, ask):  # a copy or set_rows is a view of what it writes: the conv cache's writes
        base = t.ptr.view_src
        if ask and t.op.name in ("CPY", "SET_ROWS") and base != ffi.NULL and t.nelements:
            if ffi.string(base.name) == b"cache_r_l0":
                writes.append(t.op.name)
        return False
    m = llama.Model.load(path, n_gpu_layers=0, devices=[])
    ctx = llama.Context(m, n_ctx=64, n_batch=16, n_ubatch=16, n_rs_seq=3, tensors=("cache_r_l", "cache_s_l"),
                        observe=watch)
    ctx.decode([5, 6, 7, 8, 9])
    writes.clear()
    ctx.decode([1, 2, 3])                      # 3 tokens: Kw = 4 windows, K = 4 slots
    graph_writes = list(writes)
    assert ctx.memory_seq_rm(0, 6, -1)
    ctx.decode([4, 2], logits="all")
    print(json.dumps({"writes": graph_writes, "logits": ctx.all_logits().tolist(),
                      "conv": ctx.tensor("cache_r_l0")[:3].tolist(), "ssm": ctx.tensor("cache_s_l0")[:2].tolist()}))
""")


@pytest.mark.rebuild  # a second pyggml without the patches (tests/conftest.py: opt-in, CI runs it)
def test_llama_cpp_without_the_seed_copies_k_windows_and_rolls_back_the_same(pyggml_without_patch):
    pytest.importorskip("pyggml.llama", reason="pyggml built without libllama")
    runs = {}
    for name, path in (("without", pyggml_without_patch), ("with", None)):
        proc = run_seed_graph(path, LLAMA_ROLLBACK)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    # the seed: one set_rows per layer; before it, K = 4 copies of a conv window
    assert runs["with"]["writes"] == ["SET_ROWS"]
    assert runs["without"]["writes"] == ["CPY"] * 4
    # the same logits and the same slots the step after the rollback wrote; the two builds' compiler flags
    # differ (pip's build and a plain CMake one), so their F32 arithmetic differs in the last bits (measured
    # NMSE 1e-14); the seed would differ by whole windows
    for key in ("logits", "conv", "ssm"):
        a, b = (np.array(runs[r][key], np.float64) for r in ("with", "without"))
        assert np.sum((a - b) ** 2) <= 1e-10 * np.sum(b**2), key
