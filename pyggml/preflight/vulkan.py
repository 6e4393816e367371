"""What ggml-vulkan computes wrongly or crashes on although its supports_op says yes: refused as
Unsupported where a Vulkan device computes the node."""

from __future__ import annotations

from typing import Any

from pyggml._native import ffi, lib
from pyggml.errors import Unsupported
from pyggml.preflight.core import VIEW_OPS, Rule, RuleTable, name
from pyggml.types import Op

_NULL = ffi.NULL


# Vulkan binds a tensor at an offset aligned to the device's minStorageBufferOffsetAlignment; only
# the shaders of these ops take the rest as a push constant (ggml-vulkan: init_pushconst_tensor_offsets
# specializations, allow_misalign). Any other op on a misaligned view asserts in ggml_vk_tensor_subbuffer
# or init_pushconst_tensor_offsets, which ends the process.
_VK_MISALIGN_OK = {
    int(o)
    for o in (
        Op.ADD,
        Op.SUB,
        Op.MUL,
        Op.DIV,
        Op.ADD1,
        Op.GET_ROWS,
        Op.GET_ROWS_BACK,
        Op.SET_ROWS,
        Op.RMS_NORM,
        Op.UNARY,
        Op.GLU,
        Op.SCALE,
        Op.SQR,
        Op.SQRT,
        Op.SIN,
        Op.COS,
        Op.LOG,
        Op.TRI,
        Op.DIAG,
        Op.CLAMP,
        Op.PAD,
        Op.PAD_REFLECT_1D,
        Op.ROLL,
        Op.REPEAT,
        Op.REPEAT_BACK,
        Op.CPY,
        Op.DUP,
        Op.CONT,
        Op.NORM,
        Op.L2_NORM,
        Op.LEAKY_RELU,
        Op.SUM,
        Op.SUM_ROWS,
        Op.MEAN,
        Op.CUMSUM,
        Op.CONCAT,
        Op.UPSCALE,
        Op.ROPE,
        Op.IM2COL_3D,
    )
}


def _vk_nested_view(p: Any) -> str | None:
    # acc.comp / set: b's element is found by dividing a's flat index by the view's strides, which only
    # works when they nest (docs/findings.md)
    es = lib.ggml_type_size(p.type)
    nb1, nb2, nb3 = (ffi.cast("int32_t *", p.op_params)[i] for i in range(3))
    b = p.src[1]
    if not (b.ne[0] * es <= nb1 and b.ne[1] * nb1 <= nb2 and b.ne[2] * nb2 <= nb3):
        return "its shader assumes the view's strides nest (ne10*size <= nb1, ne11*nb1 <= nb2, ne12*nb2 <= nb3)"
    return None


def _vk_group_norm(p: Any) -> str | None:
    n_groups = ffi.cast("int32_t *", p.op_params)[0]
    ne2 = p.src[0].ne[2]
    size = -(-ne2 // n_groups)
    if ne2 % size:  # docs/findings.md: the last, shorter group takes channels past its own
        return f"its shader needs groups of equal size ({ne2} channels in {n_groups} groups)"
    return None


def _vk_mul_mat(p: Any) -> str | None:
    # docs/findings.md: a quantized a times a non-contiguous b ended the process (SIGSEGV) on lavapipe for
    # Q2_K, Q4_K, Q5_K, Q6_K and TQ2_0 (not Q3_K, Q4_0, Q8_0, IQ4_NL, TQ1_0): refused for every quantized a
    if lib.ggml_is_quantized(p.src[0].type) and not lib.ggml_is_contiguous(p.src[1]):
        return "a quantized a times a non-contiguous b crashed it (make b contiguous with cont first)"
    return None


# what Vulkan computes wrongly or crashes on though supports_op says yes: refused as unsupported
VULKAN_RULES = RuleTable("Vulkan")
VULKAN_RULES.register(
    (Op.ACC, Op.SET), _vk_nested_view, finding="docs/findings.md 4, 9, 10", test="tests/test_op_cases.py::test_op_case"
)
VULKAN_RULES.register(
    Op.GROUP_NORM, _vk_group_norm, finding="docs/findings.md 4, 9, 10", test="tests/test_op_cases.py::test_op_case"
)
VULKAN_RULES.register(
    Op.MUL_MAT, _vk_mul_mat, finding="docs/findings.md 23", test="tests/test_op_cases.py::test_op_case"
)


def memory(ns: list) -> None:
    """The nodes a Vulkan device computes (pyggml.preflight's kind hook): its rules, and tensors at offsets its
    shader can bind."""
    for p in ns:
        if p.op in VIEW_OPS:
            continue
        why = VULKAN_RULES.why(p)
        if why:
            raise Unsupported(f"compute: {name(p)}: Vulkan does not compute {Op(p.op).name} here: {why}")
        if p.op in _VK_MISALIGN_OK:
            continue
        for t in (p, *p.src):
            if t == _NULL or t.buffer == _NULL or t.data == _NULL:
                continue
            align = lib.ggml_backend_buffer_get_alignment(t.buffer)
            offset = int(ffi.cast("uintptr_t", t.data)) - int(
                ffi.cast("uintptr_t", lib.ggml_backend_buffer_get_base(t.buffer))
            )
            if align > 1 and offset % align:
                tname = ffi.string(t.name).decode("utf-8", "replace") or "(unnamed)"
                raise Unsupported(
                    f"compute: {name(p)}: Vulkan computes {Op(p.op).name} only from tensors at offsets "
                    f"aligned to {align} bytes, and {tname} is {offset % align} bytes past one "
                    "(a view: make it contiguous with cont first)"
                )


GRAPH_RULES = [
    Rule(
        (),
        memory,
        "docs/findings.md 4, 9, 10",
        "tests/test_safety.py::test_vulkan_refuses_misaligned_views_it_would_abort_on",
    )
]
