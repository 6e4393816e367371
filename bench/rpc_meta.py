"""The meta backend over ggml's RPC: two server processes on loopback against two in-process CPU devices.

    python bench/rpc_meta.py [--steps 50] [--trace-steps 3] [--quick]
                             [--baseline-python PY --baseline-cwd DIR] [--check-times]

Starts two RPC servers (`rpc.Server(threads=1)`: `python -m pyggml rpc-server`, one compute thread
each) on 127.0.0.1, adds them (rpc0, rpc1) and runs the same graphs side by side on

- `cpu` (one in-process CPU backend, one thread: the single-device reference),
- `meta:cpu,cpu` (a meta device of two in-process CPU devices; ggml's meta backend creates their
  CPU backends itself, with ggml's default thread count, GGML_DEFAULT_N_THREADS = 4),
- `meta:rpc0,rpc1` (the same meta device made of the two servers' devices).

Graphs:

- conv: the seed's conv-state graph (pyggml.models.conv_state): 2 layers, d_conv 4, 4096 channels,
  K = 4 rollback slots, `host_index` strategy, qkv_mixed computed by a QkvProjection whose weight
  is split by output channel, the conv caches split by channels (`split_policy`). Every step is a
  ubatch of the same shape (4 tokens x 4 sequences), so the graph is built once and reused.
- mlp: residual MLP blocks, h = h + w_down @ relu(w_up @ h): w_up [1024, 4096] F32 split on
  axis 1 (output rows: each device computes half of the hidden units), w_down [4096, 1024] split
  on axis 0 (each device a partial sum, reduced by the meta backend); input 16 columns.

With `--baseline-python` (the interpreter of another pyggml build) and `--baseline-cwd` (its source
tree), two more servers of that build run the same graphs (`meta:` of their devices, the last row):
built without patch 0023, they compute without checking the graphs, so the difference between the
two RPC rows is what the server's graph check costs per step (`validation` below the table).
`--check-times` measures that cost inside the checked servers too, where the noise of a loaded
machine's wall times does not reach it: they run with GGML_RPC_CHECK_TIMES=1 (patch 0023), which
makes them print, for every graph they compute, the microseconds spent loading it (deserializing,
storage checks), checking it (constructors, op_params, kernel rules) and checking index values
before computing it; the script sums those lines over the timed steps (`server checks` below the
table; the printing itself is counted in the checked row).

A step is what an application does per ubatch: set the inputs, compute, read the outputs back.
Each cell: the median wall time of a step (ms), and the bytes that crossed the network per step.

Bytes are counted two ways. `/proc/<pid>/io` (rchar/wchar) does not see them: the RPC server
talks through send/recv, which those counters leave out (they stayed at 0 here).

- loopback: the `lo` line of /proc/net/dev, read before and after the timed steps, divided by the
  steps: every byte both ways between client and servers, TCP/IP headers and ACKs included (lo
  carries nothing else on these machines while the bench runs; the in-process rows show 0).
- servers received / sent: a second, untimed pass of --trace-steps steps with `strace -f` attached
  to each server child (`rpc.Server(...).proc.pid`), summing the byte counts its recvfrom/recvmsg
  and sendto/sendmsg calls returned: the TCP payload, per direction.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time

import numpy as np

import pyggml as gg
from pyggml import rpc
from pyggml.meta import Split
from pyggml.models.conv_state import (
    DeltaNetConv,
    QkvProjection,
    RecurrentMemory,
    Ubatch,
    split_policy,
)

N_LAYER, D_CONV, MEM_SIZE, N_RS_SEQ = 2, 4, 8, 3
N_TOKENS, N_SEQS = 4, 4


def loopback() -> tuple[int, int]:
    """(bytes, packets) the loopback interface has carried (/proc/net/dev, receive side of lo)."""
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                fields = rest.split()
                return int(fields[0]), int(fields[1])
    raise RuntimeError("no loopback interface in /proc/net/dev")


SOCKET_CALL = re.compile(r"\b(sendto|recvfrom|sendmsg|recvmsg)\(.*=\s+(\d+)$")
# a line a server prints per graph with GGML_RPC_CHECK_TIMES set (patch 0023)
CHECK_TIMES = re.compile(
    r"\[rpc_server\] (graph|recompute): (\d+) nodes computed; load (\d+) us, check (\d+) us, "
    r"index (\d+) us, compute (\d+) us"
)


def check_times(lines: list[str]) -> dict:
    """Totals of the servers' GGML_RPC_CHECK_TIMES lines: graphs, recomputes, and seconds per phase."""
    out = {"graphs": 0, "recomputes": 0, "nodes": 0, "load": 0.0, "check": 0.0, "index": 0.0, "compute": 0.0}
    for line in lines:
        m = CHECK_TIMES.search(line)
        if m:
            out["graphs" if m.group(1) == "graph" else "recomputes"] += 1
            out["nodes"] += int(m.group(2))
            for key, us in zip(("load", "check", "index", "compute"), m.groups()[2:]):
                out[key] += int(us) * 1e-6
    return out


def payload_per_step(step, steps: int, pids) -> tuple[float, float]:
    """(bytes the servers received, bytes they sent) per step: the return values of their socket calls,
    traced with strace for `steps` steps (a separate, slower pass: not the timed one)."""
    with tempfile.TemporaryDirectory() as tmp:
        tracers = []
        for pid in pids:
            tracers.append(
                subprocess.Popen(
                    [
                        "strace",
                        "-f",
                        "-qq",
                        "-s",
                        "0",
                        "-e",
                        "signal=none",
                        "-e",
                        "trace=sendto,recvfrom,sendmsg,recvmsg",
                        "-o",
                        f"{tmp}/{pid}.txt",
                        "-p",
                        str(pid),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        time.sleep(1.0)  # attached
        for _ in range(steps):
            step()
        time.sleep(0.3)
        for t in tracers:
            t.terminate()
            t.wait()
        recv = sent = 0
        for pid in pids:
            with open(f"{tmp}/{pid}.txt") as f:
                for line in f:
                    m = SOCKET_CALL.search(line.rstrip())
                    if m:
                        if m.group(1).startswith("recv"):
                            recv += int(m.group(2))
                        else:
                            sent += int(m.group(2))
    return recv / steps, sent / steps


def measure(step, steps: int, pids, trace_steps: int, servers=()) -> dict:
    """Median seconds per step and loopback bytes/packets per step (timed pass, after 2 warm-ups),
    then, with trace_steps > 0, the servers' socket payload per step (traced pass). `servers`: those
    that print GGML_RPC_CHECK_TIMES lines, summed over the timed steps into res["checks"] (and over the
    warm-ups, where a graph reused later is sent whole, into res["warmup"])."""
    before = [len(srv.output().splitlines()) for srv in servers]
    for _ in range(2):
        step()
    seen = [len(srv.output().splitlines()) for srv in servers]
    b0, p0 = loopback()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    b1, p1 = loopback()
    res = {
        "s": statistics.median(times),
        "lo_bytes": (b1 - b0) / steps,
        "lo_packets": (p1 - p0) / steps,
        "recv": 0.0,
        "sent": 0.0,
    }
    if servers:
        time.sleep(0.2)  # the last lines flushed
        logs = [srv.output().splitlines() for srv in servers]
        res["checks"] = {
            k: v / steps for k, v in check_times([ln for lg, n in zip(logs, seen) for ln in lg[n:]]).items()
        }
        res["warmup"] = check_times([ln for lg, n0, n in zip(logs, before, seen) for ln in lg[n0:n]])
    if trace_steps:
        res["recv"], res["sent"] = payload_per_step(step, trace_steps, pids)
    return res


def runner_for(name: str) -> gg.Runner:
    return gg.Runner(name, n_threads=1) if name == "cpu" else gg.Runner(name)


def bench_conv(name: str, channels: int, steps: int, pids, trace_steps: int, servers=()) -> dict:
    runner = runner_for(name)
    runner.set_policy(split_policy(D_CONV, runner.n_devices))  # before the static tensors (no-op on cpu)
    mem = RecurrentMemory(runner.backend, N_LAYER, D_CONV, channels, MEM_SIZE, N_RS_SEQ)
    rng = np.random.default_rng(0)
    for il in range(N_LAYER):
        mem.write(il, rng.standard_normal((mem.n_rows, mem.n_embd_r)).astype(np.float32))
    model = DeltaNetConv(mem, runner, "host_index", QkvProjection(runner.backend, N_LAYER, channels))
    qkv = [rng.standard_normal((N_SEQS, N_TOKENS, channels)).astype(np.float32) for _ in range(N_LAYER)]
    s_copy = list(range(N_SEQS))
    res = measure(lambda: model.step(Ubatch(qkv, s_copy, 0)), steps, pids, trace_steps, servers)
    assert model.builds == 1, model.builds  # one shape: built once, reused
    return res


class Mlp:
    """Residual MLP blocks with the weights split across the meta device's devices."""

    def __init__(self, runner: gg.Runner, n_in: int, n_hidden: int, n_blocks: int, cols: int):
        n = runner.n_devices  # not runner itself: the meta device (kept by pyggml) holds the policy
        runner.set_policy(
            [("w_up*", lambda t: Split.even(1, t.ne[1], n)), ("w_down*", lambda t: Split.even(0, t.ne[0], n))]
        )
        self.runner = runner
        self.wctx = gg.Context()
        self.up = [self.wctx.tensor("f32", (n_hidden, n_in), f"w_up{i}") for i in range(n_blocks)]
        self.down = [self.wctx.tensor("f32", (n_in, n_hidden), f"w_down{i}") for i in range(n_blocks)]
        self.buffer = runner.backend.alloc_tensors(self.wctx)
        rng = np.random.default_rng(0)
        for w in self.up + self.down:
            w.set((rng.standard_normal((w.ne[1], w.ne[0])) / np.sqrt(w.ne[0])).astype(np.float32))
        self.ctx = gg.Context()
        self.x = self.ctx.tensor("f32", (cols, n_in), "x", input=True)
        h = self.x
        for up, down in zip(self.up, self.down):
            h = self.ctx.add(h, self.ctx.mul_mat(down, self.ctx.relu(self.ctx.mul_mat(up, h))))
        self.out = h
        self.graph = gg.Graph(self.ctx).build_forward_expand(h)
        runner.allocate(self.graph, [self.out])

    def step(self, x: np.ndarray) -> np.ndarray:
        self.x.set(x)
        self.runner.compute(self.graph)
        return self.out.numpy()

    def reference(self, x: np.ndarray) -> np.ndarray:
        h = x.astype(np.float64)
        for up, down in zip(self.up, self.down):
            h = h + np.maximum(h @ up.numpy().T, 0) @ down.numpy().T
        return h


def bench_mlp(
    name: str, n_in: int, n_hidden: int, n_blocks: int, cols: int, steps: int, pids, trace_steps: int, servers=()
) -> dict:
    mlp = Mlp(runner_for(name), n_in, n_hidden, n_blocks, cols)
    x = np.random.default_rng(1).standard_normal((cols, n_in)).astype(np.float32)
    np.testing.assert_allclose(mlp.step(x), mlp.reference(x), rtol=1e-4, atol=1e-4)
    return measure(lambda: mlp.step(x), steps, pids, trace_steps, servers)


def fmt_bytes(b: float) -> str:
    return f"{b / 1024:.1f}" if b else "0"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50, help="timed steps per cell (after 2 warm-ups)")
    parser.add_argument(
        "--trace-steps",
        type=int,
        default=3,
        help="steps of the strace pass that counts the servers' payload (0: skip it)",
    )
    parser.add_argument("--quick", action="store_true", help="smaller graphs (1024 channels; one MLP block)")
    parser.add_argument("--blocks", type=int, default=2, help="MLP blocks (--quick: 1)")
    parser.add_argument("--baseline-python", help="also run servers of another pyggml build: its interpreter")
    parser.add_argument("--baseline-cwd", help="... started from this folder (that build's source tree)")
    parser.add_argument(
        "--check-times",
        action="store_true",
        help="the checked servers print what each graph's checks cost (GGML_RPC_CHECK_TIMES): summed per step",
    )
    args = parser.parse_args()
    channels = 1024 if args.quick else 4096
    n_blocks = 1 if args.quick else args.blocks
    n_in, n_hidden, cols = 1024, 4096, 16
    trace_steps = args.trace_steps if shutil.which("strace") else 0

    base_kw = {"python": args.baseline_python, "cwd": args.baseline_cwd}
    with contextlib.ExitStack() as stack:
        env = {"GGML_RPC_CHECK_TIMES": "1"} if args.check_times else None
        a, b = (stack.enter_context(rpc.Server(threads=1, env=env)) for _ in range(2))
        timed = (a, b) if args.check_times else ()
        names = [d.name.lower() for d in rpc.add_server(a.endpoint) + rpc.add_server(b.endpoint)]
        rpc_meta = "meta:" + ",".join(names)
        pids = [a.proc.pid, b.proc.pid]
        backends = ["cpu", "meta:cpu,cpu", rpc_meta]
        baseline = None
        if args.baseline_python:
            c, d = (stack.enter_context(rpc.Server(threads=1, **base_kw)) for _ in range(2))
            baseline = "meta:" + ",".join(
                x.name.lower() for x in rpc.add_server(c.endpoint) + rpc.add_server(d.endpoint)
            )
            backends.append(baseline)
        print(
            f"# cores: {os.cpu_count()}; servers {a.endpoint}, {b.endpoint} (loopback, 1 thread each); "
            f"median of {args.steps} steps; payload traced over {trace_steps or 'no'} steps"
        )
        print(
            f"# conv: {N_LAYER} layers, d_conv {D_CONV}, {channels} channels, K {N_RS_SEQ + 1}, host_index, "
            f"{N_TOKENS} tokens x {N_SEQS} sequences, projection [{channels}, {channels}] split by output channel"
        )
        print(
            f"# mlp: {n_blocks} blocks of w_up [{n_in}, {n_hidden}] (axis 1) and w_down [{n_hidden}, {n_in}] "
            f"(axis 0), F32, input {cols} columns"
        )
        print()
        print(
            "| graph | backend | ms/step (median) | x meta:cpu,cpu | servers received KiB/step "
            "| servers sent KiB/step | loopback KiB/step (packets) |"
        )
        print("|---|---|---|---|---|---|---|")
        cells = (
            ("conv", lambda n, tr, sv: bench_conv(n, channels, args.steps, pids, tr, sv)),
            ("mlp", lambda n, tr, sv: bench_mlp(n, n_in, n_hidden, n_blocks, cols, args.steps, pids, tr, sv)),
        )
        cost = {}
        checks = {}
        for graph, run in cells:
            base = None
            for name in backends:
                r = run(name, trace_steps if name == rpc_meta else 0, timed if name == rpc_meta else ())
                if "checks" in r:
                    checks[graph] = (r["checks"], r["warmup"], r["s"])
                gc.collect()  # free its buffers while the servers run
                if name == "meta:cpu,cpu":
                    base = r["s"]
                if name in (rpc_meta, baseline):
                    cost.setdefault(graph, {})[name] = r["s"]
                ratio = f"{r['s'] / base:.2f}x" if base else "-"
                traced = name == rpc_meta and trace_steps
                recv, sent = (fmt_bytes(r["recv"]), fmt_bytes(r["sent"])) if traced else ("-", "-")
                label = f"{name} (baseline build)" if name == baseline else name
                print(
                    f"| {graph} | {label} | {r['s'] * 1e3:.2f} | {ratio} | {recv} | {sent} "
                    f"| {fmt_bytes(r['lo_bytes'])} ({r['lo_packets']:.0f}) |",
                    flush=True,
                )
        if checks:
            print()
            for graph, (c, w, step_s) in checks.items():
                spent = c["load"] + c["check"] + c["index"]
                print(
                    f"server checks ({graph}), per step, both servers together: {c['graphs']:.1f} graphs "
                    f"({c['nodes']:.0f} nodes) and {c['recomputes']:.1f} recomputes; load {c['load'] * 1e3:.3f} ms, "
                    f"check {c['check'] * 1e3:.3f} ms, index values {c['index'] * 1e3:.3f} ms: {spent * 1e3:.3f} ms, "
                    f"{100 * spent / step_s:.2f} % of the {step_s * 1e3:.2f} ms step (compute {c['compute'] * 1e3:.2f} ms)"
                )
                print(
                    f"  warm-ups ({graph}, 2 steps): {w['graphs']} graphs sent whole ({w['nodes']} nodes), "
                    f"{w['recomputes']} recomputes; load {w['load'] * 1e3:.3f} ms, check {w['check'] * 1e3:.3f} ms, "
                    f"index values {w['index'] * 1e3:.3f} ms"
                )
        if baseline:
            print()
            for graph, t in cost.items():
                extra = t[rpc_meta] - t[baseline]
                print(
                    f"validation ({graph}): {extra * 1e3:+.3f} ms per step, {100 * extra / t[rpc_meta]:+.1f} % of a step "
                    f"({t[rpc_meta] * 1e3:.2f} ms checked, {t[baseline] * 1e3:.2f} ms unchecked)"
                )


if __name__ == "__main__":
    main()
