"""Optimizers that own their state, built on ggml's own steps (`ggml_opt_step_adamw`, `ggml_opt_step_sgd`).

A training loop in Python, as ggml trains (ggml-opt builds the same graph):

    runner = gg.Runner("cpu")
    wctx = gg.Context()
    w = wctx.tensor("f32", (3, 2), "w")
    runner.backend.alloc_tensors(wctx)          # parameters keep their values between runs
    w.set(w0)
    w.set_param()                               # trainable
    opt = optim.AdamW([w], lr=1e-2)             # its moments: a buffer of their own, beside w

    ctx = gg.Context()
    x = ctx.tensor("f32", (8, 2), "x", input=True)
    y = ctx.tensor("f32", (8, 3), "y", input=True)
    loss = ctx.cross_entropy_loss(ctx.mul_mat(w, x), y).set_loss()
    graph = gg.Graph.with_grads(ctx).build_forward_expand(loss).build_backward_expand()
    opt.build_step(graph)                       # one opt_step node per parameter, after the backward pass
    for X, Y in batches:
        print(runner.run(graph, {x: X, y: Y}, loss))   # forward, backward and one step

Each compute of the graph is one step: the runner writes the loss's gradient seed (1) and the optimizer's
hyper-parameters (AdamW's bias corrections for step `step_count + 1`) before it, and the optimizer counts the
step after it. The parameters are updated in place, on the device that holds them.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable
from typing import Any

import numpy as np

from pyggml import lifetime
from pyggml._native import cstr, ffi, lib
from pyggml.backend import Buffer
from pyggml.context import Context
from pyggml.graph import Graph
from pyggml.target import Buffer as BufferName  # a meta device is named as its buffers: Meta(DEV,DEV)
from pyggml.tensor import Tensor

__all__ = ["AdamW", "Optimizer", "SGD"]


def _number(what: str, value: object, lo: float, hi: float, lo_open: bool = False, hi_open: bool = False) -> float:
    """A real number in [lo, hi] (an open end where asked), else TypeError or ValueError naming `what`."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{what} must be a number, got {type(value).__name__}")
    v = float(value)
    low_ok = v > lo if lo_open else v >= lo
    high_ok = v < hi if hi_open else v <= hi
    if not math.isfinite(v) or not low_ok or not high_ok:
        interval = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        raise ValueError(f"{what} must be a finite number in {interval}, got {value!r}")
    return v


class Optimizer:
    """What AdamW and SGD share: the parameters, their state in a buffer of its own, the step count.

    Not made directly: use `AdamW` or `SGD`.

    Args:
        params: the trainable parameters: Tensors flagged with `Tensor.set_param`, F32, with memory of their
            own (`runner.backend.alloc_tensors(ctx)`), not graph inputs; one Tensor or an iterable of them.
        lr: the learning rate, > 0.
        weight_decay: the decoupled weight decay, 0 to 1 (each step multiplies a parameter by 1 - lr * wd).

    Attributes:
        params: the parameters, in the order given.

    Raises:
        TypeError: a parameter that is not a Tensor; hyper-parameters that are not numbers.
        ValueError: no parameters, one given twice, one not flagged with set_param, an input, one without
            memory of its own (lent by a graph allocator, or none yet) or on a meta device; hyper-parameters
            out of range.
    """

    _name = "optimizer"
    _moments = 0  # state tensors per parameter

    def __init__(self, params: Tensor | Iterable[Tensor], lr: float, weight_decay: float) -> None:
        self.params = _params(type(self).__name__, params)
        self.lr = lr
        self.weight_decay = weight_decay
        self._step_count = 0
        self._graphs: weakref.WeakSet[Graph] = weakref.WeakSet()
        # the state: one Context per buffer type the parameters live in, its tensors in a buffer of that type
        self._state: dict[int, list[Tensor]] = {}
        self._buffers: list[Buffer] = []
        by_type: dict[Any, list[Tensor]] = {}
        for p in self.params:
            by_type.setdefault(lib.ggml_backend_buffer_get_type(lifetime.memory_buffer(p.ptr)), []).append(p)
        for buft, group in by_type.items():
            if not self._moments:
                continue
            ctx = Context(n_tensors=self._moments * len(group) + 1)
            for p in group:
                label = (p.name or "param")[:40]
                self._state[id(p)] = [
                    ctx.tensor("f32", p.shape, f"{self._name} {k} for {label}") for k in "mv"[: self._moments]
                ]
            ptr = lib.ggml_backend_alloc_ctx_tensors_from_buft(ctx.ptr, buft)
            if ptr == ffi.NULL:
                raise MemoryError(f"{type(self).__name__}: no memory for the state of {len(group)} parameters")
            buf = Buffer(ptr, ctx)
            ctx.keep_alive(buf)
            self._buffers.append(buf)
        self.reset()

    # --- hyper-parameters ---------------------------------------------------------------------------
    @property
    def lr(self) -> float:
        """The learning rate (ggml's alpha), > 0; settable between steps (a schedule), read at every compute."""
        return self._lr

    @lr.setter
    def lr(self, value: float) -> None:
        self._lr = _number(f"{type(self).__name__}: lr", value, 0.0, math.inf, lo_open=True, hi_open=True)

    @property
    def weight_decay(self) -> float:
        """The decoupled weight decay (ggml's wd), 0 to 1: each step multiplies a parameter by 1 - lr * wd; settable."""
        return self._wd

    @weight_decay.setter
    def weight_decay(self, value: float) -> None:
        self._wd = _number(f"{type(self).__name__}: weight_decay", value, 0.0, 1.0)

    @property
    def step_count(self) -> int:
        """How many steps were computed (a compute of a graph holding this optimizer's steps that succeeded)."""
        return self._step_count

    def hyperparameters(self) -> np.ndarray:
        """The values ggml's step op reads at the next step (its `adamw_params` or `sgd_params` tensor).

        Returns:
            An F32 array: AdamW's 7 values or SGD's 2 (see each class).
        """
        raise NotImplementedError

    # --- state ----------------------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget the steps: the moments back to 0 and `step_count` to 0 (the parameters keep their values)."""
        for buf in self._buffers:
            lib.ggml_backend_buffer_clear(buf.ptr, 0)
        self._step_count = 0

    def build_step(self, graph: Graph) -> Graph:
        """Add one step node per parameter (ggml's opt_step op) to a graph that holds the backward pass.

        The steps come after every other node, so that each run computes the loss, the gradients, then
        updates the parameters in place. Their hyper-parameters are an input of the graph that a Runner fills
        at every compute (`hyperparameters()`); the optimizer counts each compute that succeeds.

        Args:
            graph: a graph made by `Graph.with_grads`, after `build_backward_expand`, in which every parameter
                of this optimizer has a gradient.

        Returns:
            The graph, for chaining.

        Raises:
            TypeError: `graph` is not a Graph.
            ValueError: a graph without its backward pass, a parameter without a gradient in it (the loss does
                not depend on it, or it was flagged after build_forward_expand), a graph holding this
                optimizer's steps already, or a graph that is full (the size to ask for named).
        """
        if not isinstance(graph, Graph):
            raise TypeError(f"build_step: expected a Graph, got {type(graph).__name__}")
        if not graph.has_backward:
            raise ValueError(
                "build_step: the graph has no backward pass: make it with Graph.with_grads(ctx), "
                "build_forward_expand(loss), then build_backward_expand()"
            )
        if graph in self._graphs:
            raise ValueError("build_step: the graph holds this optimizer's steps already")
        grads = []
        for p in self.params:
            g = graph.grad(p)
            if g is None:
                raise ValueError(
                    f"build_step: parameter {p.name or '(unnamed)'} has no gradient in this graph: the loss does "
                    "not depend on it, or it was flagged with set_param after build_forward_expand"
                )
            grads.append(g)
        hp = graph.ctx.tensor("f32", (len(self.hyperparameters()),), f"{self._name} params", input=True)
        for p, g in zip(self.params, grads):
            step = self._step_node(graph.ctx, p, g, hp)
            step.name = f"{self._name} step for {(p.name or 'param')[:40]}"
            graph.build_forward_expand(step)
        graph._feeds.append((hp, self.hyperparameters))
        graph._after_compute.append(self._stepped)
        self._graphs.add(graph)
        return graph

    def _step_node(self, ctx: Context, p: Tensor, g: Tensor, hp: Tensor) -> Tensor:
        raise NotImplementedError

    def _stepped(self) -> None:
        self._step_count += 1

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {len(self.params)} params lr={self.lr:g} steps={self.step_count}>"


class AdamW(Optimizer):
    """AdamW (decoupled weight decay, Loshchilov and Hutter), as ggml computes it (`ggml_opt_step_adamw`).

    At step t, for each parameter w with gradient g: m = beta1*m + (1-beta1)*g, v = beta2*v + (1-beta2)*g**2,
    w = w*(1 - lr*wd) - lr * (m/(1 - beta1**t)) / (sqrt(v/(1 - beta2**t)) + eps). The moments m and v live
    in a buffer of the optimizer's own, of the parameters' buffer type (on their device), and start at 0.
    The defaults are ggml-opt's.

    Args:
        params: the trainable parameters (see `Optimizer`).
        lr: the learning rate (alpha), > 0.
        beta1: the first moment's decay, 0 <= beta1 < 1.
        beta2: the second moment's decay, 0 <= beta2 < 1.
        eps: added to the root of the second moment, >= 0.
        weight_decay: decoupled weight decay (wd), 0 to 1.

    Raises:
        TypeError: see `Optimizer`.
        ValueError: see `Optimizer`; hyper-parameters out of their ranges.
    """

    _name = "AdamW"
    _moments = 2

    def __init__(
        self,
        params: Tensor | Iterable[Tensor],
        lr: float = 1e-3,
        beta1: float = 0.9,
        beta2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        self.beta1 = _number("AdamW: beta1", beta1, 0.0, 1.0, hi_open=True)
        self.beta2 = _number("AdamW: beta2", beta2, 0.0, 1.0, hi_open=True)
        self.eps = _number("AdamW: eps", eps, 0.0, math.inf, hi_open=True)
        super().__init__(params, lr, weight_decay)

    def hyperparameters(self) -> np.ndarray:
        """ggml's 7 AdamW values for the next step, t = step_count + 1.

        Returns:
            F32 [lr, beta1, beta2, eps, weight_decay, 1/(1 - beta1**t), 1/(1 - beta2**t)], as ggml-opt fills them.
        """
        t = self.step_count + 1
        return np.array(
            [
                self.lr,
                self.beta1,
                self.beta2,
                self.eps,
                self.weight_decay,
                1.0 / (1.0 - self.beta1**t),
                1.0 / (1.0 - self.beta2**t),
            ],
            dtype=np.float32,
        )

    def moments(self, param: Tensor) -> tuple[Tensor, Tensor]:
        """A parameter's first and second moments, m and v (tensors in the optimizer's buffer: `.numpy()`).

        Args:
            param: one of the optimizer's parameters.

        Returns:
            (m, v), each of the parameter's shape.

        Raises:
            ValueError: `param` is not one of this optimizer's parameters.
        """
        if not isinstance(param, Tensor) or id(param) not in self._state:
            for p in self.params:
                if isinstance(param, Tensor) and p == param:
                    param = p
                    break
            else:
                raise ValueError("moments: not a parameter of this optimizer")
        m, v = self._state[id(param)]
        return m, v

    def _step_node(self, ctx: Context, p: Tensor, g: Tensor, hp: Tensor) -> Tensor:
        m, v = self._state[id(p)]
        return ctx.opt_step_adamw(p, g, m, v, hp)


class SGD(Optimizer):
    """Stochastic gradient descent with decoupled weight decay, as ggml computes it (`ggml_opt_step_sgd`).

    At each step, for each parameter w with gradient g: w = w*(1 - lr*wd) - lr*g. No state but the step
    count. The defaults are ggml-opt's.

    Args:
        params: the trainable parameters (see `Optimizer`).
        lr: the learning rate (alpha), > 0.
        weight_decay: decoupled weight decay (wd), 0 to 1.

    Raises:
        TypeError: see `Optimizer`.
        ValueError: see `Optimizer`; hyper-parameters out of their ranges.
    """

    _name = "SGD"

    def __init__(self, params: Tensor | Iterable[Tensor], lr: float = 1e-3, weight_decay: float = 0.0) -> None:
        super().__init__(params, lr, weight_decay)

    def hyperparameters(self) -> np.ndarray:
        """ggml's 2 SGD values.

        Returns:
            F32 [lr, weight_decay].
        """
        return np.array([self.lr, self.weight_decay], dtype=np.float32)

    def _step_node(self, ctx: Context, p: Tensor, g: Tensor, hp: Tensor) -> Tensor:
        return ctx.opt_step_sgd(p, g, hp)


def _params(who: str, params: object) -> list[Tensor]:
    """The optimizer's parameters, checked (see `Optimizer`)."""
    if isinstance(params, Tensor):
        params = [params]
    if isinstance(params, (str, bytes)) or not isinstance(params, Iterable):
        raise TypeError(f"{who}: params must be a Tensor or an iterable of Tensors, got {type(params).__name__}")
    out: list[Tensor] = []
    for p in params:
        if not isinstance(p, Tensor):
            raise TypeError(f"{who}: params must be Tensors, got {type(p).__name__}")
        name = p.name or "(unnamed)"
        if p in out:
            raise ValueError(f"{who}: parameter {name} is given twice")
        if not p.is_param:
            raise ValueError(f"{who}: {name} is not a trainable parameter: flag it with {name}.set_param() first")
        if p.is_input:
            raise ValueError(
                f"{who}: parameter {name} is a graph input, whose values each run gives anew: an optimizer "
                "updates it in place, so give it memory of its own (runner.backend.alloc_tensors(ctx))"
            )
        if not p.is_allocated or lifetime.is_lent(p.ptr) or lifetime.memory_buffer(p.ptr) == ffi.NULL:
            raise ValueError(
                f"{who}: parameter {name} has no memory of its own: allocate its context on the runner's "
                "device first (runner.backend.alloc_tensors(ctx)) and write its initial values"
            )
        buft = lib.ggml_backend_buffer_get_type(lifetime.memory_buffer(p.ptr))
        dev = lib.ggml_backend_buft_get_device(buft)
        if dev != ffi.NULL and BufferName.parse(cstr(lib.ggml_backend_dev_name(dev))).family == "meta":
            raise ValueError(
                f"{who}: parameter {name} lives on a meta device: its optimizer state would not be split as it "
                "is; train on one device (Runner('cpu'), Runner('vulkan0'))"
            )
        out.append(p)
    if not out:
        raise ValueError(f"{who}: no parameters: give the tensors to train (flagged with set_param)")
    return out
