"""Test cases: each one small object with its parameters, how it builds its graph, its NumPy
oracle and its error bound, in the spirit of ggml's test-backend-ops.

A case runs on any backend through a `Runner`; `check.py` runs every registered case on
every backend and compares with the oracle (NMSE, as test-backend-ops) and across backends.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TypeVar

import numpy as np

from pyggml import types
from pyggml.context import Context
from pyggml.graph import Graph
from pyggml._native import ffi, lib
from pyggml.errors import Unsupported
from pyggml.runner import Runner
from pyggml.testing.guard import run_guarded

REGISTRY: dict[str, "Case"] = {}

# NMSE bounds by output precision (test-backend-ops uses 1e-7 for most F32 ops)
NMSE_F32 = 1e-7
NMSE_F16 = 1e-5
NMSE_QUANT = 1e-6  # oracle sees the dequantized inputs, so only accumulation order differs
# NMSE bounds that depend on more than the input types (see each use)
NMSE_FP16_TABLE = 1e-5   # gelu / gelu_quick on CPU look F32 inputs up in an fp16 table
NMSE_Q8_DOT = 5e-4       # mul_mat with a quantized a: the CPU quantizes b to Q8_0 first
NMSE_Q8_STORE = 1e-4     # values written into a Q8_0 tensor (quantized on the way)


def nmse(actual: np.ndarray, expected: np.ndarray) -> float:
    a = np.asarray(actual, dtype=np.float64).ravel()
    e = np.asarray(expected, dtype=np.float64).ravel()
    if a.shape != e.shape:
        return float("inf")
    off = ~np.isfinite(a)
    if (off != ~np.isfinite(e)).any() or not np.array_equal(a[off], e[off], equal_nan=True):
        return float("inf")  # NaN and Inf must sit where the oracle has them
    fin = np.isfinite(e)
    num = np.sum((a[fin] - e[fin]) ** 2)
    den = np.sum(e[fin] ** 2)
    return float(num / den) if den > 0 else float(num)


def max_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """The largest per-element error relative to the output's scale (max |expected|), finite entries."""
    a = np.asarray(actual, dtype=np.float64).ravel()
    e = np.asarray(expected, dtype=np.float64).ravel()
    fin = np.isfinite(e) & np.isfinite(a)
    if not fin.any():
        return 0.0
    diff = np.abs(a[fin] - e[fin]).max()
    scale = np.abs(e[fin]).max()
    return float(diff / scale) if scale > 0 else float(diff)


class Mismatch(Exception):
    """A property a case checks on the backend itself did not hold (e.g. rollback == rerun): a failure."""


@dataclass
class Comparison:
    ok: bool
    nmse: float = 0.0
    max_error: float = 0.0
    message: str = ""


def compare(actual: np.ndarray, expected: np.ndarray, nmse_bound: float, max_error_bound: float) -> Comparison:
    """The suite's verdict on one output: same shape, NaN and Inf in the same places, NMSE within
    nmse_bound and every element within max_error_bound of the output's scale (a single wrong element
    of a large output can hide under an NMSE bound). Bounds of 0 mean bit-exact."""
    a, e = np.asarray(actual), np.asarray(expected)
    if a.size != e.size:
        return Comparison(False, float("inf"), float("inf"), f"{a.size} elements, the oracle has {e.size}")
    a = a.reshape(e.shape)
    if nmse_bound == 0 and max_error_bound == 0:
        same = np.array_equal(a, e, equal_nan=a.dtype.kind == "f")
        return Comparison(same, 0.0 if same else float("inf"), 0.0 if same else float("inf"),
                          "" if same else f"{int((a != e).sum())} element(s) differ (bit-exact case)")
    a64, e64 = a.astype(np.float64), e.astype(np.float64)
    for what, fn in (("NaN", np.isnan), ("+Inf", np.isposinf), ("-Inf", np.isneginf)):
        if (fn(a64) != fn(e64)).any():
            return Comparison(False, float("inf"), float("inf"),
                              f"{what} at {int((fn(a64) != fn(e64)).sum())} position(s) the oracle does not have")
    err, worst = nmse(a64, e64), max_error(a64, e64)
    if err > nmse_bound:
        return Comparison(False, err, worst, f"NMSE {err:.2e} > {nmse_bound:.0e}")
    if worst > max_error_bound:
        at = np.unravel_index(np.argmax(np.abs(a64 - e64) * np.isfinite(e64)), e64.shape)
        return Comparison(False, err, worst, f"largest error {worst:.2e} of the output's scale > {max_error_bound:.1e} "
                                             f"(at {tuple(int(i) for i in at)}: {a64[at]!r} vs {e64[at]!r})")
    return Comparison(True, err, worst)


class Case:
    """Base: subclasses set `name`, `nmse_bound`, and implement execute() and expected()."""

    name: str = ""
    nmse_bound: float = NMSE_F32
    params: dict = {}
    max_error: float | None = None  # None: 30 root-mean-square errors of the NMSE bound
    known: dict[str, str] = {}

    @property
    def max_error_bound(self) -> float:
        """The largest error one element may have, relative to the output's scale (0: bit-exact)."""
        return self.max_error if self.max_error is not None else 30 * self.nmse_bound ** 0.5  # backend name prefix -> why that backend is known to disagree (findings.md)

    backend_bounds: dict[str, tuple[float, str]] = {}  # backend prefix -> (NMSE bound, why that backend needs it)

    def bounds_for(self, backend: str) -> tuple[float, float]:
        """(NMSE bound, largest-error bound) on `backend`: the case's own, or the one stated for a backend
        that computes in lower precision on purpose (e.g. Vulkan's F16 copy of a non-contiguous F32 operand)."""
        override = next((b for prefix, (b, _) in self.backend_bounds.items() if backend.startswith(prefix)), None)
        if override is None:
            return self.nmse_bound, self.max_error_bound
        return override, 30 * override ** 0.5

    def known_failure(self, backend: str) -> str | None:
        """Why `backend` is known to disagree with the oracle on this case, or None."""
        return next((why for prefix, why in self.known.items() if backend.startswith(prefix)), None)

    def execute(self, runner: Runner) -> list[np.ndarray]:
        raise NotImplementedError

    def expected(self) -> list[np.ndarray]:
        raise NotImplementedError

    def rng(self) -> np.random.Generator:
        return np.random.default_rng(zlib.crc32(self.name.encode()))


def graph_ops(graph: Graph) -> set[str]:
    """The op kinds a graph computes, as ggml names them (unary and GLU ops by their own names)."""
    return {ffi.string(lib.ggml_op_desc(n.ptr)).decode() for n in graph.nodes} - {"NONE"}


C = TypeVar("C", bound="Case")


def register(case: C) -> C:
    if case.name in REGISTRY:
        raise ValueError(f"duplicate case name {case.name}")
    REGISTRY[case.name] = case
    return case


def case_op(case: Case) -> str:
    """The op a case is about: its `op` parameter, else the first part of its name."""
    return case.params.get("op") or case.name.split("/", 1)[0]


def case_types(case: Case) -> set[str]:
    """The ggml types a case involves (lower case): its inputs' types and its name's type part."""
    out = {part for part in case.name.split("/")[1:2]}
    for spec in getattr(case, "inputs", {}).values():
        out.add(types.as_type(spec[0]).name.lower())
    if "type" in case.params:
        out.add(str(case.params["type"]).lower())
    return out


def select(pattern: str | None = None, ops: list[str] | None = None, type_names: list[str] | None = None) -> list[Case]:
    """Cases whose name contains `pattern` or matches it as a regular expression, about one of `ops`,
    involving one of the types `type_names` (each filter applies only when given)."""
    _load_all()
    cases = list(REGISTRY.values())
    if pattern:
        try:
            rx = re.compile(pattern)
        except re.error:  # not a regular expression: a plain substring then
            rx = None
        cases = [c for c in cases if pattern in c.name or (rx is not None and rx.search(c.name))]
    if ops:
        wanted = {o.lower() for o in ops}
        cases = [c for c in cases if case_op(c) in wanted]
    if type_names:
        wanted = {t.lower() for t in type_names}
        cases = [c for c in cases if case_types(c) & wanted]
    return cases


def _load_all():
    """Import every module of this package: each registers its cases when imported."""
    import importlib
    import pkgutil
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")


# --- one op, fresh inputs, one output ------------------------------------------------------
def uniform(lo=-1.0, hi=1.0):
    return lambda rng, shape: rng.uniform(lo, hi, size=shape).astype(np.float32)


def integers(lo, hi):
    return lambda rng, shape: rng.integers(lo, hi, size=shape).astype(np.int64)


def signed_away_from_zero(lo=0.5, hi=2.0):
    """|x| in [lo, hi) with a random sign: div denominators."""
    return lambda rng, shape: (rng.uniform(lo, hi, size=shape) * rng.choice([-1.0, 1.0], size=shape)).astype(np.float32)


def distinct(lo=-1.0, hi=1.0):
    """Values with no ties in any row (argsort / argmax are ambiguous on ties)."""
    def gen(rng, shape):
        n = int(np.prod(shape))
        vals = np.linspace(lo, hi, n, dtype=np.float32)
        return rng.permutation(vals).reshape(shape)
    return gen


def permutation_rows(n):
    """Distinct row indices (set_rows with repeated rows is order-dependent)."""
    return lambda rng, shape: np.stack([rng.permutation(n)[:shape[-1]] for _ in range(int(np.prod(shape[:-1])))]
                                       ).reshape(shape).astype(np.int64)


class OpCase(Case):
    """inputs: name -> (type, NumPy shape[, generator(rng, shape)]); build(ctx, x) and oracle(x)
    take a namespace of the inputs (tensors, resp. arrays as the tensors hold them)."""

    def __init__(self, name: str, inputs: dict, build: Callable, oracle: Callable, nmse: float | None = None,
                 exact: bool = False, known: dict[str, str] | None = None, max_error: float | None = None,
                 backend_bounds: dict[str, tuple[float, str]] | None = None, **params):
        self.name = name
        self.known = known or {}
        self.backend_bounds = backend_bounds or {}
        self.inputs = inputs
        self.build_fn = build
        self.oracle_fn = oracle
        self.exact = exact
        self.params = {"op": name.split("/", 1)[0], **params}  # the op is the name's first part
        out_types = {types.as_type(spec[0]) for spec in inputs.values()}
        worst = NMSE_F32
        if out_types & {types.Type.F16, types.Type.BF16}:
            worst = NMSE_F16 if types.Type.BF16 not in out_types else 1e-4
        self.nmse_bound = 0.0 if exact else (nmse if nmse is not None else worst)
        self.max_error = 0.0 if exact else max_error
        self._values: dict[str, np.ndarray] | None = None

    def values(self) -> dict[str, np.ndarray]:
        """Input values as the tensors hold them (quantized / half inputs round-tripped once)."""
        if self._values is None:
            rng = self.rng()
            vals, self._raw = {}, {}
            for k, spec in self.inputs.items():
                t, shape = types.as_type(spec[0]), spec[1]
                gen = spec[2] if len(spec) > 2 else uniform()
                raw = np.asarray(gen(rng, shape))
                # the tensor gets these very bytes: quantizing the decoded values again need not give
                # them back (IQ2_S, IQ3_S, Q3_K, ... do not settle), and the oracle would see other weights
                self._raw[k] = types.encode(t, raw)
                vals[k] = types.decode(t, self._raw[k], shape).copy()
            self._values = vals
        return self._values

    def execute(self, runner: Runner) -> list[np.ndarray]:
        ctx = Context()
        x = {k: ctx.tensor(spec[0], spec[1], k, input=True) for k, spec in self.inputs.items()}
        out = self.build_fn(ctx, SimpleNamespace(**x))
        graph = Graph(ctx).build_forward_expand(out)
        self.graph_ops = graph_ops(graph)
        self.values()
        feed = {x[k]: self._raw[k] for k in x}
        if runner.meta is not None:  # a meta device places its tensors itself: no guards
            if graph.n_nodes == 0:
                raise Unsupported("a graph of views only: nothing for a meta device to compute")
            runner.allocate(graph, [out])
            missing = [k for k, t in x.items() if t.ptr.data == ffi.NULL]
            if missing:  # the graph reads only a view of them: the scheduler allocates graph tensors only
                raise Unsupported(f"the graph holds only views of input(s) {', '.join(missing)}, which a meta "
                                  "runner does not allocate")
            for t, raw in feed.items():
                t.set_raw(raw)
            runner.compute(graph)
            return [out.numpy()]
        bad = runner.unsupported(graph)
        if bad:
            raise Unsupported(", ".join(sorted({n.op.name for n in bad})))
        return run_guarded(runner.backend, ctx, graph, feed, [out], raw=True)

    def expected(self) -> list[np.ndarray]:
        return [np.asarray(self.oracle_fn(SimpleNamespace(**self.values())))]


def op_case(name, inputs, build, oracle, **kw) -> OpCase:
    return register(OpCase(name, inputs, build, oracle, **kw))
