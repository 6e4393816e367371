"""Specs of soft_max, masks, rotary position embedding, flash attention, SAM's windows and relative
positions, DeepSeek's lightning indexer and hyper-connections."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pyggml import ops as _typed_ops
from pyggml import types
from pyggml.errors import GraphError
from pyggml.ops.attention import Yarn
from pyggml.tensor import Tensor
from pyggml.testing.engine import oracles
from pyggml.testing.engine.opdb import *  # noqa: F403 - the database's vocabulary, opdb.__all__
from pyggml.testing.engine.opdb import hints

# the bad calls pass wrong types and argument counts on purpose: pyggml must raise on them
ops: Any = _typed_ops


def _src(n: Node, i: int) -> np.ndarray | None:
    """Source slot i of a node, None when absent (Node.src drops trailing absent slots)."""
    return n.src[i] if i < len(n.src) else None


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def _causal(lo: float = -2.0, hi: float = 0.0) -> Gen:
    """A mask [.., n_q, n_kv]: -inf above the diagonal shifted so every row keeps >= 1 finite entry."""

    def gen(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        m = rng.uniform(lo, hi, size=shape).astype(np.float32)
        n_q, n_kv = shape[-2], shape[-1]
        shift = n_kv - n_q
        i, j = np.meshgrid(np.arange(n_q), np.arange(n_kv), indexing="ij")
        m[..., j > i + max(shift, 0)] = -np.inf
        return m

    return gen


# --- soft_max, soft_max_ext, diag_mask_inf ------------------------------------------------------------------------------
bad("soft_max", lambda c, t: ops.soft_max(c, t("f16", (3, 8))), ValueError, "the CPU kernel takes")
bad("soft_max", lambda c, t: ops.soft_max(c, ops.transpose(c, t("f32", (3, 8)))), ValueError, "contiguous")
spec(
    "soft_max",
    grad=[Grad({"a": ("f32", (3, 7), uniform(-2, 2))}, ("a",))],
    samples=[
        Sample({"a": ("f32", (2, 3, 16), uniform(-4, 4))}),
        Sample({"a": ("f32", (5, 13), uniform(-4, 4))}, variant="odd"),
        Sample({"a": ("f32", (37,), uniform(-4, 4))}, variant="row"),
    ],
)  # its SOFT_MAX nodes are read by soft_max_ext's spec (ggml_soft_max is soft_max_ext without mask)


def _soft_max_ext_samples() -> list[Sample]:
    out = [
        Sample({"a": ("f32", (2, 3, 16)), "m": ("f32", (3, 16), uniform(-2, 0))}, (0.5,), "mask_f32", tag="f32"),
        Sample(
            {"a": ("f32", (2, 4, 3, 16)), "m": ("f16", (1, 2, 5, 16), uniform(-2, 0))},
            (2.0,),
            "mask_f16_broadcast",
            tag="f32",
        ),
        Sample({"a": ("f32", (3, 16))}, (3.0,), "no_mask"),
        Sample({"a": ("f32", (6, 3, 16)), "m": ("f32", (3, 16), uniform(-2, 0))}, (1.0, 8.0), "alibi", tag="f32"),
    ]
    # odd sizes, broadcast masks, ALiBi with odd head counts
    for mt in ("f32", "f16"):
        out += [
            Sample({"a": ("f32", (5, 7, 13)), "m": (mt, (7, 13), uniform(-3, 0))}, (0.3,), f"odd/mask_{mt}", tag="f32"),
            Sample(
                {"a": ("f32", (3, 5, 11)), "m": (mt, (9, 11), uniform(-3, 0))}, (1.0,), f"mask_{mt}_longer", tag="f32"
            ),
            Sample(
                {"a": ("f32", (2, 6, 3, 13)), "m": (mt, (1, 3, 3, 13), uniform(-3, 0))},
                (0.7,),
                f"mask_{mt}_broadcast23",
                tag="f32",
            ),
            Sample({"a": ("f32", (3, 7, 7)), "m": (mt, (7, 7), _causal())}, (0.5,), f"causal_{mt}", tag="f32"),
            *(
                Sample(
                    {"a": ("f32", (h, 3, 11)), "m": (mt, (3, 11), uniform(-2, 0))},
                    (0.5, bias),
                    f"alibi_{h}heads_{mt}",
                    tag="f32",
                )
                for h, bias in ((5, 8.0), (7, 4.0), (3, 1.5))
            ),
        ]
    out += [Sample({"a": ("f32", (2, 7, 13))}, (s,), f"no_mask/scale_{s}") for s in (0.125, 2.5)]
    return out


bad(
    "soft_max_ext",
    lambda c, t: ops.soft_max_ext(c, t("f32", (3, 8)), t("f32", (3, 4))),
    ValueError,
    "mask->ne[0] == a->ne[0]",
)
bad(
    "soft_max_ext",
    lambda c, t: ops.soft_max_ext(c, t("f32", (3, 8)), t("f32", (2, 8))),
    ValueError,
    "mask->ne[1] >= a->ne[1]",
)
bad("soft_max_ext", lambda c, t: ops.soft_max_ext(c, t("f32", (3, 8)), None, 1.0, 8.0), ValueError, "needs a mask")
bad(
    "soft_max_ext",
    lambda c, t: ops.soft_max_ext(c, t("f32", (3, 8)), t("i32", (3, 8))),
    ValueError,
    "mask->type == GGML_TYPE_F16",
)
bad(
    "soft_max_ext",
    lambda c, t: ops.soft_max_ext(c, t("f32", (3, 8)), None, "0.5"),
    TypeError,
    "scale must be a number, got str",
)
spec(
    "soft_max_ext",
    lambda xp, x, scale, max_bias=0.0: xp.soft_max_ext(x.a, getattr(x, "m", None), scale, max_bias),
    _soft_max_ext_samples(),
    hints={"mask": hints.soft_max_mask},
    # ggml_soft_max_impl: op_params {scale, max_bias}; src[1] the mask (src[2] sinks: no wrapper sets them)
    reads=("SOFT_MAX",),
    from_node=lambda n: oracles.soft_max_ext(n.arg(0), _src(n, 1), n.param("scale"), n.param("max_bias")),
    grad=[
        Grad(
            {"a": ("f32", (3, 7), uniform(-2, 2)), "m": ("f32", (3, 7), uniform(-1, 0))},
            ("a",),
            (0.6,),
            variant="mask_scale",
        )
    ],
)

bad("diag_mask_inf", lambda c, t: ops.diag_mask_inf(c, t("f32", (3, 8)), -1), ValueError, "n_past must be >= 0")
bad("diag_mask_inf", lambda c, t: ops.diag_mask_inf(c, ops.transpose(c, t("f32", (8, 8))), 0), ValueError, "contiguous")
spec(
    "diag_mask_inf",
    reads=("DIAG_MASK_INF",),
    from_node=lambda n: oracles.diag_mask_inf(n.arg(0), n.param("n_past")),
    # the masked softmax as one graph: soft_max's call around this op's
    grad=[
        Grad(
            {"a": ("f32", (4, 5), uniform(-2, 2))},
            ("a",),
            (1,),
            variant="soft_max",
            call=lambda xp, x, n_past: xp.soft_max(xp.diag_mask_inf(x.a, n_past)),
        )
    ],
    samples=[
        Sample({"a": ("f32", (2, 5, 8))}, (0,)),
        Sample({"a": ("f32", (2, 3, 5, 8))}, (2,), "n_past"),
        *(Sample({"a": ("f32", (3, 7, 11))}, (p,), f"odd/n_past_{p}") for p in (0, 1, 3, 12)),
        Sample({"a": ("f32", (2, 3, 5, 5))}, (1,), "4d"),
        # the masked softmax
        Sample(
            {"a": ("f32", (3, 7, 9))},
            (2,),
            "then_soft_max",
            call=lambda xp, x, n_past: xp.soft_max(xp.diag_mask_inf(x.a, n_past)),
        ),
    ],
)


# ggml_rope_impl's op_params (ROPE and ROPE_BACK nodes): slot 0 n_past and 3 n_ctx unused, f32 5..10, the sections of
# the multi-section modes at 11..14, and n_offs (`ggml_rope_set_offset`) at 15
ROPE_PARAMS = (
    "",
    "n_dims",
    "mode",
    "",
    Yarn._fields[0],  # n_ctx_orig, then YaRN's six floats
    *(f"{name}:float" for name in Yarn._fields[1:]),
    *(f"section{i}" for i in range(4)),
    "n_offs",
)


# --- rope_ext, rope_multi -----------------------------------------------------------------------------------------------
def rope_offset_node(n: Node, read: Callable[[Node], np.ndarray]) -> np.ndarray:
    """A ROPE or ROPE_BACK node with `ggml_rope_set_offset` (op_params[15], n_offs): ggml rotates the n_dims
    channels from n_offs on and copies the rest (deepseek4's and hy_v4's attention). `read` is the node's oracle
    without an offset; it is given the channels from n_offs on, whose first n_dims it rotates."""
    n_offs = n.param("n_offs")
    if n_offs == 0:
        return read(n)
    a = n.arg(0)
    out = np.array(a, dtype=np.float32)
    out[..., n_offs:] = read(Node(n.tensor, [a[..., n_offs:], *n.src[1:]]))
    return out


def _rope_node(n: Node) -> np.ndarray:
    """ggml_rope_impl's op_params: {0, n_dims, mode, 0, n_ctx_orig, freq_base, freq_scale, ext_factor, attn_factor,
    beta_fast, beta_slow (f32 at 5..10), sections[4] (11..14)}; src[1] positions, src[2] freq_factors. The
    multi-section modes (mode & 8) are rope_multi's oracle, the plain ones rope_ext's."""
    n_dims, mode, *yarn = n.scalars()[:9]  # then Yarn's scalars, in their order
    if mode & 8:
        sections = tuple(n.param(f"section{i}") for i in range(4))
        return oracles.rope_multi(n.arg(0), n.arg(1), _src(n, 2), n_dims, sections, mode, *yarn)
    return oracles.rope_ext(n.arg(0), n.arg(1), _src(n, 2), n_dims, mode, *yarn)


def _rope_ext_samples() -> list[Sample]:
    """a NumPy [batch, tokens, heads, head_dim]; pos one position per token; ff the freq factors."""
    out = []
    for mode, mname in ((0, "normal"), (2, "neox")):
        for t in ("f32", "f16"):
            out.append(
                Sample(
                    {"a": (t, (5, 2, 16)), "pos": ("i32", (5,), integers(0, 200))},
                    ({"n_dims": 16, "mode": mode},),
                    mname,
                    tag=t,
                )
            )
        out += [
            Sample(
                {"a": ("f32", (2, 4, 3, 16)), "pos": ("i32", (4,), integers(0, 200))},
                ({"n_dims": 8, "mode": mode, "freq_base": 500.0, "freq_scale": 0.5, "attn_factor": 1.5},),
                f"{mname}/partial",
                tag="f32",
            ),
            Sample(
                {
                    "a": ("f32", (3, 2, 12)),
                    "pos": ("i32", (3,), integers(0, 50)),
                    "ff": ("f32", (6,), uniform(0.5, 4.0)),
                },
                ({"n_dims": 12, "mode": mode},),
                f"{mname}/freq_factors",
                tag="f32",
            ),
        ]
        # odd token and head counts, strided input, YaRN
        for t in ("f32", "f16"):
            out += [
                Sample(
                    {"a": (t, (7, 5, 10)), "pos": ("i32", (7,), integers(0, 500))},
                    ({"n_dims": 10, "mode": mode},),
                    f"{mname}/odd",
                    tag=t,
                ),
                Sample(
                    {"a": (t, (3, 5, 7, 14)), "pos": ("i32", (5,), integers(0, 500))},
                    ({"n_dims": 6, "mode": mode, "freq_base": 1000.0},),
                    f"{mname}/odd_partial",
                    tag=t,
                ),
            ]
        # a permuted view (heads and tokens swapped in memory): packed rows, strided the rest
        out.append(
            Sample(
                {"a": In("f32", (3, 5, 8), layout=Permuted()), "pos": ("i32", (5,), integers(0, 100))},
                ({"n_dims": 8, "mode": mode},),
                f"{mname}/permuted",
                tag="f32",
            )
        )
        for ef, fs in ((1.0, 0.25), (0.5, 0.5)):
            out.append(
                Sample(
                    {"a": ("f32", (5, 3, 16)), "pos": ("i32", (5,), integers(0, 300))},
                    ({"n_dims": 16, "mode": mode, "n_ctx_orig": 64, "freq_scale": fs, "ext_factor": ef},),
                    f"{mname}/yarn_{ef}",
                    tag="f32",
                )
            )
    return out


bad(
    "rope_ext",
    lambda c, t: ops.rope_ext(c, t("f32", (4, 2, 8)), t("i32", (3,)), n_dims=8),
    ValueError,
    "a->ne[2] == b->ne[0]",
)
bad("rope_ext", lambda c, t: ops.rope_ext(c, t("f32", (4, 2, 8)), t("i32", (4,)), n_dims=7), ValueError, "must be even")
bad(
    "rope_ext",
    lambda c, t: ops.rope_ext(c, t("f32", (4, 2, 8)), t("i32", (16,)), n_dims=8, mode=8),
    ValueError,
    "mode must be 0 (normal) or 2 (neox)",
)
bad(
    "rope_ext",
    lambda c, t: ops.rope_ext(c, t("f32", (4, 2, 8)), t("i32", (4,)), n_dims=8, mode=4),
    ValueError,
    "mode must be 0 (normal) or 2 (neox)",
)
bad(
    "rope_ext",
    lambda c, t: ops.rope_ext(c, t("f32", (4, 2, 8)), t("f32", (4,)), n_dims=8),
    ValueError,
    "b->type == GGML_TYPE_I32",
)
bad(
    "rope_ext",
    lambda c, t: ops.rope_ext(c, ops.permute(c, t("f32", (4, 8, 8)), 1, 0, 2, 3), t("i32", (4,)), n_dims=8),
    ValueError,
    "contiguous",
)
bad(
    "rope_ext",
    lambda c, t: ops.rope_ext(c, t("f32", (4, 2, 7)), t("i32", (4,)), n_dims=6),
    GraphError,
    "even row length",
)
bad(
    "rope_ext",
    lambda c, t: ops.rope_ext(c, t("f32", (4, 2, 8)), t("i32", (4,)), freq_base="1e4"),
    TypeError,
    "freq_base must be a number, got str",
)
bad(
    "rope_ext",
    lambda c, t: ops.rope_ext(c, t("f32", (4, 2, 8)), t("i32", (4,)), n_ctx_orig=2.5),
    TypeError,
    "n_ctx_orig must be an integer, got float",
)
bad(
    "rope_ext",
    lambda c, t: ops.rope_ext(c, t("f32", (4, 2, 8)), t("i32", (4,)), mode=False),
    TypeError,
    "mode must be an integer, got bool",
)
bad(
    "rope_ext",
    lambda c, t: ops.rope_ext(c, t("f32", (4, 2, 8)), t("i32", (4,)), n_dims=8.0),
    TypeError,
    "n_dims must be an integer, got float",
)
spec(
    "rope_ext",
    lambda xp, x, kw: xp.rope_ext(x.a, x.pos, freq_factors=getattr(x, "ff", None), **kw),
    _rope_ext_samples(),
    params=ROPE_PARAMS,
    reads=("ROPE",),
    from_node=lambda n: rope_offset_node(n, _rope_node),
    hints={"a": hints.rope_a, "pos": hints.rope_pos, "freq_factors": hints.rope_freq_factors},
    grad=[
        Grad(
            {"a": ("f32", (3, 2, 8)), "pos": ("i32", (3,), integers(0, 50))},
            ("a",),
            ({"n_dims": 8, "mode": m},),
            variant=mname,
        )
        for m, mname in ((0, "normal"), (2, "neox"))
    ],
)


def _rope_multi_samples() -> list[Sample]:
    """MROPE, IMROPE, VISION; pos holds 4 streams of n_tokens positions."""
    out = []
    for mode, mname, secs, nd, ne0 in (
        (8, "mrope", (2, 3, 3, 0), 16, 16),
        (8, "mrope_partial", (2, 1, 1, 0), 8, 12),
        (8, "mrope_e", (1, 2, 2, 3), 16, 16),
        (40, "imrope", (3, 3, 2, 0), 16, 16),
        (40, "imrope_partial", (2, 1, 1, 0), 8, 10),
        (24, "vision", (2, 2, 0, 0), 8, 16),
        (24, "vision_3", (3, 1, 0, 0), 6, 12),
    ):
        for t in ("f32", "f16"):
            out.append(
                Sample({"a": (t, (5, 3, ne0)), "pos": ("i32", (20,), integers(0, 100))}, (nd, secs, mode), mname, tag=t)
            )
        out.append(
            Sample(
                {
                    "a": ("f32", (2, 5, 3, ne0)),
                    "pos": ("i32", (20,), integers(0, 100)),
                    "ff": ("f32", (ne0 // 2,), uniform(0.5, 3)),
                },
                (nd, secs, mode, 0, 500.0, 1.0, 0.0, 0.75),
                f"{mname}/freq_factors",
                tag="f32",
            )
        )
    out.append(
        Sample(
            {"a": ("f32", (7, 3, 16)), "pos": ("i32", (28,), integers(0, 300))},
            (16, (4, 2, 2, 0), 8, 32, 10000.0, 0.5, 1.0),
            "mrope/yarn",
            tag="f32",
        )
    )
    return out


_rm = {"n_dims": 8, "sections": (2, 1, 1, 0)}
# args: n_dims, sections, mode, then n_ctx_orig, freq_base, freq_scale, ext_factor, attn_factor (both sides' order)
# its ROPE nodes are read by rope_ext's spec
bad(
    "rope_multi",
    lambda c, t: ops.rope_multi(c, t("f32", (5, 3, 8)), t("i32", (20,)), mode=2, **_rm),
    ValueError,
    "mode must be 8 (MROPE), 24 (VISION) or 40 (IMROPE)",
)
bad(
    "rope_multi",
    lambda c, t: ops.rope_multi(c, t("f32", (5, 3, 8)), t("i32", (20,)), n_dims=8, sections=(0, 0, 0, 4)),
    ValueError,
    "the first three not all 0",
)
bad(
    "rope_multi",
    lambda c, t: ops.rope_multi(c, t("f32", (5, 3, 8)), t("i32", (20,)), n_dims=8, sections=(4, -1, 0, 0)),
    ValueError,
    "non-negative",
)
bad(
    "rope_multi",
    lambda c, t: ops.rope_multi(c, t("f32", (5, 3, 8)), t("i32", (20,)), n_dims=8, sections="tyxe"),
    TypeError,
    "sections must be 4 integers",
)
bad(
    "rope_multi",
    lambda c, t: ops.rope_multi(c, t("f32", (5, 3, 8)), t("i32", (5,)), **_rm),
    ValueError,
    "a->ne[2] * 4 == b->ne[0]",
)
bad(
    "rope_multi",
    lambda c, t: ops.rope_multi(c, t("f32", (5, 3, 8)), t("i32", (20,)), n_dims=5, sections=(2, 1, 1, 0)),
    ValueError,
    "must be even",
)
bad(
    "rope_multi",
    lambda c, t: ops.rope_multi(c, t("f32", (5, 3, 8)), t("i32", (20,)), n_dims=8, sections=(4, 4, 2, 0)),
    GraphError,
    "must not add up to more than a.ne[0] (8)",
)
bad(
    "rope_multi",
    lambda c, t: ops.rope_multi(c, t("f32", (5, 3, 16)), t("i32", (20,)), n_dims=16, sections=(4, 4, 0, 0), mode=24),
    GraphError,
    "VISION rope needs n_dims == a.ne[0] / 2",
)
bad(
    "rope_multi",
    lambda c, t: ops.rope_multi(c, t("f32", (5, 3, 8)), t("f32", (20,)), **_rm),
    ValueError,
    "b->type == GGML_TYPE_I32",
)
bad(
    "rope_multi",
    lambda c, t: ops.rope_multi(c, t("f32", (4, 2, 8)), t("i32", (16,)), None, None, (1, 1, 2, 0), freq_scale="1"),
    TypeError,
    "freq_scale must be a number",
)
spec(
    "rope_multi",
    lambda xp, x, *args: xp.rope_multi(x.a, x.pos, getattr(x, "ff", None), *args),
    _rope_multi_samples(),
)

# --- flash_attn_ext -----------------------------------------------------------------------------------------------------
# q [ne3, H, n_q, D] F32, k/v [ne3, Hkv, n_kv, D], mask F16 [.., >= n_q, >= n_kv]. With F16 k the CPU converts q to
# F16 for the dot products, with F16 v it accumulates softmax(qk)·v in F16 (3e-7 seen, within NMSE_F16). Vulkan's
# shaders do both in F16 whatever k and v are (4-6e-7 on lavapipe): NMSE_FA_F32 for all-F32 inputs.
NMSE_FA_F32 = 1e-6
NMSE_FA_Q8 = 5e-4  # quantized k: q is quantized to the dot type (Q8_0) first, as in mul_mat


def _fa_inputs(
    kv: str,
    n3: int = 1,
    h: int = 4,
    hkv: int = 2,
    hv: int | None = None,
    n_q: int = 7,
    n_kv: int = 13,
    d: int = 16,
    dv: int = 16,
    mask: tuple[int, ...] | None = (7, 13),
) -> dict[str, InputSpec]:
    x: dict[str, InputSpec] = {
        "q": ("f32", (n3, h, n_q, d)),
        "k": (kv, (n3, hkv, n_kv, d)),
        "v": (kv, (n3, hv or hkv, n_kv, dv)),
    }
    if mask is not None:
        x["m"] = ("f16", mask, uniform(-2, 0)) if len(mask) > 2 or mask[0] != n_q else ("f16", mask, _causal())
    return x


def _fa_bounds(inputs: dict[str, InputSpec], nmse: float | None) -> list[Bound]:
    """A sample's plain bound: `nmse`, else what its inputs' precision earns (the spec's own plain bound is
    the nodes' one, NMSE_FA_Q8, and must not reach the cases)."""
    return [Bound(nmse if nmse is not None else default_nmse({as_input(v).type.lower() for v in inputs.values()}))]


def _fa_call(xp: Any, x: Any, scale: float, max_bias: float = 0.0, softcap: float = 0.0) -> Any:
    """flash_attn_ext on either side (the oracle's sinks argument left at None)."""
    return xp.flash_attn_ext(x.q, x.k, x.v, getattr(x, "m", None), scale, max_bias, softcap)


def _fa_sinks_call(xp: Any, x: Any, scale: float, max_bias: float = 0.0, softcap: float = 0.0) -> Any:
    """ggml side: flash_attn_ext with the sinks added to its node (flash_attn_ext_add_sinks changes it in place)."""
    r = _fa_call(xp, x, scale, max_bias, softcap)
    xp.flash_attn_ext_add_sinks(r, x.s)
    return r


def _fa_sinks_oracle(x: Any, scale: float, max_bias: float = 0.0, softcap: float = 0.0) -> np.ndarray:
    """NumPy side of the sinks: the oracle takes them as flash_attn_ext's last argument (no add_sinks oracle)."""
    return oracles.flash_attn_ext(x.q, x.k, x.v, getattr(x, "m", None), scale, max_bias, softcap, x.s)


def _fa_samples() -> list[Sample]:
    out = []

    def add(inputs: dict[str, InputSpec], args: tuple, variant: str, kv: str, nmse: float | None, **kw: Any) -> None:
        out.append(Sample(inputs, args, variant, tag=kv, bounds=_fa_bounds(inputs, nmse), **kw))

    for kv, bound in (("f32", NMSE_FA_F32), ("f16", None), ("bf16", None), ("q8_0", NMSE_FA_Q8), ("q4_0", NMSE_FA_Q8)):
        d = 32 if kv.startswith("q") else 16
        add(_fa_inputs(kv, d=d, dv=d), (0.25,), "causal", kv, bound)
        add(_fa_inputs(kv, d=d, dv=d, mask=None), (0.25,), "no_mask", kv, bound)
        add(_fa_inputs(kv, h=6, hkv=3, n_q=5, n_kv=11, d=d, dv=d, mask=(1, 3, 7, 11)), (0.2,), "gqa_odd", kv, bound)
        add(
            _fa_inputs(kv, n3=2, h=5, hkv=5, n_q=3, n_kv=9, d=d, dv=d, mask=(1, 1, 3, 9)),
            (0.3, 8.0),
            "batch_alibi",
            kv,
            bound,
        )
        add(_fa_inputs(kv, h=3, hkv=1, n_q=5, n_kv=7, d=d, dv=d, mask=(5, 7)), (1.0, 0.0, 2.0), "softcap", kv, bound)
        # the sinks through their own wrapper, which the oracles have not: both sides given
        add(
            {**_fa_inputs(kv, h=4, hkv=2, d=d, dv=d), "s": ("f32", (4,), uniform(-1, 2))},
            (0.25,),
            "sinks",
            kv,
            bound,
            call=_fa_sinks_call,
            oracle=_fa_sinks_oracle,
        )
    for kv, bound in (("f32", NMSE_FA_F32), ("f16", None)):
        add(_fa_inputs(kv, h=2, hkv=2, d=16, dv=8, mask=(7, 13)), (0.25,), "dv_8", kv, bound)
        add(_fa_inputs(kv, h=3, hkv=1, n_q=5, n_kv=7, d=13, dv=13, mask=(5, 7)), (0.3,), "d_13", kv, bound)
        add(_fa_inputs(kv, n3=2, h=4, hkv=2, n_q=3, n_kv=9, mask=(2, 4, 3, 9)), (0.5,), "mask_heads", kv, bound)
        add(_fa_inputs(kv, h=2, hkv=1, n_q=5, n_kv=11, mask=(8, 11)), (0.5,), "mask_padded", kv, bound)
        # 64 query rows: the CPU's tiled path
        add(_fa_inputs(kv, h=2, hkv=1, n_q=64, n_kv=19, d=16, dv=16, mask=(64, 19)), (0.25,), "tiled", kv, bound)
        # q as llama builds it: [D, H, n_q] permuted to [D, n_q, H]
        add(
            {**_fa_inputs(kv, h=4, hkv=2), "q": In("f32", (1, 7, 4, 16), layout=Permuted())},
            (0.25,),
            "q_permuted",
            kv,
            bound,
        )
    return out


def _fa_node(n: Node) -> np.ndarray:
    """ggml_flash_attn_ext's op_params {scale, max_bias, logit_softcap} (3: the precision, which the CPU ignores);
    src[3] the mask, src[4] the sinks (flash_attn_ext_add_sinks). The kv columns after the last one the mask lets
    some query row see are left out, of k and v decoded from their bytes only up to it (`_columns_seen`)."""
    q, mask = n.arg(0), _src(n, 3)
    n_kv = int(n.tensor.ptr.src[1].ne[1])
    used = n_kv if mask is None else _columns_seen(q, mask, n_kv)
    k, v = _kv_columns(n, 1, used), _kv_columns(n, 2, used)
    if mask is not None and used < n_kv:
        mask = mask[..., :used]
    return oracles.flash_attn_ext(q, k, v, mask, *n.scalars(), _src(n, 4))


def _columns_seen(q: np.ndarray, mask: np.ndarray, n_kv: int) -> int:
    """How many kv columns, from the first, reach the last one the mask does not hide (-inf) from some query row.

    A column after it adds exp(-inf) = 0 to every sum, and the kernels skip it without reading k or v. A generation
    step's attention reads the whole cache (256 columns and more) of which its prompt filled a few: the oracle
    spent 1.3 ms a layer on the rest."""
    n_q = q.shape[-2] if q.ndim >= 2 else 1
    m4 = mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
    seen = np.nonzero((m4[..., :n_q, :n_kv] != -np.inf).any(axis=(0, 1, 2)))[0]
    return int(seen[-1]) + 1 if seen.size else 1


def _kv_columns(n: Node, i: int, used: int) -> np.ndarray:
    """Source i (k or v, [.., n_kv, D]) with its first `used` kv columns, decoded from its bytes up to them where
    it was not decoded whole (pyggml.testing.engine.nodes.DECODED_WHEN_ASKED)."""
    p = n.tensor.ptr.src[i]
    if used >= int(p.ne[1]):
        return n.arg(i)
    raw = n.raw[i] if i < len(n.raw) else None
    if n.decoded(i) or raw is None:
        return n.arg(i)[..., :used, :]
    from pyggml.testing.engine.nodes import from_span  # nodes reads the op database: imported when first asked

    t = types.Type(p.type)
    ne, nb = (int(p.ne[0]), used, int(p.ne[2]), int(p.ne[3])), tuple(int(x) for x in p.nb)
    size = types.row_size(t, ne[0]) + sum((e - 1) * b for e, b in zip(ne[1:], nb[1:]))
    shape = Tensor(p, n.tensor.ctx).shape
    return from_span(t.name, ne, nb, (*shape[:-2], used, shape[-1]), raw[:size])


def _fa(
    c: Any,
    t: Any,
    q: tuple = ("f32", (7, 16)),
    k: tuple = ("f16", (13, 16)),
    v: tuple = ("f16", (13, 16)),
    mask: tuple | None = ("f16", (7, 13)),
    **kw: Any,
) -> Any:
    """A flash_attn_ext node for the bad calls (one argument changed per call)."""
    return ops.flash_attn_ext(c, t(*q), t(*k), t(*v), None if mask is None else t(*mask), **kw)


bad("flash_attn_ext", lambda c, t: _fa(c, t, mask=("f32", (7, 13))), ValueError, "mask->type == GGML_TYPE_F16")
bad("flash_attn_ext", lambda c, t: _fa(c, t, mask=("f16", (7, 16))), ValueError, "the mask must be [n_kv = 13")
bad("flash_attn_ext", lambda c, t: _fa(c, t, mask=("f16", (5, 13))), ValueError, ">= n_q = 7")
bad("flash_attn_ext", lambda c, t: _fa(c, t, v=("f16", (11, 16))), ValueError, "v must have k's 13 kv rows")
bad(
    "flash_attn_ext",
    lambda c, t: _fa(c, t, q=("f32", (4, 7, 16)), k=("f16", (3, 13, 16)), v=("f16", (2, 13, 16)), mask=None),
    ValueError,
    "ggml_can_mul_mat(k, q)",
)
bad(
    "flash_attn_ext",
    lambda c, t: _fa(c, t, q=("f32", (4, 7, 16)), k=("f16", (2, 13, 16)), v=("f16", (3, 13, 16)), mask=None),
    ValueError,
    "v's heads (3) must divide q's (4)",
)
bad("flash_attn_ext", lambda c, t: _fa(c, t, scale=float("nan")), ValueError, "scale must be finite")
bad("flash_attn_ext", lambda c, t: _fa(c, t, max_bias=-1.0), ValueError, "max_bias must be >= 0")
bad("flash_attn_ext", lambda c, t: _fa(c, t, mask=None, max_bias=8.0), ValueError, "mask")
bad("flash_attn_ext", lambda c, t: _fa(c, t, q=("f16", (7, 16))), GraphError, "takes q as F32")
bad("flash_attn_ext", lambda c, t: _fa(c, t, k=("i32", (13, 16))), GraphError, "no dot product for k of type I32")
bad(
    "flash_attn_ext",
    lambda c, t: ops.flash_attn_ext(c, ops.transpose(c, t("f32", (16, 7))), t("f32", (13, 16)), t("f32", (13, 16))),
    GraphError,
    "contiguous rows",
)
bad(
    "flash_attn_ext",
    lambda c, t: ops.flash_attn_ext(c, t("f32", (7, 16)), [1.0], t("f16", (13, 16))),
    TypeError,
    "k must be a Tensor",
)
bad(
    "flash_attn_ext",
    lambda c, t: ops.flash_attn_ext(c, t("f32", (1, 4, 8)), t("f32", (1, 4, 8)), t("f32", (1, 4, 8)), None, True),
    TypeError,
    "scale must be a number, got bool",
)
spec(
    "flash_attn_ext",
    _fa_call,
    _fa_samples(),
    # nodes of any k type: a quantized k quantizes q to Q8_0 first; the samples state their own bounds
    bounds=[Bound(NMSE_FA_Q8)],
    reads=("FLASH_ATTN_EXT",),
    from_node=_fa_node,
)


def _fa_prec_call(xp: Any, x: Any, scale: float, prec: int) -> Any:
    r = _fa_call(xp, x, scale)
    xp.flash_attn_ext_set_prec(r, prec)
    return r


# the oracles have no flash_attn_ext_set_prec / _add_sinks (they change a flash_attn_ext node): oracle= given
bad(
    "flash_attn_ext_set_prec",
    lambda c, t: ops.flash_attn_ext_set_prec(c, _fa(c, t), 7),
    ValueError,
    "prec must be one of",
)
bad(
    "flash_attn_ext_set_prec",
    lambda c, t: ops.flash_attn_ext_set_prec(c, _fa(c, t), "f32"),
    TypeError,
    "prec must be an integer",
)
bad(
    "flash_attn_ext_set_prec",
    lambda c, t: ops.flash_attn_ext_set_prec(c, t("f32", (3, 8)), 10),
    ValueError,
    "a->op == GGML_OP_FLASH_ATTN_EXT",
)
bad(
    "flash_attn_ext_set_prec",
    lambda c, t: ops.flash_attn_ext_set_prec(c, _fa(c, t), 20),
    GraphError,
    "default or F32 precision",
)
spec(
    "flash_attn_ext_set_prec",
    _fa_prec_call,
    oracle=lambda x, scale, prec: _fa_call(oracles, x, scale),
    samples=[
        Sample(_fa_inputs(kv), (0.25, 10), "f32", tag=kv, bounds=_fa_bounds(_fa_inputs(kv), b))
        for kv, b in (("f32", NMSE_FA_F32), ("f16", None))
    ],
)


def _fa_sinks_inputs(kv: str) -> dict[str, InputSpec]:
    return {**_fa_inputs(kv, h=6, hkv=2, n_q=3, n_kv=9, mask=(3, 9)), "s": ("f32", (6,), uniform(-2, 3))}


bad(
    "flash_attn_ext_add_sinks",
    lambda c, t: ops.flash_attn_ext_add_sinks(c, t("f32", (3, 8)), t("f32", (1,))),
    ValueError,
    "a->op == GGML_OP_FLASH_ATTN_EXT",
)
bad(
    "flash_attn_ext_add_sinks",
    lambda c, t: ops.flash_attn_ext_add_sinks(c, _fa(c, t), t("f32", (2,))),
    ValueError,
    "a->src[0]->ne[2] == sinks->ne[0]",
)
bad(
    "flash_attn_ext_add_sinks",
    lambda c, t: ops.flash_attn_ext_add_sinks(c, _fa(c, t), t("f16", (1,))),
    ValueError,
    "sinks->type == GGML_TYPE_F32",
)
bad(
    "flash_attn_ext_add_sinks",
    lambda c, t: ops.flash_attn_ext_add_sinks(c, _fa(c, t), None),
    TypeError,
    "sinks must be a Tensor",
)
bad(
    "flash_attn_ext_add_sinks",
    lambda c, t: ops.flash_attn_ext_add_sinks(
        c,
        _fa(c, t, q=("f32", (4, 7, 16)), k=("f16", (2, 13, 16)), v=("f16", (2, 13, 16))),
        ops.transpose(c, ops.view_2d(c, t("f32", (4, 2)), 1, 4, 8, 0)),
    ),
    GraphError,
    "contiguous vector",
)
spec(
    "flash_attn_ext_add_sinks",
    _fa_sinks_call,
    oracle=_fa_sinks_oracle,
    samples=[
        Sample(_fa_sinks_inputs(kv), (0.4,), "gqa", tag=kv, bounds=_fa_bounds(_fa_sinks_inputs(kv), b))
        for kv, b in (("f32", NMSE_FA_F32), ("f16", None))
    ],
)

# --- SAM: windows and relative positions --------------------------------------------------------------------------------
_WINDOWS = (((7, 5, 3), 3), ((13, 11, 2), 4), ((5, 7, 3), 8), ((4, 6, 5), 2), ((3, 5, 2), 1))


def _n_windows(shape: tuple[int, ...], w: int) -> int:
    return (-(-shape[0] // w)) * (-(-shape[1] // w))


# ggml_win_part: op_params {npx, npy, w}
bad("win_part", lambda c, t: ops.win_part(c, t("f32", (7, 5, 3)), 0), ValueError, "w must be >= 1")
bad("win_part", lambda c, t: ops.win_part(c, t("f16", (7, 5, 3)), 2), ValueError, "a->type == GGML_TYPE_F32")
bad(
    "win_part",
    lambda c, t: ops.win_part(c, ops.permute(c, t("f32", (7, 5, 3)), 0, 2, 1, 3), 2),
    GraphError,
    "contiguous",
)
bad("win_part", lambda c, t: ops.win_part(c, t("f32", (7, 5, 3)), 2.5), TypeError, "w must be an integer")
spec(
    "win_part",
    params=("npx", "npy", "w"),
    exact=True,
    reads=("WIN_PART",),
    from_node=lambda n: oracles.win_part(n.arg(0), n.param("w")),
    samples=[Sample({"a": ("f32", s)}, (w,), f"{_dims(s)}_w{w}") for s, w in _WINDOWS],
)
# ggml_win_unpart: op_params {w}; w0 and h0 are the result's ne[1] and ne[2]
bad("win_unpart", lambda c, t: ops.win_unpart(c, t("f32", (4, 3, 3, 2)), 5, 7, 3), ValueError, "a must hold 6 windows")
bad("win_unpart", lambda c, t: ops.win_unpart(c, t("f32", (6, 2, 3, 2)), 5, 7, 3), ValueError, "a must hold")
bad("win_unpart", lambda c, t: ops.win_unpart(c, t("f32", (6, 3, 3, 2)), 0, 7, 3), ValueError, "must be >= 1")
bad(
    "win_unpart",
    lambda c, t: ops.win_unpart(c, t("f16", (6, 3, 3, 2)), 5, 7, 3),
    ValueError,
    "a->type == GGML_TYPE_F32",
)
spec(
    "win_unpart",
    params=("w",),
    exact=True,
    reads=("WIN_UNPART",),
    from_node=lambda n: oracles.win_unpart(n.arg(0), n.ne[1], n.ne[2], n.param("w")),
    samples=[
        *(
            Sample({"a": ("f32", (_n_windows(s, w), w, w, s[2]))}, (s[1], s[0], w), f"{s[1]}x{s[0]}_w{w}")
            for s, w in _WINDOWS
        ),
        # win_part then win_unpart gives the image back
        Sample(
            {"a": ("f32", (7, 9, 5))},
            (9, 7, 4),
            "roundtrip",
            call=lambda xp, x, w0, h0, w: xp.win_unpart(xp.win_part(x.a, w), w0, h0, w),
        ),
    ],
)
# ggml_get_rel_pos: no op_params; the result is [C, kh, qh] (ne)
bad("get_rel_pos", lambda c, t: ops.get_rel_pos(c, t("f16", (5, 4)), 3, 2), ValueError, "qh == kh")
bad("get_rel_pos", lambda c, t: ops.get_rel_pos(c, t("f16", (6, 4)), 3, 3), ValueError, "2*MAX(qh, kh) - 1 == a->ne[1]")
bad("get_rel_pos", lambda c, t: ops.get_rel_pos(c, t("bf16", (5, 4)), 3, 3), GraphError, "takes F16 input")
bad("get_rel_pos", lambda c, t: ops.get_rel_pos(c, t("f32", (5, 4)), 3, 3), GraphError, "takes F16 input")
bad("get_rel_pos", lambda c, t: ops.get_rel_pos(c, t("f16", (5, 4)), "3", 3), TypeError, "qh must be an integer")
spec(
    "get_rel_pos",
    params=(),
    exact=True,
    reads=("GET_REL_POS",),
    from_node=lambda n: oracles.get_rel_pos(n.arg(0), n.ne[2], n.ne[1]),
    samples=[
        Sample({"a": ("f16", (2 * kh - 1, c))}, (kh, kh), f"kh{kh}_c{c}") for kh, c in ((3, 5), (5, 13), (7, 4), (1, 3))
    ],
)
_sam = {"a": ("f32", (2, 9, 9)), "pw": ("f32", (2, 3, 3, 3))}
bad(
    "add_rel_pos",
    lambda c, t: ops.add_rel_pos(c, t(*_sam["a"]), t(*_sam["pw"]), t("f16", (2, 3, 3, 3))),
    ValueError,
    "ph->type == GGML_TYPE_F32",
)
bad(
    "add_rel_pos",
    lambda c, t: ops.add_rel_pos(c, t(*_sam["a"]), t(*_sam["pw"]), t("f32", (2, 3, 3, 2))),
    ValueError,
    "ggml_are_same_shape(pw, ph)",
)
bad(
    "add_rel_pos",
    lambda c, t: ops.add_rel_pos(c, t("f32", (2, 9, 8)), t(*_sam["pw"]), t(*_sam["pw"])),
    ValueError,
    "pw->ne[0]*pw->ne[0] == a->ne[0]",
)
bad(
    "add_rel_pos",
    lambda c, t: ops.add_rel_pos(c, t("f16", (2, 9, 9)), t(*_sam["pw"]), t(*_sam["pw"])),
    GraphError,
    "takes F32 input",
)
spec(
    "add_rel_pos",
    reads=("ADD_REL_POS",),
    from_node=lambda n: oracles.add_rel_pos(n.arg(0), n.arg(1), n.arg(2)),
    samples=[
        Sample(
            {"a": ("f32", (p, h2 * h1, w * w)), "pw": ("f32", (p, h2, h1, w)), "ph": ("f32", (p, h2, h1, w))},
            variant=f"{p}x{h2}x{h1}x{w}",
        )
        for p, h2, h1, w in ((2, 3, 3, 3), (1, 2, 5, 3), (3, 1, 5, 5), (1, 1, 1, 4))
    ],
)

# --- DeepSeek: lightning indexer, hyper-connections ---------------------------------------------------------------------
_li = {"q": ("f32", (5, 3, 16)), "k": ("f32", (7, 1, 16)), "w": ("f32", (5, 3)), "m": ("f16", (5, 7))}


def _lix(c: Any, t: Any, **over: tuple) -> Any:
    """A lightning_indexer call for the bad calls (the inputs of _li, some replaced)."""
    x = {**_li, **over}
    return ops.lightning_indexer(c, t(*x["q"]), t(*x["k"]), t(*x["w"]), t(*x["m"]))


bad("lightning_indexer", lambda c, t: _lix(c, t, m=("f32", (5, 7))), ValueError, "mask->type == GGML_TYPE_F16")
bad("lightning_indexer", lambda c, t: _lix(c, t, q=("f16", (5, 3, 16))), ValueError, "q->type == GGML_TYPE_F32")
bad("lightning_indexer", lambda c, t: _lix(c, t, m=("f16", (5, 8))), ValueError, "mask->ne[0] == k->ne[2]")
bad("lightning_indexer", lambda c, t: _lix(c, t, k=("f32", (7, 2, 16))), ValueError, "k->ne[1] == 1")
bad("lightning_indexer", lambda c, t: _lix(c, t, k=("i32", (7, 1, 16))), GraphError, "cannot read k of type I32")
bad(
    "lightning_indexer",
    lambda c, t: ops.lightning_indexer(c, t(*_li["q"]), t(*_li["k"]), t(*_li["w"]), None),
    TypeError,
    "mask must be a Tensor",
)
spec(
    "lightning_indexer",
    reads=("LIGHTNING_INDEXER",),
    from_node=lambda n: oracles.lightning_indexer(n.arg(0), n.arg(1), n.arg(2), n.arg(3)),
    samples=[
        *(
            Sample(
                {
                    "q": ("f32", (5, 3, e)),
                    "k": (kt, (7, 1, e)),
                    "w": ("f32", (5, 3)),
                    "m": ("f16", (5, 7), uniform(-1, 0)),
                },
                tag=kt,
                bounds=[Bound(b)] if b is not None else [],
            )
            for kt, e, b in (("f32", 16, None), ("f16", 16, None), ("bf16", 16, None), ("q8_0", 32, 1e-6))
        ),
        Sample(
            {
                "q": ("f32", (2, 3, 5, 13)),
                "k": ("f32", (2, 11, 1, 13)),
                "w": ("f32", (2, 1, 3, 5)),
                "m": ("f16", (1, 1, 3, 11), uniform(-1, 0)),
            },
            variant="streams",
            tag="f32",
        ),
        Sample(
            {"q": ("f32", (7, 2, 8)), "k": ("f32", (7, 1, 8)), "w": ("f32", (7, 2)), "m": ("f16", (7, 7), _causal())},
            variant="causal",
            tag="f32",
        ),
        Sample(
            {
                "q": In("f32", (3, 5, 16), layout=Permuted()),
                "k": ("f32", (9, 1, 16)),
                "w": ("f32", (5, 3)),
                "m": ("f16", (5, 9), uniform(-1, 0)),
            },
            variant="q_permuted",
            tag="f32",
        ),
    ],
)

_hc = {"mx": ("f32", (5, 24)), "sc": ("f32", (3,)), "b": ("f32", (24,))}
# ggml_dsv4_hc_comb: op_params {eps (f32), n_iter (i32)}
bad(
    "dsv4_hc_comb",
    lambda c, t: ops.dsv4_hc_comb(c, t("f32", (5, 15)), t(*_hc["sc"]), t("f32", (15,))),
    ValueError,
    "hc == 4",
)
bad(
    "dsv4_hc_comb",
    lambda c, t: ops.dsv4_hc_comb(c, t(*_hc["mx"]), t(*_hc["sc"]), t(*_hc["b"]), 1e-6, 0),
    ValueError,
    "n_iter > 0",
)
bad(
    "dsv4_hc_comb",
    lambda c, t: ops.dsv4_hc_comb(c, t(*_hc["mx"]), t("f32", (2,)), t(*_hc["b"])),
    ValueError,
    "scale->ne[0] >= 3",
)
bad(
    "dsv4_hc_comb",
    lambda c, t: ops.dsv4_hc_comb(c, t(*_hc["mx"]), t(*_hc["sc"]), t(*_hc["b"]), -1.0),
    ValueError,
    "eps must be >= 0",
)
bad(
    "dsv4_hc_comb",
    lambda c, t: ops.dsv4_hc_comb(c, t(*_hc["mx"]), t(*_hc["sc"]), t(*_hc["b"]), float("inf")),
    ValueError,
    "eps must be finite",
)
spec(
    "dsv4_hc_comb",
    reads=("DSV4_HC_COMB",),
    from_node=lambda n: oracles.dsv4_hc_comb(n.arg(0), n.arg(1), n.arg(2), *n.scalars()),
    samples=[
        *(
            Sample(
                {"mx": ("f32", (tok, 24)), "sc": ("f32", (3,), uniform(0.5, 2)), "b": ("f32", (24,))},
                (eps, it),
                f"t{tok}_iter{it}",
            )
            for tok, it, eps in ((5, 1, 1e-6), (7, 3, 1e-6), (3, 20, 1e-3), (1, 2, 0.0))
        ),
        Sample(
            {"mx": In("f32", (24, 5), layout=Transposed()), "sc": ("f32", (4,), uniform(0.5, 2)), "b": ("f32", (24,))},
            (1e-6, 2),
            "mixes_transposed",
        ),
    ],
)


def _hc_pre_node(n: Node) -> np.ndarray:
    """ggml_dsv4_hc_pre_impl: op_params {scale (f32), gated (i32)}; src[1] the weights, or the gate when gated."""
    if n.param("gated"):
        return oracles.dsv4_hc_pre_gated(n.arg(0), n.arg(1), n.param("scale"))
    return oracles.dsv4_hc_pre(n.arg(0), n.arg(1))


_HC = (4, 3, 1)
bad(
    "dsv4_hc_pre",
    lambda c, t: ops.dsv4_hc_pre(c, t("f32", (5, 4, 13)), t("f32", (5, 3))),
    ValueError,
    "weights->ne[0] == hc",
)
bad(
    "dsv4_hc_pre",
    lambda c, t: ops.dsv4_hc_pre(c, t("f16", (5, 4, 13)), t("f32", (5, 4))),
    ValueError,
    "x->type == GGML_TYPE_F32",
)
bad(
    "dsv4_hc_pre",
    lambda c, t: ops.dsv4_hc_pre(c, t("f32", (2, 5, 4, 13)), t("f32", (5, 4))),
    ValueError,
    "x->ne[3] == 1",
)
spec(
    "dsv4_hc_pre",
    params=("scale:float", "gated:bool"),
    reads=("DSV4_HC_PRE",),
    from_node=_hc_pre_node,
    samples=[
        *(Sample({"x": ("f32", (5, hc, 13)), "w": ("f32", (5, hc))}, variant=f"hc{hc}") for hc in _HC),
        # strided inputs: the kernels read every operand through its strides
        Sample(
            {"x": In("f32", (4, 5, 13), layout=Permuted()), "w": In("f32", (4, 5), layout=Transposed())},
            variant="x_permuted",
        ),
    ],
)
# its DSV4_HC_PRE nodes are read by dsv4_hc_pre's spec
bad(
    "dsv4_hc_pre_gated",
    lambda c, t: ops.dsv4_hc_pre_gated(c, t("f32", (5, 4, 13)), t("f32", (5, 4, 12))),
    ValueError,
    "weights->ne[0] == n_embd",
)
bad(
    "dsv4_hc_pre_gated",
    lambda c, t: ops.dsv4_hc_pre_gated(c, t("f32", (5, 4, 13)), t("f32", (5, 4, 13)), float("nan")),
    ValueError,
    "scale must be finite",
)
bad(
    "dsv4_hc_pre_gated",
    lambda c, t: ops.dsv4_hc_pre_gated(c, t("f32", (2, 4, 8)), t("f32", (2, 4, 8)), "2"),
    TypeError,
    "scale must be a number",
)
spec(
    "dsv4_hc_pre_gated",
    samples=[
        Sample({"x": ("f32", (5, hc, 13)), "g": ("f32", (5, hc, 13), uniform(-3, 3))}, (0.7,), f"hc{hc}") for hc in _HC
    ],
)

_hp = {"x": ("f32", (5, 13)), "r": ("f32", (5, 4, 13)), "p": ("f32", (5, 4))}
bad(
    "dsv4_hc_post",
    lambda c, t: ops.dsv4_hc_post(c, t(*_hp["x"]), t(*_hp["r"]), t("f32", (5, 3))),
    ValueError,
    "post->ne[0] == hc",
)
bad(
    "dsv4_hc_post",
    lambda c, t: ops.dsv4_hc_post(c, t(*_hp["x"]), t(*_hp["r"]), t(*_hp["p"]), t("f32", (5, 4, 3))),
    ValueError,
    "comb->ne[0] == hc",
)
bad(
    "dsv4_hc_post",
    lambda c, t: ops.dsv4_hc_post(c, t(*_hp["x"]), t("f32", (5, 4, 12)), t(*_hp["p"])),
    ValueError,
    "residual->ne[0] == n_embd",
)
bad(
    "dsv4_hc_post",
    lambda c, t: ops.dsv4_hc_post(c, t(*_hp["x"]), t(*_hp["r"]), t(*_hp["p"]), "comb"),
    TypeError,
    "comb must be a Tensor",
)
spec(
    "dsv4_hc_post",
    lambda xp, x: xp.dsv4_hc_post(x.x, x.r, x.p, getattr(x, "cb", None)),
    reads=("DSV4_HC_POST",),
    from_node=lambda n: oracles.dsv4_hc_post(n.arg(0), n.arg(1), n.arg(2), _src(n, 3)),
    samples=[
        *(
            s
            for hc in _HC
            for s in (
                Sample(
                    {
                        "x": ("f32", (5, 13)),
                        "r": ("f32", (5, hc, 13)),
                        "p": ("f32", (5, hc)),
                        "cb": ("f32", (5, hc, hc)),
                    },
                    variant=f"hc{hc}",
                ),
                Sample(
                    {"x": ("f32", (5, 13)), "r": ("f32", (5, hc, 13)), "p": ("f32", (5, hc))},
                    variant=f"hc{hc}/identity",
                ),
            )
        ),
        Sample(
            {
                "x": In("f32", (13, 5), layout=Transposed()),
                "r": ("f32", (5, 4, 13)),
                "p": ("f32", (5, 4)),
                "cb": In("f32", (5, 4, 4), layout=Permuted((1, 0, 2, 3))),
            },
            variant="comb_transposed",
        ),
        # the DeepSeek V4 block: combine, then mix the streams back
        Sample(
            {
                "x": ("f32", (5, 13)),
                "r": ("f32", (5, 4, 13)),
                "p": ("f32", (5, 4)),
                "mx": ("f32", (5, 24)),
                "sc": ("f32", (3,), uniform(0.5, 2)),
                "b": ("f32", (24,)),
            },
            variant="with_comb_op",
            call=lambda xp, x: xp.dsv4_hc_post(x.x, x.r, x.p, xp.dsv4_hc_comb(x.mx, x.sc, x.b, 1e-6, 3)),
        ),
    ],
)
