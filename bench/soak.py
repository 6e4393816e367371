"""A long process, sampled: does pyggml stay the same size?

    python bench/soak.py --minutes 10 [--no-rpc] [--no-llama] [--pytest-tests 2000]

For `--minutes`, round after round: graphs of random shapes and ops (add, mul, mul_mat, soft_max, rms_norm,
a chain of them) built, run and dropped on a new Runner each time, on cpu, meta:cpu,cpu and an RPC server's
device (a `python -m pyggml rpc-server` child); every 20th round a llama model (make-model's llama) loaded,
decoded and freed. Every 5 seconds it samples the resident size, the open file descriptors and the threads
of this process. At the end, a pytest session of `--pytest-tests` tests using pyggml's pytest plugin fixtures
(ggml_runner, ggml_ctx) runs in a child, whose peak resident size is reported.

Prints the samples' summary: the first sample after the warm-up minute (or after a tenth of the run, if
shorter) against the last and the highest; exit status 1 when the resident size grew more than
--max-growth-mb after the warm-up, or the descriptors or threads grew at all. bench/README.md records a run.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import numpy as np

PYTEST_FILE = textwrap.dedent("""
    import numpy as np
    import pytest

    @pytest.mark.parametrize("i", range({n}))
    def test_one(i, ggml_runner, ggml_ctx):
        a = ggml_ctx.tensor("f32", (3, 1 + i % 17), "a", input=True)
        y = ggml_ctx.mul(a, a)
        import pyggml as gg
        x = np.full((3, 1 + i % 17), i % 5, np.float32)
        assert (ggml_runner.run(gg.Graph(ggml_ctx).build_forward_expand(y), {{a: x}}, y) == x * x).all()
""")


def sample() -> tuple[float, int, int]:
    """Resident MB, open descriptors, threads (the kernel's count: ggml's own threads too)."""
    rss = int(open(f"/proc/{os.getpid()}/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    fds = len(os.listdir(f"/proc/{os.getpid()}/fd"))
    threads = next(int(line.split()[1]) for line in open(f"/proc/{os.getpid()}/status") if line.startswith("Threads:"))
    return rss, fds, threads


def random_graph(rng: np.random.Generator) -> tuple:
    """A chain of 1 to 5 random ops over inputs of random shape: (graph, inputs, output)."""
    import pyggml as gg

    ctx = gg.Context()
    rows, cols = int(rng.integers(1, 33)), int(rng.integers(1, 65))
    a = ctx.tensor("f32", (rows, cols), "a", input=True)
    b = ctx.tensor("f32", (rows, cols), "b", input=True)
    w = ctx.tensor("f32", (cols, cols), "w", input=True)
    y = a
    for _ in range(int(rng.integers(1, 6))):
        op = rng.choice(["add", "mul", "mul_mat", "soft_max", "rms_norm"])
        if op == "add":
            y = ctx.add(y, b)
        elif op == "mul":
            y = ctx.mul(y, b)
        elif op == "mul_mat":
            y = ctx.mul_mat(w, y)  # (rows, cols) again
        elif op == "soft_max":
            y = ctx.soft_max(y)
        else:
            y = ctx.rms_norm(y, 1e-6)
    graph = gg.Graph(ctx).build_forward_expand(y)
    read = {s.name for n in graph.nodes for s in n.src}  # a random chain may not read every input
    x = {t: rng.standard_normal(t.shape).astype(np.float32) for t in (a, b, w) if t.name in read}
    return graph, x, y


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--no-rpc", action="store_true", help="leave out the RPC server's device")
    p.add_argument("--no-llama", action="store_true", help="leave out the llama models")
    p.add_argument("--pytest-tests", type=int, default=2000, help="tests of the pytest session (0: none)")
    p.add_argument("--max-growth-mb", type=float, default=20.0)
    args = p.parse_args()

    import pyggml as gg
    from pyggml import rpc

    backends = ["cpu", "meta:cpu,cpu"]
    server = None
    if not args.no_rpc:
        server = rpc.Server()
        [dev] = rpc.add_server(server.endpoint)
        backends.append(dev.name.lower())
    folder = tempfile.TemporaryDirectory(prefix="pyggml-soak-")
    model = os.path.join(folder.name, "llama.gguf")
    if not args.no_llama:
        from pyggml.models.make_model import make_model

        make_model("llama", model)

    rng = np.random.default_rng(0)
    samples: list[tuple[float, float, int, int]] = []
    stop = threading.Event()
    t0 = time.monotonic()

    def sampler() -> None:
        while not stop.wait(5.0):
            samples.append((time.monotonic() - t0, *sample()))

    threading.Thread(target=sampler, daemon=True).start()
    rounds = graphs = models = 0
    end = t0 + 60 * args.minutes
    while time.monotonic() < end:
        rounds += 1
        for name in backends:
            graph, inputs, out = random_graph(rng)
            runner = gg.Runner(name)
            runner.run(graph, inputs, out)
            graphs += 1
            del runner, graph, inputs, out
        if not args.no_llama and rounds % 20 == 0:
            from pyggml import llama

            m = llama.Model.load(model, n_gpu_layers=0, devices=[])
            c = llama.Context(m, n_ctx=64, n_batch=8)
            c.decode(rng.integers(0, m.n_vocab, 8).tolist())
            del c, m
            models += 1
    stop.set()
    gc.collect()
    samples.append((time.monotonic() - t0, *sample()))
    warm = next((s for s in samples if s[0] >= min(60.0, 6 * args.minutes)), samples[0])
    last = samples[-1]
    peak = max(s[1] for s in samples)
    print(f"# {time.strftime('%Y-%m-%d')}: python bench/soak.py {' '.join(sys.argv[1:])}")
    print(f"{rounds} rounds, {graphs} graphs on {', '.join(backends)}, {models} llama models, {len(samples)} samples")
    print("| when | s | resident MB | open fds | threads |")
    print("|---|---|---|---|---|")
    for what, s in (("after warm-up", warm), ("last", last)):
        print(f"| {what} | {s[0]:.0f} | {s[1]:.1f} | {s[2]} | {s[3]} |")
    print(f"| highest | | {peak:.1f} | {max(s[2] for s in samples)} | {max(s[3] for s in samples)} |")
    bad = last[1] - warm[1] > args.max_growth_mb or last[2] > warm[2] or last[3] > warm[3]
    if args.pytest_tests:
        path = os.path.join(folder.name, "test_soak_fixtures.py")
        with open(path, "w") as f:
            f.write(PYTEST_FILE.format(n=args.pytest_tests))
        t = time.monotonic()
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "pyggml.testing.pytest_plugin",
                "-p",
                "no:cacheprovider",
                path,
            ],
            capture_output=True,
            text=True,
            cwd=folder.name,
        )
        peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        print(
            f"pytest session: {args.pytest_tests} tests with the plugin's fixtures, {time.monotonic() - t:.0f} s, "
            f"exit {res.returncode}, peak resident {max(peak_kb, before) / 1024:.0f} MB: {res.stdout.strip().splitlines()[-1]}"
        )
        bad |= res.returncode != 0
    if server is not None:
        server.stop()
    print("bounded" if not bad else "GREW")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
