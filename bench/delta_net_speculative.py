"""Time a speculative-decoding step of the gated delta-net layer: rollback slots against host-side
checkpointing, side by side.

    python bench/delta_net_speculative.py [--backend cpu --backend vulkan0] [--steps 24] [--quick]

A step drafts n tokens of one sequence, then keeps n - j of them (j cycles through 0..n-1):

- rollback (pyggml.models.delta_net, K = n): the draft's ubatch writes K slots of both caches; the next
  step reads slot j. Nothing else happens: one graph compute per step.
- checkpoint (what a runtime without rollback slots does, K = 1): before the draft, copy the
  sequence's conv and recurrent states of every layer to the host; after it, when j > 0, copy them
  back and run the n - j accepted tokens again (a ubatch of another shape, so llama.cpp-style graph
  reuse rebuilds the graph).

Each cell: the mean wall time of a step (inputs set, compute, outputs read), and the bytes copied
between host and device per step for the checkpoints.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

os.environ.setdefault("GGML_VK_VISIBLE_DEVICES", "0")

import pyggml as gg  # noqa: E402
from pyggml import ffi, lib  # noqa: E402
from pyggml.models.delta_net import DeltaNet, DeltaNetConfig  # noqa: E402

CONFIG = DeltaNetConfig(n_embd=512, n_layer=4, head_dim=64, n_k_heads=4, n_v_heads=8)
CELL = 0


def state_rows(model: DeltaNet):
    """(tensor, byte offset, size) of cell CELL's slot-0 row in every cache of every layer."""
    out = []
    for caches in (model.mem.conv_states_all, model.mem.ssm_states_all):
        for t in caches:
            nb1 = t.ptr.nb[1]
            out.append((t, CELL * nb1, nb1))
    return out


def save(rows) -> list[np.ndarray]:
    saved = []
    for t, off, size in rows:
        buf = np.empty(size, np.uint8)
        lib.ggml_backend_tensor_get(t.ptr, ffi.from_buffer(buf), off, size)
        saved.append(buf)
    return saved


def restore(rows, saved):
    for (t, off, size), buf in zip(rows, saved):
        lib.ggml_backend_tensor_set(t.ptr, ffi.from_buffer(buf), off, size)


def bench(backend: str, n: int, steps: int) -> dict:
    rng = np.random.default_rng(0)
    drafts = [rng.standard_normal((1, n, CONFIG.n_embd)).astype(np.float32) for _ in range(steps)]
    rollbacks = [s % n for s in range(steps)]

    model = DeltaNet(gg.Runner(backend), CONFIG, K=n, mem_size=1)
    j_prev = 0
    model.step(drafts[0], [model.row(CELL)], CELL)  # build and warm up
    t0 = time.perf_counter()
    for x, j in zip(drafts, rollbacks):
        model.step(x, [model.row(CELL, j_prev)], CELL)
        j_prev = j
    rollback_s = (time.perf_counter() - t0) / steps

    model = DeltaNet(gg.Runner(backend), CONFIG, K=1, mem_size=1)
    rows = state_rows(model)
    model.step(drafts[0], [model.row(CELL)], CELL)
    moved = 0
    t0 = time.perf_counter()
    for x, j in zip(drafts, rollbacks):
        saved = save(rows)
        moved += sum(b.size for b in saved)
        model.step(x, [model.row(CELL)], CELL)
        if j:
            restore(rows, saved)
            moved += sum(b.size for b in saved)
            model.step(x[:, : n - j], [model.row(CELL)], CELL)
    checkpoint_s = (time.perf_counter() - t0) / steps
    return {
        "rollback": rollback_s,
        "checkpoint": checkpoint_s,
        "bytes": moved / steps,
        "accepted": float(np.mean([n - j for j in rollbacks])),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", action="append")
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--quick", action="store_true", help="n = 4 only, 8 steps")
    args = p.parse_args()
    backends = args.backend or ["cpu"]
    ns = [4] if args.quick else [2, 4, 8]
    steps = 8 if args.quick else args.steps
    c = CONFIG
    print(
        f"# {c.n_layer} layers, n_embd {c.n_embd}, head {c.head_dim}, {c.n_k_heads} key / {c.n_v_heads} value "
        f"heads, d_conv {c.d_conv}, F32 caches; one sequence; {steps} steps, rollback j = step % n"
    )
    print(
        "| backend | drafted n | accepted (mean) | rollback ms/step | checkpoint ms/step | checkpoint / rollback "
        "| checkpoint bytes/step |"
    )
    print("|---|---|---|---|---|---|---|")
    for backend in backends:
        for n in ns:
            r = bench(backend, n, steps)
            print(
                f"| {backend} | {n} | {r['accepted']:.1f} | {r['rollback'] * 1e3:.2f} | {r['checkpoint'] * 1e3:.2f} "
                f"| {r['checkpoint'] / r['rollback']:.2f}x | {r['bytes'] / 1024:.0f} KiB |"
            )


if __name__ == "__main__":
    main()
