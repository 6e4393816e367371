"""Specs of the matrix products (mul_mat, mul_mat_id, out_prod, add_id) and the weight-type cases:
get_rows, mul_mat, cpy and set_rows over every type ggml can write from floats
(pyggml.types.can_quantize), with odd row counts, several K and batched dims.

Weight types ggml cannot produce here: IQ2_XXS, IQ2_XS and IQ1_S need an importance matrix, IQ1_M
and Q8_K have no quantizer (`ggml_quantize_chunk` refuses them), Q8_1 is only an activation format
(no quantizer for it either). IQ2_S, IQ3_S and IQ3_XXS can be quantized by ggml_quantize_chunk but
the CPU has no `from_float` for them, so cpy / set_rows into them are refused by the preflight:
they get get_rows and mul_mat cases only.

Bounds of the weight-type cases:
- get_rows and dequantizing copies: exact. The oracle sees the weights as the tensor holds them
  (the case harness round-trips every input through the type), and a row read is the same
  dequantization.
- cpy F32/F16 -> type, set_rows into the type: the values written are the source quantized on
  the way. The oracle quantizes them itself with pyggml.types.encode/decode (ggml_quantize_chunk,
  the reference quantizer: no compute op) and so expects the very bytes the kernel writes: exact
  when the backend quantizes as ggml's reference code does (IQ4_NL's row quantizer differs from
  ggml_quantize_chunk: _iq4_nl_row_store).
- mul_mat: the oracle multiplies the dequantized weights with b in float64. The CPU first
  quantizes b to the type's vec_dot type (_VEC_DOT below), and that is the only error beyond the
  F32 accumulation order. b uniform in (-1, 1), blocks of 32 or 256 values with max|b| ~ 1:
    Q8_0 / Q8_1 / Q8_K: step d = max|b|/127, error uniform in +-d/2, variance d^2/12 ~ 5.2e-6,
      against E[b^2] = 1/3: NMSE of b ~ 1.6e-5; an output sum_k a_k (b_k + e_k) has the same
      expected NMSE (e independent of a). But all outputs of one b row share its error vector, so
      a case's NMSE is a ratio of a few correlated squares: up to 1.2e-4 seen (IQ4_XS, N=1). Bound
      3e-4; the largest error per element is bounded at 5% of the output's scale (seen: 1.3%).
      (An oracle that quantizes b to Q8_K in NumPy matches the CPU to NMSE 1e-14: the spread is
      the quantization's, not the kernel's.)
    F16: b rounded to F16 (relative step 2^-11): NMSE ~ 1e-7, F16 default bound 1e-5.
    BF16: b rounded to BF16 (relative step 2^-8): NMSE ~ 2.5e-6, BF16 default bound 1e-4.

Node readers and bounds: a node check takes its spec's plain bound (pyggml.testing.engine.nodes.node_policy)
for every node of the kind, whatever its types. mul_mat and mul_mat_id nodes with a quantized a carry
the Q8 rounding of b (NMSE_Q8_DOT), so those specs have NMSE_Q8_DOT as their plain bound, and every
sample states its own plain bound (what the inputs' precision gave it before) so that the cases'
bounds do not change.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pyggml import ops as _typed_ops
from pyggml import types
from pyggml._native import ffi, lib
from pyggml.errors import GraphError
from pyggml.target import Buffer
from pyggml.testing.engine import oracles
from pyggml.testing.engine.opdb import *  # noqa: F403 - the database's vocabulary, opdb.__all__
from pyggml.testing.engine.opdb import hints
from pyggml.testing.engine.oracles import dot_rounding
from pyggml.testing.engine.oracles._common import _as4

# the bad calls pass wrong types and argument counts on purpose: pyggml must raise on them
ops: Any = _typed_ops


def _bounded(inputs: Mapping[str, InputSpec], nmse: float | None = None, max_error: float | None = None) -> list[Bound]:
    """A sample's plain bound: `nmse` (and max_error) when given, else what its inputs' precision earns
    (cases.default_nmse). Stated on every sample of a spec that has a looser plain bound for its nodes."""
    if nmse is None:
        nmse = default_nmse({as_input(v).type.lower() for v in inputs.values()})
    return [Bound(nmse, max_error)]


# --- mul_mat ------------------------------------------------------------------------------------------------------------
# A product node the CPU computes, with F32 activations and a weight whose dot type is not F32: the oracle rounds
# b as the CPU does (oracles.dot_rounding) and is left with the F32 accumulation order. Measured on llama.cpp's
# models (docs/llama.md, the model matrix): NMSE up to 4e-8 where the plain oracle showed up to 6.7e-2.
NMSE_CPU_DOT = 1e-6
# A product lavapipe computes with ggml-vulkan's f16acc pipeline, against its F16 model (oracles.dot_rounding.
# vulkan_f16acc): measured bitwise on a trained Gemma 3's products (docs/llama.md); the bound leaves room for the
# few F16 ties NumPy's float32-then-round could break otherwise, far below the plain bound (5e-4) it replaces.
NMSE_VULKAN_F16ACC = 1e-8
# the most columns ggml-vulkan computes with its matrix-vector kernels (ggml-vulkan-types.h: F32 sums)
VULKAN_MUL_MAT_VEC_MAX_COLS = 8


def _vulkan_f16acc_applies(n: Node) -> bool:
    """Whether the node is a product lavapipe computes with ggml-vulkan's f16acc matrix-matrix kernel: a 2-D
    quantized or F16 weight, F32 activations of more than VULKAN_MUL_MAT_VEC_MAX_COLS columns in one matrix,
    on a Vulkan device that is Mesa's llvmpipe (fp16, no cooperative matrices: other devices choose other
    kernels, and keep the plain bound)."""
    from pyggml.backend import device as device_named

    t = n.tensor.ptr
    a, b = t.src[0], t.src[1]
    if t.buffer == ffi.NULL or t.op != lib.GGML_OP_MUL_MAT:
        return False
    buffer = Buffer.parse(ffi.string(lib.ggml_backend_buffer_name(t.buffer)).decode())
    if buffer.family != "vulkan" or buffer.device is None:
        return False
    try:
        device = device_named(buffer.device)
    except ValueError:
        return False
    quantized_or_f16 = a.type == int(types.Type.F16) or types.is_quantized(types.Type(a.type))
    return (
        "llvmpipe" in device.description
        and quantized_or_f16
        and b.type == int(types.Type.F32)
        and a.ne[2] == 1 and a.ne[3] == 1 and b.ne[2] * b.ne[3] == 1
        and t.ne[1] > VULKAN_MUL_MAT_VEC_MAX_COLS
        and bool(lib.ggml_is_contiguous(a)) and bool(lib.ggml_is_contiguous(b))
    )  # fmt: skip


# A weight of more values than this whose values no later step reads (`Node.decoded`) is decoded and multiplied a
# block of rows at a time (`_by_blocks_of_rows`): decoded whole, a model's weights were gigabytes of fresh float32
# memory a check (a 248k-token embedding alone 1 GB), more than the products cost.
BLOCK_OF_ROWS_VALUES = 1 << 22


def _by_blocks_of_rows(n: Node, b: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """a @ b^T for a 2-D packed weight a of a type to decode, BLOCK_OF_ROWS_VALUES values decoded at a time from
    its bytes, in float32 (as `oracles.mul_mat` computes a product of that size), with the norm of each of a's rows
    (`_unit`'s |w_i|, float64); None where a is not such a weight or b not one matrix."""
    a, raw = n.tensor.ptr.src[0], n.raw[0] if n.raw else None
    t = types.Type(a.type)
    m, k = int(a.ne[1]), int(a.ne[0])
    if (
        raw is None
        or types.has_raw_dtype(t)
        or a.ne[2] * a.ne[3] != 1
        or m * k <= BLOCK_OF_ROWS_VALUES
        or not lib.ggml_is_contiguous(a)
        or raw.size != types.row_size(t, k) * m
    ):
        return None
    b2 = np.asarray(b, dtype=np.float32).reshape(-1, k)
    if b2.shape[0] != int(n.tensor.ptr.ne[1]) or n.tensor.ptr.ne[2] * n.tensor.ptr.ne[3] != 1:
        return None
    out = np.empty((b2.shape[0], m), dtype=np.float32)
    norms = np.empty(m, dtype=np.float64)
    rows, width = max(1, BLOCK_OF_ROWS_VALUES // k), types.row_size(t, k)
    for r0 in range(0, m, rows):
        r1 = min(m, r0 + rows)
        block = types.decode(t, raw[r0 * width : r1 * width], (r1 - r0, k))
        out[:, r0:r1] = (block @ b2.T).T  # (a b^T)^T: BLAS's matrix-vector path for one row of b
        norms[r0:r1] = _row_norms(block)
    return out.reshape(n.tensor.shape), norms


# the last activations rounded to a dot type, with what they were rounded from: a layer's products read the same
# activations in turn (its q, k and v projections, its gate and up), so the rounding is done once for them
_last_rounded: list[tuple[str, np.dtype, tuple[int, ...], bytes, np.ndarray]] = []


def _as_dot_type(b: np.ndarray, dot_type: str) -> np.ndarray:
    """`dot_rounding.as_dot_type(b, dot_type)`, the last one's (read-only) when b holds the same bytes."""
    b = np.asarray(b)
    key = (dot_type, b.dtype, b.shape, b.tobytes())
    if _last_rounded and _last_rounded[0][:4] == key:
        return _last_rounded[0][4]
    rounded = dot_rounding.as_dot_type(b, dot_type)
    if np.shares_memory(rounded, b):  # a type it does not round: b itself, not kept
        return rounded
    rounded.setflags(write=False)
    _last_rounded[:] = [(*key, rounded)]
    return rounded


# --- each element of a CPU product against its rounding ------------------------------------------------------------------
# What is left between a CPU product and its oracle once the activations are rounded as the kernel rounds them
# (`dot_rounding`) is the order of float32 sums and products: the kernel's (its SIMD lanes' partial sums, a block's
# scale times its exact integer sum, the lanes added at the end) and the oracle's own (float32 BLAS for products of
# more than oracles.matmul.FLOAT64_UP_TO multiply-adds, the weight decoded to float32). Each rounding of a partial
# sum s errs by at most u |s| (u = 2^-24), and every partial sum of the dot product of w_i and x_t is at most
# |w_i| |x_t| (Cauchy-Schwarz): the unit of element (t, i) is u |w_i| |x_t| (row norms of the decoded weight and of
# the rounded activations: two cheap passes, where sum_k |w_ik x_tk| would cost a second product). Summed with
# independent signs, as rounding errors of long sums are, the error stays within a few units: measured at most
# ROUNDING_UNITS_SEEN for an element and ROW_UNITS_SEEN for a row, over llama.cpp's generated llama, qwen35 and
# qwen3moe at F32, Q8_0 and Q4_K_M and the qwen35-0.8b preset at Q4_K_M (32 tokens, with and without the CPU's
# repacked weights), and over random products of K = 256 to 16,384 (docs/llama.md, "Each element of a product").
# Bounds: ELEMENT_UNITS for one element, ROW_UNITS for the root mean square over a weight row's columns (a row's
# errors average out, so its bound can be tighter than an element's): 7x and 5x what was seen.
ROUNDING_UNIT = 2.0**-24
ELEMENT_UNITS = 16.0
ROW_UNITS = 4.0
ROUNDING_UNITS_SEEN = 2.1
ROW_UNITS_SEEN = 0.69


def _row_norms(a: np.ndarray) -> np.ndarray:
    """The Euclidean norm of each row (last axis) of a, in float64."""
    return np.sqrt(np.einsum("...k,...k->...", a, a, dtype=np.float64))


# a kept weight's row norms by the array that holds its values (`_weight_row_norms`)
_WEIGHT_NORMS: dict[int, tuple[weakref.ref, np.ndarray]] = {}


def _weight_row_norms(a: np.ndarray) -> np.ndarray:
    """`_row_norms` of a product's weight, computed once per array for the read-only ones: the weights a checker
    keeps decoded across a conversation's steps (nodes.SourceCache marks them so; their values never change). Every
    step took each weight's norms again: 0.5 s of a 0.94 s checked step of the qwen3-0.6b preset."""
    if a.flags.writeable:
        return _row_norms(a)
    key = id(a)
    hit = _WEIGHT_NORMS.get(key)
    if hit is not None and hit[0]() is a:
        return hit[1]
    norms = _row_norms(a)

    def forget(_: weakref.ref) -> None:  # the array is gone: its id may name another one
        _WEIGHT_NORMS.pop(key, None)

    _WEIGHT_NORMS[key] = (weakref.ref(a, forget), norms)
    return norms


def _unit_of_product(weight_norms: np.ndarray, b: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """u |w_i| |x_t| of every element of a MUL_MAT node: weight_norms [.., M] (ggml's dims 2 and 3 broadcast to b's
    as the product does), b the activations as the kernel read them [.., N, K]; shaped as the node."""
    w4 = _as4(np.asarray(weight_norms)[..., None])[..., 0][..., None, :]  # [A3, A2, 1, M]
    x4 = _as4(_row_norms(np.asarray(b))[..., None])[..., 0][..., :, None]  # [B3, B2, N, 1]
    r0, r1 = x4.shape[0] // w4.shape[0], x4.shape[1] // w4.shape[1]
    w4 = np.repeat(np.repeat(w4, r0, axis=0), r1, axis=1)
    return (ROUNDING_UNIT * x4 * w4).reshape(shape)


def _unit_of_product_id(as_: np.ndarray, b: np.ndarray, ids: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """u |w_i| |x_t| of every element of a MUL_MAT_ID node (as_ [n_as, M, K], b [n_tokens, n_b, K], ids
    [n_tokens, n_used]: out[t, e, i] reads expert ids[t, e]'s row i and b[t, e % n_b]); shaped as the node."""
    wn = _row_norms(_as4(np.asarray(as_))[0])  # [n_as, M]
    xn = _row_norms(_as4(np.asarray(b))[0])  # [n_tokens, n_b]
    ids2 = _as4(np.asarray(ids))[0, 0]
    n_used = ids2.shape[1]
    x_used = xn[:, np.arange(n_used) % xn.shape[1]]  # [n_tokens, n_used]
    return (ROUNDING_UNIT * x_used[..., None] * wn[ids2]).reshape(shape)


def _element_bound(unit: np.ndarray, ids: np.ndarray | None = None) -> ElementBound:
    """The ElementBound of a CPU product node of `unit`s; a MUL_MAT_ID's (its `ids`, [n_tokens, n_used]) rows are
    its experts' weight rows, numbered expert * M + i, each over the tokens routed to that expert."""
    why = "unit u*|w_i|*|x_t|, u = 2^-24"
    if ids is not None:
        m = unit.shape[-1]
        ids2 = _as4(np.asarray(ids))[0, 0].astype(np.int64)
        rows = (ids2[..., None] * m + np.arange(m)).reshape(unit.shape)
        return ElementBound(unit, ELEMENT_UNITS, ROW_UNITS, (), why + "; rows: expert * M + i", rows)
    return ElementBound(unit, ELEMENT_UNITS, ROW_UNITS, () if unit.ndim < 2 else (-2,), why)


def dot_type_name(weight_type: str) -> str:
    """The type the CPU converts a product's F32 activations to for a weight of `weight_type` (its vec_dot_type).

    Args:
        weight_type: the weight's ggml type name.

    Returns:
        The dot type's name (Q8_0, Q8_K, F16, F32, ...).
    """
    return types.Type(int(lib.ggml_get_type_traits_cpu(int(types.as_type(weight_type))).vec_dot_type)).name


def rounded_as_dot_type(b: np.ndarray, dot_type: str) -> np.ndarray:
    """b as the CPU's product kernel reads it after converting it to `dot_type` (`dot_rounding.as_dot_type`, the
    last rounding reused when b holds the same bytes: a layer's products read the same activations in turn).

    Args:
        b: the activations, F32, [.., K].
        dot_type: the weight's dot type (`dot_type_name`).

    Returns:
        The rounded activations, float32 (read-only when kept).
    """
    return _as_dot_type(b, dot_type)


def _product_node(n: Node, product: Callable[..., np.ndarray]) -> np.ndarray | Modeled:
    """A MUL_MAT or MUL_MAT_ID node's expected values (`product` of its sources); on the CPU, with b as it
    is rounded to the weight type's dot type first, and the tight bounds that earns: NMSE_CPU_DOT over the node,
    ELEMENT_UNITS and ROW_UNITS of its rounding unit per element and per row (`_element_bound`)."""
    a, b = n.tensor.ptr.src[0], n.tensor.ptr.src[1]
    dot_type = int(lib.ggml_get_type_traits_cpu(a.type).vec_dot_type)
    on_cpu = n.computed_by_cpu()
    rounds_b = on_cpu and b.type == int(types.Type.F32) and dot_type != int(types.Type.F32)
    rounded = _as_dot_type(n.arg(1), types.Type(dot_type).name) if rounds_b else None
    if rounded is not None and product is oracles.mul_mat and dot_type != int(types.Type.Q8_1) and not n.decoded(0):
        by_blocks = _by_blocks_of_rows(n, rounded)
        if by_blocks is not None:
            values, norms = by_blocks
            unit = _unit_of_product(norms, rounded, values.shape)
            return Modeled(values, NMSE_CPU_DOT, _element_bound(unit))
    args = [n.arg(i) for i in range(3 if product is oracles.mul_mat_id else 2)]
    if product is not oracles.mul_mat_id and _vulkan_f16acc_applies(n):
        a2 = np.reshape(args[0], (-1, np.shape(args[0])[-1]))
        b2 = np.reshape(args[1], (-1, np.shape(args[1])[-1]))
        return Modeled(dot_rounding.vulkan_f16acc(a2, b2).reshape(n.tensor.shape), NMSE_VULKAN_F16ACC)

    def bounded(values: np.ndarray, x: np.ndarray, nmse: float | None = NMSE_CPU_DOT) -> Modeled:
        values = np.asarray(values)
        if product is oracles.mul_mat_id:
            unit = _unit_of_product_id(args[0], x, args[2], values.shape)
        else:
            unit = _unit_of_product(_weight_row_norms(np.asarray(args[0])), x, values.shape)
        return Modeled(values, nmse, _element_bound(unit, args[2] if product is oracles.mul_mat_id else None))

    if rounded is None:
        if on_cpu and b.type == dot_type:  # the kernel reads b as it is (F32 with an F32 weight, F16 with F16):
            return bounded(product(*args), args[1], None)  # the op's NMSE bound as stated, and each element's
        return product(*args)
    blocks = n.raw_blocks(0) if dot_type == int(types.Type.Q8_1) else None
    if dot_type == int(types.Type.Q8_1) and blocks is None:  # the weight's bytes were not read: no block minima
        return product(*args)
    expected = product(args[0], rounded, *args[2:])
    if blocks is not None:  # Q4_1, Q5_1: the block minimum times Q8_1's stored block sum
        minima = np.ascontiguousarray(blocks[..., 2:4]).view(np.float16)[..., 0]  # block: F16 d, F16 m, ...
        minima = minima.reshape(*np.shape(args[0])[:-1], minima.shape[-1])
        extra = [minima, dot_rounding.q8_1_sum_error(args[1]), *args[2:]]
        expected = (expected.astype(np.float64) + product(*extra)).astype(np.float32)
    return bounded(expected, rounded)


def _quantizable_dot_types(leave_out: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """The quantized types Tensor.set can write that the CPU has a dot product for, but those in
    `leave_out` (not probed: probing IQ2_S runs ggml_quantize_init, about 2 s at import)."""
    out = []
    for t in types.Type:
        if (
            types.is_quantized(t)
            and t.name.lower() not in leave_out
            and types.can_quantize(t) is None
            and lib.ggml_get_type_traits_cpu(int(t)).vec_dot != ffi.NULL
        ):
            out.append(t.name.lower())
    return sorted(out)


def _requantized(t: str) -> Gen:
    """Values that quantizing again leaves as they are: the case harness hands the oracle the round-tripped
    values and then sets the tensor from them, which quantizes them a second time; for some types (the
    K-quants now and then) that moves them, and the oracle would see other weights than the tensor holds."""

    def gen(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        x = rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
        for _ in range(10):
            v = types.decode(t, types.encode(t, x), shape)
            if np.array_equal(types.decode(t, types.encode(t, v), shape), v):
                return v
            x = v
        raise ValueError(f"{t}: no values that survive quantization found")

    return gen


# re-quantizing what IQ2_S, IQ3_S and IQ3_XXS dequantize to keeps moving the values (no fixed point):
# under the harness's double quantization their oracle cannot see the tensor's weights
_NO_FIXED_POINT = {"iq2_s", "iq3_s", "iq3_xxs"}
_QDOT = _quantizable_dot_types(_NO_FIXED_POINT)


def _qk(q: str) -> int:
    """Row length of the quantized cases: three blocks, or one super-block of 256."""
    return 3 * types.block_size(q) if types.block_size(q) < 256 else types.block_size(q)


# weights ggml can write from floats, in ggml's type names (lower case)
WEIGHT_TYPES = (
    "q4_0",
    "q4_1",
    "q5_0",
    "q5_1",
    "q8_0",
    "q2_k",
    "q3_k",
    "q4_k",
    "q5_k",
    "q6_k",
    "iq4_nl",
    "iq4_xs",
    "mxfp4",
    "nvfp4",
    "tq1_0",
    "tq2_0",
    "q1_0",
    "q2_0",
    "iq2_s",
    "iq3_s",
    "iq3_xxs",
    "f16",
    "bf16",
)
# the CPU cannot write these (no from_float): no cpy / set_rows into them
_NO_CPU_STORE = {"iq2_s", "iq3_s", "iq3_xxs"}

# b quantized to Q8_0 / Q8_1 / Q8_K first: NMSE ~ 1.6e-5 expected, bounds in the module doc
_VEC_DOT_Q8 = (3e-4, 0.05)
_VEC_DOT: dict[str, tuple[float, float | None]] = {
    "f16": (NMSE_F16, None),
    "bf16": (1e-4, None),
}  # b rounded to a's type


def _ks(t: str) -> tuple[int, int, int]:
    """Three row lengths K for type t: whole blocks, odd block counts where they stay small; odd
    lengths for the unblocked F16/BF16."""
    b = types.block_size(t)
    if b == 1:
        return 13, 29, 7
    if b <= 64:
        return 3 * b, 5 * b, b
    if b == 128:
        return b, 3 * b, 2 * b
    return b, 2 * b, b


def _mul_mat_samples() -> list[Sample]:
    out = []

    def add(
        inputs: dict[str, InputSpec],
        variant: str = "",
        tag: str | None = None,
        nmse: float | None = None,
        max_error: float | None = None,
        bounds: Sequence[Bound] = (),
    ) -> None:
        out.append(Sample(inputs, variant=variant, tag=tag, bounds=[*_bounded(inputs, nmse, max_error), *bounds]))

    add({"a": ("f32", (5, 16)), "b": ("f32", (3, 16))})
    add({"a": ("f32", (1, 2, 4, 8)), "b": ("f32", (3, 4, 2, 8))}, "broadcast")
    add({"a": ("f32", (7, 32)), "b": ("f32", (1, 32))}, "vector")
    add({"a": ("f16", (2, 5, 32)), "b": ("f32", (2, 3, 32))}, tag="f16")
    add({"a": ("f16", (5, 32)), "b": ("f16", (3, 32))}, tag="f16_f16")
    for q in ("q8_0", "q4_0"):
        add({"a": (q, (2, 6, 64)), "b": ("f32", (2, 3, 64))}, tag=q, nmse=NMSE_Q8_DOT)
    # odd sizes, broadcasting, strided b, half types
    for ta, tb in (("f32", "f32"), ("f16", "f32"), ("f16", "f16"), ("bf16", "f32"), ("bf16", "bf16"), ("f32", "bf16")):
        tag = ta if tb == "f32" else f"{ta}_{tb}"
        add({"a": (ta, (7, 13)), "b": (tb, (5, 13))}, "odd", tag)
        add({"a": (ta, (2, 1, 7, 13)), "b": (tb, (2, 3, 5, 13))}, "broadcast2", tag)
        add({"a": (ta, (1, 3, 5, 11)), "b": (tb, (2, 6, 3, 11))}, "broadcast23", tag)
        add({"a": (ta, (11, 37)), "b": (tb, (1, 37))}, "vector_odd", tag)
        # b's rows permuted out of order (dims 1 and 2 swapped): packed rows, strided matrices
        add({"a": (ta, (3, 7, 13)), "b": In(tb, (5, 3, 13), layout=Permuted())}, "b_permuted", tag)
        # b a view of 13 of every 16 columns: rows with a gap between them
        add({"a": (ta, (7, 13)), "b": In(tb, (5, 16), layout=Columns(0, 13))}, "b_row_gap", tag)
    # a itself a permuted view (rows packed, matrices strided)
    # Vulkan copies a non-contiguous a to F16 before the product (ggml_vk_mul_mat_q_f16): F16 inputs' bound
    add(
        {"a": In("f32", (7, 2, 13), layout=Permuted()), "b": ("f32", (2, 5, 13))},
        "a_permuted",
        bounds=[Bound(NMSE_F16, backend="vulkan", why="a non-contiguous F32 a is rounded to F16 (docs/findings.md)")],
    )
    # quantized a: the oracle sees the dequantized weights; the CPU quantizes b to the type's vec_dot type
    # (Q8_0 / Q8_1 / Q8_K) first, whose rounding is what NMSE_Q8_DOT bounds
    for q in _QDOT:
        k, g = _qk(q), _requantized(q)
        add({"a": (q, (5, k), g), "b": ("f32", (3, k))}, "odd", q, NMSE_Q8_DOT)
        add({"a": (q, (1, 3, k), g), "b": ("f32", (2, 1, 2, k))}, "broadcast", q, NMSE_Q8_DOT)
    # the weight types (module doc): b is quantized to the vec_dot type first
    for t in WEIGHT_TYPES:
        k1, k2, k3 = _ks(t)
        nmse, max_error = _VEC_DOT.get(t, _VEC_DOT_Q8)
        add({"a": (t, (7, k1)), "b": ("f32", (3, k1))}, "weights_m7_n3", t, nmse, max_error)
        add({"a": (t, (13, k2)), "b": ("f32", (1, k2))}, "weights_m13_n1", t, nmse, max_error)
        # a broadcast over dims 2 and 3 of b
        add({"a": (t, (1, 2, 5, k3)), "b": ("f32", (3, 2, 3, k3))}, "weights_batched", t, nmse, max_error)
        # b a permuted view (rows contiguous, dims 1 and 2 swapped), a broadcast over dim 2
        add(
            {"a": (t, (5, k3)), "b": In("f32", (3, 4, k3), layout=Permuted())}, "weights_b_permuted", t, nmse, max_error
        )
    return out


bad("mul_mat", lambda c, t: ops.mul_mat(c, t("f32", (4, 32)), t("f32", (3, 16))), ValueError, "ggml_can_mul_mat(a, b)")
bad(
    "mul_mat",
    lambda c, t: ops.mul_mat(c, t("f32", (3, 4, 32)), t("f32", (2, 3, 32))),
    ValueError,
    "ggml_can_mul_mat(a, b)",
)
bad("mul_mat", lambda c, t: ops.mul_mat(c, t("i32", (4, 32)), t("f32", (3, 32))), ValueError, "no dot product")
bad(
    "mul_mat",
    lambda c, t: ops.mul_mat(c, t("f32", (4, 32)), ops.transpose(c, t("f32", (32, 3)))),
    ValueError,
    "a and b with contiguous rows",
)
bad(
    "mul_mat",
    lambda c, t: ops.mul_mat(c, ops.transpose(c, t("f32", (32, 4))), t("f32", (3, 32))),
    ValueError,
    "!ggml_is_transposed(a)",
)
spec(
    "mul_mat",
    samples=_mul_mat_samples(),
    hints={"a": hints.mul_mat_a, "b": hints.mul_mat_b},
    # a node of any types: the quantized ones carry b's Q8 rounding (module doc); the samples state their own
    bounds=[Bound(NMSE_Q8_DOT)],
    reads=("MUL_MAT",),
    from_node=lambda n: _product_node(n, oracles.mul_mat),
    grad=[
        Grad({"a": ("f32", (5, 7)), "b": ("f32", (3, 7))}, ("a", "b")),
        Grad({"a": ("f32", (2, 3, 5)), "b": ("f32", (2, 4, 5))}, ("a", "b"), variant="batched"),
    ],
)


# --- mul_mat_id ---------------------------------------------------------------------------------------------------------
def _mul_mat_id_samples() -> list[Sample]:
    out = []
    for q in _QDOT:
        # mixture of experts: 3 experts of [5, K], 4 tokens each using 2 of them, b one row per token (broadcast)
        k = _qk(q)
        x: dict[str, InputSpec] = {
            "a": (q, (3, 5, k), _requantized(q)),
            "b": ("f32", (4, 1, k)),
            "ids": ("i32", (4, 2), integers(0, 3)),
        }
        out.append(Sample(x, tag=q, bounds=_bounded(x, NMSE_Q8_DOT)))
    for ta, tb in (("f32", "f32"), ("f16", "f32"), ("f16", "f16"), ("bf16", "f32"), ("bf16", "bf16")):
        tag = ta if tb == "f32" else f"{ta}_{tb}"
        # b with one row per expert used (n_b == n_used) and with one row for all of them (n_b == 1)
        x = {"a": (ta, (5, 7, 13)), "b": (tb, (3, 2, 13)), "ids": ("i32", (3, 2), integers(0, 5))}
        out.append(Sample(x, variant="rows_per_expert", tag=tag, bounds=_bounded(x)))
        x = {"a": (ta, (4, 3, 11)), "b": (tb, (5, 1, 11)), "ids": ("i32", (5, 3), integers(0, 4))}
        out.append(Sample(x, variant="one_row", tag=tag, bounds=_bounded(x)))

    def every_expert(rng: np.random.Generator, s: tuple[int, ...]) -> np.ndarray:
        return np.stack([rng.permutation(3) for _ in range(s[0])])

    # every token through every expert once (ids a permutation per token)
    x = {"a": ("f32", (3, 5, 16)), "b": ("f32", (7, 3, 16)), "ids": ("i32", (7, 3), every_expert)}
    out.append(Sample(x, variant="all_experts", tag="f32", bounds=_bounded(x)))
    # b's tokens strided (a permuted view with packed rows)
    x = {
        "a": ("f32", (4, 5, 13)),
        "b": In("f32", (2, 3, 13), layout=Permuted()),
        "ids": ("i32", (3, 2), integers(0, 4)),
    }
    out.append(Sample(x, variant="b_permuted", tag="f32", bounds=_bounded(x)))
    return out


bad(
    "mul_mat_id",
    lambda c, t: ops.mul_mat_id(c, t("f32", (3, 5, 16)), t("f32", (4, 1, 16)), t("f32", (4, 2))),
    ValueError,
    "ids->type == GGML_TYPE_I32",
)
bad(
    "mul_mat_id",
    lambda c, t: ops.mul_mat_id(c, t("f32", (2, 3, 5, 16)), t("f32", (4, 1, 16)), t("i32", (4, 2))),
    ValueError,
    "as->ne[3] == 1",
)
bad(
    "mul_mat_id",
    lambda c, t: ops.mul_mat_id(c, t("f32", (3, 5, 16)), t("f32", (4, 1, 8)), t("i32", (4, 2))),
    ValueError,
    "as->ne[0] == b->ne[0]",
)
bad(
    "mul_mat_id",
    lambda c, t: ops.mul_mat_id(c, "as", t("f32", (4, 1, 16)), t("i32", (4, 2))),
    TypeError,
    "as_ must be a Tensor",
)
bad(
    "mul_mat_id",
    lambda c, t: ops.mul_mat_id(c, t("f32", (3, 5, 16)), t("f16", (4, 1, 16)), t("i32", (4, 2))),
    GraphError,
    "takes b as F32",
)
bad(
    "mul_mat_id",
    lambda c, t: ops.mul_mat_id(c, t("q8_0", (3, 5, 32)), t("f16", (4, 1, 32)), t("i32", (4, 2))),
    GraphError,
    "takes b as F32 (or Q8_0)",
)
bad(
    "mul_mat_id",
    lambda c, t: ops.mul_mat_id(c, t("i32", (3, 5, 16)), t("f32", (4, 1, 16)), t("i32", (4, 2))),
    GraphError,
    "no dot product",
)
bad(
    "mul_mat_id",
    lambda c, t: ops.mul_mat_id(
        c, t("f32", (3, 5, 16)), ops.permute(c, t("f32", (16, 1, 4)), 2, 1, 0, 3), t("i32", (4, 2))
    ),
    GraphError,
    "contiguous rows",
)
spec(
    "mul_mat_id",
    samples=_mul_mat_id_samples(),
    bounds=[Bound(NMSE_Q8_DOT)],  # nodes: as mul_mat's (quantized experts); the samples state their own
    reads=("MUL_MAT_ID",),
    from_node=lambda n: _product_node(n, oracles.mul_mat_id),
)

# --- out_prod -----------------------------------------------------------------------------------------------------------
bad(
    "out_prod",
    lambda c, t: ops.out_prod(c, t("f32", (13, 7)), t("f32", (12, 5))),
    ValueError,
    "ggml_can_out_prod(a, b)",
)
bad(
    "out_prod",
    lambda c, t: ops.out_prod(c, ops.transpose(c, t("f32", (7, 13))), t("f32", (13, 5))),
    ValueError,
    "!ggml_is_transposed(a)",
)
bad("out_prod", lambda c, t: ops.out_prod(c, t("q8_1", (3, 32)), t("f32", (3, 5))), GraphError, "dequantizable type")
bad("out_prod", lambda c, t: ops.out_prod(c, t("f32", (3, 32)), 1.5), TypeError, "b must be a Tensor")
spec(
    "out_prod",
    reads=("OUT_PROD",),
    from_node=lambda n: oracles.out_prod(n.arg(0), n.arg(1)),
    samples=[
        *(
            Sample(
                {"a": (q, (7, types.block_size(q)), _requantized(q)), "b": ("f32", (7, 3))}, tag=q, bounds=[Bound(1e-6)]
            )
            for q in _QDOT
        ),
        Sample({"a": ("f32", (13, 7)), "b": ("f32", (13, 5))}, variant="odd"),
        Sample({"a": ("f32", (1, 2, 13, 7)), "b": ("f32", (2, 4, 13, 5))}, variant="broadcast"),
        Sample({"a": ("f16", (2, 13, 7)), "b": ("f32", (2, 13, 5))}, tag="f16"),
        # b transposed (the backward pass's usual argument): the kernel reads b with any strides
        Sample({"a": ("f32", (13, 7)), "b": In("f32", (5, 13), layout=Transposed())}, variant="b_transposed"),
        Sample({"a": In("f32", (13, 2, 7), layout=Permuted()), "b": ("f32", (2, 13, 5))}, variant="a_permuted"),
        Sample({"a": ("f32", (1, 11)), "b": ("f32", (1, 9))}, variant="vector"),
    ],
)

# --- add_id -------------------------------------------------------------------------------------------------------------
bad(
    "add_id",
    lambda c, t: ops.add_id(c, t("f32", (3, 4, 13)), t("f32", (5, 13)), t("i32", (3, 5))),
    ValueError,
    "a->ne[1] == ids->ne[0]",
)
bad(
    "add_id",
    lambda c, t: ops.add_id(c, t("f32", (3, 4, 13)), t("f32", (5, 12)), t("i32", (3, 4))),
    ValueError,
    "a->ne[0] == b->ne[0]",
)
bad(
    "add_id",
    lambda c, t: ops.add_id(c, t("f16", (3, 4, 13)), t("f32", (5, 13)), t("i32", (3, 4))),
    GraphError,
    "F32 a and b",
)
bad("add_id", lambda c, t: ops.add_id(c, t("f32", (3, 4, 13)), None, t("i32", (3, 4))), TypeError, "b must be a Tensor")
spec(
    "add_id",
    reads=("ADD_ID",),
    from_node=lambda n: oracles.add_id(n.arg(0), n.arg(1), n.arg(2)),
    samples=[
        Sample({"a": ("f32", (3, 4, 13)), "b": ("f32", (5, 13)), "ids": ("i32", (3, 4), integers(0, 5))}, tag="f32"),
        Sample(
            {"a": ("f32", (2, 3, 2, 7)), "b": ("f32", (3, 7)), "ids": ("i32", (3, 2), integers(0, 3))},
            variant="4d",
            tag="f32",
        ),
        Sample(
            {
                "a": In("f32", (4, 3, 13), layout=Permuted()),
                "b": ("f32", (5, 13)),
                "ids": ("i32", (3, 4), integers(0, 5)),
            },
            variant="a_permuted",
            tag="f32",
        ),
    ],
)


# --- the weight types' get_rows, cpy and set_rows cases -----------------------------------------------------------------
def _stored(t: str, x: np.ndarray) -> np.ndarray:
    """x as a tensor of type t holds it: quantized by ggml's reference quantizer, dequantized."""
    x = np.asarray(x, dtype=np.float32)
    return types.decode(t, types.encode(t, x), x.shape).copy()


# IQ4_NL's 16 levels (ggml-common.h kvalues_iq4nl)
_IQ4NL_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32)


def _iq4_nl_row_store(x: np.ndarray) -> np.ndarray:
    """x as a backend's IQ4_NL row quantizer writes it (ggml's quantize_row_iq4_nl_ref, the CPU's
    from_float, which cpy and set_rows use): per block of 32, levels from the scale max/-127, then the
    scale refit by least squares with weights x^2; no scale search. ggml_quantize_chunk (and so
    pyggml.types.encode) searches 15 scales instead, so its bytes differ. float32 throughout, the
    sums in order, as the C code."""
    x = np.asarray(x, dtype=np.float32)
    xb = x.reshape(-1, 32)
    rows = np.arange(len(xb))
    amax_at = np.abs(xb).argmax(axis=1)  # the first largest |x|, as the C loop's strict >
    mx = xb[rows, amax_at]
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.float32(1) / (mx / np.float32(-127))
    al = inv[:, None] * xb
    hi = np.clip(np.searchsorted(_IQ4NL_LEVELS, al, side="right"), 1, 15)  # first level above al
    lo_d, hi_d = al - _IQ4NL_LEVELS[hi - 1], _IQ4NL_LEVELS[hi] - al
    idx = np.where(lo_d < hi_d, hi - 1, hi)
    idx = np.where(al <= _IQ4NL_LEVELS[0], 0, np.where(al >= _IQ4NL_LEVELS[15], 15, idx))
    q = _IQ4NL_LEVELS[idx]
    w = xb * xb
    sumqx = np.zeros(len(xb), np.float32)
    sumq2 = np.zeros(len(xb), np.float32)
    for j in range(32):
        sumqx = sumqx + w[:, j] * q[:, j] * xb[:, j]
        sumq2 = sumq2 + w[:, j] * q[:, j] * q[:, j]
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.where((sumq2 > 0) & (np.abs(mx) >= 1e-15), sumqx / sumq2, 0).astype(np.float32)
    d = d.astype(np.float16).astype(np.float32)  # the block's scale is stored as F16
    return (d[:, None] * q).reshape(x.shape)


def _written(t: str, x: np.ndarray) -> np.ndarray:
    """Values written into a tensor of type t by cpy / set_rows: the row quantizer's result."""
    return _iq4_nl_row_store(x) if t == "iq4_nl" else _stored(t, x)


def weight_samples() -> dict[str, list[Sample]]:
    """The weight types' samples of get_rows, cpy and set_rows (module doc), for their specs in
    opdb/movement.py. Each carries its own call (and oracle where the values are quantized on the way)."""
    get_rows = lambda xp, x: xp.get_rows(x.a, x.b)  # noqa: E731
    cpy = lambda xp, x: xp.cpy(x.a, x.b)  # noqa: E731
    set_rows = lambda xp, x: xp.set_rows(x.a, x.b, x.c)  # noqa: E731
    out: dict[str, list[Sample]] = {"get_rows": [], "cpy": [], "set_rows": []}
    for t in WEIGHT_TYPES:
        k1, k2, k3 = _ks(t)
        # get_rows: the rows as the tensor holds them
        out["get_rows"] += [
            Sample(
                {"a": (t, (11, k1)), "b": ("i32", (5,), integers(0, 11))},
                variant="weights_rows11",
                tag=t,
                call=get_rows,
                exact=True,
            ),
            Sample(
                {"a": (t, (2, 3, 7, k3)), "b": ("i32", (2, 3, 4), integers(0, 7))},
                variant="weights_batched",
                tag=t,
                call=get_rows,
                exact=True,
            ),
            # a permuted (dims 1 and 2 swapped: rows stay whole) and a transposed (strided) index
            Sample(
                {"a": In(t, (7, 3, k3), layout=Permuted()), "b": In("i32", (5, 3), integers(0, 7), Transposed())},
                variant="weights_strided",
                tag=t,
                call=get_rows,
                exact=True,
            ),
        ]
        # dequantizing copy (F16/BF16 -> F32 copies are movement cases)
        if t not in ("f16", "bf16"):
            out["cpy"].append(
                Sample(
                    {"a": (t, (5, k1)), "b": ("f32", (5, k1))},
                    variant="weights",
                    call=cpy,
                    oracle=lambda x: x.a,
                    exact=True,
                )
            )
        if t in _NO_CPU_STORE:
            continue
        # cpy F32/F16 -> the type: quantized on the way, by the row quantizer (_written), not oracles.cpy's cast
        # (tags spelled out: F16 -> F16 would otherwise be tagged "f16")
        written = lambda x, t=t: _written(t, x.a)  # noqa: E731
        out["cpy"] += [
            Sample({"a": ("f32", (5, k1)), "b": (t, (5, k1))}, variant="weights", call=cpy, oracle=written, exact=True),
            Sample(
                {"a": ("f32", (2, 3, k3)), "b": (t, (3, 2 * k3))},
                variant="weights_reshaped",
                call=cpy,
                oracle=lambda x, t=t: _written(t, x.a).reshape(x.b.shape),
                exact=True,
            ),
            Sample(
                {"a": ("f16", (3, k2)), "b": (t, (3, k2))},
                variant="weights",
                tag=f"f16_{t}",
                call=cpy,
                oracle=written,
                exact=True,
            ),
            # a permuted source: rows contiguous, dims 1 and 2 swapped
            Sample(
                {"a": In("f32", (3, 5, k3), layout=Permuted()), "b": (t, (5, 3, k3))},
                variant="weights_permuted",
                call=cpy,
                oracle=written,
                exact=True,
            ),
        ]
        # set_rows into the type: the rows written are quantized on the way (_written)
        rows_written = lambda x, t=t: oracles.set_rows(x.a, _written(t, x.b), x.c)  # noqa: E731
        out["set_rows"] += [
            Sample(
                {"a": (t, (9, k1)), "b": ("f32", (4, k1)), "c": ("i64", (4,), permutation_rows(9))},
                variant="weights_i64",
                tag=t,
                call=set_rows,
                oracle=rows_written,
                exact=True,
            ),
            Sample(
                {"a": (t, (2, 3, 6, k3)), "b": ("f32", (2, 3, 2, k3)), "c": ("i32", (1, 3, 2), permutation_rows(6))},
                variant="weights_broadcast_i32",
                tag=t,
                call=set_rows,
                oracle=rows_written,
                exact=True,
            ),
            Sample(
                {"a": (t, (7, k2)), "b": ("f16", (3, k2)), "c": ("i32", (3,), permutation_rows(7))},
                variant="weights_f16_src",
                tag=t,
                call=set_rows,
                oracle=rows_written,
                exact=True,
            ),
        ]
    return out
