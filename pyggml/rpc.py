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

Refusals: with our patch 0023 the server checks every graph before it runs it (README: "The RPC server's
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
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from pyggml import parent, transport
from pyggml._native import ffi, lib
from pyggml.errors import GGMLError

if TYPE_CHECKING:
    from pyggml._pyggml_cffi import CData

DEFAULT_PORT = 50052
DEFAULT_TIMEOUT = 60.0
OPEN_NETWORK_WARNING = (
    "WARNING: the RPC server binds {host}, not 127.0.0.1. It has no authentication and no encryption: "
    "anyone who reaches the port can use the device and read what its clients sent. Never expose it to an "
    "open network: bind loopback, or reach it through a tunnel."
)

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
    return hasattr(lib, "ggml_backend_rpc_add_server")


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
    if not hasattr(lib, "ggml_backend_rpc_take_refusal"):
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
        RpcError: the server cannot be reached, is not an RPC server, or reports no device.
        ValueError: a malformed endpoint or timeout.
        RuntimeError: this pyggml was built without the RPC backend.
    """
    _require()
    from pyggml.backend import Device

    parse_endpoint(endpoint)
    if endpoint in _REGISTERED and error(endpoint) is None:
        return list(_REGISTERED[endpoint])
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
    from pyggml.backend import device as find_device

    dev = find_device(device)
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(OPEN_NETWORK_WARNING.format(host=host), file=sys.stderr, flush=True)
    endpoint = f"{host}:{port}"
    parse_endpoint(endpoint)
    n_threads = threads if threads is not None else (os.cpu_count() or 1)
    devs = ffi.new("ggml_backend_dev_t[]", [dev.ptr])
    if hasattr(lib, "ggml_backend_rpc_server_trust_clients"):  # patch 0023 (a build without it trusts every client)
        lib.ggml_backend_rpc_server_trust_clients(bool(trust_clients))
    sys.stdout.flush()
    lib.ggml_backend_rpc_start_server(endpoint.encode(), ffi.NULL, n_threads, 1, devs)
    return 1  # it returns only when it could not bind or set up


def free_port() -> int:
    """A TCP port on 127.0.0.1 free at the time of the call (for a local rpc-server).

    Returns:
        The port number.
    """
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
