"""Memory an allocator lends to one graph at a time, and what may be done with it.

A `Gallocr` or a `Scheduler` (a Runner's) gives memory to the tensors of the graph it allocates
and takes it back when it allocates again (`pyggml.backend._Lender`). While it is lent, two facts
are kept here, by tensor address (the lender keeps the tensors' contexts alive meanwhile, so no
other tensor can take an address that is listed):

- which tensors hold lent memory. A zero-copy NumPy `view()` of it would outlive the lending and
  read whatever the allocator put there next, so `Tensor.view()` refuses it (use `numpy()`, a copy,
  or give the tensor memory of its own with `Backend.alloc_tensors`);
- which leaves (graph inputs, and tensors no op computes) have not been written since they got
  their memory. Such memory holds what an earlier graph left there: computing raises, naming them.
  `Tensor.set` and `set_raw` count as writes.
"""

from __future__ import annotations

from pyggml._native import cstr, ffi, lib
from pyggml.errors import GraphError

_NULL = ffi.NULL
_lent: dict[int, object] = {}  # address of a tensor holding lent memory -> its lender
_unwritten: dict[int, object] = {}  # address of a leaf given lent memory, not written since -> its lender


def _addr(p) -> int:
    return int(ffi.cast("uintptr_t", p))


def lend(lender, fresh: list, graph_nodes: list) -> list:
    """`fresh` (C tensors) got memory from `lender`; returns the leaves among them that must be
    written before the graph is computed. A leaf that only receives a copy (cpy's destination) is
    overwritten whole by the graph and needs no value."""
    copied_into = {_addr(n.src[1]) for n in graph_nodes if n.op == lib.GGML_OP_CPY and n.src[1] != _NULL}
    leaves = []
    for p in fresh:
        a = _addr(p)
        _lent[a] = lender
        if p.op == lib.GGML_OP_NONE and p.view_src == _NULL and a not in copied_into:
            _unwritten[a] = lender
            leaves.append(p)
    return leaves


def take_back(lender, fresh: list):
    for p in fresh:
        a = _addr(p)
        if _lent.get(a) is lender:
            del _lent[a]
        if _unwritten.get(a) is lender:
            del _unwritten[a]


def written(p):
    """The tensor was written from the host; a view counts as a write of the tensor it views only
    when it covers all of it (half an input written is still an input left with old values)."""
    _unwritten.pop(_addr(p), None)
    if p.view_src != _NULL and lib.ggml_nbytes(p) == lib.ggml_nbytes(p.view_src):
        _unwritten.pop(_addr(p.view_src), None)


def is_lent(p) -> bool:
    return _addr(p) in _lent or (p.view_src != _NULL and _addr(p.view_src) in _lent)


def check_written(leaves: list):
    """Raise naming the leaves that still hold what an earlier graph left in their memory."""
    if not _unwritten:
        return
    missing = [p for p in leaves if _addr(p) in _unwritten]
    if missing:
        names = ", ".join(cstr(p.name) or "(unnamed)" for p in missing)
        raise GraphError(f"compute: input(s) {names} were given no value since the graph was allocated: "
                         "their memory holds whatever an earlier graph left there. Give every input in "
                         "Runner.run's inputs (each run allocates anew), or write it with Tensor.set before "
                         "computing; tensors that must keep their values between runs (weights) belong in a "
                         "buffer of their own (Backend.alloc_tensors)")
