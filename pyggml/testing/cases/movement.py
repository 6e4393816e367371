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

for _axes in ((1, 0, 2, 3), (2, 0, 1, 3), (0, 2, 1, 3), (3, 2, 1, 0), (1, 3, 0, 2)):
    op_case("permute/f32/" + "".join(map(str, _axes)), {"a": ("f32", (2, 3, 4, 5))},
            lambda c, x, _a=_axes: c.cont(c.permute(x.a, *_a)), lambda x, _a=_axes: oracles.permute(x.a, *_a))
op_case("permute/f16/2013", {"a": ("f16", (2, 3, 4, 5))}, lambda c, x: c.cont(c.permute(x.a, 2, 0, 1, 3)),
        lambda x: oracles.permute(x.a, 2, 0, 1, 3))
op_case("transpose/f32", {"a": ("f32", (2, 3, 7))}, lambda c, x: c.cont(c.transpose(x.a)),
        lambda x: oracles.transpose(x.a))
op_case("transpose/f16", {"a": ("f16", (6, 7))}, lambda c, x: c.cont(c.transpose(x.a)),
        lambda x: oracles.transpose(x.a))

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


