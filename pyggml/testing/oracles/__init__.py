"""NumPy oracles: each op written from its definition in ggml.h, never by calling ggml.

Arrays are in NumPy order (ggml's ne reversed): ggml dim d is NumPy axis -1-d. Every oracle
takes and returns plain arrays; arguments that mirror a C function keep the C meaning
(ggml dims, ggml-order shapes `ne`, byte strides `nb`, byte offsets).
"""


from pyggml.testing.oracles import (
    attention,
    convolution,
    elementwise,
    matmul,
    movement,
    recurrent,
    reductions,
    training,
)
from pyggml.testing.oracles._common import broadcast_to  # noqa: F401

FAMILIES = {m.__name__.rsplit(".", 1)[1]: m for m in
            (elementwise, reductions, matmul, attention, recurrent, convolution, movement, training)}

# every oracle by its op's name: oracles.add, oracles.mul_mat, ...
for _module in FAMILIES.values():
    globals().update({_n: _v for _n, _v in vars(_module).items()
                      if not _n.startswith("_") and callable(_v) and getattr(_v, "__module__", None) == _module.__name__})
del _module
