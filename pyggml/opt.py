"""Training with ggml's own optimizer library, ggml-opt (`ggml_opt_*`), as ggml's examples/mnist trains.

A `Dataset` holds the data and labels (`ggml_opt_dataset`, in host memory); a `Model` is a forward pass built
in Python, an input tensor and an output tensor (the logits, for a classifier), whose weights are flagged as
trainable parameters and live in memory of their own on the runner's device. `Model.fit` trains it for some
epochs in logical batches (one optimizer step each, AdamW or SGD, ggml's `opt_step_adamw`/`opt_step_sgd`),
computed as physical batches (the input tensor's batch: gradient accumulation when smaller), with a share of
the data kept for validation, and returns each epoch's training and validation loss and accuracy (`History`)::

    pctx = gg.Context()                                   # weights and the input batch: memory of their own
    w = pctx.tensor("f32", (10, 64), "w")
    x = pctx.tensor("f32", (32, 64), "x")                 # (physical batch, features)
    runner.backend.alloc_tensors(pctx)
    w.set(np.random.default_rng(0).normal(0, 0.1, (10, 64)))
    ctx = gg.Context()                                    # the forward pass: no memory, ggml-opt allocates it
    logits = ctx.mul_mat(w, x)                            # (32, 10)
    model = opt.Model(runner, x, logits, params=[w])      # loss="cross_entropy" by default
    history = model.fit(opt.Dataset(X, opt.one_hot(y, 10)), epochs=5, batch=128, val_split=0.1)

ggml-opt builds the loss, the backward pass and the optimizer steps itself, in graphs of at most
`GRAPH_SIZE` nodes, and computes them with a ggml scheduler over the runner's backends. Everything ggml-opt
asserts is checked here first (shapes, types, batch sizes that divide, memory each tensor must or must not
have, the optimizer's hyper-parameters): a wrong argument raises ValueError or TypeError naming it. The epoch
loop is ggml_opt_fit's (ggml-opt.cpp), run from Python one physical batch at a time: the same shuffles (ggml's
own random generator, seeded as ggml seeds it), the same split, the same steps; a progress callback is an
ordinary Python call between two batches, so what it raises propagates at once.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np

from pyggml import lifetime, preflight
from pyggml._args import instance, integer, text
from pyggml._native import ffi, lib
from pyggml._pyggml_cffi import lib as real_lib
from pyggml.backend import Scheduler, auto_threads
from pyggml.context import Context
from pyggml.errors import GGMLError, Unsupported
from pyggml.graph import Graph
from pyggml.runner import Runner
from pyggml.tensor import Tensor
from pyggml.types import as_type

__all__ = [
    "GRAPH_SIZE",
    "LOSSES",
    "OPTIMIZERS",
    "Dataset",
    "Evaluation",
    "History",
    "Model",
    "Progress",
    "fit",
    "one_hot",
]

GRAPH_SIZE = lib.GGML_DEFAULT_GRAPH_SIZE  # ggml-opt makes its graphs this size: forward, backward and steps fit in it

LOSSES = {
    "cross_entropy": lib.GGML_OPT_LOSS_TYPE_CROSS_ENTROPY,
    "mse": lib.GGML_OPT_LOSS_TYPE_MEAN_SQUARED_ERROR,
    "mean": lib.GGML_OPT_LOSS_TYPE_MEAN,
    "sum": lib.GGML_OPT_LOSS_TYPE_SUM,
}
_NEEDS_LABELS = {"cross_entropy", "mse"}

OPTIMIZERS = {"adamw": lib.GGML_OPT_OPTIMIZER_TYPE_ADAMW, "sgd": lib.GGML_OPT_OPTIMIZER_TYPE_SGD}

_NULL = ffi.NULL
_MAX_ROWS = 2**40  # datapoints of a dataset: far beyond host memory, well inside ggml's int64 sizes
_SCHED_SIZE = 4 * GRAPH_SIZE  # nodes and leafs of ggml-opt's graphs (each at most GRAPH_SIZE), and the copies


def _name(t: Tensor) -> str:
    return t.name or "(unnamed)"


def one_hot(classes: Any, n_classes: int) -> np.ndarray:
    """Class indices as one-hot rows, the labels a cross-entropy loss compares the outputs with.

    Args:
        classes: a 1-d array of whole numbers in 0..n_classes-1.
        n_classes: the number of classes (the outputs' width), at least 1.

    Returns:
        A float32 array of shape `(len(classes), n_classes)`, 1 at each row's class and 0 elsewhere.

    Raises:
        ValueError: classes that are not 1-d, not whole numbers, or outside 0..n_classes-1.
        TypeError: classes that are not numbers; `n_classes` not an integer.
    """
    n_classes = integer("one_hot: n_classes", n_classes, 1, 2**31 - 1)
    c = np.asarray(classes)
    if c.dtype.kind not in "biuf":
        raise TypeError(f"one_hot: classes must be numbers, got dtype {c.dtype}")
    if c.ndim != 1:
        raise ValueError(f"one_hot: classes must be 1-d (one class per datapoint), got shape {c.shape}")
    if c.size and (not np.all(np.isfinite(c)) or np.any(c != np.trunc(c))):
        raise ValueError("one_hot: classes must be whole numbers")
    if c.size and (c.min() < 0 or c.max() >= n_classes):
        raise ValueError(f"one_hot: classes must be in 0..{n_classes - 1}, got {c.min()}..{c.max()}")
    out = np.zeros((c.size, n_classes), dtype=np.float32)
    out[np.arange(c.size), c.astype(np.int64)] = 1.0
    return out


# --- datasets ----------------------------------------------------------------------------------------------------
class Dataset:
    """Datapoints and their labels in host memory, as ggml-opt reads them (`ggml_opt_dataset_init`).

    Each datapoint is one row of `data` (its other axes flattened, in NumPy's C order, into the `ne_datapoint`
    values an input column holds); each label one row of `labels`. The values are converted to the dataset's
    type by `Tensor.set`'s rules (exactly, or rounded to a float type's precision; whole numbers in range for an
    integer type), and refused otherwise. ggml-opt shuffles a dataset in shards of `shard_size` datapoints: a
    fit shuffles its order (ggml's permutation; `data()` and `labels()` read the stored rows, which do not move).

    Args:
        data: an array of shape `(ndata, ...)`: ndata datapoints, each of one or more values.
        labels: an array of shape `(ndata, ne_label)` (one-hot rows for a cross-entropy loss: `one_hot`), or of
            shape `(ndata,)` for one value each; None for a loss without labels ('mean', 'sum').
        shard_size: the datapoints ggml-opt shuffles and copies as one unit; it must divide ndata (and later
            each physical batch).
        type: the type of the stored data, which must be the model's input type: 'f32' (the default), 'f16',
            'bf16', 'i32' and the other non-quantized types. Labels are F32, as the outputs they are compared with.

    Attributes:
        ndata: the number of datapoints.
        datapoint_shape: the shape of one datapoint, as given.
        ne_datapoint: the values of one datapoint.
        ne_label: the values of one label (0 without labels).
        shard_size: as given.
        type: the data's `Type`.
        ptr: the `ggml_opt_dataset_t` (cffi cdata), freed with the object.

    Raises:
        ValueError: data without datapoints or values, labels of another number of rows, a 3-d or larger
            labels array, a shard size that does not divide ndata, a quantized type, values that do not
            convert exactly.
        TypeError: arrays that are not numbers; a shard size that is not an integer.
        MemoryError: no host memory for the data.
    """

    def __init__(self, data: Any, labels: Any = None, *, shard_size: int = 1, type: Any = "f32") -> None:
        t = as_type(type)
        if lib.ggml_is_quantized(t.value):
            raise ValueError(f"Dataset: type {t.name} is quantized; a dataset holds plain values (f32, f16, ...)")
        arr = _numbers("Dataset: data", data)
        if arr.ndim < 1 or arr.shape[0] == 0:
            raise ValueError(f"Dataset: data must have at least one datapoint (shape (ndata, ...)), got {arr.shape}")
        ndata = arr.shape[0]
        point_shape = tuple(int(n) for n in arr.shape[1:])
        ne_datapoint = int(np.prod(point_shape, dtype=np.int64))
        if ne_datapoint == 0:
            raise ValueError(f"Dataset: each datapoint must hold at least one value, got shape {arr.shape}")
        if ndata > _MAX_ROWS:
            raise ValueError(f"Dataset: at most {_MAX_ROWS} datapoints, got {ndata}")
        lab = None
        if labels is not None:
            lab = _numbers("Dataset: labels", labels)
            if lab.ndim == 1:
                lab = lab.reshape(-1, 1)
            if lab.ndim != 2:
                raise ValueError(f"Dataset: labels must be of shape (ndata, ne_label) or (ndata,), got {lab.shape}")
            if lab.shape[0] != ndata:
                raise ValueError(f"Dataset: {lab.shape[0]} labels for {ndata} datapoints: give one label row each")
            if lab.shape[1] == 0:
                raise ValueError("Dataset: labels of no values; give None for a loss without labels")
        shard_size = integer("Dataset: shard_size", shard_size, 1, ndata)
        if ndata % shard_size:
            raise ValueError(
                f"Dataset: shard_size {shard_size} does not divide the {ndata} datapoints (ggml-opt would drop the "
                "rest): choose a divisor, or leave out the last datapoints"
            )
        ne_label = 0 if lab is None else lab.shape[1]
        ptr = lib.ggml_opt_dataset_init(t.value, lib.GGML_TYPE_F32, ne_datapoint, ne_label, ndata, shard_size)
        self.ptr = ffi.gc(ptr, lib.ggml_opt_dataset_free)
        if lib.ggml_opt_dataset_data(ptr).data == _NULL:
            raise MemoryError(f"Dataset: no host memory for {ndata} x {ne_datapoint} values of {t.name}")
        self.ndata = ndata
        self.datapoint_shape = point_shape
        self.ne_datapoint = ne_datapoint
        self.ne_label = ne_label
        self.shard_size = shard_size
        self.type = t
        self._tensor(lib.ggml_opt_dataset_data).set(arr.reshape(ndata, ne_datapoint))
        if lab is not None:
            self._tensor(lib.ggml_opt_dataset_labels).set(lab)

    def _tensor(self, get: Callable[[Any], Any]) -> Tensor:
        # the dataset owns it; this Tensor is used while the dataset is referenced (self), never handed out
        return Tensor(get(self.ptr), None)

    def __len__(self) -> int:
        return self.ndata

    def __repr__(self) -> str:
        return (
            f"<Dataset {self.ndata} x {self.datapoint_shape} {self.type.name}, labels "
            f"{self.ne_label or 'none'}, shard {self.shard_size}>"
        )

    def data(self) -> np.ndarray:
        """A copy of the stored datapoints, in the order given.

        Returns:
            An array of shape `(ndata, *datapoint_shape)` of the type's host dtype.
        """
        return self._tensor(lib.ggml_opt_dataset_data).numpy().reshape((self.ndata, *self.datapoint_shape))

    def labels(self) -> np.ndarray | None:
        """A copy of the stored labels, in the order given.

        Returns:
            A float32 array of shape `(ndata, ne_label)`, or None for a dataset without labels.
        """
        if self.ne_label == 0:
            return None
        return self._tensor(lib.ggml_opt_dataset_labels).numpy().reshape(self.ndata, self.ne_label)


def _numbers(what: str, values: Any) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{what} must be numbers, got dtype {arr.dtype}")
    return arr


# --- results -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Progress:
    """Where a fit or an evaluation is, given to a progress callback after every physical batch.

    Attributes:
        phase: 'train', 'val' (a fit's validation share) or 'eval' (`Model.evaluate`).
        epoch: the epoch, from 1 (1 for an evaluation).
        epochs: the epochs of the fit (1 for an evaluation).
        batch: the physical batches of this phase done so far in this epoch, from 1.
        batches: the physical batches of this phase in an epoch.
        loss: the phase's mean loss so far this epoch (ggml_opt_result_loss).
        accuracy: the share of datapoints whose output's largest value is at its label's (NaN without one).
        seconds: the time since the phase began this epoch.
    """

    phase: str
    epoch: int
    epochs: int
    batch: int
    batches: int
    loss: float
    accuracy: float
    seconds: float


@dataclass(frozen=True)
class Evaluation:
    """A model's loss and accuracy over a dataset (`Model.evaluate`), as ggml-opt reports them.

    Attributes:
        loss: the loss: the mean of the physical batches' losses (each one's mean over its datapoints for
            'cross_entropy', 'mse' and 'mean'), or their sum for 'sum'.
        loss_unc: the loss's standard error over the batches (NaN with fewer than 2).
        accuracy: the share of datapoints whose output's largest value is where its label's is (cross_entropy
            only; NaN otherwise).
        accuracy_unc: its standard error.
        ndata: the datapoints evaluated.
    """

    loss: float
    loss_unc: float
    accuracy: float
    accuracy_unc: float
    ndata: int


@dataclass
class History:
    """What `Model.fit` measured, one entry per epoch (ggml-opt's results, reset at each epoch).

    Attributes:
        train_loss: the mean training loss of each epoch's batches (with the weights as they were at each batch).
        train_accuracy: the training accuracy of each epoch (NaN without a cross-entropy loss).
        val_loss: the mean validation loss of each epoch, after its training share (NaN without a validation share).
        val_accuracy: the validation accuracy of each epoch (NaN without a validation share or a cross-entropy
            loss).
        seconds: each epoch's wall time.
        steps: the optimizer steps of each epoch.
    """

    train_loss: list[float] = field(default_factory=list)
    train_accuracy: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    val_accuracy: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.train_loss)

    def table(self) -> str:
        """The history as a text table, one row per epoch.

        Returns:
            The table.
        """
        rows = ["epoch  train loss  train acc  val loss  val acc"]
        for i in range(len(self)):
            rows.append(
                f"{i + 1:5d}  {self.train_loss[i]:10.5f}  {100 * self.train_accuracy[i]:8.2f}%  "
                f"{self.val_loss[i]:8.5f}  {100 * self.val_accuracy[i]:6.2f}%"
            )
        return "\n".join(rows)


class _Result:
    """A ggml_opt_result_t, freed with the object."""

    def __init__(self) -> None:
        self.ptr = ffi.gc(lib.ggml_opt_result_init(), lib.ggml_opt_result_free)
        self._d = ffi.new("double[2]")

    def reset(self) -> None:
        lib.ggml_opt_result_reset(self.ptr)

    def loss(self) -> tuple[float, float]:
        lib.ggml_opt_result_loss(self.ptr, self._d, self._d + 1)
        return float(self._d[0]), float(self._d[1])

    def accuracy(self) -> tuple[float, float]:
        lib.ggml_opt_result_accuracy(self.ptr, self._d, self._d + 1)
        return float(self._d[0]), float(self._d[1])

    def ndata(self) -> int:
        n = ffi.new("int64_t *")
        lib.ggml_opt_result_ndata(self.ptr, n)
        return int(n[0])


# --- the progress bar ---------------------------------------------------------------------------------------------
class _Bar:
    """A progress bar on a text stream, as ggml's ggml_opt_epoch_callback_progress_bar draws it; redrawn at most
    every 0.1 s, and at each phase's end."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.drawn = 0.0

    def __call__(self, p: Progress) -> None:
        now = time.perf_counter()
        last = p.batch == p.batches
        if not last and now - self.drawn < 0.1:
            return
        self.drawn = now
        filled = int(20 * p.batch / p.batches)
        acc = "" if math.isnan(p.accuracy) else f" acc={100 * p.accuracy:.2f}%"
        head = f"epoch {p.epoch}/{p.epochs} " if p.phase != "eval" else ""
        self.stream.write(
            f"\r{head}{p.phase + ':':6s}[{'#' * filled}{' ' * (20 - filled)}] {p.batch}/{p.batches} "
            f"loss={p.loss:.5f}{acc} t={p.seconds:.1f}s" + ("\n" if last else "")
        )
        self.stream.flush()


def _progress_fn(what: str, progress: Any) -> Callable[[Progress], None] | None:
    if progress is True:
        return _Bar(sys.stderr)
    if progress is False or progress is None:
        return None
    if callable(progress):
        return progress
    raise TypeError(f"{what}: progress must be True, False or a callable taking a Progress, got {progress!r}")


def _finite_float(what: str, value: Any, lo: float, hi: float, *, open_lo: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"{what} must be a number, got {type(value).__name__} {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < lo or v > hi or (open_lo and v == lo):
        lo_text = f"> {lo}" if open_lo else f">= {lo}"
        raise ValueError(f"{what} must be finite, {lo_text} and <= {hi}, got {value!r}")
    return v


# --- the model -------------------------------------------------------------------------------------------------------
class Model:
    """A forward pass built in Python, trained and evaluated with ggml-opt.

    Build it as ggml's examples do, in two contexts: the trainable weights and the input batch in a context
    given memory of its own on the runner's device (`runner.backend.alloc_tensors(ctx)`, written with
    `Tensor.set`), and the forward pass in another context (made with `no_alloc=True`, the default), whose
    tensors ggml-opt gives memory at every batch. The input is 2-d, NumPy shape `(batch, ne_datapoint)`:
    `batch` datapoints of a dataset's `ne_datapoint` values (reshape it inside the forward pass for images);
    the output is 2-d, `(batch, n_out)`, and for a 'cross_entropy' or 'mse' loss `n_out` is the labels' width.
    ggml-opt adds the loss, its backward pass and the optimizer's steps; the weights are updated in place, so
    `w.numpy()` reads the trained values, and `predict` runs the forward pass on the runner.

    Args:
        runner: the Runner whose backends compute (a CPU runner, or a device such as 'vulkan0' with the CPU
            beside it; not a meta runner).
        inputs: the input batch, F32 (or the dataset's type), with memory of its own.
        outputs: the forward pass's output, F32, computed from `inputs`.
        loss: 'cross_entropy' (the outputs are logits; labels are one-hot rows: `one_hot`), 'mse' (mean squared
            error against the labels), 'mean' or 'sum' (of the outputs themselves: a loss computed in the forward
            pass; no labels).
        params: the trainable weights, flagged here (`ggml_set_param`); None takes those flagged already
            (`Tensor.set_param`). Each must be F32, no op's result, with memory of its own, and read by the
            forward pass.

    Attributes:
        runner: as given.
        inputs: as given.
        outputs: as given.
        loss: the loss's name.
        params: the trainable weights, in the forward pass's order.
        batch: the physical batch: the datapoints `inputs` holds.

    Raises:
        TypeError: arguments of the wrong kind; parameters that are not F32.
        ValueError: a meta or closed runner; inputs or outputs that are not 2-d, of other batches, or not
            connected; tensors without the memory ggml-opt needs (weights and inputs allocated, the forward
            pass not), or with memory where it must have none; no trainable parameter; a forward pass too
            large for ggml-opt's graphs (`GRAPH_SIZE` nodes).
        Unsupported: the runner's device cannot compute the optimizer's steps (they update its weights in place).
        OpError: an op ggml has no backward pass for.
    """

    def __init__(
        self,
        runner: Runner,
        inputs: Tensor,
        outputs: Tensor,
        *,
        loss: str = "cross_entropy",
        params: Sequence[Tensor] | None = None,
    ) -> None:
        instance("Model: runner", runner, Runner)
        instance("Model: inputs", inputs, Tensor)
        instance("Model: outputs", outputs, Tensor)
        if text("Model: loss", loss) not in LOSSES:
            raise ValueError(f"Model: loss must be one of {sorted(LOSSES)}, got {loss!r}")
        if runner.closed:
            raise ValueError("Model: the runner is closed: make a new one")
        if runner.meta is not None:
            raise ValueError(
                f"Model: {runner.name} is a meta runner; ggml-opt trains on one device (with the CPU beside it)"
            )
        self.runner = runner
        self.inputs = inputs
        self.outputs = outputs
        self.loss = loss
        self._check_io()
        self._mark_params(params)
        self.params = self._check_memory()
        self._graph_nodes = self._dry_run()
        self._forward: Graph | None = None  # predict's graph, built at its first call

    @property
    def batch(self) -> int:
        """The physical batch: the datapoints the input tensor holds, computed in one pass."""
        return int(self.inputs.ne[1])

    def _check_io(self) -> None:
        x, y = self.inputs, self.outputs
        if x.ptr.op != lib.GGML_OP_NONE or x.ptr.view_src != _NULL:
            raise ValueError(f"Model: inputs {_name(x)} is computed by a {x.op.name} node; give the input tensor")
        if x.ne[2] != 1 or x.ne[3] != 1:
            raise ValueError(
                f"Model: inputs {_name(x)} must be 2-d, (batch, values per datapoint), got shape {x.shape}: "
                "reshape it inside the forward pass instead (ctx.reshape_4d(...))"
            )
        if lib.ggml_is_quantized(x.ptr.type):
            raise ValueError(f"Model: inputs {_name(x)} is quantized ({x.type.name}); give a plain type (f32)")
        if y.ptr.op == lib.GGML_OP_NONE:
            raise ValueError(f"Model: outputs {_name(y)} is no op's result; give the forward pass's last node")
        if y.ptr.type != lib.GGML_TYPE_F32:
            raise TypeError(f"Model: outputs {_name(y)} must be F32 (ggml-opt's losses are), got {y.type.name}")
        if y.ne[2] != 1 or y.ne[3] != 1:
            raise ValueError(f"Model: outputs {_name(y)} must be 2-d, (batch, values), got shape {y.shape}")
        if y.ne[1] != x.ne[1]:
            raise ValueError(
                f"Model: outputs {_name(y)} hold {y.ne[1]} datapoints (shape {y.shape}) but inputs {_name(x)} "
                f"hold {x.ne[1]} (shape {x.shape}): the batch is NumPy's first axis of both"
            )
        reached = lifetime.reachable([y.ptr], views=True)
        if not any(p == x.ptr for p in reached):
            raise ValueError(f"Model: outputs {_name(y)} are not computed from inputs {_name(x)}")
        self._reached = reached

    def _mark_params(self, params: Sequence[Tensor] | None) -> None:
        if params is None:
            return
        if isinstance(params, Tensor) or not isinstance(params, Sequence):
            raise TypeError(f"Model: params must be a list of Tensors, got {type(params).__name__}")
        reached = {lifetime.address(p) for p in self._reached}
        for t in params:
            instance("Model: params", t, Tensor)
            if t.ptr.op != lib.GGML_OP_NONE or t.ptr.view_src != _NULL:
                raise ValueError(f"Model: parameter {_name(t)} is computed by a {t.op.name} node; give a weight")
            if t.ptr.type != lib.GGML_TYPE_F32:
                raise TypeError(
                    f"Model: parameter {_name(t)} is {t.type.name}; trainable weights must be F32 (ggml's gradients "
                    "and optimizer steps are)"
                )
            if t == self.inputs:
                raise ValueError(f"Model: {_name(t)} is the inputs; the inputs cannot be a trainable parameter")
            if lifetime.address(t.ptr) not in reached:
                raise ValueError(
                    f"Model: parameter {_name(t)} is not read by the forward pass of {_name(self.outputs)}"
                )
        for t in params:
            t.set_param()

    def _check_memory(self) -> list[Tensor]:
        """The memory ggml-opt relies on: the inputs and every leaf (weights, constants) allocated, in a buffer the
        runner's backends can use; the computed nodes without memory (ggml-opt copies them and allocates the
        copies: a node holding memory would be computed there, at every batch). Memory a Runner lent to a node
        (an earlier `run` or `predict`) is taken back. Returns the parameters."""
        ctx_of = self.outputs.ctx
        params: list[Tensor] = []
        for p in self._reached:
            t = Tensor(p, ctx_of)
            if p.op == lib.GGML_OP_NONE and p.view_src == _NULL:  # a leaf: weights, constants, the inputs
                if p.data == _NULL or lifetime.is_lent(p):
                    what = "the inputs" if t == self.inputs else f"leaf {_name(t)}"
                    raise ValueError(
                        f"Model: {what} has no memory of its own: make it in a context given memory on the "
                        "runner's device (runner.backend.alloc_tensors(ctx)) and write it (Tensor.set) before "
                        "training"
                    )
                if p.buffer == _NULL:
                    raise ValueError(
                        f"Model: {_name(t)} lives in a context's own host memory (no_alloc=False); ggml-opt needs it "
                        "in a backend buffer: make its context with no_alloc=True and runner.backend.alloc_tensors(ctx)"
                    )
                if p.flags & lib.GGML_TENSOR_FLAG_PARAM:
                    params.append(t)
                continue
            if p.data == _NULL:
                continue
            if lifetime.is_lent(p):  # an earlier run's memory: take it back, as the runner would
                self._release(p)
                continue
            if p.view_src != _NULL and lifetime.memory_buffer(p) != _NULL and p.op == lib.GGML_OP_VIEW:
                continue  # a view of a weight or of the inputs, made after they got memory: it reads them
            if p.view_src != _NULL and p.view_src.op == lib.GGML_OP_NONE and p.view_src.data != _NULL:
                continue  # any view (reshape, permute, ...) of an allocated leaf
            raise ValueError(
                f"Model: node {_name(t)} ({t.op.name}) has memory of its own; build the forward pass in a context "
                "made with no_alloc=True and leave its nodes unallocated (ggml-opt allocates them)"
            )
        if not params:
            raise ValueError(
                f"Model: the forward pass of {_name(self.outputs)} has no trainable parameter: pass params=[...] "
                "(or flag the weights with set_param())"
            )
        return params

    @staticmethod
    def _release(p: Any) -> None:
        ref = lifetime._lent.get(lifetime.address(p))  # noqa: SLF001 - the lender of p's memory
        if ref is None and p.view_src != _NULL:
            ref = lifetime._lent.get(lifetime.address(p.view_src))  # noqa: SLF001
        lender = ref() if ref is not None else None
        if lender is not None:
            lender.release()

    def _dry_run(self) -> int:
        """Build what ggml-opt will build (the loss, its predictions, the backward pass, one optimizer step) in a
        scratch context, with pyggml's guarded ops: an op without a backward pass raises OpError here instead of
        aborting inside ggml_opt_init, the nodes are counted against GRAPH_SIZE, and the device must compute every
        node. Returns the node count of the forward pass with its loss."""
        y = self.outputs
        n_reached = len(self._reached)
        scratch = Context(
            mem_size=(4 * n_reached + 64) * lib.ggml_tensor_overhead()
            + 2 * lib.ggml_graph_overhead_custom(4 * n_reached + 64, True)
        )
        labels = scratch.tensor("f32", y.shape, "labels", input=True) if self.loss in _NEEDS_LABELS else None
        if self.loss == "cross_entropy":
            assert labels is not None
            loss = scratch.cross_entropy_loss(y, labels)
            extra = [scratch.argmax(y)]
            extra.append(scratch.count_equal(extra[0], scratch.argmax(labels)))
        elif self.loss == "mse":
            assert labels is not None
            loss = scratch.scale(scratch.sum(scratch.sqr(scratch.sub(y, labels))), 1.0)
            extra = []
        else:
            loss = scratch.scale(scratch.sum(y), 1.0) if self.loss == "mean" else scratch.sum(y)
            extra = []
        lib.ggml_set_loss(loss.ptr)
        forward = Graph.with_grads(scratch, 4 * n_reached + 64).build_forward_expand(loss, *extra)
        n_forward, n_leafs = forward.n_nodes, preflight.leaf_count(forward)
        forward.build_backward_expand()
        p0 = self.params[0]
        adamw = scratch.tensor("f32", (7,), "adamw_params", input=True)
        g0 = forward.grad(p0)
        steps = []
        if g0 is not None:
            m = scratch.new_tensor("f32", list(p0.ne))
            steps.append(scratch.opt_step_adamw(p0, g0, m, scratch.new_tensor("f32", list(p0.ne)), adamw))
            steps.append(scratch.opt_step_sgd(p0, g0, scratch.tensor("f32", (2,), "sgd_params", input=True)))
        need = forward.n_nodes + len(self.params)
        if need > GRAPH_SIZE or n_leafs + len(self.params) * 3 + 16 > GRAPH_SIZE:
            raise ValueError(
                f"Model: the forward pass, its loss, backward pass and optimizer steps need {need} nodes and "
                f"about {n_leafs} leafs; ggml-opt's graphs hold {GRAPH_SIZE}: make the model smaller"
            )
        if not self.runner.backend.is_cpu:
            # ggml's scheduler computes a node the device cannot on the CPU, except one whose memory is already the
            # device's: an optimizer step writes the weights in place, and ggml aborts if the device cannot
            bad = sorted({n.op.name for n in steps if not self.runner.backend.supports_op(n)})
            if bad:
                raise Unsupported(
                    f"Model: {self.runner.name} cannot compute {', '.join(bad)}, the optimizer's update of its weights "
                    "in place; train on another runner (Runner('cpu'))"
                )
        preflight.check_view_leaves(forward)
        preflight.check_buffers_usable(forward, self.runner.backends, "Model")
        return n_forward

    # --- ggml-opt's context ---------------------------------------------------------------------------------------
    def _opt_init(self, build_type: int, opt_period: int, optimizer: str, pars: Any) -> Any:
        """ggml_opt_init over this model: a static-graph context (the inputs allocated up front, as ggml-opt
        requires), ggml's graphs made in a compute context of its own, computed by a scheduler of its own over
        the runner's backends (it allocates ggml-opt's copies of the graphs, never the tensors built here, and
        the runner's memory plans stay the runner's). Returns (ggml_opt_context_t, what must outlive it); the
        caller frees both with `_opt_free`."""
        if self.runner.closed:
            raise ValueError("Model: the runner is closed (close() was called): make a new one and a new Model")
        sched = Scheduler(self.runner.backends, _SCHED_SIZE)
        ctx_compute = Context(
            mem_size=3 * lib.ggml_graph_overhead_custom(GRAPH_SIZE, True) + 3 * GRAPH_SIZE * lib.ggml_tensor_overhead()
        )
        params = lib.ggml_opt_default_params(sched.ptr, LOSSES[self.loss])
        params.ctx_compute = ctx_compute.ptr
        params.inputs = self.inputs.ptr
        params.outputs = self.outputs.ptr
        params.build_type = build_type
        params.opt_period = opt_period
        params.optimizer = OPTIMIZERS[optimizer]
        params.get_opt_pars = ffi.addressof(real_lib, "ggml_opt_get_constant_optimizer_params")
        params.get_opt_pars_ud = pars
        ptr = lib.ggml_opt_init(params)
        if ptr == _NULL:
            sched.close()
            raise GGMLError("ggml_opt_init failed")
        return ptr, (sched, ctx_compute, pars)

    @contextlib.contextmanager
    def _computing(self) -> Iterator[None]:
        """Hold the runner's lock and its backends' for a whole fit or evaluation: ggml-opt computes on the runner's
        backends, which another thread's run must not use meanwhile (pyggml.serial)."""
        with contextlib.ExitStack() as stack:
            stack.enter_context(self.runner.lock)
            for b in self.runner.backends:
                stack.enter_context(b.lock)
            yield

    @staticmethod
    def _opt_free(octx: Any, keep: tuple) -> None:
        lib.ggml_opt_free(octx)
        keep[0].close()  # the scheduler: the runner's backends may be closed from now on

    def _check_dataset(self, what: str, dataset: Dataset, batch: int) -> None:
        instance(f"{what}: dataset", dataset, Dataset)
        x, y = self.inputs, self.outputs
        if dataset.type.value != x.ptr.type:
            raise TypeError(
                f"{what}: the dataset holds {dataset.type.name} but inputs {_name(x)} are {x.type.name}: make the "
                f"dataset with type={x.type.name.lower()!r}"
            )
        if dataset.ne_datapoint != x.ne[0]:
            raise ValueError(
                f"{what}: a datapoint holds {dataset.ne_datapoint} values (shape {dataset.datapoint_shape}) but "
                f"inputs {_name(x)} take {x.ne[0]} per datapoint (shape {x.shape})"
            )
        if self.loss in _NEEDS_LABELS:
            if dataset.ne_label == 0:
                raise ValueError(f"{what}: a {self.loss} loss compares with labels; the dataset has none")
            if dataset.ne_label != y.ne[0]:
                raise ValueError(
                    f"{what}: a label holds {dataset.ne_label} values but outputs {_name(y)} have {y.ne[0]} per "
                    f"datapoint (shape {y.shape}); for classes give one_hot(classes, {y.ne[0]})"
                )
        elif dataset.ne_label != 0:
            raise ValueError(f"{what}: a {self.loss!r} loss takes no labels; make the dataset without them")
        if self.batch % dataset.shard_size:
            raise ValueError(
                f"{what}: the dataset's shard_size {dataset.shard_size} does not divide the physical batch "
                f"{self.batch} (the inputs' first axis)"
            )
        if dataset.ndata % batch:
            raise ValueError(
                f"{what}: the batch of {batch} datapoints does not divide the dataset's {dataset.ndata}: use a "
                f"divisor, or a dataset of {dataset.ndata - dataset.ndata % batch} datapoints"
            )

    def _forward_graph(self) -> Graph:
        """The forward pass alone as a Graph (predict's, and the measure of the CPU threads), built once."""
        if self._forward is None:
            size = max(2 * self._graph_nodes + 16, 64)
            self._forward = Graph(Context(graph_size=size), size).build_forward_expand(self.outputs)
        return self._forward

    def _prepare_threads(self) -> None:
        """A CPU backend made without n_threads computes with the threads pyggml gives the forward pass
        (`pyggml.backend.auto_threads`: one for a small one): ggml-opt computes without asking."""
        n = auto_threads(self._forward_graph())
        for b in self.runner.backends:
            if b.is_cpu and b.auto_threads and n != b.n_threads:
                b._set_threads(n)  # noqa: SLF001 - as Backend._threads_for does before each compute
                b.n_threads = n

    def fit(
        self,
        dataset: Dataset,
        *,
        epochs: int = 1,
        batch: int | None = None,
        optimizer: str = "adamw",
        lr: float | Callable[[int], float] = 1e-3,
        beta1: float = 0.9,
        beta2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        val_split: float = 0.0,
        shuffle: bool = True,
        progress: bool | Callable[[Progress], None] = True,
    ) -> History:
        """Train the weights on the dataset, as ggml_opt_fit does, and return each epoch's numbers.

        Each epoch: the training share in logical batches of `batch` datapoints, each one optimizer step,
        computed as `batch / model.batch` physical batches whose gradients are accumulated; then the validation
        share (the last `val_split` of the dataset, in whole logical batches), forward only. With `shuffle`, the
        whole dataset is shuffled once (which datapoints validate) and the training share at every epoch, in
        shards, with ggml's random generator (seeded as ggml seeds it: two fits shuffle alike). The optimizer's
        state (AdamW's moments) starts anew at each call.

        Args:
            dataset: the data and labels (`Dataset`).
            epochs: passes over the dataset, at least 1.
            batch: the logical batch, datapoints per optimizer step: a multiple of the physical batch
                (`model.batch`) that divides the dataset; None: the physical batch.
            optimizer: 'adamw' or 'sgd'.
            lr: the learning rate (> 0), or a function of the epoch (from 1) giving it.
            beta1: AdamW's first moment's decay, in [0, 1].
            beta2: AdamW's second moment's decay, in [0, 1].
            eps: AdamW's epsilon, >= 0.
            weight_decay: the weight decay, in [0, 1] (both optimizers).
            val_split: the share of the dataset kept for validation, in [0, 1); 0 for none.
            shuffle: shuffle as ggml_opt_fit does (False keeps the dataset's order).
            progress: True draws a progress bar on stderr, False nothing; a callable is called with a `Progress`
                after every physical batch (what it raises stops the fit and propagates).

        Returns:
            The `History`: each epoch's training and validation loss and accuracy.

        Raises:
            TypeError: arguments of the wrong kind; a dataset of another type than the inputs.
            ValueError: a dataset whose datapoints or labels do not fit the model; a batch that is not a multiple
                of the physical batch or does not divide the dataset; epochs below 1; hyper-parameters out of
                range (ggml asserts them); a validation share that leaves no training batch.
        """
        what = "fit"
        epochs = integer(f"{what}: epochs", epochs, 1, 2**62)
        batch = self.batch if batch is None else integer(f"{what}: batch", batch, 1, _MAX_ROWS)
        if batch % self.batch:
            raise ValueError(
                f"{what}: the logical batch {batch} is not a multiple of the physical batch {self.batch} (the "
                "inputs' first axis); gradients are accumulated over whole physical batches"
            )
        if text(f"{what}: optimizer", optimizer) not in OPTIMIZERS:
            raise ValueError(f"{what}: optimizer must be one of {sorted(OPTIMIZERS)}, got {optimizer!r}")
        self._check_dataset(what, dataset, batch)
        val_split = _finite_float(f"{what}: val_split", val_split, 0.0, 1.0)
        if val_split >= 1.0:
            raise ValueError(f"{what}: val_split must be below 1 (the share kept for validation), got {val_split}")
        beta1 = _finite_float(f"{what}: beta1", beta1, 0.0, 1.0)
        beta2 = _finite_float(f"{what}: beta2", beta2, 0.0, 1.0)
        eps = _finite_float(f"{what}: eps", eps, 0.0, math.inf)
        weight_decay = _finite_float(f"{what}: weight_decay", weight_decay, 0.0, 1.0)
        if not callable(lr):
            _finite_float(f"{what}: lr", lr, 0.0, math.inf, open_lo=True)
        if not isinstance(shuffle, bool):
            raise TypeError(f"{what}: shuffle must be a bool, got {type(shuffle).__name__}")
        report = _progress_fn(what, progress)

        ndata, nphys = dataset.ndata, self.batch
        opt_period = batch // nphys
        if opt_period > 2**31 - 1:
            raise ValueError(f"{what}: at most {2**31 - 1} physical batches per logical batch, got {opt_period}")
        nbatches_logical = ndata // batch
        # ggml_opt_fit's split, in its float arithmetic: whole logical batches train, the rest validates
        ibatch_split = int(np.float32(np.float32(1.0) - np.float32(val_split)) * np.float32(nbatches_logical))
        ibatch_split *= opt_period
        if ibatch_split == 0:
            raise ValueError(
                f"{what}: val_split {val_split} leaves no training batch ({nbatches_logical} logical batches of "
                f"{batch}): lower it, or use a smaller batch"
            )
        nbatches = ndata // nphys
        if val_split > 0 and ibatch_split == nbatches:
            raise ValueError(
                f"{what}: val_split {val_split} is too small to keep one logical batch of {batch} of the "
                f"{ndata} datapoints for validation: raise it, or give 0 for none"
            )
        pars = ffi.new("struct ggml_opt_optimizer_params *")

        def set_pars(epoch: int) -> None:
            rate = lr(epoch) if callable(lr) else lr
            rate = _finite_float(
                f"{what}: lr({epoch})" if callable(lr) else f"{what}: lr", rate, 0.0, math.inf, open_lo=True
            )
            pars.adamw.alpha, pars.adamw.beta1, pars.adamw.beta2 = rate, beta1, beta2
            pars.adamw.eps, pars.adamw.wd = eps, weight_decay
            pars.sgd.alpha, pars.sgd.wd = rate, weight_decay
            if not (pars.adamw.alpha > 0 and pars.sgd.alpha > 0):  # a rate that rounds to 0 in float32
                raise ValueError(f"{what}: the learning rate {rate!r} is 0 in float32")

        set_pars(1)
        history = History()
        self._check_memory()  # memory a runner lent since the model was made goes back
        self._prepare_threads()
        train, val = _Result(), _Result()
        with self._computing():
            self._fit_epochs(
                dataset,
                history,
                epochs,
                batch,
                opt_period,
                optimizer,
                pars,
                set_pars,
                shuffle,
                report,
                ibatch_split,
                nbatches,
                train,
                val,
            )
        return history

    def _fit_epochs(
        self,
        dataset: Dataset,
        history: History,
        epochs: int,
        batch: int,
        opt_period: int,
        optimizer: str,
        pars: Any,
        set_pars: Callable[[int], None],
        shuffle: bool,
        report: Callable[[Progress], None] | None,
        ibatch_split: int,
        nbatches: int,
        train: _Result,
        val: _Result,
    ) -> None:
        """fit's epochs, with ggml-opt's context made and freed around them."""
        ndata, idata_split = dataset.ndata, ibatch_split * self.batch
        octx, keep = self._opt_init(lib.GGML_OPT_BUILD_TYPE_OPT, opt_period, optimizer, pars)
        try:
            if shuffle and batch < ndata:
                lib.ggml_opt_dataset_shuffle(octx, dataset.ptr, -1)
            for epoch in range(1, epochs + 1):
                if epoch > 1:
                    set_pars(epoch)
                if shuffle and batch < idata_split:
                    lib.ggml_opt_dataset_shuffle(octx, dataset.ptr, idata_split)
                train.reset()
                val.reset()
                t0 = time.perf_counter()
                self._batches(octx, dataset, train, True, 0, ibatch_split, report, epoch, epochs, "train")
                self._batches(octx, dataset, val, False, ibatch_split, nbatches, report, epoch, epochs, "val")
                history.seconds.append(time.perf_counter() - t0)
                history.train_loss.append(train.loss()[0])
                history.train_accuracy.append(train.accuracy()[0])
                has_val = ibatch_split < nbatches
                history.val_loss.append(val.loss()[0] if has_val else math.nan)
                history.val_accuracy.append(val.accuracy()[0] if has_val else math.nan)
                history.steps.append(ibatch_split // opt_period)
        finally:
            self._opt_free(octx, keep)

    def _batches(
        self,
        octx: Any,
        dataset: Dataset,
        result: _Result,
        backward: bool,
        first: int,
        end: int,
        report: Callable[[Progress], None] | None,
        epoch: int,
        epochs: int,
        phase: str,
    ) -> None:
        """ggml_opt_epoch's loop over physical batches first..end-1, forward and backward or forward only."""
        if first >= end:
            return
        inputs = self.inputs.ptr
        labels = lib.ggml_opt_labels(octx)
        ds = dataset.ptr
        alloc, get_batch, evaluate = lib.ggml_opt_alloc, lib.ggml_opt_dataset_get_batch, lib.ggml_opt_eval
        res = result.ptr
        t0 = time.perf_counter()
        for ibatch in range(first, end):
            alloc(octx, backward)
            get_batch(ds, inputs, labels, ibatch)
            evaluate(octx, res)
            if report is not None:
                report(
                    Progress(
                        phase,
                        epoch,
                        epochs,
                        ibatch + 1 - first,
                        end - first,
                        result.loss()[0],
                        result.accuracy()[0],
                        time.perf_counter() - t0,
                    )
                )

    def evaluate(self, dataset: Dataset, *, progress: bool | Callable[[Progress], None] = False) -> Evaluation:
        """The model's loss and accuracy over a dataset, forward only, in physical batches (ggml-opt's numbers).

        Args:
            dataset: the data and labels; its size must be a multiple of the physical batch (`model.batch`).
            progress: True draws a progress bar on stderr; a callable is called with a `Progress` after every
                batch; False (the default) nothing.

        Returns:
            The `Evaluation`: loss, accuracy (cross-entropy only), their standard errors, the datapoints.

        Raises:
            TypeError: arguments of the wrong kind; a dataset of another type than the inputs.
            ValueError: a dataset whose datapoints or labels do not fit the model, or whose size the physical
                batch does not divide.
        """
        self._check_dataset("evaluate", dataset, self.batch)
        report = _progress_fn("evaluate", progress)
        self._check_memory()
        self._prepare_threads()
        pars = ffi.new("struct ggml_opt_optimizer_params *")
        result = _Result()
        with self._computing():
            octx, keep = self._opt_init(lib.GGML_OPT_BUILD_TYPE_FORWARD, 1, "adamw", pars)
            try:
                self._batches(octx, dataset, result, False, 0, dataset.ndata // self.batch, report, 1, 1, "eval")
            finally:
                self._opt_free(octx, keep)
        loss, loss_unc = result.loss()
        acc, acc_unc = result.accuracy()
        return Evaluation(loss, loss_unc, acc, acc_unc, result.ndata())

    def predict(self, data: Any) -> np.ndarray:
        """The forward pass's outputs for each datapoint, computed on the runner in physical batches.

        Args:
            data: a `Dataset` (its stored datapoints, in their given order), or an array of shape `(n, ...)`
                whose datapoints hold the inputs' values each (converted as `Tensor.set` converts). Any n: the
                last batch is padded, and its padding dropped from the result.

        Returns:
            An array of shape `(n, n_out)`: the outputs (for a classifier, logits: `.argmax(1)` gives classes).

        Raises:
            TypeError: data that are not numbers.
            ValueError: datapoints of another number of values than the inputs take; values that do not convert.
        """
        arr = data.data() if isinstance(data, Dataset) else _numbers("predict: data", data)
        if arr.ndim < 1:
            raise ValueError(f"predict: data must be of shape (n, ...), got {arr.shape}")
        n = arr.shape[0]
        per = int(np.prod(arr.shape[1:], dtype=np.int64))
        if per != self.inputs.ne[0]:
            raise ValueError(
                f"predict: a datapoint holds {per} values (shape {arr.shape[1:]}) but inputs "
                f"{_name(self.inputs)} take {self.inputs.ne[0]}"
            )
        rows = arr.reshape(n, per)
        graph = self._forward_graph()
        out = np.empty((n, self.outputs.ne[0]), dtype=np.float32)
        b = self.batch
        for start in range(0, n, b):
            chunk = rows[start : start + b]
            if chunk.shape[0] < b:
                pad = np.zeros((b, per), dtype=chunk.dtype)
                pad[: chunk.shape[0]] = chunk
                chunk = pad
            y = self.runner.run(graph, {self.inputs: chunk}, self.outputs)
            out[start : start + b] = y[: min(b, n - start)]
        return out


def fit(
    runner: Runner,
    inputs: Tensor,
    outputs: Tensor,
    dataset: Dataset,
    *,
    loss: str = "cross_entropy",
    params: Sequence[Tensor] | None = None,
    **options: Any,
) -> History:
    """Train a forward pass on a dataset: `Model(runner, inputs, outputs, loss=..., params=...).fit(dataset, ...)`.

    Args:
        runner: the Runner whose backends compute.
        inputs: the input batch (see `Model`).
        outputs: the forward pass's output.
        dataset: the data and labels.
        loss: 'cross_entropy', 'mse', 'mean' or 'sum'.
        params: the trainable weights (None: those flagged already).
        **options: `Model.fit`'s keyword arguments (epochs, batch, optimizer, lr, val_split, progress, ...).

    Returns:
        The `History`.

    Raises:
        TypeError: as `Model` and `Model.fit`.
        ValueError: as `Model` and `Model.fit`.
    """
    return Model(runner, inputs, outputs, loss=loss, params=params).fit(dataset, **options)
