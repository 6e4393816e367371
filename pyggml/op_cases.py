"""One or more oracle cases for every op of pyggml.ops."""

from __future__ import annotations

from pyggml import oracles
from pyggml.cases import op_case

op_case("add/f32", {"a": ("f32", (2, 3, 8)), "b": ("f32", (2, 3, 8))},
        lambda c, x: c.add(x.a, x.b), lambda x: oracles.add(x.a, x.b), op="add")
op_case("add/f32/broadcast", {"a": ("f32", (2, 3, 8)), "b": ("f32", (1, 3, 8))},
        lambda c, x: c.add(x.a, x.b), lambda x: oracles.add(x.a, x.b), op="add")
