"""NumPy oracles: each op written from its definition in ggml.h, never by calling ggml.

Arrays are in NumPy order (ggml's ne reversed): ggml dim d is NumPy axis -1-d. Every oracle
takes and returns plain arrays; arguments that mirror a C function keep the C meaning
(ggml dims, ggml-order shapes `ne`, byte strides `nb`, byte offsets).
"""

from pyggml.testing.engine.oracles import (
    attention,
    convolution,
    elementwise,
    matmul,
    movement,
    recurrent,
    reductions,
    training,
)
from pyggml.testing.engine.oracles._common import broadcast_to  # noqa: F401

FAMILIES = {
    m.__name__.rsplit(".", 1)[1]: m
    for m in (elementwise, reductions, matmul, attention, recurrent, convolution, movement, training)
}

# every oracle by its op's name: oracles.add, oracles.mul_mat, ... (a family module has no __all__ to keep in step
# with the wrappers': what it defines is what it exports, and the names it imports are dropped below)
from pyggml.testing.engine.oracles.attention import *  # noqa: E402,F403
from pyggml.testing.engine.oracles.convolution import *  # noqa: E402,F403
from pyggml.testing.engine.oracles.elementwise import *  # noqa: E402,F403
from pyggml.testing.engine.oracles.matmul import *  # noqa: E402,F403
from pyggml.testing.engine.oracles.movement import *  # noqa: E402,F403
from pyggml.testing.engine.oracles.recurrent import *  # noqa: E402,F403
from pyggml.testing.engine.oracles.reductions import *  # noqa: E402,F403
from pyggml.testing.engine.oracles.training import *  # noqa: E402,F403

for _name in [n for n, v in globals().items() if not n.startswith("_") and n not in ("FAMILIES", "broadcast_to")]:
    _value = globals()[_name]
    if (
        not (callable(_value) and getattr(_value, "__module__", "").startswith(__name__ + "."))
        and _name not in FAMILIES
    ):
        del globals()[_name]  # np, math, ArrayLike, ...: imported by a family, not an oracle
