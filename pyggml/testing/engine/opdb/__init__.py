"""The op database: one `OpSpec` per op, holding everything pyggml knows about that op.

A spec is what PyTorch's OpInfo is to torch and one `test_case` struct to test-backend-ops:

- `ref`: the op's NumPy reference (as OpInfo's `ref=`), taking what the op takes in NumPy order; by default
  the oracle of the op's name in `pyggml.testing.engine.oracles`;
- `call(xp, x, *args)`: how to call the op, written once (none where the wrapper and the reference take the
  sample's inputs in order, then its args: `plain_call`). It runs twice: with `xp` a ggml
  `Context` (the checked wrappers, `xp.add(x.a, x.b)`) and with `xp` the references (`xp.<op>` is
  `ref`, any other name the oracle of that name). Where the two must differ, `oracle(x, *args)` overrides the
  NumPy side;
- `samples`: the inputs (types, NumPy-order shapes, value generators, layouts such as a
  permuted or column-sliced view) and arguments from which the cases are generated;
- `bounds`, `known` and `skips`: per-backend and per-type overrides as data, each with its
  reason (a sentence or a docs/findings.md number);
- `grad`: the samples of grad mode (ggml's backward pass against finite differences);
- `errors`: the bad calls, each with the exception type and words it must raise, given by `bad(op, ...)`
  before the op's spec (the one shape of a bad call);
- `hints`: how the fuzzer shapes each argument so that most random calls build;
- `reads` and `from_node`: how a computed ggml node of that op kind is read back into an
  oracle call (its op_params, by name: `n.param("eps")`, `n.scalars()`, and its source values to the oracle's
  arguments; `params` where the op keeps its parameters otherwise than its builder takes them), so that any node
  of any graph can be checked against its oracle with the data it actually received
  (`pyggml.testing.engine.nodes`).

A new op is one `spec(...)` in `opdb/<family>.py` with its reference (`ref=`, or its oracle's maths in
`pyggml/testing/engine/oracles/<family>.py`): its wrapper is made from the op's declaration in ggml.h
(`pyggml.ops.declared`) unless its family writes one (a docstring, defaults, or a check of what ggml does not
check). The cases, grad cases, bad-call tests, fuzz hints and node checks all come from the spec.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from pyggml import types
from pyggml.target import Buffer

if TYPE_CHECKING:
    from pyggml.context import Context
    from pyggml.tensor import Tensor

Gen = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]

# what a family module of the database writes its specs with: it imports the lot (`from ... import *`)
__all__ = [
    "Bound",
    "Columns",
    "EXACT",
    "ElementBound",
    "Gen",
    "Grad",
    "In",
    "InputSpec",
    "Known",
    "Modeled",
    "NMSE_BF16",
    "NMSE_F16",
    "NMSE_F32",
    "NMSE_FP16_TABLE",
    "NMSE_Q8_DOT",
    "NMSE_Q8_STORE",
    "NMSE_QUANT",
    "Node",
    "Permuted",
    "Sample",
    "Skip",
    "Transposed",
    "as_input",
    "bad",
    "default_nmse",
    "distinct",
    "integers",
    "permutation_rows",
    "signed_away_from_zero",
    "spec",
    "uniform",
]


# --- value generators -----------------------------------------------------------------------------
def uniform(lo: float = -1.0, hi: float = 1.0) -> Gen:
    return lambda rng, shape: rng.uniform(lo, hi, size=shape).astype(np.float32)


def integers(lo: int, hi: int) -> Gen:
    return lambda rng, shape: rng.integers(lo, hi, size=shape).astype(np.int64)


def signed_away_from_zero(lo: float = 0.5, hi: float = 2.0) -> Gen:
    """|x| in [lo, hi) with a random sign: div denominators."""
    return lambda rng, shape: (rng.uniform(lo, hi, size=shape) * rng.choice([-1.0, 1.0], size=shape)).astype(np.float32)


def distinct(lo: float = -1.0, hi: float = 1.0) -> Gen:
    """Values with no ties in any row (argsort / argmax are ambiguous on ties)."""

    def gen(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        vals = np.linspace(lo, hi, int(np.prod(shape)), dtype=np.float32)
        return rng.permutation(vals).reshape(shape)

    return gen


def permutation_rows(n: int) -> Gen:
    """Distinct row indices (set_rows with repeated rows is order-dependent)."""
    return (
        lambda rng, shape: np.stack([rng.permutation(n)[: shape[-1]] for _ in range(int(np.prod(shape[:-1])))])
        .reshape(shape)
        .astype(np.int64)
    )


# --- layouts: how an input reaches the op ----------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """A view the op reads instead of the input tensor itself; `tag` goes into the case's name."""

    def ggml(self, ctx: Context, t: Tensor) -> Tensor:
        raise NotImplementedError

    def numpy(self, a: np.ndarray) -> np.ndarray:
        raise NotImplementedError


@dataclass(frozen=True)
class Permuted(Layout):
    """ggml_permute(t, *axes) (ggml's dims); rows stay contiguous when axes[0] == 0."""

    axes: tuple[int, int, int, int] = (0, 2, 1, 3)

    def ggml(self, ctx: Context, t: Tensor) -> Tensor:
        return ctx.permute(t, *self.axes)

    def numpy(self, a: np.ndarray) -> np.ndarray:
        from pyggml.testing.engine import oracles

        return oracles.permute(a, *self.axes)


@dataclass(frozen=True)
class Transposed(Layout):
    """ggml_transpose: rows no longer contiguous."""

    def ggml(self, ctx: Context, t: Tensor) -> Tensor:
        return ctx.transpose(t)

    def numpy(self, a: np.ndarray) -> np.ndarray:
        return np.swapaxes(a, -1, -2)


@dataclass(frozen=True)
class Columns(Layout):
    """Columns start..stop of every row (a view with the source's row strides)."""

    start: int
    stop: int

    def ggml(self, ctx: Context, t: Tensor) -> Tensor:
        ne = t.ne
        return ctx.view_4d(
            t, self.stop - self.start, ne[1], ne[2], ne[3], t.nb[1], t.nb[2], t.nb[3], self.start * t.nb[0]
        )

    def numpy(self, a: np.ndarray) -> np.ndarray:
        return a[..., self.start : self.stop]


@dataclass(frozen=True)
class In:
    """One input: its ggml type, its NumPy-order shape, how its values are drawn, and its layout."""

    type: str
    shape: tuple[int, ...]
    gen: Gen | None = None
    layout: Layout | None = None


InputSpec = In | tuple  # (type, shape[, gen]) is short for In(type, shape, gen)


def as_input(spec: InputSpec) -> In:
    return spec if isinstance(spec, In) else In(spec[0], tuple(spec[1]), spec[2] if len(spec) > 2 else None)


# --- bounds, known disagreements and skips: structured, each with its reason -----------------------
# NMSE bounds by output precision (test-backend-ops uses 1e-7 for most F32 ops)
NMSE_F32 = 1e-7
NMSE_F16 = 1e-5
NMSE_BF16 = 1e-4
NMSE_QUANT = 1e-6  # oracle sees the dequantized inputs, so only accumulation order differs
# NMSE bounds that depend on more than the input types (see each use)
NMSE_FP16_TABLE = 1e-5  # gelu / gelu_quick on CPU look F32 inputs up in an fp16 table
NMSE_Q8_DOT = 5e-4  # mul_mat with a quantized a: the CPU quantizes b to Q8_0 first
NMSE_Q8_STORE = 1e-4  # values written into a Q8_0 tensor (quantized on the way)


def default_nmse(type_names: set[str]) -> float:
    """The NMSE bound an output earns from its inputs' precision."""
    if "bf16" in type_names:
        return NMSE_BF16
    return NMSE_F16 if "f16" in type_names else NMSE_F32


@dataclass(frozen=True)
class Bound:
    """The error a backend may show: NMSE (and largest single error, relative to the output's scale;
    None: 30 root-mean-square errors of the NMSE). `backend` is a name prefix ("vulkan", "meta:vulkan";
    "" for all), `types` the case types it applies to (empty for all)."""

    nmse: float
    max_error: float | None = None
    backend: str = ""
    types: tuple[str, ...] = ()
    why: str = ""

    def __post_init__(self) -> None:
        if (self.backend or self.types) and not self.why:
            raise ValueError(f"a bound for {self.backend or self.types} needs its reason (why=)")


@dataclass(frozen=True)
class Known:
    """A backend known to disagree with the oracle (reported as `known`, not `fail`): why it does."""

    backend: str
    why: str
    types: tuple[str, ...] = ()


@dataclass(frozen=True)
class Skip:
    """Cases not run on a backend (by name prefix, and `device` in its description) unless asked for."""

    backend: str
    why: str
    types: tuple[str, ...] = ()
    device: str = ""


EXACT = Bound(0.0, 0.0)


# --- samples ------------------------------------------------------------------------------------------
@dataclass
class Sample:
    """One generated case: inputs (name -> In or (type, shape[, gen])), the op's other arguments,
    the variant (the name's last part), the type tag (the name's middle; default: the inputs' types)
    and overrides of the spec's call, oracle and bounds for this sample only."""

    inputs: Mapping[str, InputSpec]
    args: tuple = ()
    variant: str = ""
    tag: str | None = None
    call: Callable[..., Any] | None = None
    oracle: Callable[..., Any] | None = None
    bounds: Sequence[Bound] = ()
    known: Sequence[Known] = ()
    types: tuple[str, ...] = ()  # types the case involves beyond its inputs' (a cast's target)
    exact: bool | None = None


@dataclass
class Grad:
    """A grad-mode sample: `params` are the inputs that get gradients. Its case is named
    <op>/<variant>, or `name` where the grad case has a name of its own."""

    inputs: Mapping[str, InputSpec]
    params: tuple[str, ...]
    args: tuple = ()
    variant: str = "f32"
    call: Callable[..., Any] | None = None
    oracle: Callable[..., Any] | None = None
    bound: float | None = None
    known: Sequence[Known] = ()
    name: str | None = None


@dataclass
class Bad:
    """A call that must raise `raises` with `words` in its message: fn(ctx, make_tensor)."""

    fn: Callable[..., Any]
    raises: type[Exception]
    words: str


@dataclass(frozen=True)
class ElementBound:
    """A bound on every element of a result, and on every row of it, in units of its modelled rounding: where the
    oracle models what the kernel computes but the order of its float sums (a product whose activations it rounds
    as the kernel does), what is left of the difference is that order's rounding, whose size each element's
    `unit` states (for a product: u * |w_i| * |x_t|, pyggml.testing.engine.opdb.matmul). A node passes when every
    |actual - expected| <= `element` units and, for every row (the values along `axes` at one index of the
    others), the root mean square of the errors in units is <= `row`: a row off by a little, which one NMSE over a
    whole node cannot see, is failed by its own figure.

    Attributes:
        unit: the rounding unit of each element, absolute, shaped as the expected values.
        element: how many units one element may be off.
        row: how many units (root mean square) one row may be off.
        axes: the axes a row runs along (a product's columns: -2).
        why: what the unit is, said in a failure's message.
        rows: instead of `axes`, the row of each element by number (shaped as the values, or broadcastable to
            them): a mixture of experts' product, whose weight row (expert, i) is read by the tokens routed to it.
    """

    unit: np.ndarray
    element: float
    row: float
    axes: tuple[int, ...] = (-2,)
    why: str = ""
    rows: np.ndarray | None = None


@dataclass(frozen=True)
class Modeled:
    """What a `from_node` returns when its oracle models what the backend computing the node does, beyond
    the op's definition (the CPU's rounding of activations to a quantized weight's dot type): the values
    it expects, and the tighter NMSE bound that modeling earns (instead of the spec's plain one; None: the spec's
    bound as its policy resolves it), and where the oracle models all but the order of the kernel's float sums,
    the bound of each element and row (`ElementBound`; None: the NMSE bound alone)."""

    values: np.ndarray
    nmse: float | None
    elements: ElementBound | None = None


@dataclass
class Node:
    """A node as `from_node` sees it: its tensor (op_params, ne, type) and its sources' values as NumPy
    arrays, by slot (None for an empty slot), as they were just before ggml computed the node. A source the
    reader asks for itself may be given as a call that decodes it (pyggml.testing.engine.nodes.DECODED_WHEN_ASKED):
    `arg` makes the call, the reader may read fewer values from `raw` instead."""

    tensor: Tensor
    src: list[Any]  # np.ndarray, a call returning one (decoded when asked: `arg`), or None
    raw: list[np.ndarray | None] = field(default_factory=list)  # each source's bytes (uint8), where read
    _decoded: dict[str, Any] | None = field(default=None, repr=False, compare=False)  # by _by_name

    def raw_blocks(self, i: int) -> np.ndarray | None:
        """Source i's bytes as [rows..., blocks, block bytes] (a packed tensor of a block type), else None."""
        from pyggml import types

        raw = self.raw[i] if i < len(self.raw) else None
        p = self.tensor.ptr.src[i]
        t = types.Type(p.type)
        block, size = types.block_size(t), types.type_size(t)
        ne = [int(p.ne[d]) for d in range(4)]
        if raw is None or block == 1 or raw.size != size * int(np.prod(ne)) // block:
            return None
        return raw.reshape(ne[3], ne[2], ne[1], ne[0] // block, size)

    def decoded(self, i: int) -> bool:
        """Whether source i's values are at hand (a weight decoded once for every step that reads it), rather
        than decoded when asked for (`arg`): a reader may then read them a part at a time from `raw`."""
        return not callable(self.src[i]) if i < len(self.src) else False

    def arg(self, i: int) -> np.ndarray:
        """Source i's values; ValueError when the node has no source in that slot."""
        a = self.src[i] if i < len(self.src) else None
        if a is None:
            raise ValueError(f"{self.tensor.op.name} node: no source in slot {i}")
        if callable(a):  # decoded when asked for
            a = self.src[i] = a()
        return a

    def param(self, name: str) -> Any:
        """The op parameter `name`, by its op's layout (`param_layout`): an int, a float or a bool."""
        by_name = self._by_name()
        try:
            return by_name[name]
        except KeyError:
            raise KeyError(f"{self.tensor.op.name} node: no op parameter {name!r} (it has {list(by_name)})") from None

    def scalars(self) -> list[Any]:
        """Every op parameter of the node's layout, in order: what its op's builder took after its tensors."""
        return list(self._by_name().values())

    def _by_name(self) -> dict[str, Any]:
        """The node's parameters by name, its op_params read once (a reader asks for several)."""
        if self._decoded is None:
            slots = self.params(16)  # ggml's 64 bytes of op_params
            floats = slots.view(np.float32)
            self._decoded = {
                name: bool(slots[i]) if kind == "bool" else float(floats[i]) if kind == "float" else int(slots[i])
                for name, (i, kind) in param_layout(_reader_op(self.tensor)).items()
            }
        return self._decoded

    def params(self, n: int, dtype: Any = np.int32) -> np.ndarray:
        """The first n op_params read as `dtype` (ggml keeps them as 64 bytes of int32 slots)."""
        from pyggml._native import ffi

        return np.frombuffer(bytes(ffi.buffer(self.tensor.ptr.op_params)), dtype)[:n].copy()

    @property
    def ne(self) -> tuple[int, ...]:
        return tuple(self.tensor.ne)

    def computed_by_cpu(self) -> bool:
        """The node's output lies in a CPU buffer, or in a meta buffer over CPU buffers only ("Meta(CPU,CPU)":
        each device's share computed by a CPU backend), since ggml's scheduler computes a node on the backend
        whose buffer holds it. False on a device or an RPC server (whose backend is not known here)."""
        from pyggml._native import ffi, lib

        buffer = self.tensor.ptr.buffer
        if buffer == ffi.NULL:
            return False
        return Buffer.parse(ffi.string(lib.ggml_backend_buffer_name(buffer)).decode()).on_cpu

    def value(self) -> np.ndarray:
        """The node's own output: only for ops whose result is defined up to an order ggml leaves open
        (top_k), where the reader checks the node's set and then answers in the node's order."""
        return self.tensor.numpy()


@dataclass
class OpSpec:
    """Everything about one op (module docstring). `op` is the wrapper's name in pyggml.ops and the
    first part of every generated case's name."""

    op: str
    call: Callable[..., Any] | None = None
    samples: Sequence[Sample] = ()
    ref: Callable[..., Any] | None = None
    oracle: Callable[..., Any] | None = None
    exact: bool = False
    bounds: Sequence[Bound] = ()
    known: Sequence[Known] = ()
    skips: Sequence[Skip] = ()
    grad: Sequence[Grad] = ()
    errors: Sequence[Bad] = ()
    hints: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    reads: tuple[str, ...] = ()
    from_node: Callable[[Node], np.ndarray] | None = None
    params: tuple[str, ...] | None = None
    family: str = ""


def param_layout(op: str) -> dict[str, tuple[int, str]]:
    """How a node of `op` keeps its parameters (ggml's op_params, 4-byte slots): name -> (slot, kind), kind
    "int", "float" or "bool". By default the builder's own: the scalar parameters its ggml.h declaration lists
    after its tensors, one slot each in order, as most builders store them (`ggml_set_op_params`). A spec
    whose op keeps them otherwise gives `params=`, one "name:kind" per slot in order ("" skips a slot)."""
    from pyggml.ops.declared import declaration

    spec = SPECS.get(op)
    if spec is not None and spec.params is not None:
        entries = [p.partition(":") for p in spec.params]
        return {name: (slot, kind or "int") for slot, (name, _, kind) in enumerate(entries) if name}
    scalars = [p for p in declaration(op) if p.kind != "tensor"]
    return {p.name: (slot, p.kind if p.kind in ("float", "bool") else "int") for slot, p in enumerate(scalars)}


def _reader_op(t: Tensor) -> str:
    """The op whose spec reads the node t (its kind's reader), else the kind's own name in lower case."""
    from pyggml._native import ffi, lib

    kind = ffi.string(lib.ggml_op_desc(t.ptr)).decode()  # as nodes.kind names it (nodes imports this module)
    spec = READERS.get(kind)
    return spec.op if spec is not None else kind.lower()


SPECS: dict[str, OpSpec] = {}
READERS: dict[str, OpSpec] = {}  # ggml op kind (ggml_op_desc) -> the spec that reads its nodes


# the bad calls of each op, each given by bad() before the op's spec, which takes them
BAD_CALLS: dict[str, list[Bad]] = {}


def bad(op: str, fn: Callable[..., Any], raises: type[Exception], words: str) -> None:
    """A call of `op` that must raise `raises` with `words` in its message: fn(ctx, make_tensor). The one shape of
    a bad call: given before the op's spec, which takes every bad call of its op (`spec`).

    Args:
        op: the op's name (its spec's).
        fn: the call, fn(ctx, t) with t(type, shape) making a tensor.
        raises: the exception type it must raise.
        words: what its message must say.
    """
    if op in SPECS:
        raise ValueError(f"bad({op!r}, ...) after the op's spec: give an op's bad calls before its spec")
    BAD_CALLS.setdefault(op, []).append(Bad(fn, raises, words))


def spec(op: str, call: Callable[..., Any] | None = None, samples: Iterable[Sample] = (), **fields: Any) -> OpSpec:
    """Register the spec of `op` (once: a second spec of the same op raises), with the bad calls `bad` gave it."""
    if op in SPECS:
        raise ValueError(f"op {op!r} already has a spec (in opdb/{SPECS[op].family}.py): one spec per op")
    if "errors" in fields:
        raise ValueError(f"{op}: give its bad calls with bad({op!r}, fn, raises, words) before the spec, not errors=")
    s = OpSpec(op, call or plain_call(op), list(samples), errors=BAD_CALLS.pop(op, []), **fields)
    s.family = s.family or _calling_family()
    if s.ref is None:
        from pyggml.testing.engine import oracles

        s.ref = getattr(oracles, op, None)
    for kind in s.reads:
        if kind in READERS:
            raise ValueError(f"{kind} nodes are already read by the spec of {READERS[kind].op}")
        if s.from_node is None:
            raise ValueError(f"{op}: reads {kind} but has no from_node")
        READERS[kind] = s
    SPECS[op] = s
    return s


def plain_call(op: str) -> Callable[..., Any]:
    """The call of a spec that gives none: the op's wrapper (its family's, or the one ggml.h declares:
    `pyggml.ops.wrapper`) and its reference (the spec's `ref`) take the sample's inputs in their order,
    then its args (`xp.<op>(x.a, x.b, *args)`). A spec writes a call where its op is called otherwise.

    Args:
        op: the op's name.

    Returns:
        call(xp, x, *args).
    """

    def call(xp: Any, x: SimpleNamespace, *args: Any) -> Any:
        from pyggml.arena import Arena
        from pyggml.ops import wrapper

        if isinstance(xp, Arena):
            return wrapper(op)(xp, *vars(x).values(), *args)
        return getattr(xp, op)(*vars(x).values(), *args)

    call.__qualname__ = f"plain_call({op!r})"
    return call


def _calling_family() -> str:
    import sys

    mod = sys._getframe(2).f_globals.get("__name__", "")
    return mod.rsplit(".", 1)[-1]


_loaded = False


def load() -> dict[str, OpSpec]:
    """Import every family module of the database once (each registers its specs when imported)."""
    global _loaded
    if not _loaded:
        for info in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{info.name}")
        if BAD_CALLS:
            raise ValueError(f"bad calls of ops with no spec: {sorted(BAD_CALLS)}")
        _loaded = True
    return SPECS


# --- running a spec's call on both sides ---------------------------------------------------------------
def ggml_side(s: OpSpec, sample: Sample | Grad) -> Callable[[Context, SimpleNamespace], Tensor]:
    """build(ctx, x): the inputs through their layouts, then the spec's call with xp = the context."""
    call = sample.call or s.call
    if call is None:
        raise ValueError(f"{s.op}: neither the spec nor its sample has a call")
    layouts = {k: as_input(v).layout for k, v in sample.inputs.items()}

    def build(ctx: Context, x: SimpleNamespace) -> Tensor:
        xs = {k: (lay.ggml(ctx, t) if (lay := layouts[k]) else t) for k, t in vars(x).items()}
        return call(ctx, SimpleNamespace(**xs), *sample.args)

    return build


class References:
    """The NumPy side's `xp`: `xp.<op>` is the spec's reference (`ref`), any other name the oracle of that name."""

    def __init__(self, s: OpSpec) -> None:
        self._op, self._ref = s.op, s.ref

    def __getattr__(self, name: str) -> Any:
        from pyggml.testing.engine import oracles

        if name == self._op and self._ref is not None:
            return self._ref
        try:
            return getattr(oracles, name)
        except AttributeError:
            raise AttributeError(
                f"{self._op}: no reference for {name!r}: give the spec ref= or write its oracle"
            ) from None


def oracle_side(s: OpSpec, sample: Sample | Grad) -> Callable[[SimpleNamespace], np.ndarray]:
    """oracle(x): the inputs through their layouts, then the oracle override or the call with xp = the references."""
    references = References(s)
    override = sample.oracle or (s.oracle if sample.call is None else None)
    call = sample.call or s.call
    layouts = {k: as_input(v).layout for k, v in sample.inputs.items()}

    def oracle(x: SimpleNamespace) -> np.ndarray:
        xs = SimpleNamespace(**{k: (lay.numpy(a) if (lay := layouts[k]) else a) for k, a in vars(x).items()})
        if override is not None:
            return override(xs, *sample.args)
        assert call is not None
        return call(references, xs, *sample.args)

    return oracle


def type_tag(inputs: Mapping[str, InputSpec]) -> str:
    """The type part of a case's name: the inputs' distinct types in order ("f32", "f16_f32")."""
    seen: list[str] = []
    for v in inputs.values():
        t = as_input(v).type.lower()
        if t not in seen:
            seen.append(t)
    return "_".join(seen) if seen else "f32"


def case_name(s: OpSpec, sample: Sample) -> str:
    tag = sample.tag if sample.tag is not None else type_tag(sample.inputs)
    return "/".join(p for p in (s.op, tag, sample.variant) if p)


def involved_types(sample: Sample, tag: str) -> frozenset[str]:
    """The ggml types a case involves: its inputs', its tag's parts that are type names, and any extra."""
    out = {as_input(v).type.lower() for v in sample.inputs.values()} | {t.lower() for t in sample.types}
    for part in tag.replace("to_", "").split("_"):
        try:
            out.add(types.as_type(part).name.lower())
        except (KeyError, ValueError, TypeError):
            pass
    return frozenset(out)
