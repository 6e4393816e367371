"""What the Python binding costs, measured side by side with the same work in C.

    python bench/binding_overhead.py [--ops 10000] [--ggml-python]

Builds bench/harness.c against the ggml that pyggml built (the editable install's build
folder), runs it, then does the same three things through pyggml in this process:

- building a graph of N ggml_add nodes: through the checked layer (`ctx.add`) and through
  the raw cffi layer (`lib.ggml_add`), per op;
- a graph-reuse step at one thread: set 16 floats from NumPy, compute, read 16 floats back
  into NumPy (with `Tensor.set`/`numpy()`, and with the zero-copy `view()`);
- computing a mul_mat graph (512x512 by 512x64, then add) at all threads, built in Python.

With --ggml-python, ggml-python==0.0.45 (a ctypes binding) is installed into a throwaway
virtual environment under build/bench/ and measured on the same build and step.
Prints a table of ratios to C, with the machine's cores and the thread counts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import textwrap
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "bench"


def build_dir() -> Path:
    tag = (
        f"cp{sys.version_info.major}{sys.version_info.minor}-cp{sys.version_info.major}{sys.version_info.minor}-"
        f"{sysconfig.get_platform().replace('-', '_').replace('.', '_')}"
    )
    d = ROOT / "build" / tag
    if not (d / "ggml" / "src" / "libggml.a").exists():
        sys.exit(f"no ggml build in {d}: install pyggml with `pip install -e .` first")
    return d


def build_harness() -> Path:
    b = build_dir()
    libs = [b / "ggml/src/libggml.a"]
    extra = []
    for backend, syslib in (("vulkan", "-lvulkan"), ("rpc", None)):
        lib = b / f"ggml/src/ggml-{backend}/libggml-{backend}.a"
        if lib.exists():
            libs.append(lib)
            if syslib:
                extra.append(syslib)
    libs += [b / "ggml/src/libggml-cpu.a", b / "ggml/src/libggml-base.a"]
    OUT.mkdir(parents=True, exist_ok=True)
    exe = OUT / "harness"
    cmd = [
        "cc",
        "-O2",
        str(ROOT / "bench/harness.c"),
        "-I",
        str(b / "ggml-src/include"),
        "-o",
        str(exe),
        *map(str, libs),
        "-lstdc++",
        "-lm",
        "-lpthread",
        "-fopenmp",
        *extra,
    ]
    subprocess.run(cmd, check=True)
    return exe


def timed(fn, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def py_build(n_ops: int, raw: bool) -> float:
    import pyggml as gg
    from pyggml import lib

    def once():
        ctx = gg.Context(n_tensors=n_ops + 16, graph_size=2 * n_ops)
        if raw:
            a = lib.ggml_new_tensor_1d(ctx.ptr, lib.GGML_TYPE_F32, 16)
            x = a
            for _ in range(n_ops):
                x = lib.ggml_add(ctx.ptr, x, a)
            gf = lib.ggml_new_graph_custom(ctx.ptr, 2 * n_ops, False)
            lib.ggml_build_forward_expand(gf, x)
        else:
            a = ctx.new_tensor_1d("f32", 16)
            x = a
            for _ in range(n_ops):
                x = ctx.add(x, a)
            gg.Graph(ctx, 2 * n_ops).build_forward_expand(x)

    return timed(once, 21) / n_ops * 1e6


def py_step(steps: int, zero_copy: bool) -> float:
    import pyggml as gg

    ctx = gg.Context()
    a = ctx.tensor("f32", (16,), "a", input=True)
    y = ctx.scale(ctx.add(a, a), 0.5).set_output()
    graph = gg.Graph(ctx).build_forward_expand(y)
    cpu = gg.cpu_backend(1)
    cpu.alloc_tensors(ctx)
    x = np.arange(16, dtype=np.float32)
    if zero_copy:
        a_view, y_view = a.view(), y.view()

        def step():
            a_view[...] = x
            cpu.compute(graph)
            return y_view.copy()
    else:

        def step():
            a.set(x)
            cpu.compute(graph)
            return y.numpy()

    for _ in range(1000):
        out = step()
    assert out[1] == 1.0
    t = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t) / steps * 1e6


def py_compute(n_threads: int) -> float:
    import pyggml as gg

    ctx = gg.Context()
    w = ctx.new_tensor_2d("f32", 512, 512)
    x = ctx.new_tensor_2d("f32", 512, 64)
    y = ctx.mul_mat(w, x)
    z = ctx.add(y, y)
    graph = gg.Graph(ctx).build_forward_expand(z)
    cpu = gg.cpu_backend(n_threads)
    cpu.alloc_tensors(ctx).clear(0)
    for _ in range(5):
        cpu.compute(graph)
    return timed(lambda: cpu.compute(graph), 101) * 1e6


GGML_PYTHON_SCRIPT = textwrap.dedent("""
    import json, sys, time, statistics, ctypes
    import numpy as np
    import ggml
    import ggml.utils
    n_ops = int(sys.argv[1])
    def build():
        params = ggml.ggml_init_params(mem_size=(n_ops + 16) * ggml.ggml_tensor_overhead()
                                       + ggml.ggml_graph_overhead_custom(2 * n_ops, False),
                                       mem_buffer=None, no_alloc=True)
        ctx = ggml.ggml_init(params)
        t = time.perf_counter()
        a = ggml.ggml_new_tensor_1d(ctx, ggml.GGML_TYPE_F32, 16)
        x = a
        for _ in range(n_ops):
            x = ggml.ggml_add(ctx, x, a)
        gf = ggml.ggml_new_graph_custom(ctx, 2 * n_ops, False)
        ggml.ggml_build_forward_expand(gf, x)
        dt = time.perf_counter() - t
        ggml.ggml_free(ctx)
        return dt / n_ops * 1e6
    build_us = statistics.median(build() for _ in range(21))
    params = ggml.ggml_init_params(mem_size=1 << 20, mem_buffer=None, no_alloc=False)
    ctx = ggml.ggml_init(params)
    a = ggml.ggml_new_tensor_1d(ctx, ggml.GGML_TYPE_F32, 16)
    y = ggml.ggml_scale(ctx, ggml.ggml_add(ctx, a, a), 0.5)
    gf = ggml.ggml_new_graph(ctx)
    ggml.ggml_build_forward_expand(gf, y)
    x = np.arange(16, dtype=np.float32)
    def step():
        ggml.utils.to_numpy(a)[:] = x
        ggml.ggml_graph_compute_with_ctx(ctx, gf, 1)
        return ggml.utils.to_numpy(y).copy()
    for _ in range(1000):
        out = step()
    assert out[1] == 1.0, out
    steps = 20000
    t = time.perf_counter()
    for _ in range(steps):
        step()
    step_us = (time.perf_counter() - t) / steps * 1e6
    print(json.dumps({"build_us_per_op": build_us, "step_us": step_us}))
""")


def ggml_python(n_ops: int) -> dict | None:
    venv = OUT / "ggml-python-venv"
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "ggml-python==0.0.45", "numpy"], check=True)
    proc = subprocess.run([str(py), "-c", GGML_PYTHON_SCRIPT, str(n_ops)], capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"ggml-python: {proc.stderr.strip()[-800:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=10000)
    parser.add_argument("--ggml-python", action="store_true", help="also measure ggml-python==0.0.45")
    args = parser.parse_args()
    threads = os.cpu_count()
    exe = build_harness()
    c = json.loads(
        subprocess.run([str(exe), str(args.ops), str(threads)], check=True, capture_output=True, text=True).stdout
    )
    rows = [
        ("build, per op", "C", c["build_us_per_op"]),
        ("build, per op", "pyggml raw cffi (lib.ggml_add)", py_build(args.ops, raw=True)),
        ("build, per op", "pyggml checked (ctx.add)", py_build(args.ops, raw=False)),
        ("step, 1 thread", "C", c["step_us"]),
        ("step, 1 thread", "pyggml set/compute/numpy", py_step(100000, zero_copy=False)),
        ("step, 1 thread", "pyggml zero-copy view", py_step(100000, zero_copy=True)),
        (f"compute, {threads} threads", "C", c["compute_us"]),
        (f"compute, {threads} threads", "pyggml (graph built in Python)", py_compute(threads)),
    ]
    if args.ggml_python:
        gp = ggml_python(args.ops)
        if gp:
            rows.insert(3, ("build, per op", "ggml-python 0.0.45 (ctypes)", gp["build_us_per_op"]))
            rows.insert(7, ("step, 1 thread", "ggml-python 0.0.45 (ctypes)", gp["step_us"]))
    print(f"# cores: {threads}; build: {args.ops} ggml_add nodes; step: 16 floats in, add+scale, 16 out")
    print()
    print("| measurement | who | us | vs C | minus C (us) |")
    print("|---|---|---|---|---|")
    base = {}
    for what, who, us in rows:
        if who == "C":
            base[what] = us
        ref = base[what]
        print(f"| {what} | {who} | {us:.3f} | {us / ref:.2f}x | {us - ref:+.3f} |")


if __name__ == "__main__":
    main()
