"""ggml's RPC backend from Python: serve a local device over TCP, use devices of other processes.

Server: `python -m pyggml rpc-server [--host 127.0.0.1] [--port 50052] [--device cpu] [--threads N]`
serves one device (ggml_backend_rpc_start_server), one client connection at a time; from Python,
`Server(device="cpu")` starts one as a child process and waits until it accepts (a context manager).

Client: `add_server("host:port")` connects, registers the server's devices with ggml (named `RPC0`,
`RPC1`, ... in the order servers are added: `rpc0` for `Runner`, `MetaDevice`, `check --backend`) and
returns them.

Faults: ggml's RPC client aborted the process when a server died or answered nonsense, and had no
timeout. With our patch 0019 a failed connection is marked failed and later commands on it complete at
once; pyggml asks ggml before a compute (`pyggml.preflight.rpc`) and after every call that may have talked
to a server (compute, allocation, tensor transfers: the hook this module registers with `pyggml.transport`)
and raises `RpcError`. The client carries on with its other
backends; the failed server's devices stay failed. `set_timeout(seconds)` bounds connect, send and
receive of connections opened afterwards (default 60 s: a receive waits for the server's compute, so
the timeout must exceed the longest graph).

Refusals: with our patch 0023 the server checks every graph before it runs it (docs/reference.md: "The RPC server's
threat model") and answers a refused one with its reason; the client raises `RpcRefused` (an `RpcError`)
naming it, and the connection stays usable: the next graph is computed as usual.

The server has no authentication and no encryption: it binds 127.0.0.1 unless told otherwise, and then
prints that warning.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from pyggml import parent
from pyggml._native import ffi, has, lib
from pyggml.backend import Device
from pyggml.backend import device as find_device
from pyggml.rpc_link import (  # the client's state, below the backends (re-exported: pyggml.rpc is the public face)
    _ENDPOINT_OF_DEVICE,
    _REGISTERED,
    RpcError,
    RpcRefused,
    _require,
    available,
    endpoints_of_device,
    error,
    parse_endpoint,
    raise_if_failed,
    register_meta,
    set_timeout,
    take_refusal,
)
from pyggml.threads import cores

if TYPE_CHECKING:
    pass

__all__ = [
    "DEFAULT_PORT",
    "DEFAULT_TIMEOUT",
    "OPEN_NETWORK_WARNING",
    "RpcError",
    "RpcRefused",
    "Server",
    "add_server",
    "add_servers",
    "available",
    "await_server",
    "endpoints_of_device",
    "error",
    "free_port",
    "parse_endpoint",
    "raise_if_failed",
    "register_meta",
    "serve",
    "set_timeout",
    "take_refusal",
]

DEFAULT_PORT = 50052
DEFAULT_TIMEOUT = 60.0
OPEN_NETWORK_WARNING = (
    "WARNING: the RPC server binds {host}, not 127.0.0.1. It has no authentication and no encryption: "
    "anyone who reaches the port can use the device and read what its clients sent. Never expose it to an "
    "open network: bind loopback, or reach it through a tunnel."
)


def add_server(endpoint: str, timeout: float | None = None) -> list:
    """Connect to an RPC server and register its devices with ggml.

    The devices are named `RPC0`, `RPC1`, ... in the order servers are added (`rpc0` for `Runner`,
    `MetaDevice`, `check --backend`). Adding the same endpoint again returns the same devices.

    Args:
        endpoint: the server's 'host:port'.
        timeout: seconds for connect, send and receive of this and later connections (see `set_timeout`);
            None keeps the one in force (the first server: `PYGGML_RPC_TIMEOUT`, else 60 s).

    Returns:
        The server's devices, as `pyggml.backend.Device` objects.

    Raises:
        RpcError: the server cannot be reached, is not an RPC server, or reports no device; or a connection to
            this endpoint failed earlier in this process (ggml's client keeps that: use another port).
        ValueError: a malformed endpoint or timeout.
        RuntimeError: this pyggml was built without the RPC backend.
    """
    _require()
    parse_endpoint(endpoint)
    earlier = error(endpoint)
    if endpoint in _REGISTERED and earlier is None:
        return list(_REGISTERED[endpoint])
    if earlier is not None:
        # sticky in ggml's client (patch 0019), so that nothing holding the dead connection passes for working
        raise RpcError(
            f"RPC server {endpoint}: the connection to it failed earlier in this process ({earlier}); a server "
            "started again on that port cannot be reached from this process: start it on another port"
        )
    if timeout is not None:
        set_timeout(timeout)
    elif not _REGISTERED:
        set_timeout(float(os.environ.get("PYGGML_RPC_TIMEOUT", DEFAULT_TIMEOUT)))
    reg = lib.ggml_backend_rpc_add_server(endpoint.encode())
    raise_if_failed([endpoint])
    if reg == ffi.NULL:
        raise RpcError(f"RPC server {endpoint}: it reported no device")
    devs = []
    for i in range(lib.ggml_backend_reg_dev_count(reg)):
        d = lib.ggml_backend_reg_dev_get(reg, i)
        if int(ffi.cast("uintptr_t", d)) not in _ENDPOINT_OF_DEVICE:
            lib.ggml_backend_device_register(d)
            _ENDPOINT_OF_DEVICE[int(ffi.cast("uintptr_t", d))] = endpoint
        devs.append(Device(d))
    _REGISTERED[endpoint] = devs
    return list(devs)


def add_servers(spec: str) -> list:
    """`add_server` for each endpoint of a comma-separated list.

    Args:
        spec: 'host:port,host:port,...'; empty entries are skipped.

    Returns:
        All their devices, in order.

    Raises:
        RpcError: a server cannot be reached (see `add_server`).
        ValueError: a malformed endpoint.
    """
    out = []
    for ep in (s.strip() for s in spec.split(",")):
        if ep:
            out.extend(add_server(ep))
    return out


# --- the server --------------------------------------------------------------------------------
def serve(
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    device: str = "cpu",
    threads: int | None = None,
    trust_clients: bool = False,
) -> int:
    """Serve one local device over TCP until killed (`ggml_backend_rpc_start_server`); `python -m pyggml rpc-server`.

    One client connection at a time. A host other than loopback prints a warning: the server has no
    authentication and no encryption.

    Args:
        host: the address to bind.
        port: the TCP port.
        device: the local device to serve ('cpu', 'vulkan0', ...).
        threads: the CPU backend's threads; None: the machine's cores.
        trust_clients: compute CUSTOM and MAP_CUSTOM nodes (they make the server call an address the client
            gives); refused otherwise.

    Returns:
        1, when the server could not start (it returns only then).

    Raises:
        ValueError: no device of that name, or a malformed host or port.
        RuntimeError: this pyggml was built without the RPC backend.
    """
    _require()
    dev = find_device(device)
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(OPEN_NETWORK_WARNING.format(host=host), file=sys.stderr, flush=True)
    endpoint = f"{host}:{port}"
    parse_endpoint(endpoint)
    n_threads = threads if threads is not None else cores()
    devs = ffi.new("ggml_backend_dev_t[]", [dev.ptr])
    if has("ggml_backend_rpc_server_trust_clients"):  # patch 0023 (a build without it trusts every client)
        lib.ggml_backend_rpc_server_trust_clients(bool(trust_clients))
    sys.stdout.flush()
    lib.ggml_backend_rpc_start_server(endpoint.encode(), ffi.NULL, n_threads, 1, devs)
    return 1  # it returns only when it could not bind or set up


def free_port() -> int:
    """A TCP port on 127.0.0.1 free at the time of the call (for a local rpc-server).

    Never a port whose server this process saw fail: ggml's RPC client cannot reach that endpoint again.

    Returns:
        The port number.

    Raises:
        RpcError: 64 ports in a row were ones this process saw fail.
    """
    # ggml's RPC client keeps a failed endpoint failed for the rest of the process: a port whose earlier
    # server died here would be unreachable for a new one (the OS hands freed ports out again)
    for _ in range(64):
        port = _any_free_port()
        if error(f"127.0.0.1:{port}") is None:
            return port
    raise RpcError("no free TCP port on 127.0.0.1 that this process has not seen fail (64 tried)")


def _any_free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def await_server(host: str, port: int, timeout: float, running: Callable[[], bool]) -> str:
    """Poll until a server starting on host:port accepts a connection.

    The probe connection closes without a command: the server moves on.

    Args:
        host: the server's address.
        port: its port.
        timeout: seconds to wait.
        running: tells whether the server process still runs.

    Returns:
        "accepting"; "ended" when `running()` says it stopped first; "timeout" after `timeout` seconds.
    """
    deadline = time.monotonic() + timeout
    while running():
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return "accepting"
        except OSError:
            if time.monotonic() > deadline:
                return "timeout"
            time.sleep(0.05)
    return "ended"


def _end_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


class Server:
    """An RPC server in a child process (`python -m pyggml rpc-server`), for tests and notebooks.

    A context manager that stops the server on exit:

        with Server(device="cpu") as srv:
            [dev] = add_server(srv.endpoint)

    It binds 127.0.0.1, and the constructor waits until the server accepts connections. The server is
    killed when the Server object is collected, if not stopped before.

    Args:
        device: the device to serve.
        port: the port; None: a free one.
        threads: the server's CPU threads; None: the machine's cores.
        startup_timeout: seconds to wait for it to accept.
        env: variables added to the child's environment.
        trust_clients: let it compute CUSTOM and MAP_CUSTOM nodes (see `serve`).
        python: another interpreter to run it with (a server of another pyggml build); None: this one.
        cwd: the child's working folder.

    Attributes:
        host: '127.0.0.1'.
        port: the port.
        endpoint: 'host:port', for `add_server`.
        proc: the child process (`subprocess.Popen`).

    Raises:
        RpcError: the server exited before accepting (with its output), or did not accept in time.
    """

    def __init__(
        self,
        device: str = "cpu",
        port: int | None = None,
        threads: int | None = None,
        startup_timeout: float = 30.0,
        env: dict | None = None,
        trust_clients: bool = False,
        python: str | None = None,
        cwd: str | None = None,
    ) -> None:
        self.host, self.port = "127.0.0.1", port or free_port()
        self.endpoint = f"{self.host}:{self.port}"
        cmd = [
            python or sys.executable,  # another interpreter (and cwd): a server of another pyggml build
            "-m",
            "pyggml",
            "rpc-server",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--device",
            device,
        ]
        if threads is not None:
            cmd += ["--threads", str(threads)]
        if trust_clients:
            cmd += ["--trust-clients"]
        # its output goes to a file: a pipe nobody reads would fill up and block the server
        self.log = tempfile.TemporaryFile()
        # it ends with this process however that one ends (pyggml.parent; the other build's pyggml may not
        # know the variable, and then only stop() and the finalizer below end it)
        child_env = {**os.environ, parent.ENV: str(os.getpid()), **(env or {})}
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=child_env, cwd=cwd)
        # a caller that dies before stop() (a failing test's child process) leaves no server behind
        weakref.finalize(self, _end_process, self.proc)
        state = await_server(self.host, self.port, startup_timeout, lambda: self.proc.poll() is None)
        if state == "ended":
            raise RpcError(f"the RPC server ({' '.join(cmd[2:])}) exited with {self.proc.returncode}:\n{self.output()}")
        if state == "timeout":
            self.stop()
            raise RpcError(f"the RPC server on {self.endpoint} did not accept within {startup_timeout} s")

    def output(self) -> str:
        """What the server printed so far (stdout and stderr).

        Returns:
            The text.
        """
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def kill(self) -> None:
        """Kill the server at once (SIGKILL): what a crash looks like to its clients."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def pause(self) -> None:
        """Stop the server without closing its connections (SIGSTOP): a server that stops answering."""
        import signal

        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused server run again (SIGCONT)."""
        import signal

        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """End the server process: resumed, terminated, killed if it has not ended within 5 s; its log is closed."""
        if self.proc.poll() is None:
            self.resume()
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
