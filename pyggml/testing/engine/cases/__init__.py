"""Test cases: each one small object that builds its graphs, runs them on a `Runner` and gives
its NumPy oracle's outputs, in the spirit of ggml's test-backend-ops.

Op cases are generated from the op database (`pyggml.testing.engine.opdb`: one spec per op, its
samples are the cases); scenario cases that exercise more than one op (the seed's conv-state
rollback, a whole delta-net layer) are classes in this package's modules. Every case has the
fields the suite selects on (`op`, `types`, `variant`); its name is made from them. The verdict
on a backend comes from `pyggml.testing.engine.verdict`.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import zlib
from collections.abc import Sequence
from types import SimpleNamespace
from typing import TypeVar

import numpy as np

from pyggml import types
from pyggml._native import ffi, lib
from pyggml.context import Context
from pyggml.errors import Unsupported
from pyggml.graph import Graph
from pyggml.runner import Runner
from pyggml.tensor import Tensor
from pyggml.testing.engine import opdb
from pyggml.testing.engine.guard import run_guarded
from pyggml.testing.engine.opdb import (  # noqa: F401
    NMSE_F16,
    NMSE_F32,
    Bound,
    Known,
    OpSpec,
    Sample,
    Skip,
    as_input,
    default_nmse,
    uniform,
)
from pyggml.testing.engine.verdict import Mismatch as Mismatch  # the verdict's (it judges it); cases raise it
from pyggml.testing.engine.verdict import default_max_error

REGISTRY: dict[str, "Case"] = {}


class Case:
    """Base: subclasses set the fields below and implement execute() and expected()."""

    name: str = ""
    op: str = ""  # the op (or scenario) the case is about
    types: frozenset[str] = frozenset()  # the ggml types it involves (lower case)
    variant: str = ""
    params: dict = {}
    nmse_bound: float = NMSE_F32
    max_error: float | None = None  # None: 30 root-mean-square errors of the NMSE bound
    bounds: Sequence[Bound] = ()  # per-backend / per-type overrides, each with its reason
    known: Sequence[Known] = ()
    skips: Sequence[Skip] = ()

    @property
    def max_error_bound(self) -> float:
        """The largest error one element may have, relative to the output's scale (0: bit-exact)."""
        return self.max_error if self.max_error is not None else default_max_error(self.nmse_bound)

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


def select(pattern: str | None = None, ops: list[str] | None = None, type_names: list[str] | None = None) -> list[Case]:
    """Cases whose name contains `pattern` or matches it as a regular expression, whose `op` is one of
    `ops`, involving one of the types `type_names` (each filter applies only when given)."""
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
        cases = [c for c in cases if c.op in wanted]
    if type_names:
        wanted = {t.lower() for t in type_names}
        cases = [c for c in cases if c.types & wanted]
    return cases


_loaded = False


def _load_all() -> None:
    """Generate the op cases from the op database and import this package's scenario modules."""
    global _loaded
    if _loaded:
        return
    try:
        for s in opdb.load().values():
            for sample in s.samples:
                register(OpCase(s, sample))
        for info in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{info.name}")
    except BaseException:
        REGISTRY.clear()  # never a registry with part of the cases: the next call fails the same way
        raise
    _loaded = True


# --- op cases: one per sample of an op spec --------------------------------------------------------
# ggml builds the quantization tables of these types at a process's first quantization of one of them,
# for seconds (IQ2_S: 3-6 s on this project's machines, more than the rest of the CPU suite's op cases):
# their inputs are drawn as blocks instead, never quantized. Every code of their blocks is valid (a
# grid index, signs, a 4-bit scale), so random bytes under a drawn scale are a tensor of that type.
DRAWN_AS_BLOCKS = frozenset({types.Type.IQ2_S, types.Type.IQ3_S, types.Type.IQ3_XXS})


def draw_blocks(rng: np.random.Generator, t: types.Type, shape: tuple[int, ...]) -> np.ndarray:
    """The bytes of a tensor of block type t (each block's first two bytes its F16 scale): random codes,
    the scales drawn so that the values' largest magnitude is about 1."""
    n_blocks = int(np.prod(shape)) // types.block_size(t)
    blocks = rng.integers(0, 256, size=(n_blocks, types.type_size(t)), dtype=np.uint8)
    blocks[:, :2] = np.ones(n_blocks, np.float16).view(np.uint8).reshape(-1, 2)
    peak = float(np.abs(types.decode(t, blocks.reshape(-1), shape)).max()) or 1.0
    scales = (rng.uniform(0.5, 1.0, n_blocks) / peak).astype(np.float16)
    blocks[:, :2] = scales.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(-1)


class OpCase(Case):
    """One sample of an op spec: fresh inputs, the spec's call on ggml, the same call on the oracles."""

    def __init__(self, spec: OpSpec, sample: Sample) -> None:
        self.spec, self.sample = spec, sample
        self.name = opdb.case_name(spec, sample)
        self.op, self.variant = spec.op, sample.variant
        tag = sample.tag if sample.tag is not None else opdb.type_tag(sample.inputs)
        self.types = opdb.involved_types(sample, tag)
        self.inputs = {k: as_input(v) for k, v in sample.inputs.items()}
        self.params = {"op": spec.op, "args": sample.args}
        self.build_fn = opdb.ggml_side(spec, sample)
        self.oracle_fn = opdb.oracle_side(spec, sample)
        rules = [*sample.bounds, *spec.bounds]
        plain = next((b for b in rules if not b.backend and not b.types), None)
        exact = sample.exact if sample.exact is not None else spec.exact
        if exact:
            self.nmse_bound, self.max_error = 0.0, 0.0
        elif plain is not None:
            self.nmse_bound, self.max_error = plain.nmse, plain.max_error
        else:
            self.nmse_bound = default_nmse({i.type.lower() for i in self.inputs.values()})
        self.bounds = [b for b in rules if b.backend or b.types]
        self.known = [*sample.known, *spec.known]
        self.skips = list(spec.skips)
        self._values: dict[str, np.ndarray] | None = None

    def values(self) -> dict[str, np.ndarray]:
        """Input values as the tensors hold them (quantized / half inputs round-tripped once)."""
        if self._values is None:
            rng = self.rng()
            vals, self._raw = {}, {}
            for k, spec in self.inputs.items():
                t, shape = types.as_type(spec.type), spec.shape
                if t in DRAWN_AS_BLOCKS:
                    self._raw[k] = draw_blocks(rng, t, shape)
                else:
                    raw = np.asarray((spec.gen or uniform())(rng, shape))
                    # the tensor gets these very bytes: quantizing the decoded values again need not give
                    # them back (IQ2_S, IQ3_S, Q3_K, ... do not settle), and the oracle would see other weights
                    self._raw[k] = types.encode(t, raw)
                vals[k] = types.decode(t, self._raw[k], shape).copy()
            self._values = vals
        return self._values

    def build(self) -> tuple[Context, dict[str, Tensor], Tensor, Graph]:
        """The case's graph in a fresh context: (ctx, input tensors by name, output, graph)."""
        ctx = Context()
        x = {k: ctx.tensor(spec.type, spec.shape, k, input=True) for k, spec in self.inputs.items()}
        out = self.build_fn(ctx, SimpleNamespace(**x))
        graph = Graph(ctx).build_forward_expand(out)
        self.graph_ops = graph_ops(graph)
        return ctx, x, out, graph

    def run_on(self, runner: Runner, x: dict[str, Tensor], out: Tensor, graph: Graph) -> np.ndarray:
        """Allocate through `runner` (a scheduler or meta device places the tensors), set, compute, read."""
        runner.allocate(graph, [out])
        missing = [k for k, t in x.items() if t.ptr.data == ffi.NULL]
        if missing:  # the graph reads only a view of them: the scheduler allocates graph tensors only
            raise Unsupported(
                f"the graph holds only views of input(s) {', '.join(missing)}, which a meta runner does not allocate"
            )
        raw = self.raw_values()
        for k, t in x.items():
            t.set_raw(raw[k])
        runner.compute(graph)
        return out.numpy()

    def raw_values(self) -> dict[str, np.ndarray]:
        """The inputs' bytes as the tensors get them."""
        self.values()
        return self._raw

    def execute(self, runner: Runner) -> list[np.ndarray]:
        ctx, x, out, graph = self.build()
        if runner.meta is not None:  # a meta device places its tensors itself: no guards
            if graph.n_nodes == 0:
                raise Unsupported("a graph of views only: nothing for a meta device to compute")
            return [self.run_on(runner, x, out, graph)]
        bad = runner.unsupported(graph)
        if bad:
            raise Unsupported(", ".join(sorted({n.op.name for n in bad})))
        raw = self.raw_values()
        return run_guarded(runner.backend, ctx, graph, {x[k]: raw[k] for k in x}, [out], raw=True)

    def expected(self) -> list[np.ndarray]:
        return [np.asarray(self.oracle_fn(SimpleNamespace(**self.values())))]
