"""Random-call fuzzer of pyggml's Python layer.

    python -m pyggml fuzz --calls 3000 --seed 1 [--batch 100] [--no-meta] [--json FILE]

Each call is a short Python program of pyggml calls, written as it runs: tensors of random
types and shapes (odd, zero, huge), views with random strides and offsets, permutations,
tensors of a foreign context, then one op of `pyggml.ops` or one public method of Context,
Tensor, Graph, Backend, Buffer, Gallocr, Scheduler, Runner, MetaDevice, Split or conv_state,
with valid and invalid arguments. What builds is computed on the CPU (`Runner("cpu")`) and,
with --meta (the default), again on a two-CPU meta device. Every node of the CPU's graph is checked
against its NumPy oracle with the values it received (the op database's node readers:
pyggml.testing.engine.nodes), and the meta result against the CPU one.

Outcomes of a call: `raised` (a documented exception: TypeError, ValueError and its
subclasses OpError/GraphError/Unsupported/Unsplittable, MemoryError, GGMLError), `off-contract`
(any other exception), `wrong` (a result that disagrees with the oracle or the CPU), `death`
(the process died: abort, signal, or a hang). Calls run in batches, each in a child process
(pyggml.testing.engine.child);
a death ends only its batch, which then resumes after the dying call, and the dying call's
program is printed as a standalone reproducer. Every call is deterministic from (seed, index).
Exit status: 1 if any death, wrong or off-contract result, else 0.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import math
import os
import random
import re
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from pyggml._args import at_least
from pyggml.testing.engine import child
from pyggml.testing.engine.child import Outcome
from pyggml.testing.engine.opdb.hints import SMALL

if TYPE_CHECKING:
    from pyggml.tensor import Tensor

PRELUDE = [
    "import numpy as np",
    "import pyggml as gg",
    "from pyggml import ops",
    "from pyggml.models import conv_state",
    "from pyggml.testing.engine import oracles",
    "from pyggml.meta import MetaDevice, Split",
    "from pyggml.testing.engine.nodes import NodeChecker",
    "from pyggml.testing.fuzzers.fuzz import tolerance",
]
ONLY_OPS: list[str] = []  # --ops: fuzz only these op wrappers
MAX_BYTES = 1 << 24  # a graph touching more than this is built but never computed (huge sizes stay symbolic)
TENSOR_PARAMS = {"a", "b", "c", "mask", "pos", "freq_factors", "sx"}
COMMON_TYPES = ["F32"] * 10 + ["F16"] * 3 + ["BF16", "I32", "I32"]
RARE_TYPES = [
    "Q8_0",
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q5_1",
    "Q4_K",
    "Q6_K",
    "Q8_K",
    "Q8_1",
    "IQ2_XXS",
    "IQ2_XS",
    "IQ1_S",
    "IQ4_NL",
    "IQ4_XS",
    "TQ1_0",
    "MXFP4",
    "I8",
    "I16",
    "I64",
    "F64",
]
WEIRD_INTS = [0, -1, -7, 2**31, 2**40, 2**63, -(2**63), 2**64]
WEIRD_FLOATS = ["float('nan')", "float('inf')", "float('-inf')", "-1.0", "0.0", "1e38", "1e-45"]
WEIRD_VALUES = ["None", "'x'", "1.5", "[1, 2]", "True", "object()", "np.float32(2)", "{}", "(3,)"]


# --- documented exceptions -------------------------------------------------------------------
def documented() -> tuple[type, ...]:
    from pyggml.errors import GGMLError

    # IndexError: what sequence-style indexing raises (Graph.node out of range)
    return (TypeError, ValueError, MemoryError, IndexError, GGMLError)


# --- the program of one call -------------------------------------------------------------------
class Raised(Exception):
    """A line of the program raised `exc` (kept apart from errors of the fuzzer itself)."""

    def __init__(self, exc: BaseException, line: str) -> None:
        super().__init__(line)
        self.exc = exc
        self.line = line


class Script:
    """Code lines executed one by one in one namespace, each echoed before it runs, so the
    lines of a call that kills the process are on record (the parent reads the echo).
    `lines` holds the lines that ran through; a line that raised is left out, so the
    program can be run again (the meta pass rebuilds it) and stays a valid script."""

    def __init__(self, echo: Callable[[str], None] | None = None) -> None:
        self.lines: list[str] = []
        self.echo = echo
        self.ns: dict = {}
        for line in PRELUDE:
            exec(line, self.ns)

    def run(self, line: str) -> None:
        if self.echo:
            self.echo(f"@code {json.dumps(line)}")
        try:
            exec(line, self.ns)
        except Exception as e:  # noqa: BLE001 - the caller classifies it
            raise Raised(e, line) from e
        self.lines.append(line)

    def __getitem__(self, var):
        return self.ns[var]


def float_code(x: float) -> str:
    return f"float('{x}')" if not math.isfinite(x) else repr(float(x))


class Gen:
    """Random arguments for one call, chosen by parameter name and by the live tensors made so far."""

    rng: random.Random  # declared here: the hints (opdb/hints.py) use it, and mypy meets them first

    def __init__(self, rng: random.Random, script: Script) -> None:
        self.rng = rng
        self.s = script
        self.n = 0
        self.tensors: list[str] = []  # base tensors (graph inputs)
        self.vars: list[str] = []  # every tensor var: base tensors and those derived from them
        self.limit: dict[str, int] = {}  # index tensors: values drawn below this
        self.distinct: set[str] = set()  # index tensors whose values must not repeat (set_rows)
        self.chosen: dict[str, str] = {}  # parameter name -> tensor var, for this call
        self.n_seqs = 1  # the recurrent ops' sequences, for this call
        self.scan: dict[str, int] = {}  # ssm_scan's sizes, for this call

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    # --- tensors ---------------------------------------------------------------------
    def rand_type(self) -> str:
        return self.rng.choice(COMMON_TYPES if self.chance(0.85) else RARE_TYPES)

    def rand_ne(self, type_name: str) -> list[int]:
        from pyggml import types

        ndim = self.rng.choice([1, 2, 2, 3, 3, 4])
        ne = [self.rng.choice(SMALL) for _ in range(ndim)]
        if self.chance(0.03):
            ne[self.rng.randrange(ndim)] = 0
        if self.chance(0.02):
            ne[self.rng.randrange(ndim)] = 2**40
        blck = types.block_size(type_name)
        if blck > 1 and self.chance(0.9):
            ne[0] = blck * self.rng.choice([1, 1, 2])
        return ne + [1] * (4 - ndim)

    def new_tensor(self, type_name: str, ne: list[int], ctx: str = "ctx") -> str:
        var = f"t{self.n}"
        self.n += 1
        ndim = max([i + 1 for i, n in enumerate(ne) if n != 1] + [1])
        shape = tuple(reversed(ne[:ndim]))
        self.s.run(f"{var} = {ctx}.tensor({type_name!r}, {shape}, {var!r}, input=True)")
        self.tensors.append(var)
        self.vars.append(var)
        return var

    def tensor(self, like: str | None = None) -> str:
        """A base tensor: like another one (same type and shape) or random; sometimes from a foreign context."""
        if like is not None and self.chance(0.6):
            t = self.s[like]
            type_name, ne = t.type.name, list(t.ne)
        else:
            type_name = self.rand_type()
            ne = self.rand_ne(type_name)
        ctx = "ctx"
        if self.chance(0.05):
            if "ctx2" not in self.s.ns:
                self.s.run("ctx2 = gg.Context()")
            ctx = "ctx2"
        return self.new_tensor(type_name, ne, ctx)

    def derive(self, var: str) -> str:
        """A view, permutation, transpose or reshape of var (the derived call may itself raise)."""
        t = self.s[var]
        out = f"t{self.n}"
        self.n += 1
        kind = self.rng.choice(["view", "view", "permute", "transpose", "reshape", "cont"])
        if kind == "view":
            dims = self.rng.randint(1, 4)
            name = f"view_{dims}d"
            args = [
                self.int_arg(name, p, var)
                for p in (["ne0", "ne1", "ne2", "ne3"][:dims] + ["nb1", "nb2", "nb3"][: dims - 1] + ["offset"])
            ]
            self.s.run(f"{out} = ctx.{name}({var}, {', '.join(args)})")
        elif kind in ("permute", "transpose"):
            axes = [0, 1, 2, 3]
            self.rng.shuffle(axes)
            rest = f", {', '.join(map(str, axes))}" if kind == "permute" else ""
            self.s.run(f"{out} = ctx.{kind}({var}{rest})")
        elif kind == "reshape":
            ne = list(t.ne)
            self.rng.shuffle(ne)
            self.s.run(f"{out} = ctx.reshape_4d({var}, {', '.join(map(str, ne))})")
        else:
            self.s.run(f"{out} = ctx.cont({var})")
        self.vars.append(out)
        return out

    def try_derive(self, var: str) -> str:
        try:
            return self.derive(var)
        except Raised as e:
            if classify(e.exc) != "raised":
                raise
            return var  # the derived tensor was refused (documented): keep the base one

    # --- arguments by parameter name --------------------------------------------------------
    def weird(self) -> str:
        return self.rng.choice(WEIRD_VALUES + WEIRD_FLOATS + [str(i) for i in WEIRD_INTS] + ["np.zeros((2, 3))"])

    def tensor_arg(self, op: str, param: str) -> str:
        """A tensor for `param` of `op`: shaped to fit the other arguments (a hint) or random."""
        first = next(iter(self.chosen.values()), None)
        hint = hints().get((op, param)) if self.chance(0.85) else None
        var = None
        if hint is not None:
            try:
                var = hint(self)
            except KeyError:  # the hint needs an earlier argument that was not a tensor
                var = None
        if var is None:
            var = self.tensor(like=first)
        if self.chance(0.2):
            var = self.try_derive(var)
        self.chosen[param] = var
        return var

    def int_arg(self, op: str, param: str, a: str | None = None) -> str:
        if self.chance(0.06):
            return str(self.rng.choice(WEIRD_INTS))
        t = self.s[a] if a else None
        m = re.fullmatch(r"(ne|nb|axis|p)(\d)", param)
        if t is not None and m and m.group(1) == "ne":
            i = int(m.group(2))
            return str(self.rng.randint(0, t.ne[i]) if self.chance(0.3) else t.ne[i])
        if t is not None and m and m.group(1) == "nb":
            i = int(m.group(2))
            return str(t.nb[i] if self.chance(0.7) else self.rng.choice([0, t.nb[0], t.nb[i] * 2, t.nb[i] - 1]))
        if param == "offset":
            es = t.nb[0] if t is not None else 4
            return str(self.rng.choice([0, 0, 0, es, 2 * es, 1, -es]))
        if m and m.group(1) == "axis":
            return str(self.rng.randrange(4) if self.chance(0.9) else self.rng.choice([-1, 4]))
        if m and m.group(1) == "p":
            return str(self.rng.choice([0, 0, 1, 2, 3, -1]))
        if param == "dim":
            return str(self.rng.choice([0, 1, 2, 3, 3, -1, 4]))
        if param in ("n_past",):
            return str(self.rng.choice([0, 1, 2, -1]))
        if param == "n_dims":
            return str(t.ne[0] if t is not None and self.chance(0.7) else self.rng.choice([0, 2, 4, 3, -2]))
        if param == "mode":
            return str(self.rng.choice([0, 0, 2, 1, 8, 24, 40]))
        return str(self.rng.choice(SMALL + [0, -1]))

    def float_arg(self, param: str) -> str:
        if self.chance(0.08):
            return self.rng.choice(WEIRD_FLOATS)
        if param == "min":
            return "-0.5"
        if param == "max":
            return "0.5"
        if param == "eps":
            return self.rng.choice(["1e-6", "1e-5", "0.0"])
        if param == "max_bias":
            return self.rng.choice(["0.0", "0.0", "8.0"])
        if param == "start":
            return self.rng.choice(["0.0", "1.0", "-2.5"])
        if param == "stop":
            return self.rng.choice(["5.0", "8.0", "1.0"])
        if param == "step":
            return self.rng.choice(["1.0", "0.5", "3.0"])
        if param == "freq_base":
            return "10000.0"
        if param in ("freq_scale", "attn_factor"):
            return "1.0"
        if param == "ext_factor":
            return "0.0"
        if param == "beta_fast":
            return "32.0"
        if param == "beta_slow":
            return "1.0"
        return float_code(round(self.rng.uniform(-2, 2), 3))

    def arg(self, op: str, p: inspect.Parameter) -> str:
        name = p.name
        if self.chance(0.04):
            return self.weird()
        if name in TENSOR_PARAMS or p.annotation in ("Tensor", "Tensor | None"):
            if p.default is None and self.chance(0.4):
                return "None"
            return self.tensor_arg(op, name)
        a = self.chosen.get("a")
        if name == "order":
            return self.rng.choice(["gg.SortOrder.ASC", "gg.SortOrder.DESC", "'asc'", "'desc'", "'up'", "7"])
        if name == "name":
            return self.rng.choice(["'x'", "'y' * 80", "''", "'é'"])
        if name in ("ne", "nb"):
            t = self.s[a] if a else None
            if t is not None and self.chance(0.7):
                vals = list(t.ne) if name == "ne" else list(t.nb)
                if name == "ne" and self.chance(0.3):
                    vals[self.rng.randrange(4)] = self.rng.choice([0, -1, 1])
                return str(vals)
            return str([self.rng.choice(SMALL + [0, -1]) for _ in range(self.rng.choice([4, 4, 3]))])
        if p.annotation in ("float", float) or isinstance(p.default, float):
            return self.float_arg(name)
        return self.int_arg(op, name, a)


# --- shape hints: each op spec's `hints` (pyggml/testing/engine/opdb/hints.py has the shared helpers) ----------
@functools.cache
def hints() -> dict[tuple[str, str], Callable[[Gen], str]]:
    """(op, param) -> the spec's hint for that argument."""
    from pyggml.testing.engine import opdb

    return {(op, p): h for op, s in opdb.load().items() for p, h in s.hints.items()}


# --- one op call ----------------------------------------------------------------------------------
def public_ops() -> list[str]:
    from pyggml import ops

    return sorted(n for n in ops.__all__ if callable(getattr(ops, n)) and not isinstance(getattr(ops, n), type))


def op_call(g: Gen, name: str) -> dict:
    """Build `out = ops.<name>(ctx, ...)`; returns what compute and check need to know."""
    from pyggml import ops

    params = list(inspect.signature(getattr(ops, name)).parameters.values())[1:]
    if g.chance(0.03):
        ctx = g.rng.choice(["None", "gg.Context()", "ctx2"])
        if ctx == "ctx2":
            g.s.run("ctx2 = gg.Context(n_tensors=2)")
    else:
        ctx = "ctx"
    args = [g.arg(name, p) for p in params]
    g.s.run(f"out = ops.{name}({ctx}, {', '.join(args)})")
    return {"op": name, "args": args}


# --- compute and check ----------------------------------------------------------------------------
def reachable(out: Tensor) -> set[int]:
    """Addresses of every tensor out depends on (sources and view sources)."""
    from pyggml._native import ffi

    seen, stack = set(), [out.ptr]
    while stack:
        p = stack.pop()
        key = int(ffi.cast("uintptr_t", p))
        if p == ffi.NULL or key in seen:
            continue
        seen.add(key)
        stack.extend(s for s in p.src if s != ffi.NULL)
        if p.view_src != ffi.NULL:
            stack.append(p.view_src)
    return seen


def input_code(g: Gen, var: str) -> str:
    """NumPy code of random values for a base tensor (NumPy shape)."""
    t = g.s[var]
    shape = tuple(reversed(t.ne))
    name = t.type.name
    if name in ("I32", "I64", "I16", "I8"):
        limit = g.limit.get(var, 8)
        if var in g.distinct and t.ne[0] <= limit:
            return f"rng.permutation({limit})[:{t.ne[0]}].reshape({shape}).astype(np.int{name[1:]})"
        return f"rng.integers(0, {max(1, limit)}, {shape}).astype(np.int{name[1:]})"
    dtype = "np.float64" if name == "F64" else "np.float32"
    return f"rng.uniform(-1, 1, {shape}).astype({dtype})"


def py_nbytes(t: Tensor) -> int:
    """A tensor's size by its shape, in Python ints (ggml_nbytes wraps around for huge shapes)."""
    from pyggml import types

    n = types.type_size(t.type) * (t.ne[0] // max(1, types.block_size(t.type)) + 1)
    for d in t.ne[1:]:
        n *= d
    return n


def computable(g: Gen, out: object) -> bool:
    """Compute what builds, zero-element tensors included, but never allocate huge ones."""
    from pyggml.tensor import Tensor

    if not isinstance(out, Tensor) or not out.ctx.no_alloc:
        return False
    vars_ = [v for v in g.vars if v in g.s.ns]
    return all(py_nbytes(g.s[v]) <= MAX_BYTES for v in vars_) and py_nbytes(out) <= MAX_BYTES


def compute_lines(g: Gen, runner: str, seed: int) -> list[str]:
    used = reachable(g.s["out"])
    from pyggml._native import ffi

    inputs = [v for v in g.tensors if int(ffi.cast("uintptr_t", g.s[v].ptr)) in used]
    lines = ["graph = gg.Graph(out.ctx).build_forward_expand(out)", f"rng = np.random.default_rng({seed})"]
    lines += [f"X_{v} = {input_code(g, v)}" for v in inputs]
    lines.append("inputs = {" + ", ".join(f"{v}: X_{v}" for v in inputs) + "}")
    if runner != "cpu":
        return lines + [f"[y] = gg.Runner({runner!r}).run(graph, inputs, [out])"]
    # on the CPU every node is checked as it is computed (check)
    return lines + [
        "runner = gg.Runner('cpu')",
        "nodes = NodeChecker(tolerance, flush=True)",
        "runner.sched.observe(nodes)",
        "[y] = runner.run(graph, inputs, [out])",
        "runner.sched.observe(None)",
    ]


def mismatch(actual: Any, expected: Any, bound: float) -> str | None:
    """None when the meta result matches the CPU's within NMSE `bound` (check's comparison), else why."""
    from pyggml.testing.engine.verdict import compare, default_max_error

    v = compare(actual, expected, bound, default_max_error(bound))
    return None if v.ok else v.message


# --- method calls ---------------------------------------------------------------------------------
def setup_objects(g: Gen, kind: str) -> str:
    """Lines that make an object of `kind`; returns its variable."""
    s = g.s
    if kind == "Context":
        g.tensor()
        return "ctx"
    if kind == "Tensor":
        var = g.tensor()
        if g.chance(0.5) and s[var].nbytes <= MAX_BYTES and s[var].ctx is s["ctx"]:
            s.run("buf = gg.cpu_backend().alloc_tensors(ctx)")
        if g.chance(0.2):
            var = g.try_derive(var)
        return var
    t0 = g.new_tensor("F32", [g.rng.choice(SMALL), g.rng.choice(SMALL), 1, 1])
    s.run(f"out = ops.add(ctx, {t0}, {t0})")
    s.run("graph = gg.Graph(ctx).build_forward_expand(out)")
    if kind == "Graph":
        return "graph"
    s.run("be = gg.cpu_backend()")
    if kind == "Backend":
        return "be"
    if kind == "Buffer":
        s.run("buf = be.alloc_tensors(ctx)")
        return "buf"
    if kind == "Gallocr":
        s.run("galloc = gg.Gallocr(be.buffer_type)")
        return "galloc"
    if kind == "Scheduler":
        s.run("sched = gg.Scheduler([be])")
        return "sched"
    if kind == "Runner":
        s.run(f"runner = gg.Runner({g.rng.choice(['cpu', 'meta:cpu,cpu'])!r})")
        return "runner"
    if kind == "MetaDevice":
        s.run("meta = MetaDevice(['cpu', 'cpu'])")
        return "meta"
    if kind == "Split":
        axis = g.rng.choice(["0", "1", "2", "'mirrored'", "'partial'", "5"])
        sizes = g.rng.choice(["(1, 1)", "(2, 0)", "((1, 1), (1, 1))", "()", "(-1, 3)", "(1,)"])
        s.run(f"split = Split({axis}, {sizes})")
        return "split"
    raise ValueError(kind)


METHOD_KINDS = [
    "Context",
    "Tensor",
    "Graph",
    "Backend",
    "Buffer",
    "Gallocr",
    "Scheduler",
    "Runner",
    "MetaDevice",
    "Split",
]


def method_arg(g: Gen, name: str) -> str:
    """An argument for a method parameter, chosen by its name (random values, sometimes absurd)."""
    if g.chance(0.08):
        return g.weird()
    tensor_like = next((v for v in reversed(g.tensors)), None)
    table = {
        "graph": lambda: "graph" if "graph" in g.s.ns else "None",
        "t": lambda: tensor_like or "None",
        "tensor": lambda: tensor_like or "None",
        "ctx": lambda: "ctx",
        "values": lambda: g.rng.choice(
            [
                f"np.ones({tuple(reversed(g.s[tensor_like].ne))})" if tensor_like else "np.ones(3)",
                "np.full(6, np.nan)",
                "np.arange(6) * 2**40",
                "[1, 2, 3]",
                "np.zeros((0,))",
                "'abc'",
                f"np.linspace(-1, 1, {g.s[tensor_like].nelements if tensor_like else 4})",
            ]
        ),
        "value": lambda: g.rng.choice(["0", "255", "-1", "256", "'x'"]),
        "name": lambda: g.rng.choice(["'w'", "'q' * 100", "'é'", "''", "'cpu'", "'meta:cpu'", "'vulkan9'"]),
        "type": lambda: g.rng.choice(["'f32'", "'q8_0'", "'nope'", "gg.Type.F16", "99", "np.float32", "np.int8"]),
        "ne": lambda: g.rng.choice(["[3, 2]", "[0]", "[2**40, 2**40]", "[-1, 2]", "[1, 1, 1, 1, 1]", "[]", "[32]"]),
        "shape": lambda: g.rng.choice(["(2, 3)", "()", "(0, 4)", "(2**40,)", "(-3,)", "(1, 1, 1, 1, 2)"]),
        "inputs": lambda: f"{{{tensor_like}: np.ones({tuple(reversed(g.s[tensor_like].ne))})}}"
        if tensor_like
        else "{}",
        "outputs": lambda: "[out]" if "out" in g.s.ns else "[]",
        "policy": lambda: g.rng.choice(
            [
                "None",
                "[('t*', Split(0, (1, 1)))]",
                "lambda t: Split(7)",
                "lambda t: 1 / 0",
                "[('*', lambda t: Split.even(0, t.ne[0], 2))]",
            ]
        ),
        "backends": lambda: g.rng.choice(["[be]", "[]", "[be, be]", "[gg.cpu_backend()]"]) if "be" in g.s.ns else "[]",
        "b": lambda: "be" if "be" in g.s.ns else "None",
        "buffer_type": lambda: "be.buffer_type" if "be" in g.s.ns else "None",
        "devices": lambda: g.rng.choice(["['cpu', 'cpu']", "['cpu']", "[]", "['cpu'] * 20", "['nope']"]),
        "n_devices": lambda: g.rng.choice(["2", "1", "0", "-1"]),
        "i": lambda: g.rng.choice(["0", "-1", "5", "2**63"]),
        "what": lambda: "'x'",
        "obj": lambda: "object()",
    }
    if name in table:
        return table[name]()
    return g.rng.choice(["0", "1", "2", "3", "-1", "2**40", "4096", "True"])


def method_call(g: Gen, kind: str) -> dict:
    obj = setup_objects(g, kind)
    o = g.s[obj]
    names = sorted(n for n in dir(type(o)) if not n.startswith("_"))
    if kind == "Context":  # the op methods are fuzzed as ops
        from pyggml import ops

        names = [n for n in names if n not in ops.__all__]
    name = g.rng.choice(names)
    attr = inspect.getattr_static(type(o), name)
    if isinstance(attr, property):
        if attr.fset is not None and g.chance(0.5):
            g.s.run(f"{obj}.{name} = {method_arg(g, name)}")
        else:
            g.s.run(f"r = {obj}.{name}")
        return {"op": f"{kind}.{name}"}
    fn = getattr(o, name)
    if not callable(fn):
        g.s.run(f"r = {obj}.{name}")
        return {"op": f"{kind}.{name}"}
    try:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY)
        ]
    except (TypeError, ValueError):
        params = []
    args = [method_arg(g, p.name) for p in params if p.default is inspect.Parameter.empty or g.chance(0.5)]
    g.s.run(f"r = {obj}.{name}({', '.join(args)})")
    return {"op": f"{kind}.{name}"}


# constructor_call's calls whose arguments are all drawn from fixed lists: kind -> (the call with a {} per
# argument, each argument's choices, drawn in order)
_FIXED_CALLS: dict[str, tuple[str, tuple[list[str], ...]]] = {
    "Context": (
        "gg.Context({}, n_tensors={}, no_alloc={})",
        (["None", "0", "-5", "2**62", "2**20", "100"], ["1", "0", "-1", "4096", "2**40"], ["True", "False"]),
    ),
    "Graph": ("gg.Graph(ctx, {})", (["1", "0", "-1", "2**31", "2**40", "8"],)),
    "Split.even": (
        "Split.even({}, {}, {}, {})",
        (["0", "1", "5", "-1"], ["8", "7", "0", "-4"], ["2", "0", "-1", "3"], ["1", "2", "0", "-1"]),
    ),
    "windows_written": ("conv_state.windows_written({}, {})", (["0", "3", "-1", "2**63"], ["1", "4", "0", "-2"])),
    "split_policy": ("conv_state.split_policy({}, {})", (["4", "1", "0", "-1"], ["2", "0", "1"])),
}


def constructor_call(g: Gen) -> dict:
    """A class or a conv_state entry point called with random arguments."""
    s = g.s
    kind = g.rng.choice(
        [
            "Context",
            "Graph",
            "Runner",
            "Scheduler",
            "MetaDevice",
            "Split.even",
            "RecurrentMemory",
            "DeltaNetConv",
            "windows_written",
            "split_policy",
            "tensor",
        ]
    )
    r = g.rng
    if kind in _FIXED_CALLS:
        call, choices = _FIXED_CALLS[kind]
        s.run("r = " + call.format(*[r.choice(c) for c in choices]))
    elif kind == "tensor":
        s.run(f"r = ctx.tensor({method_arg(g, 'type')}, {method_arg(g, 'shape')})")
    elif kind == "Runner":
        s.run(
            f"r = gg.Runner({method_arg(g, 'name')}, n_threads={r.choice(['None', '0', '-1', '1', '2**31'])}, "
            f"graph_size={r.choice(['1', '0', '-1', '64', '2**40'])})"
        )
    elif kind == "Scheduler":
        s.run("be = gg.cpu_backend()")
        s.run(f"r = gg.Scheduler({method_arg(g, 'backends')}, {r.choice(['1', '0', '-1', '64', '2**40'])})")
    elif kind == "MetaDevice":
        s.run(f"r = MetaDevice({method_arg(g, 'devices')}, {method_arg(g, 'policy')})")
    elif kind in ("RecurrentMemory", "DeltaNetConv"):
        s.run("be = gg.cpu_backend()")
        dims = [
            r.choice(["1", "2", "0", "-1"]),
            r.choice(["4", "2", "1", "0"]),
            r.choice(["8", "3", "0", "2**40"]),
            r.choice(["2", "1", "0"]),
            r.choice(["1", "0", "3", "-1"]),
        ]
        cache_type = r.choice(["'f32'", "'f16'", "'q8_0'"])
        s.run(f"mem = conv_state.RecurrentMemory(be, {', '.join(dims)}, type={cache_type})")
        if kind == "DeltaNetConv":
            runner = r.choice(["cpu", "cpu", "meta:cpu,cpu"])
            strategy = r.choice(["'host_index'", "'device_index'", "'copies'", "'nope'"])
            s.run(f"dn = conv_state.DeltaNetConv(mem, gg.Runner({runner!r}), {strategy})")
            n_tok, n_seq = r.choice([1, 2, 3, 0]), r.choice([1, 2, 3])
            layers = r.choice(["mem.n_layer", "mem.n_layer + 1"])
            s.run(
                f"ub = conv_state.Ubatch([np.ones(({n_seq}, {n_tok}, mem.channels), np.float32)] * {layers}, "
                f"{[r.choice([0, 1, 5, -1]) for _ in range(n_seq)]}, {r.choice([0, 1, -1, 7])})"
            )
            s.run("r = dn.step(ub)")
    return {"op": kind}


# --- one call, start to end -----------------------------------------------------------------------
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def classify(e: BaseException) -> str:
    """raised (documented), off-contract (undocumented, from inside pyggml) or internal (the
    program's own code failed, e.g. an oracle or NumPy line: a limit of the fuzzer, not a finding)."""
    if isinstance(e, documented()):
        return "raised"
    tb, inside = e.__traceback__, False
    while tb is not None:
        f = tb.tb_frame.f_code.co_filename
        inside |= f.startswith(PACKAGE_DIR) and os.path.abspath(f) != os.path.abspath(__file__)
        tb = tb.tb_next
    return "off-contract" if inside else "internal"


def describe_exc(e: BaseException) -> str:
    msg = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {msg[:300]}"


def pass_header(echo: Callable[[str], None] | None, which: str) -> None:
    if echo:
        echo(f"@pass {which}")


def run_call(
    seed: int, k: int, meta: bool = True, echo: Callable[[str], None] | None = None, selftest_death: int | None = None
) -> dict:
    """Make and run call k of this seed; returns its record (outcome, phase, target, message, code)."""
    rng = random.Random(f"pyggml.fuzz:{seed}:{k}")
    rec = {
        "call": k,
        "outcome": "raised",
        "phase": "build",
        "target": "",
        "message": "",
        "code": [],
        "built": False,
        "computed": False,
        "checked": False,
    }
    script = Script(echo)
    pass_header(echo, "build")
    g = Gen(rng, script)
    if selftest_death == k:  # a deliberate raw death: tests that the reproducer machinery works
        rec["target"] = "selftest"
        script.run("import os")
        script.run("os.abort()")
    try:
        script.run(
            f"ctx = {rng.choice(['gg.Context()'] * 18 + ['gg.Context(no_alloc=False, mem_size=1 << 16)', 'gg.Context(n_tensors=3)'])}"
        )
        roll = rng.random()
        if ONLY_OPS:  # --ops: every call is one of these ops
            info = op_call(g, rng.choice(ONLY_OPS))
        elif roll < 0.72:
            info = op_call(g, rng.choice(public_ops()))
        elif roll < 0.9:
            info = method_call(g, rng.choice(METHOD_KINDS))
        else:
            info = constructor_call(g)
    except Raised as e:
        return failed(rec, "build", e, script)
    except Exception as e:  # noqa: BLE001 - a bug of the fuzzer itself, not of pyggml
        rec.update(
            outcome="internal",
            message=describe_exc(e),
            code=list(script.lines),
            traceback=traceback.format_exc(limit=-4),
        )
        return rec
    rec.update(target=info["op"], built=True, outcome="built", code=list(script.lines))
    if "args" not in info or not computable(g, script["out"]):
        return rec
    build_lines = list(script.lines)
    input_seed = rng.randrange(2**32)
    results: dict[str, Any] = {}
    for runner in ["cpu", "meta:cpu,cpu"] if meta else ["cpu"]:
        if runner != "cpu":  # a fresh build of the same program: a graph is allocated by one scheduler
            script = Script(echo)
            pass_header(echo, runner)
            try:
                for line in build_lines:
                    script.run(line)
            except Raised as e:
                rec = failed(rec, f"rebuild {runner}", e, script)
                rec.update(
                    outcome="off-contract", message=f"the same program failed on its second run: {rec['message']}"
                )
                return rec
        if echo:
            echo(f"@phase compute {runner}")
        try:
            for line in compute_lines(g, runner, input_seed):
                script.run(line)
        except Raised as e:
            return failed(rec, "compute " + runner, e, script)
        results[runner] = script["y"]
        rec.update(computed=True, outcome="computed", code=list(script.lines))
        if runner == "cpu":
            results["nodes"] = script["nodes"].verdicts
    return check(g, info, script, results, rec)


def failed(rec: dict, phase: str, e: Raised, script: Script) -> dict:
    rec.update(phase=phase, outcome=classify(e.exc), message=describe_exc(e.exc), code=script.lines + [e.line])
    if not rec["target"]:
        rec["target"] = _target_of_lines([e.line])
    if rec["outcome"] == "off-contract":
        rec["traceback"] = "".join(traceback.format_exception(e.exc, limit=-4))
    return rec


# ops whose result may end in memory the op leaves unwritten: state snapshot slots past n_tokens
_SNAPSHOTS = {"gated_delta_net": "v", "ssm_scan": "x"}  # op -> the argument whose ne[2] is n_tokens


def written(g: Gen, info: dict, out: Any) -> int | None:
    """How many leading elements of the result the op writes, when it leaves the rest alone (the meta and
    CPU results are compared there only: the rest is whatever the memory held)."""
    if info["op"] not in _SNAPSHOTS:
        return None
    names = list(inspect.signature(getattr(__import__("pyggml").ops, info["op"])).parameters)[1:]
    args = dict(zip(names, info["args"]))
    try:
        K = int(args.get("K", "1"))
        per_token = g.s[args[_SNAPSHOTS[info["op"]]]]
    except (KeyError, ValueError):
        return None
    n_tokens, y_size = per_token.ne[2], per_token.nelements
    if K <= n_tokens:
        return None
    snapshot = (out.nelements - y_size) // K
    return y_size + n_tokens * snapshot


def tolerance(node: Any, bound: float) -> float:
    """The fuzzer's NMSE bound for a node: at least what its types allow random shapes and values (sums over
    rows of any length, arguments at the ends of their ranges), never tighter than the spec's."""
    from pyggml import types

    names = {node.type.name} | {s.type.name for s in node.src}
    if any(types.is_quantized(n) for n in names):
        floor = 1e-2
    elif "BF16" in names:
        floor = 1e-3
    elif "F16" in names:
        floor = 1e-4
    else:
        floor = 1e-5
    return max(bound, floor)


def element_aligned(graph: Any) -> bool:
    """Every view in the graph starts and steps at whole elements of its type (a view at byte offset 1 of
    F32 data reads the halves of two floats: garbage as large as 1e38, which overflows F32 sums)."""
    from pyggml._native import ffi
    from pyggml.tensor import Tensor

    for t in [*graph.nodes, *graph.leafs()]:
        if t.ptr.view_src == ffi.NULL:
            continue
        size = Tensor(t.ptr.view_src, None).element_size
        if t.view_offs % size or any(nb % size for nb in t.nb[1:]):
            return False
    return True


def check(g: Gen, info: dict, script: Script, results: dict, rec: dict) -> dict:
    """Every node of the CPU's graph against its oracle (each spec's node reader, with the values the
    node received), and the meta result against the CPU's."""
    n = written(g, info, script["out"])
    if "meta:cpu,cpu" in results:
        meta, cpu = (results[r] if n is None else results[r].reshape(-1)[:n] for r in ("meta:cpu,cpu", "cpu"))
        bad = mismatch(meta, cpu, 1e-9)
        if bad:
            rec.update(outcome="wrong", phase="meta vs cpu", message=bad)
            return rec
    verdicts = results["nodes"]
    if not element_aligned(script["graph"]):
        return rec  # the nodes read parts of two elements as one: values no op is defined on, no verdict
    errors = [v.error for v in verdicts if v.error]
    if errors:  # a reader that does not model this call (its oracle raised): noted, not a finding
        rec["oracle_error"] = errors[0]
    rec["code"] = list(script.lines)
    wrong = [v for v in verdicts if not v.ok]
    if wrong:
        v = wrong[0]
        assert v.comparison is not None
        rec.update(outcome="wrong", phase="oracle", message=f"node {v.index} {v.kind}: {v.comparison.message}")
    elif any(v.comparison is not None for v in verdicts):
        rec.update(checked=True, outcome="checked")
    return rec


# --- child: one batch ---------------------------------------------------------------------------------
def run_calls(seed: int, start: int, stop: int, meta: bool, selftest_death: int | None, ops: list[str]) -> None:
    """Calls start..stop, in a child process (run_batch): each line of each call's program is echoed
    to stdout before it runs, so that the parent knows which call, and which line, killed the child."""
    import faulthandler
    import logging

    faulthandler.enable()  # a segfault prints the Python stack to stderr
    logging.disable(logging.CRITICAL)  # ggml's log of refused calls is noise here
    import warnings

    warnings.simplefilter("ignore")
    ONLY_OPS[:] = ops  # the parent's --ops: a fresh interpreter starts without them

    def echo(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    for k in range(start, stop):
        echo(f"@call {k}")
        rec = run_call(seed, k, meta, echo, selftest_death)
        echo("@result " + json.dumps(rec, default=str))


# --- parent: batches, deaths, summary ---------------------------------------------------------------
def parse_stream(text: str) -> tuple[list[dict], int | None, list[str], str]:
    """Records of the finished calls; the call that was running at the end, its current pass's code and name."""
    records: list[dict] = []
    running: int | None = None
    code: list[str] = []
    which = ""
    for line in text.splitlines():
        if line.startswith("@call "):
            running, code, which = int(line.split()[1]), [], ""
        elif line.startswith("@pass "):
            code, which = [], line[6:]
        elif line.startswith("@phase "):
            which = line[7:]
        elif line.startswith("@code "):
            code.append(json.loads(line[6:]))
        elif line.startswith("@result "):
            records.append(json.loads(line[8:]))
            running = None
    return records, running, code, which


def death_reason(outcome: Outcome) -> str:
    """Why a child died, in one line: ggml's abort message, Python's fatal error, the signal or the exit status."""
    stderr = outcome.stderr
    m = re.search(r"ggml aborted: (.*)", stderr) or re.search(r"(GGML_ASSERT\(.*)", stderr)
    if m:  # ggml's source path shortened to its file name: the same assert reads the same anywhere
        return "ggml abort: " + re.sub(r"\S*/([^/\s]+:\d+)", r"\1", m.group(1).strip())
    m = re.search(r"Fatal Python error: (\w+.*)", stderr)
    if m:
        return m.group(1).strip()
    if outcome.status == "raised":  # the fuzzer's own code failed in the child
        return f"raised {outcome.error_type}: {outcome.message}"
    if outcome.signal_name:
        return f"killed by {outcome.signal_name}"
    tail = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    return f"exit status {outcome.exit_code}" + (f": {tail[-1][:200]}" if tail else "")


def run_batch(seed: int, start: int, stop: int, meta: bool, timeout: float, selftest_death: int | None) -> list[dict]:
    """Run calls start..stop in children; a death ends a child, the next child resumes after it."""
    records: list[dict] = []
    while start < stop:
        outcome = child.run(run_calls, (seed, start, stop, meta, selftest_death, list(ONLY_OPS)), timeout=timeout)
        done, running, code, which = parse_stream(outcome.stdout)
        records.extend(done)
        if outcome.status == "returned" and running is None:
            break
        stderr = (outcome.stderr + outcome.traceback)[-2000:]  # faulthandler's stack: where it died
        if running is None:  # died between calls: nothing to blame, stop this batch
            records.append(
                {
                    "call": done[-1]["call"] + 1 if done else start,
                    "outcome": "death",
                    "phase": "harness",
                    "target": "",
                    "message": death_reason(outcome),
                    "code": [],
                    "stderr": stderr,
                }
            )
            break
        reason = "hang (timeout)" if outcome.status == "timeout" else death_reason(outcome)
        records.append(
            {
                "call": running,
                "outcome": "death",
                "phase": which or "build",
                "target": _target_of_lines(code),
                "message": reason,
                "code": code,
                "stderr": stderr,
            }
        )
        start = running + 1
    return records


def _target_of_lines(code: list[str]) -> str:
    for line in reversed(code):
        m = re.match(r"(?:\[?\w+\]? = )?(ops\.\w+|gg\.Runner\(.*\)\.run|\w+\.\w+|[\w.]+)\(", line)
        if m:
            return m.group(1)
    return ""


def reproducer(rec: dict) -> str:
    return "\n".join(PRELUDE + rec.get("code", []))


def cause_key(rec: dict) -> tuple:
    """Deduplicate findings by cause: the same kind and the same message once numbers are blanked
    (a ggml assert reads the same whichever op reached it; the targets are listed apart)."""
    msg = re.sub(r"0x[0-9a-f]+|-?\d+(\.\d+)?(e[-+]?\d+)?", "N", rec.get("message", ""))
    return rec["outcome"], msg[:160]


def summarize(records: list[dict], calls: int, seconds: float) -> dict:
    c = Counter(r["outcome"] for r in records)
    return {
        "calls": calls,
        "built": sum(bool(r.get("built")) for r in records),
        "computed": sum(bool(r.get("computed")) for r in records),
        "checked": sum(bool(r.get("checked")) for r in records),
        "raised": c["raised"],
        "off-contract": c["off-contract"],
        "wrong": c["wrong"],
        "deaths": c["death"],
        "internal": c["internal"],
        "seconds": round(seconds, 1),
    }


def report(records: list[dict], summary: dict, out: TextIO = sys.stdout, max_causes: int = 40) -> None:
    bad = [r for r in records if r["outcome"] in ("death", "off-contract", "wrong", "internal")]
    groups: dict[tuple, list[dict]] = {}
    for r in bad:
        groups.setdefault(cause_key(r), []).append(r)
    for i, (key, recs) in enumerate(sorted(groups.items(), key=lambda kv: (kv[0][0], -len(kv[1])))):
        if i >= max_causes:
            out.write(f"... {len(groups) - max_causes} more distinct causes (see --json)\n")
            break
        first = min(recs, key=lambda r: len(r.get("code", [])))
        where = ", ".join(
            f"{t} x{n}" for t, n in Counter(f"{r.get('phase', '')}: {r.get('target', '')}" for r in recs).most_common(6)
        )
        out.write(f"\n=== {key[0].upper()} x{len(recs)}: {first.get('message', '')}\n# where: {where}\n")
        out.write(f"# calls: {', '.join(str(r['call']) for r in recs[:10])}{' ...' if len(recs) > 10 else ''}\n")
        out.write(reproducer(first) + "\n")
    out.write("\nsummary: " + "  ".join(f"{k}: {v}" for k, v in summary.items()) + "\n")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `python -m pyggml fuzz`."""
    parser.add_argument("--calls", type=at_least(1), default=1000)
    parser.add_argument("--seed", type=at_least(0), default=0)
    parser.add_argument("--batch", type=at_least(1), default=200, help="calls per child process (default 200)")
    parser.add_argument(
        "--meta",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also compute on a two-CPU meta device and compare (default on)",
    )
    parser.add_argument("--json", metavar="FILE", help="write the summary and every finding here")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a batch may run before it counts as a hang")
    parser.add_argument(
        "--ops", metavar="LIST", help="only these op wrappers, comma-separated (default: every call kind)"
    )
    parser.add_argument("--selftest-death", type=int, default=None, help=argparse.SUPPRESS)


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run `python -m pyggml fuzz` with its parsed options; parser reports a bad option."""
    if args.ops:
        unknown = sorted(set(args.ops.split(",")) - set(public_ops()))
        if unknown:
            parser.error(f"--ops: no op wrapper named {', '.join(unknown)}")
        ONLY_OPS[:] = args.ops.split(",")
    if args.json:
        try:  # fail now, not after the run
            with open(args.json, "a"):
                pass
        except OSError as e:
            parser.error(f"cannot write --json {args.json}: {e.strerror}")
    t0 = time.perf_counter()
    records = []
    for start in range(0, args.calls, args.batch):
        stop = min(args.calls, start + args.batch)
        records.extend(run_batch(args.seed, start, stop, args.meta, args.timeout, args.selftest_death))
        sys.stderr.write(f"\r[{stop}/{args.calls}] deaths so far: {sum(r['outcome'] == 'death' for r in records)}   ")
        sys.stderr.flush()
    sys.stderr.write("\n")
    summary = summarize(records, args.calls, time.perf_counter() - t0)
    report(records, summary)
    if args.json:
        findings = [r for r in records if r["outcome"] in ("death", "off-contract", "wrong")]
        try:
            with open(args.json, "w") as f:
                json.dump({"seed": args.seed, "summary": summary, "findings": findings}, f, indent=1, default=str)
        except OSError as e:
            print(f"error: could not write {args.json}: {e.strerror}", file=sys.stderr)
            return 2
    return 1 if summary["deaths"] or summary["wrong"] or summary["off-contract"] else 0
