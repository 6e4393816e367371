"""`check --mode perf`: each op case's graph timed on each backend, as test-backend-ops' perf mode times
its own cases, and set against what this machine's backend can do at best.

For one case on one backend (no scheduler, no guards: the backend computes the graph itself):

- the case's graph is built (its inputs through their layouts, its op) in a graph of 8192 nodes, its
  tensors are allocated on the backend and its inputs written once;
- one compute warms up (Vulkan compiles its pipelines there) and passes pyggml's checks;
- the output node is added again until a compute does about 8 GFLOP (CPU; 100 on a device) for a
  compute-bound op, or moves about 8 GiB (CPU; 32 GiB on a device) otherwise, as test-backend-ops
  does, so that the launch of one compute is small beside its work;
- `ggml_backend_graph_compute` itself is timed, again and again until `seconds` have passed.

It reports runs (times the op was computed), us per run, GFLOPS for compute-bound ops (products,
convolutions, attention, triangular solves) and GB/s otherwise (bytes of the node and its sources,
as test-backend-ops counts them; GB = 1e9 bytes), and the fraction of the backend's measured limits:
the bandwidth of a large F32 copy (read + write) and the FLOPS of a large F32 and F16 product,
measured the same way in the same run.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, TextIO

from pyggml._native import ffi, lib
from pyggml.backend import Backend, backend, cpu_backend
from pyggml.context import Context
from pyggml.graph import Graph
from pyggml.tensor import Tensor
from pyggml.testing.engine import verdict
from pyggml.testing.engine.verdict import Record, Status

if TYPE_CHECKING:
    from pyggml._pyggml_cffi import CData
    from pyggml.testing.engine.cases import Case

GRAPH_NODES = 8192
GFLOP, GIB = 10**9, 1 << 30
TARGET_FLOPS = {True: 8 * GFLOP, False: 100 * GFLOP}  # per compute, by "is the CPU" (test-backend-ops)
TARGET_BYTES = {True: 8 * GIB, False: 32 * GIB}


@dataclass
class PerfRecord:
    """One case's timing on one backend. `gflops` for a compute-bound op, else `gbps`; `of_peak` is the
    fraction of the backend's measured limit that figure reaches."""

    case: str
    backend: str
    status: Status
    runs: int = 0
    us_per_run: float = 0.0
    nodes_per_compute: int = 0
    flops: int = 0  # of one run
    bytes: int = 0  # of one run
    gflops: float | None = None
    gbps: float | None = None
    of_peak: float | None = None
    message: str = ""

    @classmethod
    def of(cls, record: Record, **timing: Any) -> PerfRecord:
        """The perf record of a verdict's record (`pyggml.testing.engine.verdict`: its statuses are written there),
        with the timing figures given."""
        return cls(record.case, record.backend, record.status, message=record.message, **timing)


def _ne(t) -> list[int]:
    return [t.ne[i] for i in range(4)]


def _nel(t) -> int:
    a, b, c, d = _ne(t)
    return a * b * c * d


VIEW_OPS = ("VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE")  # ggml_is_view_op's: no work of their own


def _op_name(t) -> str:
    return ffi.string(lib.ggml_op_name(t.op)).decode()


def node_flops(t: CData) -> int:
    """The floating-point operations of one node of a compute-bound op kind (a multiply-add counts 2),
    else 0. Counted as test-backend-ops counts its own cases' (op_flops)."""
    op = _op_name(t)
    s0, s1 = t.src[0], t.src[1]
    if op in ("MUL_MAT", "MUL_MAT_ID"):
        return 2 * _nel(t) * s0.ne[0]
    if op == "OUT_PROD":
        return 2 * _nel(t) * s0.ne[1]
    if op == "CONV_2D":  # kernel [KW, KH, Cin, Cout]
        return 2 * _nel(t) * s0.ne[0] * s0.ne[1] * s0.ne[2]
    if op == "CONV_2D_DW":
        return 2 * _nel(t) * s0.ne[0] * s0.ne[1]
    if op == "CONV_TRANSPOSE_1D":  # kernel [K, Cout, Cin], input [L, Cin]
        return 2 * _nel(s1) * s0.ne[0] * s0.ne[1]
    if op == "CONV_TRANSPOSE_2D":  # kernel [KW, KH, Cout, Cin], input [W, H, Cin, N]
        return 2 * _nel(s1) * s0.ne[0] * s0.ne[1] * s0.ne[2]
    if op == "FLASH_ATTN_EXT":  # q [hsk, nb, nh, ns], k [hsk, kv, ...], v [hsv, kv, ...]
        return 2 * s0.ne[1] * s0.ne[2] * s0.ne[3] * (s0.ne[0] + t.src[2].ne[0]) * s1.ne[1]
    if op == "SOLVE_TRI":  # lhs [n, n, ...], rhs [k, n, ...]
        return s0.ne[0] * (s0.ne[0] + 1) * s1.ne[0] * s0.ne[2] * s0.ne[3]
    return 0


def node_bytes(t: CData) -> int:
    """The bytes a node reads and writes as test-backend-ops counts them: its own and its sources'."""
    n = lib.ggml_nbytes(t)
    for i in range(lib.GGML_MAX_SRC):
        if t.src[i] != ffi.NULL:
            n += lib.ggml_nbytes(t.src[i])
    return n


def cpu_like(be: Backend) -> bool:
    """The CPU, or a device that computes on it (Mesa's lavapipe): test-backend-ops' CPU work targets."""
    return be.is_cpu or "llvmpipe" in be.device.description.lower()


def make_backend(name: str, n_threads: int | None) -> Backend:
    return cpu_backend(n_threads) if name == "cpu" else backend(name, n_threads)


def time_graph(be: Backend, ctx: Context, out: Tensor, graph: Graph, seconds: float) -> PerfRecord:
    """Warm up, repeat the output node as test-backend-ops does, time computes for `seconds`."""
    be.compute(graph)  # warm-up, through pyggml's checks
    is_cpu = cpu_like(be)
    flops = node_flops(out.ptr)
    size = node_bytes(out.ptr)
    room = GRAPH_NODES - graph.n_nodes
    n_runs = min(room, TARGET_FLOPS[is_cpu] // flops if flops else TARGET_BYTES[is_cpu] // max(size, 1)) + 1
    others = [p for p in (lib.ggml_graph_node(graph.ptr, i) for i in range(graph.n_nodes)) if p != out.ptr]
    other_flops = sum(node_flops(p) for p in others)
    other_bytes = sum(node_bytes(p) for p in others if _op_name(p) not in VIEW_OPS)
    for _ in range(1, n_runs):
        lib.ggml_graph_add_node(graph.ptr, out.ptr)
    total_us, runs, computes = 0, 0, 0
    while total_us < seconds * 1e6 or computes == 0:
        t0 = time.perf_counter_ns()
        status = lib.ggml_backend_graph_compute(be.ptr, graph.ptr)
        total_us += (time.perf_counter_ns() - t0) // 1000
        if status != lib.GGML_STATUS_SUCCESS:
            raise RuntimeError(f"ggml_backend_graph_compute failed: status {status}")
        runs += n_runs
        computes += 1
    sec = total_us / 1e6
    timing = {"runs": runs, "us_per_run": total_us / runs, "nodes_per_compute": n_runs + len(others)}
    rec = PerfRecord.of(verdict.timed("", ""), **timing, flops=flops, bytes=size)
    if flops:
        rec.gflops = (flops * runs + other_flops * computes) / sec / 1e9
    else:
        rec.gbps = (size * runs + other_bytes * computes) / sec / 1e9
    return rec


def time_case(case: Case, be: Backend, seconds: float) -> PerfRecord:
    """One op case's graph on `be` (the case must be an OpCase: one graph built from its spec)."""
    ctx = Context(graph_size=GRAPH_NODES)
    x = {k: ctx.tensor(spec.type, spec.shape, k, input=True) for k, spec in case.inputs.items()}  # type: ignore[attr-defined]
    out = case.build_fn(ctx, SimpleNamespace(**x))  # type: ignore[attr-defined]
    graph = Graph(ctx, GRAPH_NODES).build_forward_expand(out)
    if graph.n_nodes == 0:
        raise ValueError("a graph of views only: nothing to compute")
    bad = be.unsupported(graph)
    if bad:
        return PerfRecord.of(verdict.unsupported(case.name, "", "not supported: " + ", ".join(n.op.name for n in bad)))
    be.alloc_tensors(ctx)
    raw = case.raw_values()  # type: ignore[attr-defined]
    for k, t in x.items():
        t.set_raw(raw[k])
    rec = time_graph(be, ctx, out, graph, seconds)
    rec.case = case.name
    return rec


# --- the machine's limits on a backend ----------------------------------------------------------------------
@dataclass
class Limits:
    gbps: float  # a large F32 copy, read + write
    gflops_f32: float  # a large F32 product
    gflops_f16: float  # a large F16 x F32 product


def measure_limits(be: Backend, seconds: float, copy_mib: int = 256, n: int = 1024) -> Limits:
    """The backend's best bandwidth (a copy of `copy_mib` MiB of F32, or the largest half of it the device
    takes: lavapipe refuses buffers past 128 MiB) and FLOPS (n x n x n products)."""
    while True:
        ctx = Context(graph_size=GRAPH_NODES)
        rows = copy_mib * (1 << 20) // 4 // 4096
        out = ctx.cpy(ctx.tensor("f32", (rows, 4096), "src"), ctx.tensor("f32", (rows, 4096), "dst"))
        if be.supports_op(out) or copy_mib <= 16:
            break
        copy_mib //= 2
    copy = _limit_run(be, ctx, out, seconds)
    copy_gbps = 2 * copy_mib * (1 << 20) / (copy.us_per_run * 1e3)  # read + write: the bytes that move
    mm = []
    for wtype in ("f32", "f16"):
        ctx = Context(graph_size=GRAPH_NODES)
        w, v = ctx.tensor(wtype, (n, n), "w"), ctx.tensor("f32", (n, n), "x")
        mm.append(_limit_run(be, ctx, ctx.mul_mat(w, v), seconds))
    return Limits(copy_gbps, mm[0].gflops or 0.0, mm[1].gflops or 0.0)


def _limit_run(be: Backend, ctx: Context, out: Tensor, seconds: float) -> PerfRecord:
    graph = Graph(ctx, GRAPH_NODES).build_forward_expand(out)
    be.alloc_tensors(ctx)
    for t in ctx.tensors():
        if t.ptr.view_src == ffi.NULL and t is not out and t.ptr.op == 0:
            lib.ggml_backend_tensor_memset(t.ptr, 0, 0, lib.ggml_nbytes(t.ptr))
    return time_graph(be, ctx, out, graph, seconds)


def of_peak(rec: PerfRecord, limits: Limits, case: Case) -> float | None:
    if rec.gflops is not None:
        peak = limits.gflops_f16 if "f16" in case.types else limits.gflops_f32
        return rec.gflops / peak if peak else None
    return rec.gbps / limits.gbps if rec.gbps is not None and limits.gbps else None


# --- the run --------------------------------------------------------------------------------------------------
def run_perf(
    selected: Sequence[Case],
    backends: list[str],
    seconds: float = 1.0,
    n_threads: int | None = None,
    progress: TextIO | None = None,
) -> tuple[list[PerfRecord], dict[str, Limits]]:
    """Every selected op case on every backend, and each backend's limits. n_threads: the CPU backend's
    threads (None: half the machine's cores, at least one, as test-backend-ops' perf mode)."""
    import os

    from pyggml.testing.engine.cases import OpCase

    n_threads = n_threads or max(1, (os.cpu_count() or 1) // 2)  # test-backend-ops' choice
    records: list[PerfRecord] = []
    limits: dict[str, Limits] = {}
    for name in backends:
        try:
            be = make_backend(name, n_threads)
            limits[name] = measure_limits(make_backend(name, n_threads), seconds)
        except Exception as e:  # noqa: BLE001 - reported as the backend's error
            records.append(PerfRecord.of(verdict.unavailable(name, e)))
            continue
        for case in selected:
            if not isinstance(case, OpCase):
                rec = PerfRecord.of(verdict.skip(case.name, name, "a scenario of several graphs"))
            else:
                try:
                    rec = time_case(case, be, seconds)
                    if rec.status == Status.PASS:
                        rec.of_peak = of_peak(rec, limits[name], case)
                except Exception as e:  # noqa: BLE001 - one case's error, not the run's
                    rec = PerfRecord.of(verdict.error(case.name, name, f"{type(e).__name__}: {e}"))
            rec.backend = name
            records.append(rec)
            if progress is not None:
                progress.write(f"{format_row(rec)}\n")
                progress.flush()
    return records, limits


def format_row(r: PerfRecord, width: int = 60) -> str:
    if r.status != Status.PASS:
        return f"{r.case:<{width}} {r.backend:<10} {r.status}: {r.message}"
    rate = f"{r.gflops:9.2f} GFLOPS" if r.gflops is not None else f"{r.gbps:9.2f} GB/s  "
    peak = f"{100 * r.of_peak:5.1f} %" if r.of_peak is not None else "     -"
    return f"{r.case:<{width}} {r.backend:<10} {r.runs:>9} {r.us_per_run:>12.3f} {rate} {peak}"


def table(records: Sequence[PerfRecord], limits: dict[str, Limits]) -> str:
    width = max([len(r.case) for r in records] + [4])
    lines = [f"{'case':<{width}} {'backend':<10} {'runs':>9} {'us/run':>12} {'rate':>16} {'of peak':>7}"]
    lines += [format_row(r, width) for r in records]
    lines.append("")
    for name, lim in limits.items():
        lines.append(
            f"{name}: limits measured now: copy {lim.gbps:.1f} GB/s, F32 product {lim.gflops_f32:.1f} GFLOPS, "
            f"F16 product {lim.gflops_f16:.1f} GFLOPS"
        )
    return "\n".join(lines)


def as_records(records: Sequence[PerfRecord]) -> list[Record]:
    """The runs as check's records (for JUnit: a testcase per case and backend, its time one run's)."""
    out = []
    for r in records:
        msg = r.message
        if r.status == Status.PASS:
            rate = f"{r.gflops:.3f} GFLOPS" if r.gflops is not None else f"{r.gbps:.3f} GB/s"
            peak = f", {100 * r.of_peak:.1f} % of the backend's measured limit" if r.of_peak is not None else ""
            msg = f"{r.runs} runs, {r.us_per_run:.3f} us/run, {rate}{peak}"
        out.append(Record(r.case, r.backend, r.status, message=msg, seconds=r.us_per_run / 1e6))
    return out
