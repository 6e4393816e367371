"""Fuzz ggml's RPC server with malformed messages: `python -m pyggml rpc-fuzz --messages N --seed S`.

A server (`rpc.serve` in a child process, pyggml.testing.child) gets one connection per message: the
HELLO handshake (or, now and then, none or a broken one), a real buffer to aim at (ALLOC_BUFFER,
BUFFER_GET_BASE), then one command built to be wrong: a random command byte, a declared size that
lies (zero, short, huge), a payload cut off, and for the commands that carry tensors
(SET/GET/COPY/MEMSET/INIT_TENSOR, GET_ALLOC_SIZE, GRAPH_COMPUTE) tensor descriptions with random
types, extents, strides, offsets, data pointers inside and outside the buffer, sources and op
parameters. After each message the server must still be running and answer a fresh HELLO. A server
that died is a crash: its message is printed as hex (a reproducer) and a new server is started.
Exit status 1 if any crash.

The wire format is ggml-rpc's (ggml-rpc.cpp): a request is | cmd (1 byte) | size (8) | payload |, a
response | size (8) | payload |, every structure packed.
"""

from __future__ import annotations

import argparse
import random
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import TextIO

from pyggml import rpc
from pyggml._args import at_least
from pyggml.testing import child
from pyggml.testing.child import Outcome

HELLO, ALLOC_BUFFER, BUFFER_GET_BASE = 14, 0, 3
SET_TENSOR, GET_TENSOR, COPY_TENSOR, GRAPH_COMPUTE = 6, 8, 9, 10
INIT_TENSOR, GET_ALLOC_SIZE, MEMSET_TENSOR, SET_TENSOR_HASH = 12, 13, 17, 7
N_CMDS = 20
TENSOR_SIZE = 296  # sizeof(rpc_tensor), packed
MAX_SRC, N_OP_PARAMS = 10, 16


def _request(cmd: int, payload: bytes, declared: int | None = None) -> bytes:
    return struct.pack("<BQ", cmd, len(payload) if declared is None else declared) + payload


def _recv_exact(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def _call(s: socket.socket, cmd: int, payload: bytes) -> bytes:
    s.sendall(_request(cmd, payload))
    (size,) = struct.unpack("<Q", _recv_exact(s, 8))
    return _recv_exact(s, size)


def hello(s: socket.socket) -> bool:
    try:
        rsp = _call(s, HELLO, bytes(24))
        return len(rsp) == 28
    except OSError:
        return False


class Fuzzer:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def u64(self, near: int | None = None) -> int:
        r = self.rng
        choice = r.random()
        if near is not None and choice < 0.5:
            return max(0, near + r.choice([0, 0, 1, -1, 8, 4096, -4096, 1 << 20, r.randrange(-1 << 16, 1 << 16)])) % (
                1 << 64
            )
        if choice < 0.7:
            return r.choice([0, 1, 8, 4096, (1 << 32) - 1, (1 << 63), (1 << 64) - 1])
        return r.getrandbits(64)

    def tensor(self, buffer: int, base: int, ids: list[int]) -> bytes:
        r = self.rng
        tid = r.choice(ids) if ids and r.random() < 0.7 else r.getrandbits(64)
        ttype = r.choice([0, 1, 2, 8, 26, 30, 39, r.randrange(0, 256), (1 << 32) - 1])
        ne = [r.choice([0, 1, 2, 3, 16, 64, 1 << 16, (1 << 32) - 1, r.randrange(0, 1 << 32)]) for _ in range(4)]
        nb = [r.choice([0, 1, 2, 4, 8, 64, 256, 1 << 20, (1 << 32) - 1, r.randrange(0, 1 << 32)]) for _ in range(4)]
        op = r.choice([0, 1, 2, 6, 26, 29, 30, 33, 35, 40, r.randrange(0, 128)])
        params = [r.choice([0, 1, -1, 2, 1 << 30, r.getrandbits(31)]) for _ in range(N_OP_PARAMS)]
        flags = r.choice([0, 1, 2, 4, 8, r.getrandbits(31)])
        srcs = [
            r.choice(ids) if ids and r.random() < 0.3 else (0 if r.random() < 0.6 else r.getrandbits(64))
            for _ in range(MAX_SRC)
        ]
        view_src = r.choice(ids) if ids and r.random() < 0.2 else 0
        data = self.u64(near=base)
        buf = buffer if r.random() < 0.8 else self.u64()
        name = bytes(r.getrandbits(8) for _ in range(64)) if r.random() < 0.2 else b"t".ljust(64, b"\0")
        return struct.pack(
            "<QIQ4I4II16iI10QQQQ64si",
            tid,
            ttype,
            buf,
            *ne,
            *nb,
            op,
            *params,
            flags & 0x7FFFFFFF,
            *srcs,
            view_src,
            self.u64(),
            data,
            name,
            r.getrandbits(31),
        )

    def message(self, buffer: int, base: int) -> bytes:
        """One malformed request (after the handshake)."""
        r = self.rng
        ids = [r.getrandbits(64) for _ in range(r.randrange(1, 5))]
        t = lambda: self.tensor(buffer, base, ids)  # noqa: E731
        kind = r.random()
        if kind < 0.15:  # a random command with a random payload and a size that may lie
            payload = bytes(r.getrandbits(8) for _ in range(r.choice([0, 1, 7, 12, 64, TENSOR_SIZE, 700])))
            declared = r.choice([None, None, 0, len(payload) + 1, 1 << 40, (1 << 64) - 1])
            return _request(r.randrange(0, 256) if r.random() < 0.2 else r.randrange(0, N_CMDS), payload, declared)
        cmd = r.choice(
            [
                SET_TENSOR,
                GET_TENSOR,
                COPY_TENSOR,
                GRAPH_COMPUTE,
                INIT_TENSOR,
                GET_ALLOC_SIZE,
                MEMSET_TENSOR,
                SET_TENSOR_HASH,
                ALLOC_BUFFER,
                BUFFER_GET_BASE,
                4,
                5,
                1,
                2,
                11,
            ]
        )
        if cmd == SET_TENSOR:
            data = bytes(r.getrandbits(8) for _ in range(r.choice([0, 1, 16, 300])))
            payload = t() + struct.pack("<BQ", r.choice([0, 0, 1, 2]), self.u64()) + data
        elif cmd in (GET_TENSOR, SET_TENSOR_HASH):
            payload = t() + struct.pack("<QQ", self.u64(), r.choice([0, 1, 16, 4096, 1 << 31, self.u64()]))
        elif cmd == COPY_TENSOR:
            payload = t() + t()
        elif cmd == MEMSET_TENSOR:
            payload = t() + struct.pack("<QQB", self.u64(), self.u64(), r.getrandbits(8))
        elif cmd == INIT_TENSOR:
            payload = t()
        elif cmd == GET_ALLOC_SIZE:
            payload = struct.pack("<I", r.choice([0, 0, 1, (1 << 32) - 1])) + b"".join(t() for _ in range(1 + MAX_SRC))
        elif cmd == GRAPH_COMPUTE:
            n_tensors = r.choice([0, 1, 2, 3, 5])
            tensors = [t() for _ in range(n_tensors)]
            n_nodes = r.choice([0, 1, 2, n_tensors, 1 << 20])
            node_ids = [r.choice(ids + [0, r.getrandbits(64)]) for _ in range(min(n_nodes, 8))]
            payload = (
                struct.pack("<II", r.choice([0, 0, 1, 7]), n_nodes)
                + b"".join(struct.pack("<Q", i) for i in node_ids)
                + struct.pack("<I", r.choice([n_tensors, n_tensors + 1, 1 << 30]))
                + b"".join(tensors)
            )
        elif cmd == ALLOC_BUFFER:
            payload = struct.pack("<IQ", r.choice([0, 1, (1 << 32) - 1]), r.choice([0, 1, 1 << 40, (1 << 64) - 1]))
        elif cmd in (BUFFER_GET_BASE, 4):
            payload = struct.pack("<Q", buffer if r.random() < 0.3 else self.u64(near=buffer))
        elif cmd == 5:
            payload = struct.pack("<QB", self.u64(near=buffer), 7)
        else:  # GET_ALIGNMENT, GET_MAX_SIZE, GET_DEVICE_MEMORY: a device index
            payload = struct.pack("<I", r.choice([0, 1, 5, (1 << 32) - 1]))
        if r.random() < 0.1:  # cut off, or a size that lies
            cut = r.randrange(0, len(payload) + 1)
            return _request(cmd, payload[:cut], declared=len(payload))
        return _request(cmd, payload)


def _setup(s: socket.socket) -> tuple[int, int]:
    """A real buffer on the server: (remote buffer, base address)."""
    rsp = _call(s, ALLOC_BUFFER, struct.pack("<IQ", 0, 4096))
    buffer, _ = struct.unpack("<QQ", rsp)
    (base,) = struct.unpack("<Q", _call(s, BUFFER_GET_BASE, struct.pack("<Q", buffer)))
    return buffer, base


class Server:
    """ggml's RPC server of the CPU (one thread) on a free local port, in a child process."""

    def __init__(self, startup_timeout: float = 30.0) -> None:
        self.host, self.port = "127.0.0.1", rpc.free_port()
        self.child = child.start(rpc.serve, (self.host, self.port, "cpu", 1))
        state = rpc.await_server(self.host, self.port, startup_timeout, self.running)
        if state == "ended":
            raise rpc.RpcError(f"the RPC server on port {self.port} ended: {self.stop().stderr[-2000:]}")
        if state == "timeout":
            self.stop()
            raise rpc.RpcError(f"the RPC server on port {self.port} did not accept within {startup_timeout} s")

    def running(self) -> bool:
        """Whether its process is still running (answering or not)."""
        return self.child.poll() is None

    def stop(self) -> Outcome:
        """Kill it (if it still runs) and say how its process ended, with what it printed."""
        self.child.kill()
        return self.child.wait()


def alive(host: str, port: int, running: Callable[[], bool]) -> bool:
    """Whether the server on host:port, its process still `running`, answers a fresh HELLO."""
    if not running():
        return False
    try:
        with socket.create_connection((host, port), timeout=10) as s:
            s.settimeout(10)
            return hello(s)
    except OSError:
        return running() and _retry_hello(host, port)


def _retry_hello(host: str, port: int) -> bool:
    time.sleep(0.2)
    try:
        with socket.create_connection((host, port), timeout=10) as s:
            s.settimeout(10)
            return hello(s)
    except OSError:
        return False


def run(messages: int, seed: int, out: TextIO = sys.stdout) -> dict:
    fz = Fuzzer(seed)
    srv = Server()
    crashes, sent = [], 0
    try:
        for i in range(messages):
            msg = b""
            try:
                with socket.create_connection((srv.host, srv.port), timeout=10) as s:
                    s.settimeout(5)
                    buffer = base = 0
                    if fz.rng.random() < 0.95:
                        if not hello(s):
                            raise ConnectionError("handshake refused")
                        buffer, base = _setup(s)
                    elif fz.rng.random() < 0.5:
                        s.sendall(_request(HELLO, bytes(fz.rng.choice([0, 3, 24, 30]))))
                    msg = fz.message(buffer, base)
                    s.sendall(msg)
                    sent += 1
                    try:
                        s.recv(1 << 16)  # an answer, or the server closing the connection
                    except OSError:
                        pass
            except OSError:
                pass
            if not alive(srv.host, srv.port, srv.running):
                code = srv.child.poll()  # None: running but not answering
                ended = srv.stop()
                why = [
                    line
                    for line in (ended.stdout + ended.stderr).splitlines()
                    if "aborted" in line or "error" in line.lower()
                ]
                out.write(
                    f"CRASH at message {i} (seed {seed}): server exit {code}: "
                    f"{why[-1] if why else '(no message)'}\n  request: {msg.hex()}\n"
                )
                crashes.append((i, msg.hex()))
                srv = Server()
    finally:
        srv.stop()
    return {"messages": messages, "sent": sent, "crashes": len(crashes), "reproducers": crashes}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `python -m pyggml rpc-fuzz`."""
    p.add_argument("--messages", type=at_least(1), default=200)
    p.add_argument("--seed", type=at_least(0), default=0)


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run `python -m pyggml rpc-fuzz` with its parsed options (parser: unused, every fuzzer's main takes it)."""
    if not rpc.available():
        print("this pyggml was built without ggml's RPC backend", file=sys.stderr)
        return 2
    t = time.monotonic()
    res = run(args.messages, args.seed)
    print(
        f"{res['messages']} messages ({res['sent']} sent whole), {res['crashes']} server crashes, "
        f"{time.monotonic() - t:.0f} s"
    )
    return 1 if res["crashes"] else 0
