"""Where pyggml talks to a device: one hook registry for what may go wrong on the way.

Reading back is refused before the call where ggml cannot do it (`unreadable`: the CPU's extra buffer types,
whose `get_tensor` ggml leaves NULL: the call would kill the process).

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

import functools
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


def extra_buffer_types() -> dict[int, str]:
    """The extra buffer types of every device that has them (`ggml_backend_dev_get_extra_bufts`): the CPU's
    weight layouts of its own (CPU_REPACK, AMX, KleidiAI), which llama.cpp puts weights in.

    Returns:
        {address of the buffer type: its name}.
    """
    out: dict[int, str] = {}
    for i in range(lib.ggml_backend_reg_count()):
        reg = lib.ggml_backend_reg_get(i)
        for j in range(lib.ggml_backend_reg_dev_count(reg)):
            for buft in device_extra_buffer_types(lib.ggml_backend_reg_dev_get(reg, j)):
                out[int(ffi.cast("uintptr_t", buft))] = ffi.string(lib.ggml_backend_buft_name(buft)).decode()
    return out


def device_extra_buffer_types(dev: Any) -> list[Any]:
    """One device's extra buffer types (`ggml_backend_dev_get_extra_bufts` of its registry), in ggml's order.

    Args:
        dev: the device (`ggml_backend_dev_t`), of a registry in ggml's list or loaded apart (a CPU variant).

    Returns:
        The buffer types (`ggml_backend_buffer_type_t`); none where its registry does not offer the call.
    """
    fn = lib.ggml_backend_reg_get_proc_address(
        lib.ggml_backend_dev_backend_reg(dev), b"ggml_backend_dev_get_extra_bufts"
    )
    if fn == ffi.NULL:
        return []
    bufts = ffi.cast("ggml_backend_dev_get_extra_bufts_t", fn)(dev)
    out: list[Any] = []
    while bufts != ffi.NULL and bufts[len(out)] != ffi.NULL:
        out.append(bufts[len(out)])
    return out


@functools.cache
def _extra_bufts() -> dict[int, str]:
    # the devices that have extra buffer types (the CPU) are registered with ggml, never added later
    return extra_buffer_types()


def unreadable(buffer: Any) -> str | None:
    """Why a tensor in `buffer` cannot be read back with `ggml_backend_tensor_get`, or None when it can.

    ggml implements no `get_tensor` for the extra buffer types (`extra_buffer_types`): the call dereferences a
    NULL function, and their bytes are a layout of the device's own (CPU_REPACK interleaves the blocks of
    several rows), not the tensor type's.

    Args:
        buffer: a `ggml_backend_buffer_t` (NULL: the tensor is in its context's memory).

    Returns:
        The reason, naming the buffer type, or None.
    """
    if buffer == ffi.NULL:
        return None
    buft = lib.ggml_backend_buffer_get_type(buffer)
    name = _extra_bufts().get(int(ffi.cast("uintptr_t", buft)))
    if name is None:
        return None
    return (
        f"its memory is in the {name} buffer type, a device's own layout of weights that ggml cannot read back "
        "(no get_tensor): read the values from where they were loaded (the model file), or load the model "
        "with use_extra_bufts=False"
    )


def before_read(buffer: Any, what: str) -> None:
    """Raise ValueError, before the call, where reading `buffer` back would kill the process (`unreadable`).

    Args:
        buffer: the tensor's `ggml_backend_buffer_t`.
        what: the caller and tensor, for the message.
    """
    why = unreadable(buffer)
    if why is not None:
        raise ValueError(f"{what}: {why}")
