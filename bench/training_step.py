"""A training step through pyggml.opt against ggml's own C loop (ggml_opt_fit), same net, data and batch.

    python bench/training_step.py [--epochs 20] [--rounds 5] [--threads 1]

Builds bench/opt_fit.c against the ggml that pyggml built (the editable install's build folder, the same
static libraries the module links), writes scikit-learn's 8x8 digits (1,440 to train, 352 to test, split
with seed 0) and the initial weights of a 64-128-10 fully connected net to a temporary folder, then alternates
C and pyggml runs: each trains from the same initial weights with AdamW (lr 1e-3) in batches of 32, without a
validation share, and the time of a fit over its optimizer steps is the step time (ggml_opt_init's graph
building included on both sides). Prints the median step of each and their ratio, then one more fit of each
as examples/training_digits.ipynb trains (30 epochs, a tenth kept for validation) and both test accuracies:
ggml-opt's loop run from Python repeats ggml's shuffles, so the two should agree.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from binding_overhead import OUT, ROOT, build_dir  # noqa: E402

N_IN, N_HIDDEN, N_OUT = 64, 128, 10
N_TRAIN, N_TEST, BATCH, LR = 1440, 352, 32, 1e-3


def digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's digits scaled to [0, 1], split with seed 0: (train_x, train_y, test_x, test_y) classes."""
    from sklearn.datasets import load_digits

    d = load_digits()
    order = np.random.default_rng(0).permutation(len(d.target))
    x, y = (d.data[order] / 16).astype(np.float32), d.target[order]
    return x[:N_TRAIN], y[:N_TRAIN], x[N_TRAIN : N_TRAIN + N_TEST], y[N_TRAIN : N_TRAIN + N_TEST]


def initial_weights() -> dict[str, np.ndarray]:
    """He-style normal weights, zero biases, seed 1."""
    rng = np.random.default_rng(1)
    return {
        "w1": (rng.standard_normal((N_HIDDEN, N_IN)) * np.sqrt(2 / N_IN)).astype(np.float32),
        "b1": np.zeros(N_HIDDEN, np.float32),
        "w2": (rng.standard_normal((N_OUT, N_HIDDEN)) * np.sqrt(1 / N_HIDDEN)).astype(np.float32),
        "b2": np.zeros(N_OUT, np.float32),
    }


def build_c() -> Path:
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
    exe = OUT / "opt_fit"
    cmd = ["cc", "-O2", str(ROOT / "bench/opt_fit.c"), "-I", str(b / "ggml-src/include"), "-o", str(exe)]
    subprocess.run(cmd + [*map(str, libs), "-lstdc++", "-lm", "-lpthread", "-fopenmp", *extra], check=True)
    return exe


def run_c(exe: Path, folder: str, epochs: int, val_split: float, threads: int) -> dict[str, float]:
    args = [folder, N_IN, N_HIDDEN, N_OUT, N_TRAIN, N_TEST, BATCH, BATCH, epochs, LR, val_split, threads]
    out = subprocess.run([str(exe), *map(str, args)], check=True, capture_output=True, text=True).stdout
    return {k: float(v) for k, v in (kv.split("=") for kv in out.split())}


class PyNet:
    """The same net through pyggml.opt, on Runner('cpu', n_threads=threads)."""

    def __init__(self, threads: int) -> None:
        import pyggml as gg
        from pyggml import opt

        self.runner = gg.Runner("cpu", n_threads=threads)
        pctx = gg.Context()
        self.w = {n: pctx.tensor("f32", a.shape, n) for n, a in initial_weights().items()}
        x = pctx.tensor("f32", (BATCH, N_IN), "x")
        self.runner.backend.alloc_tensors(pctx)
        ctx = gg.Context()
        w = self.w
        h = ctx.relu(ctx.add(ctx.mul_mat(w["w1"], x), w["b1"]))
        logits = ctx.add(ctx.mul_mat(w["w2"], h), w["b2"])
        self.model = opt.Model(self.runner, x, logits, params=list(w.values()))
        tx, ty, sx, sy = digits()
        self.train = opt.Dataset(tx, opt.one_hot(ty, N_OUT))
        self.test = opt.Dataset(sx, opt.one_hot(sy, N_OUT))

    def fit(self, epochs: int, val_split: float) -> dict[str, float]:
        from pyggml import opt

        for n, a in initial_weights().items():
            self.w[n].set(a)
        tx, ty, _, _ = digits()
        self.train = opt.Dataset(tx, opt.one_hot(ty, N_OUT))  # ggml's order: a fresh dataset, as C makes one
        t0 = time.perf_counter()
        h = self.model.fit(self.train, epochs=epochs, lr=LR, val_split=val_split, progress=False)
        fit_s = time.perf_counter() - t0
        ev = self.model.evaluate(self.test)
        return {"fit_s": fit_s, "steps": sum(h.steps), "test_loss": ev.loss, "test_accuracy": ev.accuracy}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    exe = build_c()
    with tempfile.TemporaryDirectory() as folder:
        tx, ty, sx, sy = digits()
        eye = np.eye(N_OUT, dtype=np.float32)
        files = {"train_x": tx, "train_y": eye[ty], "test_x": sx, "test_y": eye[sy], **initial_weights()}
        for name, a in files.items():
            np.ascontiguousarray(a, np.float32).tofile(os.path.join(folder, name))
        net = PyNet(args.threads)
        c_us, py_us = [], []
        for _ in range(args.rounds):  # alternating, so that a busy moment of the machine hits both
            c = run_c(exe, folder, args.epochs, 0.0, args.threads)
            c_us.append(c["fit_s"] / c["steps"] * 1e6)
            p = net.fit(args.epochs, 0.0)
            py_us.append(p["fit_s"] / p["steps"] * 1e6)
        c_med, py_med = statistics.median(c_us), statistics.median(py_us)
        print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; threads {args.threads}")
        print(f"net {N_IN}-{N_HIDDEN}-{N_OUT}, batch {BATCH}, AdamW, {N_TRAIN} digits, {args.epochs} epochs")
        print("| | step (us, median of %d) | all runs (us) |" % args.rounds)
        print("|---|---|---|")
        print(f"| C, ggml_opt_fit | {c_med:.1f} | {', '.join(f'{v:.1f}' for v in c_us)} |")
        print(f"| pyggml.opt Model.fit | {py_med:.1f} | {', '.join(f'{v:.1f}' for v in py_us)} |")
        print(f"| ratio | {py_med / c_med:.2f}x | |")
        c = run_c(exe, folder, 30, 0.1, args.threads)
        p = net.fit(30, 0.1)
        print("30 epochs, val_split 0.1, test split of 352:")
        print(
            f"  C       test loss {c['test_loss']:.6f} accuracy {100 * c['test_accuracy']:.2f}% ({round(c['test_accuracy'] * N_TEST)}/{N_TEST})"
        )
        print(
            f"  pyggml  test loss {p['test_loss']:.6f} accuracy {100 * p['test_accuracy']:.2f}% ({round(p['test_accuracy'] * N_TEST)}/{N_TEST})"
        )


if __name__ == "__main__":
    main()
