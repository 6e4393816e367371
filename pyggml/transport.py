"""Where pyggml talks to a device: one hook registry for what may go wrong on the way.

`Tensor.set`, `set_raw`, `numpy`, `raw_bytes` and `Buffer.clear` report each transfer into or out of
a backend buffer (`after_transfer`); `Backend` and `Scheduler` report each compute and allocation
(`after_device_call`). Whoever can tell that such a call failed silently registers a hook: today
`pyggml.rpc` (a failed RPC connection computes nothing, returns zeros and says SUCCESS), which
registers when it is imported. A device call reaches an RPC server only after `pyggml.rpc.add_server`,
so nothing is missed while it is not imported.

This module imports nothing of pyggml beyond `_native`: tensor.py and backend.py report here
instead of importing `pyggml.rpc`, which keeps the import graph without circles
(tests/test_imports.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pyggml._native import ffi, lib

# a hook gets the ggml_backend_dev_t a call talked to and raises if that call failed
Hook = Callable[[Any], None]
_hooks: list[Hook] = []


def register(hook: Hook) -> None:
    """Call `hook(device)` after every transfer and device call from now on (once, however often registered).

    Args:
        hook: a callable taking the `ggml_backend_dev_t` a call talked to; it raises if that call failed.
    """
    if hook not in _hooks:
        _hooks.append(hook)


def after_transfer(buffer: Any) -> None:
    """Report that data went into or out of `buffer`: let the hooks check its device.

    Args:
        buffer: a `ggml_backend_buffer_t` (cffi cdata); NULL is ignored.

    Raises:
        Exception: what a hook raises (`pyggml.rpc.RpcError` for a failed RPC connection).
    """
    if _hooks and buffer != ffi.NULL:
        dev = lib.ggml_backend_buft_get_device(lib.ggml_backend_buffer_get_type(buffer))
        for hook in _hooks:
            hook(dev)


def after_device_call(devices: Iterable[Any]) -> None:
    """Report that a compute or an allocation ran on these devices: let the hooks check each.

    Args:
        devices: `ggml_backend_dev_t`s (cffi cdata).

    Raises:
        Exception: what a hook raises (`pyggml.rpc.RpcError` for a failed RPC connection).
    """
    for dev in devices:
        for hook in _hooks:
            hook(dev)
