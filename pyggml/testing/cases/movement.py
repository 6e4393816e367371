"""Cases of data movement: rows, copies, views, reshapes, permutations."""

from __future__ import annotations

import numpy as np

from pyggml.testing import oracles
from pyggml.testing.cases import (
    NMSE_Q8_STORE,
    integers,
    op_case,
    permutation_rows,
)

# --- index ops -----------------------------------------------------------------------------------------------------------
for _t in ("f32", "f16", "q8_0", "q4_0"):
    op_case(f"get_rows/{_t}", {"a": (_t, (10, 32)), "b": ("i32", (6,), integers(0, 10))},
            lambda c, x: c.get_rows(x.a, x.b), lambda x: oracles.get_rows(x.a, x.b))
op_case("get_rows/f32/batched", {"a": ("f32", (2, 3, 7, 8)), "b": ("i32", (2, 3, 4), integers(0, 7))},
        lambda c, x: c.get_rows(x.a, x.b), lambda x: oracles.get_rows(x.a, x.b))
op_case("get_rows/i32", {"a": ("i32", (6, 4), integers(-100, 100)), "b": ("i32", (5,), integers(0, 6))},
        lambda c, x: c.get_rows(x.a, x.b), lambda x: oracles.get_rows(x.a, x.b), exact=True)

op_case("set_rows/f32/i64", {"a": ("f32", (10, 8)), "b": ("f32", (4, 8)), "c": ("i64", (4,), permutation_rows(10))},
        lambda c, x: c.set_rows(x.a, x.b, x.c), lambda x: oracles.set_rows(x.a, x.b, x.c))
op_case("set_rows/f32/i32_batched", {"a": ("f32", (2, 3, 6, 8)), "b": ("f32", (2, 3, 2, 8)),
                                     "c": ("i32", (2, 3, 2), permutation_rows(6))},
        lambda c, x: c.set_rows(x.a, x.b, x.c), lambda x: oracles.set_rows(x.a, x.b, x.c))
op_case("set_rows/f32/broadcast_index", {"a": ("f32", (2, 4, 6, 8)), "b": ("f32", (2, 4, 3, 8)),
                                         "c": ("i64", (1, 2, 3), permutation_rows(6))},
        lambda c, x: c.set_rows(x.a, x.b, x.c), lambda x: oracles.set_rows(x.a, x.b, x.c))
op_case("set_rows/f16", {"a": ("f16", (7, 16)), "b": ("f32", (3, 16)), "c": ("i64", (3,), permutation_rows(7))},
        lambda c, x: c.set_rows(x.a, x.b, x.c), lambda x: oracles.set_rows(x.a, x.b, x.c))
op_case("set_rows/f16_src", {"a": ("f32", (7, 16)), "b": ("f16", (3, 16)), "c": ("i32", (3,), permutation_rows(7))},
        lambda c, x: c.set_rows(x.a, x.b, x.c), lambda x: oracles.set_rows(x.a, x.b, x.c))
op_case("set_rows/q8_0", {"a": ("q8_0", (6, 64)), "b": ("f32", (2, 64)), "c": ("i64", (2,), permutation_rows(6))},
        lambda c, x: c.set_rows(x.a, x.b, x.c), lambda x: oracles.set_rows(x.a, x.b, x.c), nmse=NMSE_Q8_STORE)


# --- data movement ----------------------------------------------------------------------------------------------------------
op_case("cpy/f32_f16", {"a": ("f32", (3, 16)), "b": ("f16", (3, 16))}, lambda c, x: c.cpy(x.a, x.b),
        lambda x: oracles.cpy(x.a))
op_case("cpy/f16_f32", {"a": ("f16", (3, 16)), "b": ("f32", (6, 8))}, lambda c, x: c.cpy(x.a, x.b),
        lambda x: oracles.cpy(x.a).reshape(6, 8))
op_case("cpy/f32_bf16", {"a": ("f32", (3, 16)), "b": ("bf16", (3, 16))}, lambda c, x: c.cpy(x.a, x.b),
        lambda x: oracles.cpy(x.a))
op_case("cpy/f32_q8_0", {"a": ("f32", (2, 64)), "b": ("q8_0", (2, 64))}, lambda c, x: c.cpy(x.a, x.b),
        lambda x: oracles.cpy(x.a), nmse=NMSE_Q8_STORE)
op_case("cpy/f32_transposed", {"a": ("f32", (4, 6)), "b": ("f32", (6, 4))}, lambda c, x: c.cpy(c.transpose(x.a), x.b),
        lambda x: oracles.cpy(oracles.transpose(x.a)))
op_case("cpy/f32_i32", {"a": ("f32", (3, 8), integers(-50, 50)), "b": ("i32", (3, 8))}, lambda c, x: c.cpy(x.a, x.b),
        lambda x: oracles.cpy(x.a, np.int32), exact=True)

op_case("dup/f32", {"a": ("f32", (2, 3, 8))}, lambda c, x: c.dup(x.a), lambda x: oracles.dup(x.a))
op_case("dup/f16/permuted", {"a": ("f16", (2, 3, 8))}, lambda c, x: c.dup(c.permute(x.a, 2, 0, 1, 3)),
        lambda x: oracles.dup(oracles.permute(x.a, 2, 0, 1, 3)))
op_case("cont/f32", {"a": ("f32", (5, 8))}, lambda c, x: c.cont(c.transpose(x.a)),
        lambda x: oracles.cont(oracles.transpose(x.a)))
op_case("cont/f16", {"a": ("f16", (2, 5, 8))}, lambda c, x: c.cont(c.permute(x.a, 1, 2, 0, 3)),
        lambda x: oracles.cont(oracles.permute(x.a, 1, 2, 0, 3)))
_CONT_NE = {1: (40,), 2: (10, 4), 3: (5, 2, 4), 4: (5, 2, 2, 2)}
for _n, _ne in _CONT_NE.items():
    op_case(f"cont_{_n}d/f32", {"a": ("f32", (5, 8))},
            lambda c, x, _n=_n, _ne=_ne: getattr(c, f"cont_{_n}d")(c.transpose(x.a), *_ne),
            lambda x, _ne=_ne: oracles.cont_nd(oracles.transpose(x.a), _ne))
    op_case(f"cont_{_n}d/f16", {"a": ("f16", (5, 8))},
            lambda c, x, _n=_n, _ne=_ne: getattr(c, f"cont_{_n}d")(c.transpose(x.a), *_ne),
            lambda x, _ne=_ne: oracles.cont_nd(oracles.transpose(x.a), _ne))
    op_case(f"reshape_{_n}d/f32", {"a": ("f32", (5, 8))},
            lambda c, x, _n=_n, _ne=_ne: getattr(c, f"reshape_{_n}d")(x.a, *_ne),
            lambda x, _ne=_ne: oracles.reshape(x.a, _ne))
    op_case(f"reshape_{_n}d/f16", {"a": ("f16", (5, 8))},
            lambda c, x, _n=_n, _ne=_ne: c.cont(getattr(c, f"reshape_{_n}d")(x.a, *_ne)),
            lambda x, _ne=_ne: oracles.reshape(x.a, _ne))
op_case("reshape/f32", {"a": ("f32", (4, 6))}, lambda c, x: c.reshape(x.a, c.new_tensor("f32", [3, 8])),
        lambda x: oracles.reshape(x.a, (3, 8)))

_axes: tuple[int, ...]  # and every permutation below
for _axes in ((1, 0, 2, 3), (2, 0, 1, 3), (0, 2, 1, 3), (3, 2, 1, 0), (1, 3, 0, 2)):
    op_case("permute/f32/" + "".join(map(str, _axes)), {"a": ("f32", (2, 3, 4, 5))},
            lambda c, x, _a=_axes: c.cont(c.permute(x.a, *_a)), lambda x, _a=_axes: oracles.permute(x.a, *_a))
op_case("permute/f16/2013", {"a": ("f16", (2, 3, 4, 5))}, lambda c, x: c.cont(c.permute(x.a, 2, 0, 1, 3)),
        lambda x: oracles.permute(x.a, 2, 0, 1, 3))
op_case("transpose/f32", {"a": ("f32", (2, 3, 7))}, lambda c, x: c.cont(c.transpose(x.a)),
        lambda x: oracles.transpose(x.a))
op_case("transpose/f16", {"a": ("f16", (6, 7))}, lambda c, x: c.cont(c.transpose(x.a)),
        lambda x: oracles.transpose(x.a))

# NumPy shapes, reused below: lists where one extent is set, tuples from the set_rows table
_sa: list[int] | tuple[int, ...]
_sb: list[int] | tuple[int, ...]
for _dim in range(4):
    _sa, _sb = [2, 3, 4, 5], [2, 3, 4, 5]
    _sb[3 - _dim] = 2
    op_case(f"concat/f32/dim{_dim}", {"a": ("f32", tuple(_sa)), "b": ("f32", tuple(_sb))},
            lambda c, x, _d=_dim: c.concat(x.a, x.b, _d), lambda x, _d=_dim: oracles.concat(x.a, x.b, _d))
op_case("concat/f16/dim1", {"a": ("f16", (3, 8)), "b": ("f16", (2, 8))}, lambda c, x: c.concat(x.a, x.b, 1),
        lambda x: oracles.concat(x.a, x.b, 1))
op_case("concat/f32/dim0_transposed", {"a": ("f32", (4, 3)), "b": ("f32", (3, 2))},
        lambda c, x: c.concat(c.transpose(x.a), x.b, 0), lambda x: oracles.concat(oracles.transpose(x.a), x.b, 0))

op_case("repeat/f32", {"a": ("f32", (1, 3, 4))}, lambda c, x: c.repeat(x.a, c.new_tensor("f32", [8, 6, 2, 2])),
        lambda x: oracles.repeat(x.a, (8, 6, 2, 2)))
op_case("repeat/f16", {"a": ("f16", (2, 4))}, lambda c, x: c.repeat(x.a, c.new_tensor("f16", [4, 6])),
        lambda x: oracles.repeat(x.a, (4, 6)))
op_case("pad/f32", {"a": ("f32", (2, 3, 5))}, lambda c, x: c.pad(x.a, 3, 1, 2, 1),
        lambda x: oracles.pad(x.a, 3, 1, 2, 1))
op_case("pad/f32/dim0", {"a": ("f32", (4, 5))}, lambda c, x: c.pad(x.a, 2),
        lambda x: oracles.pad(x.a, 2))

# --- views (strided, made contiguous with cont so every backend returns them alike) ------------------------------------------
# a is NumPy (4, 5, 6, 8) F32: ne = [8, 6, 5, 4], nb = [4, 32, 192, 960]
_VA = ("f32", (4, 5, 6, 8))
op_case("view_1d/f32", {"a": _VA}, lambda c, x: c.cont(c.view_1d(x.a, 20, 4 * 7)),
        lambda x: oracles.view_1d(x.a, 20, 4 * 7))
op_case("view_2d/f32", {"a": _VA}, lambda c, x: c.cont(c.view_2d(x.a, 5, 7, 64, 4 * 3)),
        lambda x: oracles.view_2d(x.a, 5, 7, 64, 4 * 3))
op_case("view_3d/f32", {"a": _VA}, lambda c, x: c.cont(c.view_3d(x.a, 3, 4, 2, 32, 192 * 2, 4 * 2 + 192)),
        lambda x: oracles.view_3d(x.a, 3, 4, 2, 32, 192 * 2, 4 * 2 + 192))
op_case("view_4d/f32", {"a": _VA}, lambda c, x: c.cont(c.view_4d(x.a, 4, 3, 2, 2, 64, 192, 960 * 2, 4 + 32)),
        lambda x: oracles.view_4d(x.a, 4, 3, 2, 2, 64, 192, 960 * 2, 4 + 32))
op_case("view_2d/f16", {"a": ("f16", (6, 8))}, lambda c, x: c.cont(c.view_2d(x.a, 4, 3, 32, 2)),
        lambda x: oracles.view_2d(x.a, 4, 3, 32, 2))
# view_nd: overlapping conv windows as llama.cpp's seed takes them. a: NumPy (channels 3, time 9);
# windows ne = [d_conv 4, window 6, channel 3, 1], nb = [4 (time step), 4 (next window), 36 (channel), 108]
op_case("view_nd/f32/windows", {"a": ("f32", (3, 9))},
        lambda c, x: c.cont(c.view_nd(x.a, [4, 6, 3, 1], [4, 4, 36, 108])),
        lambda x: oracles.view_nd(x.a, [4, 6, 3, 1], [4, 4, 36, 108]))
# view_nd with a strided innermost dim: every other element of each row
op_case("view_nd/f32/stride0", {"a": ("f32", (2, 3, 8))},
        lambda c, x: c.cont(c.view_nd(x.a, [4, 3, 2, 1], [8, 32, 96, 192], 4)),
        lambda x: oracles.view_nd(x.a, [4, 3, 2, 1], [8, 32, 96, 192], 4))


# === breadth: odd sizes, every layout the kernels take, F16/BF16/I32 ==========================================
from itertools import permutations as _permutations  # noqa: E402

from pyggml.testing.cases import uniform  # noqa: E402

_FLOATS = ("f32", "f16", "bf16")


def _gen(t):
    """Integers for integer tensors (a float would be truncated on the way in), floats otherwise."""
    return integers(-100, 100) if t in ("i32", "i16", "i8") else uniform()


def _inp(t, shape):
    return (t, shape, _gen(t))


# --- permute: all 24 permutations, odd extents (NumPy (2, 3, 5, 7): ggml ne [7, 5, 3, 2]) -----------------------------
for _axes in _permutations(range(4)):
    _tag = "".join(map(str, _axes))
    op_case(f"permute/f32/all_{_tag}", {"a": _inp("f32", (2, 3, 5, 7))},
            lambda c, x, _a=_axes: c.cont(c.permute(x.a, *_a)), lambda x, _a=_axes: oracles.permute(x.a, *_a), exact=True)
    op_case(f"permute/f16/all_{_tag}", {"a": _inp("f16", (3, 5, 2, 7))},
            lambda c, x, _a=_axes: c.cont(c.permute(x.a, *_a)), lambda x, _a=_axes: oracles.permute(x.a, *_a), exact=True)
for _t in ("bf16", "i32"):
    for _axes in ((1, 0, 2, 3), (2, 0, 1, 3), (0, 2, 1, 3), (3, 2, 1, 0), (1, 3, 0, 2), (2, 3, 0, 1)):
        op_case(f"permute/{_t}/" + "".join(map(str, _axes)), {"a": _inp(_t, (2, 3, 5, 7))},
                lambda c, x, _a=_axes: c.cont(c.permute(x.a, *_a)), lambda x, _a=_axes: oracles.permute(x.a, *_a),
                exact=True)
# a permutation of a permutation, and a permuted copy that converts the type on the way
op_case("permute/f32/twice", {"a": _inp("f32", (2, 3, 5, 7))},
        lambda c, x: c.cont(c.permute(c.permute(x.a, 2, 0, 3, 1), 1, 3, 0, 2)),
        lambda x: oracles.permute(oracles.permute(x.a, 2, 0, 3, 1), 1, 3, 0, 2), exact=True)

# --- transpose ---------------------------------------------------------------------------------------------------------
for _t in ("f32", "f16", "bf16", "i32"):
    op_case(f"transpose/{_t}/odd", {"a": _inp(_t, (7, 5))}, lambda c, x: c.cont(c.transpose(x.a)),
            lambda x: oracles.transpose(x.a), exact=True)
    op_case(f"transpose/{_t}/3d", {"a": _inp(_t, (3, 11, 4))}, lambda c, x: c.cont(c.transpose(x.a)),
            lambda x: oracles.transpose(x.a), exact=True)
op_case("transpose/f32/of_permuted", {"a": _inp("f32", (2, 3, 5, 7))},
        lambda c, x: c.cont(c.transpose(c.permute(x.a, 0, 2, 1, 3))),
        lambda x: oracles.transpose(oracles.permute(x.a, 0, 2, 1, 3)), exact=True)

# --- concat: every dim, four types, contiguous and permuted a -----------------------------------------------------
for _t in ("f32", "f16", "bf16", "i32"):
    for _dim in range(4):
        _sb = [2, 3, 5, 7]
        _sb[3 - _dim] = (1, 2, 4, 3)[_dim]  # b's extent along dim (other extents equal a's)
        op_case(f"concat/{_t}/dim{_dim}_odd", {"a": _inp(_t, (2, 3, 5, 7)), "b": _inp(_t, tuple(_sb))},
                lambda c, x, _d=_dim: c.concat(x.a, x.b, _d), lambda x, _d=_dim: oracles.concat(x.a, x.b, _d),
                exact=True)
        # a is a (dims 0 and 1 swapped) view of its input: NumPy (2, 3, 7, 5) -> (2, 3, 5, 7)
        op_case(f"concat/{_t}/dim{_dim}_a_permuted", {"a": _inp(_t, (2, 3, 7, 5)), "b": _inp(_t, tuple(_sb))},
                lambda c, x, _d=_dim: c.concat(c.permute(x.a, 1, 0, 2, 3), x.b, _d),
                lambda x, _d=_dim: oracles.concat(oracles.permute(x.a, 1, 0, 2, 3), x.b, _d), exact=True)

# --- repeat ------------------------------------------------------------------------------------------------------------
for _t in ("f32", "f16", "bf16", "i32", "i16"):
    op_case(f"repeat/{_t}/odd", {"a": _inp(_t, (1, 3, 1, 5))},
            lambda c, x, _t=_t: c.repeat(x.a, c.new_tensor(_t, [10, 3, 3, 2])),
            lambda x: oracles.repeat(x.a, (10, 3, 3, 2)), exact=True)
    op_case(f"repeat/{_t}/rows", {"a": _inp(_t, (7,))},
            lambda c, x, _t=_t: c.repeat(x.a, c.new_tensor(_t, [7, 5])),
            lambda x: oracles.repeat(x.a, (7, 5)), exact=True)
op_case("repeat/f32/a_permuted", {"a": _inp("f32", (3, 1, 5))},
        lambda c, x: c.repeat(c.permute(x.a, 0, 2, 1, 3), c.new_tensor("f32", [5, 6, 2])),
        lambda x: oracles.repeat(oracles.permute(x.a, 0, 2, 1, 3), (5, 6, 2)), exact=True)
op_case("repeat/f32/same_shape", {"a": _inp("f32", (3, 5))},
        lambda c, x: c.repeat(x.a, c.new_tensor("f32", [5, 3])), lambda x: oracles.repeat(x.a, (5, 3)), exact=True)

# --- pad (the CPU pads F32) ---------------------------------------------------------------------------------------
for _p in ((1, 0, 0, 0), (0, 2, 0, 0), (0, 0, 3, 0), (0, 0, 0, 1), (2, 1, 1, 1), (5, 3, 0, 2)):
    op_case("pad/f32/odd_" + "".join(map(str, _p)), {"a": _inp("f32", (2, 3, 5, 7))},
            lambda c, x, _p=_p: c.pad(x.a, *_p), lambda x, _p=_p: oracles.pad(x.a, *_p), exact=True)
op_case("pad/f32/a_permuted", {"a": _inp("f32", (3, 5, 7))},
        lambda c, x: c.pad(c.permute(x.a, 0, 2, 1, 3), 2, 1, 1), 
        lambda x: oracles.pad(oracles.permute(x.a, 0, 2, 1, 3), 2, 1, 1), exact=True)
op_case("pad/f32/vector", {"a": _inp("f32", (13,))}, lambda c, x: c.pad(x.a, 3, 2),
        lambda x: oracles.pad(x.a, 3, 2), exact=True)

# --- get_rows: four types x layouts (repeated indices; a permuted with whole rows; strided index) -------------------
for _t in ("f32", "f16", "bf16", "i32"):
    op_case(f"get_rows/{_t}/odd", {"a": _inp(_t, (11, 13)), "b": ("i32", (7,), integers(0, 11))},
            lambda c, x: c.get_rows(x.a, x.b), lambda x: oracles.get_rows(x.a, x.b), exact=True)
    op_case(f"get_rows/{_t}/batched_odd", {"a": _inp(_t, (3, 5, 7, 9)), "b": ("i32", (3, 5, 2), integers(0, 7))},
            lambda c, x: c.get_rows(x.a, x.b), lambda x: oracles.get_rows(x.a, x.b), exact=True)
    op_case(f"get_rows/{_t}/a_permuted", {"a": _inp(_t, (7, 3, 5)), "b": ("i32", (3, 4), integers(0, 7))},
            lambda c, x: c.get_rows(c.permute(x.a, 0, 2, 1, 3), x.b),
            lambda x: oracles.get_rows(oracles.permute(x.a, 0, 2, 1, 3), x.b), exact=True)
    op_case(f"get_rows/{_t}/index_transposed", {"a": _inp(_t, (3, 7, 5)), "b": ("i32", (6, 3), integers(0, 7))},
            lambda c, x: c.get_rows(x.a, c.transpose(x.b)), lambda x: oracles.get_rows(x.a, x.b.T), exact=True)
# the index is a gapped view (every other element of its input)
op_case("get_rows/f32/index_strided", {"a": _inp("f32", (9, 5)), "b": ("i32", (10,), integers(0, 9))},
        lambda c, x: c.get_rows(x.a, c.view_nd(x.b, [5, 1, 1, 1], [8, 40, 40, 40], 4)),
        lambda x: oracles.get_rows(x.a, x.b[1::2]), exact=True)

# --- set_rows: destination F32/F16/BF16 x source F32/F16 x index I32/I64, three layouts ------------------------------
_SET_LAYOUTS = {
    # a, b, c (NumPy shapes); c's rows addressed: a's dim 1
    "odd": ((11, 13), (5, 13), (5,)),
    "batched": ((2, 3, 7, 5), (2, 3, 3, 5), (2, 3, 3)),
    "broadcast_index": ((3, 2, 9, 7), (3, 2, 4, 7), (1, 2, 4)),
}
_i = 0
for _ta in _FLOATS:
    for _tb in ("f32", "f16"):
        for _tc in ("i32", "i64"):
            _lay = list(_SET_LAYOUTS)[_i % 3]
            _i += 1
            _sa, _sb, _sc = _SET_LAYOUTS[_lay]
            # bf16 / f16 rows written are the values rounded to the destination type: exact when the
            # oracle rounds b the same way (F16 rounding through NumPy, BF16 nearest-even)
            op_case(f"set_rows/{_ta}/{_tb}_{_tc}_{_lay}",
                    {"a": (_ta, _sa), "b": (_tb, _sb), "c": (_tc, _sc, permutation_rows(_sa[-2]))},
                    lambda c, x: c.set_rows(x.a, x.b, x.c),
                    lambda x, _ta=_ta: oracles.set_rows(x.a, oracles.round_to(x.b, _ta), x.c), exact=True)
# b a permuted view (whole rows), the index transposed (strided), the destination a gapped view of a
op_case("set_rows/f32/b_permuted", {"a": ("f32", (3, 7, 5)), "b": ("f32", (2, 3, 5)),
                                    "c": ("i64", (3, 2), permutation_rows(7))},
        lambda c, x: c.set_rows(x.a, c.permute(x.b, 0, 2, 1, 3), x.c),
        lambda x: oracles.set_rows(x.a, oracles.permute(x.b, 0, 2, 1, 3), x.c), exact=True)
op_case("set_rows/f16/index_transposed", {"a": ("f16", (3, 7, 5)), "b": ("f32", (3, 2, 5)),
                                          "c": ("i32", (2, 3), lambda rng, s: permutation_rows(7)(rng, (3, 2)).T)},
        lambda c, x: c.set_rows(x.a, x.b, c.transpose(x.c)),
        lambda x: oracles.set_rows(x.a, oracles.round_to(x.b, "f16"), x.c.T), exact=True)
op_case("set_rows/f32/dst_view", {"a": ("f32", (9, 12)), "b": ("f32", (3, 8)), "c": ("i64", (3,), permutation_rows(9))},
        lambda c, x: c.cont(c.set_rows(c.view_2d(x.a, 8, 9, 48, 8), x.b, x.c)),
        lambda x: oracles.set_rows(x.a[:, 2:10], x.b, x.c), exact=True)

# --- cpy: every conversion the CPU has, four layouts -----------------------------------------------------------------
_CPY_PAIRS = [(s, d) for s in _FLOATS for d in _FLOATS] + [("f32", "i32"), ("i32", "f32"), ("i32", "i32")]
for _ts, _td in _CPY_PAIRS:
    _name = f"cpy/{_ts}_{_td}"
    _src = (_ts, (5, 7), integers(-100, 100)) if "i32" in (_ts, _td) else (_ts, (5, 7))
    _conv = (lambda v, _td=_td: oracles.round_to(v, _td))
    op_case(f"{_name}/reshaped", {"a": _src, "b": (_td, (7, 5))}, lambda c, x: c.cpy(x.a, x.b),
            lambda x, _f=_conv: _f(x.a).reshape(7, 5), exact=True)
    op_case(f"{_name}/transposed", {"a": _src, "b": (_td, (7, 5))}, lambda c, x: c.cpy(c.transpose(x.a), x.b),
            lambda x, _f=_conv: _f(oracles.transpose(x.a)), exact=True)
    _src3 = (_src[0], (3, 5, 2)) + _src[2:]
    op_case(f"{_name}/permuted", {"a": _src3, "b": (_td, (2, 3, 5))}, lambda c, x: c.cpy(c.permute(x.a, 2, 0, 1, 3), x.b),
            lambda x, _f=_conv: _f(oracles.permute(x.a, 2, 0, 1, 3)), exact=True)
    # the destination is a gapped view: columns 1..5 of a (7, 9) tensor
    op_case(f"{_name}/dst_view", {"a": _src, "b": (_td, (5, 9))},
            lambda c, x: c.cont(c.cpy(x.a, c.view_2d(x.b, 7, 5, x.b.nb[1], x.b.nb[0]))),
            lambda x, _f=_conv: _f(x.a), exact=True)

# --- dup, cont --------------------------------------------------------------------------------------------------------
for _t in ("f32", "f16", "bf16", "i32"):
    op_case(f"dup/{_t}/transposed", {"a": _inp(_t, (5, 7))}, lambda c, x: c.dup(c.transpose(x.a)),
            lambda x: oracles.dup(oracles.transpose(x.a)), exact=True)
    op_case(f"cont/{_t}/permuted", {"a": _inp(_t, (2, 3, 5, 7))}, lambda c, x: c.cont(c.permute(x.a, 3, 1, 0, 2)),
            lambda x: oracles.cont(oracles.permute(x.a, 3, 1, 0, 2)), exact=True)
    op_case(f"cont/{_t}/gapped", {"a": _inp(_t, (5, 9))}, lambda c, x: c.cont(c.view_2d(x.a, 7, 5, x.a.nb[1], x.a.nb[0])),
            lambda x: oracles.cont(x.a[:, 1:8]), exact=True)
op_case("cont/q8_0/rows_of_blocks", {"a": ("q8_0", (3, 5, 64))}, lambda c, x: c.cont(c.permute(x.a, 0, 2, 1, 3)),
        lambda x: oracles.cont(oracles.permute(x.a, 0, 2, 1, 3)), exact=True)

# --- cont_Nd of permuted sources, reshape_Nd (views; read as they are) -------------------------------------------------
_ND = {1: (105,), 2: (15, 7), 3: (5, 7, 3), 4: (7, 5, 1, 3)}
for _n, _ne in _ND.items():
    for _t in ("f32", "bf16", "i32"):
        op_case(f"cont_{_n}d/{_t}/permuted", {"a": _inp(_t, (3, 5, 7))},
                lambda c, x, _n=_n, _ne=_ne: getattr(c, f"cont_{_n}d")(c.permute(x.a, 1, 2, 0, 3), *_ne),
                lambda x, _ne=_ne: oracles.cont_nd(oracles.permute(x.a, 1, 2, 0, 3), _ne), exact=True)
    for _t in ("f32", "f16", "i32"):
        op_case(f"reshape_{_n}d/{_t}/odd", {"a": _inp(_t, (3, 5, 7))},
                lambda c, x, _n=_n, _ne=_ne: getattr(c, f"reshape_{_n}d")(x.a, *_ne),
                lambda x, _ne=_ne: oracles.reshape(x.a, _ne), exact=True)
    op_case(f"reshape_{_n}d/q4_0/blocks", {"a": ("q4_0", (3, 2, 64))},
            lambda c, x, _n=_n: getattr(c, f"reshape_{_n}d")(x.a, *{1: (384,), 2: (64, 6), 3: (64, 3, 2),
                                                                    4: (32, 3, 2, 2)}[_n]),
            lambda x, _n=_n: oracles.reshape(x.a, {1: (384,), 2: (64, 6), 3: (64, 3, 2), 4: (32, 3, 2, 2)}[_n]),
            exact=True)

# --- views of F16 / BF16 / I32 (strided, at an offset, read through cont) ------------------------------------------------
# a NumPy (3, 4, 5, 7): ne = [7, 5, 4, 3], element size s: nb = [s, 7s, 35s, 140s]. The oracle reads the
# host array, whose items are o bytes (BF16 arrives as float32): the same view in its strides
for _t, _s, _o in (("f16", 2, 2), ("bf16", 2, 4), ("i32", 4, 4)):
    _A = {"a": _inp(_t, (3, 4, 5, 7))}
    op_case(f"view_1d/{_t}/offset", _A, lambda c, x, _s=_s: c.cont(c.view_1d(x.a, 23, 9 * _s)),
            lambda x, _o=_o: oracles.view_1d(x.a, 23, 9 * _o), exact=True)
    op_case(f"view_2d/{_t}/gapped", _A, lambda c, x, _s=_s: c.cont(c.view_2d(x.a, 5, 9, 14 * _s, 1 * _s)),
            lambda x, _o=_o: oracles.view_2d(x.a, 5, 9, 14 * _o, 1 * _o), exact=True)
    op_case(f"view_3d/{_t}/gapped", _A,
            lambda c, x, _s=_s: c.cont(c.view_3d(x.a, 3, 5, 3, 7 * _s, 35 * _s, 2 * _s + 35 * _s)),
            lambda x, _o=_o: oracles.view_3d(x.a, 3, 5, 3, 7 * _o, 35 * _o, 2 * _o + 35 * _o), exact=True)
    op_case(f"view_4d/{_t}/gapped", _A,
            lambda c, x, _s=_s: c.cont(c.view_4d(x.a, 5, 2, 3, 2, 14 * _s, 35 * _s, 140 * _s, 1 * _s)),
            lambda x, _o=_o: oracles.view_4d(x.a, 5, 2, 3, 2, 14 * _o, 35 * _o, 140 * _o, 1 * _o), exact=True)
    op_case(f"view_nd/{_t}/stride0", _A,
            lambda c, x, _s=_s: c.cont(c.view_nd(x.a, [3, 5, 4, 3], [2 * _s, 7 * _s, 35 * _s, 140 * _s], _s)),
            lambda x, _o=_o: oracles.view_nd(x.a, [3, 5, 4, 3], [2 * _o, 7 * _o, 35 * _o, 140 * _o], _o), exact=True)
# every view op on a view: a 2-d view of a transposed 3-d view's copy
op_case("view_2d/f32/of_view", {"a": _inp("f32", (5, 11))},
        lambda c, x: c.cont(c.view_2d(c.view_2d(x.a, 9, 5, 44, 4), 4, 3, 44, 8)),
        lambda x: x.a[:3, 3:7], exact=True)

# --- view_tensor: a view of the whole tensor, strides and all ---------------------------------------------------------
for _t in ("f32", "f16", "i32"):
    op_case(f"view_tensor/{_t}/of_transposed", {"a": _inp(_t, (5, 7))},
            lambda c, x: c.cont(c.view_tensor(c.transpose(x.a))), lambda x: oracles.transpose(x.a), exact=True)
op_case("view_tensor/q4_0/rows", {"a": ("q4_0", (3, 64))}, lambda c, x: c.view_tensor(x.a), lambda x: x.a, exact=True)
