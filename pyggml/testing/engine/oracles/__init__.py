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

# every oracle by its op's name (each family's __all__): oracles.add, oracles.mul_mat, ...
from pyggml.testing.engine.oracles.attention import *  # noqa: E402,F403
from pyggml.testing.engine.oracles.convolution import *  # noqa: E402,F403
from pyggml.testing.engine.oracles.elementwise import *  # noqa: E402,F403
from pyggml.testing.engine.oracles.matmul import *  # noqa: E402,F403
from pyggml.testing.engine.oracles.movement import *  # noqa: E402,F403
from pyggml.testing.engine.oracles.recurrent import *  # noqa: E402,F403
from pyggml.testing.engine.oracles.reductions import *  # noqa: E402,F403
from pyggml.testing.engine.oracles.training import *  # noqa: E402,F403
