"""Test cases: each one small object with its parameters, how it builds its graph, its NumPy
oracle and its error bound, in the spirit of ggml's test-backend-ops.

A case runs on any backend through a `Runner`; `check.py` runs every registered case on
every backend and compares with the oracle (NMSE, as test-backend-ops) and across backends.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from types import SimpleNamespace

import numpy as np

from pyggml import types
from pyggml.context import Context
from pyggml.graph import Graph
from pyggml.runner import Runner

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
    if not (np.isfinite(a) == np.isfinite(e)).all() or (a[~np.isfinite(a)] != e[~np.isfinite(e)]).any():
        return float("inf")
    fin = np.isfinite(e)
    num = np.sum((a[fin] - e[fin]) ** 2)
    den = np.sum(e[fin] ** 2)
    return float(num / den) if den > 0 else float(num)


class Case:
    """Base: subclasses set `name`, `nmse_bound`, and implement execute() and expected()."""

    name: str = ""
    nmse_bound: float = NMSE_F32
    params: dict = {}
    known: dict[str, str] = {}  # backend name prefix -> why that backend is known to disagree (findings.md)

    def known_failure(self, backend: str) -> str | None:
        """Why `backend` is known to disagree with the oracle on this case, or None."""
        return next((why for prefix, why in self.known.items() if backend.startswith(prefix)), None)

    def execute(self, runner: Runner) -> list[np.ndarray]:
        raise NotImplementedError

    def expected(self) -> list[np.ndarray]:
        raise NotImplementedError

    def rng(self) -> np.random.Generator:
        return np.random.default_rng(zlib.crc32(self.name.encode()))


def register(case: Case) -> Case:
    if case.name in REGISTRY:
        raise ValueError(f"duplicate case name {case.name}")
    REGISTRY[case.name] = case
    return case


def select(pattern: str | None = None) -> list[Case]:
    """Cases whose name contains `pattern` or matches it as a regular expression."""
    _load_all()
    cases = list(REGISTRY.values())
    if not pattern:
        return cases
    try:
        rx = re.compile(pattern)
    except re.error:  # not a regular expression: a plain substring then
        return [c for c in cases if pattern in c.name]
    return [c for c in cases if pattern in c.name or rx.search(c.name)]


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
                 exact: bool = False, known: dict[str, str] | None = None, **params):
        self.name = name
        self.known = known or {}
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
        self._values = None

    def values(self) -> dict[str, np.ndarray]:
        """Input values as the tensors hold them (quantized / half inputs round-tripped)."""
        if self._values is None:
            rng = self.rng()
            vals = {}
            for k, spec in self.inputs.items():
                t, shape = types.as_type(spec[0]), spec[1]
                gen = spec[2] if len(spec) > 2 else uniform()
                raw = np.asarray(gen(rng, shape))
                vals[k] = types.decode(t, types.encode(t, raw), shape).copy()
            self._values = vals
        return self._values

    def execute(self, runner: Runner) -> list[np.ndarray]:
        ctx = Context()
        x = {k: ctx.tensor(spec[0], spec[1], k, input=True) for k, spec in self.inputs.items()}
        out = self.build_fn(ctx, SimpleNamespace(**x))
        graph = Graph(ctx).build_forward_expand(out)
        vals = self.values()
        return runner.run(graph, {x[k]: vals[k] for k in x}, [out])

    def expected(self) -> list[np.ndarray]:
        return [np.asarray(self.oracle_fn(SimpleNamespace(**self.values())))]


def op_case(name, inputs, build, oracle, **kw) -> OpCase:
    return register(OpCase(name, inputs, build, oracle, **kw))
