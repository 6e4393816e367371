"""RPC devices whose server failed: ggml's client (patch 0019) marks a failed connection and then
completes every command on it at once, computing nothing and saying SUCCESS. Before a compute or an
allocation pyggml asks ggml whether the connection failed; after one, pyggml.rpc_link's transport hook asks
again (the connection can fail during the call)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pyggml import rpc_link as rpc
from pyggml.preflight.core import Rule


def check_devices(devices: Iterable[Any]) -> None:
    """Raise RpcError for the first of these devices (ggml_backend_dev_t) on a failed server."""
    for dev in devices:
        rpc.raise_if_failed(rpc.endpoints_of_device(dev))


GRAPH_RULES = [
    Rule(
        (),
        check_devices,
        "a failed RPC connection computes nothing and says SUCCESS",
        "tests/test_rpc.py::test_a_device_whose_server_failed_is_refused_before_compute",
    ),
]
