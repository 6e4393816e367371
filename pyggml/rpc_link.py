"""The client side of ggml's RPC backend that the layers below the server need: which device is on which
server, whether a server's connection failed or refused a graph (`RpcError`, `RpcRefused`), and the hook
that raises those after every call that may have talked to a server (`pyggml.transport`). `pyggml.rpc`
(above the backends: it makes Devices and starts servers) re-exports all of it; its docstring says more.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from pyggml import transport
from pyggml._native import ffi, has, lib
from pyggml.errors import GGMLError

if TYPE_CHECKING:
    from pyggml._pyggml_cffi import CData

_ENDPOINT_OF_DEVICE: dict[int, str] = {}  # RPC device pointer -> "host:port"
_META_ENDPOINTS: dict[int, tuple[str, ...]] = {}  # meta device pointer -> its RPC devices' endpoints
_REGISTERED: dict[str, list] = {}  # endpoint -> its Devices (ggml caches the registry)


class RpcError(GGMLError):
    """A connection to an RPC server failed: refused, closed, timed out, or answered nonsense.

    The message names the server's endpoint and the reason. The client goes on with its other backends;
    the failed server's devices stay failed.
    """


class RpcRefused(RpcError):
    """An RPC server refused a graph (its checks found it unsafe to compute), or its device failed to compute one.

    The message gives the server's reason. The connection still works: the next graph is computed as usual.
    """


def available() -> bool:
    """Whether this pyggml was built with ggml's RPC backend (`-DGGML_RPC=ON`, the default).

    Returns:
        True when the RPC functions are there.
    """
    return has("ggml_backend_rpc_add_server")


def _require():
    if not available():
        raise RuntimeError("this pyggml was built without ggml's RPC backend (build with -DGGML_RPC=ON)")


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """Split a 'host:port' endpoint.

    Args:
        endpoint: 'host:port', with a port in 1..65535.

    Returns:
        `(host, port)`.

    Raises:
        ValueError: anything else.
        TypeError: `endpoint` is not a str.
    """
    if not isinstance(endpoint, str):
        raise TypeError(f"an RPC endpoint is a 'host:port' string, got {type(endpoint).__name__}")
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"an RPC endpoint is 'host:port' with a port in 1..65535, got {endpoint!r}")
    return host, int(port)


def set_timeout(seconds: float) -> None:
    """Bound connect, send and receive of RPC connections opened from now on.

    A receive waits for the server's compute: the timeout must exceed the longest graph. The default is 60 s
    (`PYGGML_RPC_TIMEOUT` overrides it, read by the first `add_server`).

    Args:
        seconds: the bound, 0 to 86400; 0 waits forever.

    Raises:
        ValueError: `seconds` is not a number in range.
        RuntimeError: this pyggml was built without the RPC backend.
    """
    _require()
    if not isinstance(seconds, (int, float)) or not 0 <= seconds <= 24 * 3600:
        raise ValueError(f"set_timeout: seconds must be in 0..86400, got {seconds!r}")
    lib.ggml_backend_rpc_set_timeout(int(round(seconds * 1000)))


def error(endpoint: str) -> str | None:
    """Why the connection to `endpoint` failed.

    Args:
        endpoint: a 'host:port' given to `add_server`.

    Returns:
        The reason, or None while the connection is fine.
    """
    if not has("ggml_backend_rpc_get_error"):  # a ggml without patch 0019: its client aborts on a fault instead
        return None
    buf = ffi.new("char[]", 512)
    if lib.ggml_backend_rpc_get_error(endpoint.encode(), buf, len(buf)):
        return ffi.string(buf).decode(errors="replace")
    return None


def take_refusal(endpoint: str) -> str | None:
    """Why the server at `endpoint` refused a graph since the last call, and forget it.

    Args:
        endpoint: a 'host:port' given to `add_server`.

    Returns:
        The first such reason, or None.
    """
    if not has("ggml_backend_rpc_take_refusal"):
        return None
    buf = ffi.new("char[]", 512)
    if lib.ggml_backend_rpc_take_refusal(endpoint.encode(), buf, len(buf)):
        return ffi.string(buf).decode(errors="replace")
    return None


def raise_if_failed(endpoints: Iterable[str]) -> None:
    """Raise for the first of these endpoints whose server has failed, or that refused a graph since the last check.

    Args:
        endpoints: 'host:port' endpoints.

    Raises:
        RpcError: a failed connection (its reason in the message).
        RpcRefused: refused graphs (every endpoint's reason in the message).
    """
    eps = list(endpoints)
    for ep in eps:
        why = error(ep)
        if why is not None:
            raise RpcError(f"RPC server {ep}: {why}")
    refusals = [(ep, why) for ep, why in ((ep, take_refusal(ep)) for ep in eps) if why is not None]
    if refusals:
        raise RpcRefused("; ".join(f"RPC server {ep}: {why}" for ep, why in refusals))


def register_meta(meta_dev_ptr: CData, device_ptrs: Iterable[CData]) -> None:
    """Record that a meta device is made of these devices: its faults are those of their RPC servers.

    Args:
        meta_dev_ptr: the meta device's `ggml_backend_dev_t`.
        device_ptrs: its devices' `ggml_backend_dev_t`s.
    """
    eps = tuple(
        dict.fromkeys(
            _ENDPOINT_OF_DEVICE[k]
            for k in (int(ffi.cast("uintptr_t", p)) for p in device_ptrs)
            if k in _ENDPOINT_OF_DEVICE
        )
    )
    if eps:
        _META_ENDPOINTS[int(ffi.cast("uintptr_t", meta_dev_ptr))] = eps


def endpoints_of_device(dev_ptr: CData) -> tuple[str, ...]:
    """The RPC endpoints a device reaches.

    Args:
        dev_ptr: a `ggml_backend_dev_t` (cffi cdata).

    Returns:
        Its own endpoint for an RPC device, its parts' for a meta device over RPC devices, `()` for any
        other device.
    """
    if not _ENDPOINT_OF_DEVICE or dev_ptr == ffi.NULL:
        return ()
    k = int(ffi.cast("uintptr_t", dev_ptr))
    if k in _ENDPOINT_OF_DEVICE:
        return (_ENDPOINT_OF_DEVICE[k],)
    return _META_ENDPOINTS.get(k, ())


def _after_call(dev_ptr) -> None:
    """After a transfer or a device call (pyggml.transport): raise if the device is on a failed server."""
    if _ENDPOINT_OF_DEVICE:
        raise_if_failed(endpoints_of_device(dev_ptr))


transport.register(_after_call)
