"""The fuzzer's shape hints: how an op's tensor arguments are drawn so that most random calls build.

Each op spec names its hints (`hints={param: fn}` in opdb/<family>.py); a hint gets the fuzzer's
generator `g` (pyggml.testing.fuzzers.fuzz.Gen) and returns the name of the tensor variable it made. A hint that
needs an earlier argument which was not a tensor raises KeyError: the fuzzer then draws that argument
freely. These are the shared helpers.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from pyggml.testing.fuzzers.fuzz import Gen

Hint = Callable[["Gen"], str]
SMALL = [1, 1, 2, 2, 3, 4, 5, 7, 8, 16]  # sizes the fuzzer draws dims from


def like(g: Gen, var: str, type_name: str | None = None, **dims: int) -> str:
    """A new tensor shaped like variable `var` (its type unless given), with dims ne<i>=v changed."""
    t = g.s[var]
    ne = list(t.ne)
    for k, v in dims.items():
        ne[int(k[2])] = v
    return g.new_tensor(type_name or t.type.name, ne)


def chosen(g: Gen, param: str) -> Any:
    return g.s[g.chosen[param]]  # KeyError when that argument was not a tensor: no hint then


def index(g: Gen, ne: list[int], limit: int, type_name: str = "I32", distinct: bool = False) -> str:
    """An index tensor whose values the fuzzer keeps below `limit` (and distinct if asked)."""
    var = g.new_tensor(type_name, ne)
    g.limit[var] = limit
    if distinct:
        g.distinct.add(var)
    return var


def same_or_row(g: Gen) -> str:
    """A binary op's b: a's shape, or one row of it (broadcast)."""
    return like(g, g.chosen["a"], "F32", ne1=1) if g.chance(0.3) else like(g, g.chosen["a"])


def mul_mat_a(g: Gen) -> str:
    type_name = g.rng.choice(["F32"] * 4 + ["F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q6_K", "IQ4_NL", "Q8_K"])
    return g.new_tensor(type_name, g.rand_ne(type_name))


def mul_mat_b(g: Gen) -> str:
    a = chosen(g, "a")
    return g.new_tensor("F32", [a.ne[0], g.rng.choice(SMALL), a.ne[2] * g.rng.choice([1, 1, 2]), a.ne[3]])


def get_rows_a(g: Gen) -> str:
    type_name = g.rng.choice(["F32"] * 4 + ["F16", "BF16", "I32", "Q8_0", "Q4_0", "Q4_K"])
    return g.new_tensor(type_name, g.rand_ne(type_name)[:3] + [1])


def get_rows_b(g: Gen) -> str:
    a = chosen(g, "a")
    return index(g, [g.rng.choice(SMALL), a.ne[2], a.ne[3], 1], a.ne[1])


def set_rows_a(g: Gen) -> str:
    type_name = g.rng.choice(["F32"] * 4 + ["F16", "BF16", "Q8_0", "Q4_0"])
    return g.new_tensor(type_name, g.rand_ne(type_name)[:3] + [1])


def set_rows_b(g: Gen) -> str:
    a = chosen(g, "a")
    return g.new_tensor(
        g.rng.choice(["F32", "F32", "F16"]), [a.ne[0], g.rng.randint(1, max(1, a.ne[1])), a.ne[2], a.ne[3]]
    )


def set_rows_c(g: Gen) -> str:
    a, b = chosen(g, "a"), chosen(g, "b")
    return index(g, [b.ne[1], 1, 1, 1], a.ne[1], g.rng.choice(["I32", "I64"]), distinct=True)


def rope_a(g: Gen) -> str:
    return g.new_tensor(
        g.rng.choice(["F32", "F32", "F16"]), [g.rng.choice([2, 4, 8]), g.rng.choice(SMALL), g.rng.choice(SMALL), 1]
    )


def rope_pos(g: Gen) -> str:
    return index(g, [chosen(g, "a").ne[2], 1, 1, 1], 64)


def rope_freq_factors(g: Gen) -> str:
    return g.new_tensor("F32", [max(1, chosen(g, "a").ne[0] // 2), 1, 1, 1])


def soft_max_mask(g: Gen) -> str:
    return like(g, g.chosen["a"], g.rng.choice(["F32", "F16"]), ne2=1, ne3=1)


def ssm_conv_sx(g: Gen) -> str:
    return g.new_tensor("F32", [g.rng.choice([3, 4, 6]), g.rng.choice(SMALL), g.rng.choice([1, 2]), 1])


def ssm_conv_c(g: Gen) -> str:
    return g.new_tensor("F32", [g.rng.choice([2, 3, 4]), chosen(g, "sx").ne[1], 1, 1])


def same_as_a(g: Gen) -> str:
    return like(g, g.chosen["a"])


def twice_ne1_of_a(g: Gen) -> str:
    return like(g, g.chosen["a"], ne1=chosen(g, "a").ne[1] * 2)


def cpy_b(g: Gen) -> str:
    return like(g, g.chosen["a"], g.rng.choice(["F32", "F16", "BF16", "Q8_0"]))


def reshape_b(g: Gen) -> str:
    return g.new_tensor("F32", [chosen(g, "a").nelements, 1, 1, 1])


# --- recurrent ops: tokens [S, H, n_tokens, 1], states sized to match -------------------------------
def first_token(g: Gen) -> str:
    g.n_seqs = g.rng.choice([1, 2, 3])
    return g.new_tensor(
        "F32", [g.rng.choice([1, 3, 4, 5, 8, 64]), g.rng.choice([1, 2, 3]), g.n_seqs * g.rng.choice([1, 2, 4]), 1]
    )


def like_token(g: Gen, first: str) -> str:
    return g.new_tensor("F32", list(chosen(g, first).ne[:3]) + [1])


def time_first(g: Gen, first: str) -> str:
    return g.new_tensor("F32", list(chosen(g, first).ne[:2]) + [1, 1])


def wkv_state(g: Gen, first: str) -> str:
    k = chosen(g, first)
    return g.new_tensor("F32", [k.ne[0] * k.ne[0] * k.ne[1], getattr(g, "n_seqs", 1), 1, 1])


def token_ops(names: list[str]) -> dict[str, Hint]:
    """rwkv_wkv6 / gated_linear_attn / rwkv_wkv7: the first tensor sets the tokens, the rest follow it."""
    out: dict[str, Hint] = {names[0]: first_token}
    for n in names[1:]:
        helper = {"state": wkv_state, "tf": time_first}.get(n, like_token)
        out[n] = partial(helper, first=names[0])
    return out


SOLVE_TRI: dict[str, Hint] = {
    "a": lambda g: g.new_tensor("F32", [(n := g.rng.choice([1, 2, 3, 5, 8])), n, g.rng.choice([1, 2]), 1]),
    "b": lambda g: g.new_tensor("F32", [g.rng.choice([1, 2, 5])] + list(chosen(g, "a").ne[1:])),
}
GATED_DELTA_NET: dict[str, Hint] = {
    "q": lambda g: g.new_tensor(
        "F32", [g.rng.choice([1, 2, 4, 5, 16]), g.rng.choice([1, 2]), g.rng.choice([1, 2, 3, 5]), 1]
    ),
    "k": lambda g: g.new_tensor("F32", list(chosen(g, "q").ne)),
    "v": lambda g: g.new_tensor(
        "F32",
        [chosen(g, "q").ne[0], chosen(g, "q").ne[1] * g.rng.choice([1, 2]), chosen(g, "q").ne[2], g.rng.choice([1, 2])],
    ),
    "g": lambda g: g.new_tensor("F32", [g.rng.choice([1, chosen(g, "v").ne[0]])] + list(chosen(g, "v").ne[1:])),
    "beta": lambda g: g.new_tensor("F32", [1] + list(chosen(g, "v").ne[1:])),
    "state": lambda g: g.new_tensor(
        "F32", [chosen(g, "v").ne[0], chosen(g, "v").ne[0], chosen(g, "v").ne[1], chosen(g, "v").ne[3]]
    ),
}


def _scan_state(g: Gen) -> str:
    g.scan = dict(
        ds=g.rng.choice([1, 4, 5, 16]),
        hd=g.rng.choice([1, 2, 3]),
        nh=g.rng.choice([1, 2, 4]),
        nt=g.rng.choice([1, 2, 3, 5]),
        ns=g.rng.choice([1, 2]),
    )
    d = g.scan
    return g.new_tensor("F32", [d["ds"], d["hd"], d["nh"], d["ns"] + g.rng.choice([0, 1])])


def _scan(g: Gen) -> dict:
    if not hasattr(g, "scan"):
        raise KeyError("s")
    return g.scan


SSM_SCAN: dict[str, Hint] = {
    "s": _scan_state,
    "x": lambda g: g.new_tensor("F32", [_scan(g)["hd"], _scan(g)["nh"], _scan(g)["nt"], _scan(g)["ns"]]),
    "dt": lambda g: g.new_tensor("F32", [_scan(g)["nh"], _scan(g)["nt"], _scan(g)["ns"], 1]),
    "A": lambda g: g.new_tensor("F32", [g.rng.choice([1, _scan(g)["ds"]]), _scan(g)["nh"], 1, 1]),
    "B": lambda g: g.new_tensor(
        "F32", [_scan(g)["ds"], g.rng.choice([1, _scan(g)["nh"]]), _scan(g)["nt"], _scan(g)["ns"]]
    ),
    "C": lambda g: g.new_tensor("F32", list(chosen(g, "B").ne)),
    "ids": lambda g: index(g, [_scan(g)["ns"], 1, 1, 1], chosen(g, "s").ne[3], distinct=True),
}
