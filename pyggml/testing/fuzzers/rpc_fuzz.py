"""Fuzz ggml's RPC server: malformed messages (`--messages N`) or mutated graphs (`--graphs N`).

    python -m pyggml rpc-fuzz --messages N --seed S
    python -m pyggml rpc-fuzz --graphs N --seed S [--mutations M] [--only PATTERN]

Messages:
A server (`rpc.serve` in a child process, pyggml.testing.engine.child) gets one connection per message: the
HELLO handshake (or, now and then, none or a broken one), a real buffer to aim at (ALLOC_BUFFER,
BUFFER_GET_BASE), then one command built to be wrong: a random command byte, a declared size that
lies (zero, short, huge), a payload cut off, and for the commands that carry tensors
(SET/GET/COPY/MEMSET/INIT_TENSOR, GET_ALLOC_SIZE, GRAPH_COMPUTE) tensor descriptions with random
types, extents, strides, offsets, data pointers inside and outside the buffer, sources and op
parameters. After each message the server must still be running and answer a fresh HELLO. A server
that died is a crash: its message is printed as hex (a reproducer) and a new server is started.
Exit status 1 if any crash.

Graphs: valid graphs from the suite's op cases (pyggml.testing.engine.cases), laid out by hand in one server
buffer with canary bytes around every tensor (pyggml.testing.fuzzers.rpc_wire.Arena) and computed once as they
are, then mutated at the level of their meaning, M mutations per graph: op_params, extents (empty ones
included: an extent of 0 with ggml's strides for it), strides, types, sources, op values, the node list
(id 0, repeats, unknown ids, dropped nodes), index values out of range, data pointers, views, and chains
of sources thousands deep. After each mutated graph the
server must be running, must not have changed a byte outside the destinations of the nodes it was sent
(whether it computed the graph or refused it), and must compute the unmutated graph again to the same
bytes. A death, a write outside or a wrong answer afterwards is a failure, printed with its case and
mutation; the server is restarted after a death.

The wire format is ggml-rpc's (ggml-rpc.cpp, pyggml.testing.fuzzers.rpc_wire).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np

from pyggml import rpc
from pyggml._args import at_least
from pyggml.testing.engine import child
from pyggml.testing.engine.child import Outcome
from pyggml.testing.fuzzers import rpc_wire
from pyggml.testing.fuzzers.rpc_wire import (
    ALLOC_BUFFER,
    BUFFER_GET_BASE,
    COPY_TENSOR,
    GET_ALLOC_SIZE,
    GET_TENSOR,
    GRAPH_COMPUTE,
    HELLO,
    INIT_TENSOR,
    MAX_SRC,
    MEMSET_TENSOR,
    N_CMDS,
    N_OP_PARAMS,
    SET_TENSOR,
    SET_TENSOR_HASH,
    TENSOR_SIZE,
)
from pyggml.testing.fuzzers.rpc_wire import call as _call
from pyggml.testing.fuzzers.rpc_wire import request as _request
from pyggml.types import Op

__all__ = ["GET_TENSOR", "HELLO", "SET_TENSOR", "hello", "alive", "run", "run_graphs"]


def hello(s: socket.socket) -> bool:
    return rpc_wire.hello(s) is not None


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


# --- graph mode -------------------------------------------------------------------------------------
Desc = rpc_wire.Desc
_WRITES_SOURCES = {"OPT_STEP_ADAMW": (2, 3)}  # ops that update sources in place besides their result


@dataclasses.dataclass
class WireGraph:
    """A case's graph as the wire carries it, laid out in an arena: nodes in order, every tensor by id,
    and the arena's bytes before the compute (inputs written, canaries around every tensor)."""

    case: str
    ids: list[int]
    tensors: dict[int, Desc]
    before: bytes
    indices: list[tuple[int, int]]  # (index tensor id, rows it addresses) of the index-reading nodes

    def all(self) -> list[Desc]:
        return list(self.tensors.values())


def _op_name(op: int) -> str:
    try:
        return Op(op).name
    except ValueError:
        return str(op)


def wire_graph(case: Any, arena: rpc_wire.Arena) -> WireGraph:
    """Lay out an op case's graph in `arena` and describe it as the wire carries it: each tensor that owns
    its memory (no view_src) gets a place of its own, a view its root's place plus its offset."""
    from pyggml._native import ffi, lib

    ctx, x, out, graph = case.build()
    raw = case.raw_values()
    inputs = {int(ffi.cast("uintptr_t", t.ptr)): np.ascontiguousarray(raw[k]).tobytes() for k, t in x.items()}
    ptrs: dict[int, Any] = {}

    def add(p) -> None:
        if p != ffi.NULL and int(ffi.cast("uintptr_t", p)) not in ptrs:
            ptrs[int(ffi.cast("uintptr_t", p))] = p

    nodes = [n.ptr for n in graph.nodes]
    for p in nodes:
        add(p)
        add(p.view_src)
        for j in range(MAX_SRC):
            add(p.src[j])
            if p.src[j] != ffi.NULL:
                add(p.src[j].view_src)
    ids = {k: arena.new_id() for k in ptrs}
    key = lambda p: int(ffi.cast("uintptr_t", p))  # noqa: E731
    place: dict[int, int] = {}
    for k, p in ptrs.items():
        if p.view_src == ffi.NULL:
            d = arena.place(p.type, list(p.ne), nbytes=int(lib.ggml_nbytes(p)))
            place[k] = d.data
            arena.tensors.remove(d)
            if k in inputs:
                arena.conn.write(arena.buffer, d.data, inputs[k])
            elif p.op == lib.GGML_OP_NONE:  # another leaf: some values
                arena.conn.write(arena.buffer, d.data, np.random.default_rng(k % 1000).bytes(int(lib.ggml_nbytes(p))))
    node_keys = {key(p) for p in nodes}
    tensors: dict[int, Desc] = {}
    for k, p in ptrs.items():
        data = place[k] if p.view_src == ffi.NULL else place[key(p.view_src)] + int(p.view_offs)
        tensors[ids[k]] = Desc(
            ids[k],
            int(p.type),
            tuple(int(n) for n in p.ne),
            tuple(int(n) for n in p.nb),
            buffer=arena.buffer,
            data=data,
            op=int(p.op),
            op_params=bytes(ffi.buffer(p.op_params)),
            flags=int(p.flags) | (16 if k in node_keys else 0),
            src=tuple(ids[key(p.src[j])] if k in node_keys and p.src[j] != ffi.NULL else 0 for j in range(MAX_SRC)),
            view_src=ids[key(p.view_src)] if p.view_src != ffi.NULL else 0,
            view_offs=int(p.view_offs),
        )
    index_ops = {
        int(Op.GET_ROWS): (1, lambda n, t: t[n.src[0]].ne[1]),
        int(Op.SET_ROWS): (1, lambda n, t: t[n.src[2]].ne[1]),
        int(Op.MUL_MAT_ID): (2, lambda n, t: t[n.src[0]].ne[2]),
        int(Op.ADD_ID): (2, lambda n, t: t[n.src[1]].ne[1]),
    }
    indices = []
    for p in nodes:
        n = tensors[ids[key(p)]]
        if n.op in index_ops:
            i, rows = index_ops[n.op]
            indices.append((n.src[i], int(rows(n, tensors))))
    del ctx
    return WireGraph(case.name, [ids[key(p)] for p in nodes], tensors, arena.snapshot(), indices)


class Mutator:
    """Changes a wire graph the way a hostile client would, one field of meaning at a time."""

    INTS = [0, 1, -1, 2, 3, 7, 8, 64, 255, 4096, 1 << 20, 1 << 30, 0x7FFFFFFF, -0x80000000]
    FLOATS = [0.0, -1.0, 1e30, -1e30, float("inf"), float("nan"), 1e-40, 2.0]

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def mutate(
        self, g: WireGraph, arena: rpc_wire.Arena
    ) -> tuple[list[int], dict[int, Desc], list[tuple[int, bytes]], str]:
        """(node ids, tensors, bytes to write before the compute, what was done)."""
        r = self.rng
        ids = list(g.ids)
        tensors = {k: dataclasses.replace(v) for k, v in g.tensors.items()}
        writes: list[tuple[int, bytes]] = []
        done = []
        for _ in range(r.choice([1, 1, 1, 2, 3])):
            kind = r.choice(
                ["op_params"] * 4
                + ["ne"] * 3
                + ["empty"] * 2
                + ["nb"] * 3
                + ["type"] * 2
                + ["src"] * 3
                + ["op"] * 2
                + ["nodes"] * 2
                + ["index"] * 3
                + ["data"] * 2
                + ["view"] * 2
                + ["depth"]
                + ["flags"]
            )
            known = [i for i in ids if i in tensors]
            node = tensors[r.choice(known)] if known else None
            t = r.choice(list(tensors.values()))
            if kind == "op_params" and node is not None:
                slot = r.randrange(N_OP_PARAMS)
                v = r.choice(self.INTS + [r.getrandbits(32) - (1 << 31)])
                packed = struct.pack("<f", r.choice(self.FLOATS)) if r.random() < 0.3 else struct.pack("<i", v)
                node.op_params = node.op_params[: 4 * slot] + packed + node.op_params[4 * slot + 4 :]
                done.append(f"op_params[{slot}] of {node.id} = {packed.hex()}")
            elif kind == "ne":
                i = r.randrange(4)
                ne = list(t.ne)
                ne[i] = max(0, r.choice([ne[i] + 1, ne[i] - 1, ne[i] * 2, 1, 0, ne[i] * 1000, r.getrandbits(31)]))
                t.ne = tuple(ne)
                if r.random() < 0.5:  # strides that follow: sources that disagree, each well formed
                    nb = [t.nb[0], t.nb[0] * ne[0]]
                    nb += [nb[1] * ne[1], nb[1] * ne[1] * ne[2]]
                    t.nb = tuple(min(x, (1 << 32) - 1) for x in nb)
                done.append(f"ne of {t.id} = {t.ne}")
            elif kind == "empty":  # an extent of 0, as a meta device holding no share of a split gets
                i = r.randrange(4)
                ne = list(t.ne)
                ne[i] = 0
                t.ne = tuple(ne)
                if r.random() < 0.7:  # the strides ggml gives it: 0 past the empty extent
                    nb = [t.nb[0], t.nb[0] * ne[0]]
                    nb += [nb[1] * ne[1], nb[1] * ne[1] * ne[2]]
                    t.nb = tuple(nb)
                done.append(f"ne of {t.id} = {t.ne} (empty)")
            elif kind == "nb":
                i = r.randrange(4)
                nb = list(t.nb)
                nb[i] = r.choice([0, 1, 2, nb[i] + 4, nb[i] * 2, nb[i] // 2, t.nb[(i + 1) % 4], (1 << 32) - 1])
                t.nb = tuple(nb)
                done.append(f"nb of {t.id} = {t.nb}")
            elif kind == "type":
                t.type = r.choice([0, 1, 2, 8, 12, 16, 24, 25, 26, 27, 28, 30, 39, r.randrange(0, 45)])
                done.append(f"type of {t.id} = {t.type}")
            elif kind == "src" and node is not None:
                j = r.randrange(4 if r.random() < 0.8 else MAX_SRC)
                src = list(node.src) + [0] * (MAX_SRC - len(node.src))
                src[j] = r.choice([0, node.id, r.choice(list(tensors)), r.getrandbits(64), r.choice(known)])
                node.src = tuple(src)
                done.append(f"src[{j}] of {node.id} = {src[j]}")
            elif kind == "op" and node is not None:
                node.op = r.choice([r.randrange(0, 101), r.randrange(0, 101), 101, 0xFFFFFFFF, r.randrange(90, 101)])
                done.append(f"op of {node.id} = {_op_name(node.op)}")
            elif kind == "nodes":
                how = r.choice(["zero", "repeat", "unknown", "drop", "swap"])
                if how == "zero":
                    ids.insert(r.randrange(len(ids) + 1), 0)
                elif how == "repeat" and ids:
                    ids.insert(r.randrange(len(ids) + 1), r.choice(ids))
                elif how == "unknown":
                    ids.append(r.getrandbits(63))
                elif how == "drop" and len(ids) > 1:
                    ids.pop(r.randrange(len(ids)))
                elif how == "swap" and len(ids) > 1:
                    i, j = r.randrange(len(ids)), r.randrange(len(ids))
                    ids[i], ids[j] = ids[j], ids[i]
                done.append(f"node list {how}")
            elif kind == "index" and g.indices:
                idx, rows = r.choice(g.indices)
                d = g.tensors[idx]  # where the index lies in the arena, whatever the mutations say
                v = r.choice([rows, rows + 1, -1, -(1 << 31), 1 << 30, rows * 1000])
                fmt = "<q" if d.type == 27 else "<i"
                at = r.randrange(max(1, d.ne[0]))
                writes.append(
                    (
                        d.data + at * d.nb[0],
                        struct.pack(fmt, max(-(1 << 31), min(v, (1 << 31) - 1)) if fmt == "<i" else v),
                    )
                )
                done.append(f"index {idx}[{at}] = {v} (rows {rows})")
            elif kind == "data":
                t.data = max(0, t.data + r.choice([1, 4, -4, 64, -64, 4096, arena.size, -(1 << 20), 1 << 40]))
                done.append(f"data of {t.id} moved")
            elif kind == "view":
                if r.random() < 0.5:
                    t.view_src = r.choice([0, r.choice(list(tensors)), t.id])
                else:
                    t.view_offs = max(0, t.view_offs + r.choice([4, -4, 64, 1 << 20]))
                done.append(f"view of {t.id} = {t.view_src}+{t.view_offs}")
            elif kind == "depth" and node is not None and any(x in tensors for x in node.src):
                j = next(j for j, x in enumerate(node.src) if x in tensors)
                depth = r.choice([2, 100, 5000, 50000])
                as_nodes = r.random() < 0.3 and depth <= 5000
                nxt = node.src[j]
                base = tensors[nxt]
                for _ in range(depth):  # aliases of the source, each the next one's source (or a view of it)
                    a = dataclasses.replace(base, id=arena.new_id(), op=int(Op.DUP), src=(nxt,), flags=0)
                    if as_nodes:  # views of the source's memory, each a node viewing the one before
                        a.op, a.flags, a.view_src = int(Op.VIEW), 16, base.view_src or base.id
                        a.op_params = bytes(4 * N_OP_PARAMS)
                        ids.insert(ids.index(node.id), a.id)
                    tensors[a.id] = a
                    nxt = a.id
                src = list(node.src)
                src[j] = nxt
                node.src = tuple(src)
                done.append(
                    f"a chain of {depth} {'VIEW nodes' if as_nodes else 'aliases'} before src[{j}] of {node.id}"
                )
            elif kind == "flags":
                t.flags = r.choice([0, 1, 2, 4, 8, 16, 31, r.getrandbits(31)])
                done.append(f"flags of {t.id} = {t.flags}")
        return ids, tensors, writes, "; ".join(done) or "nothing"


def _allowed(ids: list[int], tensors: dict[int, Desc]) -> list[Desc]:
    """What the nodes sent may write: their own bytes, and the moments adamw updates."""
    out = []
    for i in ids:
        n = tensors.get(i)
        if n is None:
            continue
        out.append(n)
        for j in _WRITES_SOURCES.get(_op_name(n.op), ()):
            if j < len(n.src) and n.src[j] in tensors:
                out.append(tensors[n.src[j]])
    return out


class GraphServer:
    """An RPC server (one compute thread) and one connection to it, restarted when it dies."""

    def __init__(self) -> None:
        self.start()

    def start(self) -> None:
        self.srv = rpc.Server(threads=1)
        self.conn = rpc_wire.Connection(self.srv.host, self.srv.port, timeout=120)

    def running(self) -> bool:
        return self.srv.proc.poll() is None

    def why(self) -> str:
        lines = [ln for ln in self.srv.output().splitlines() if ln.strip() and "Accepted" not in ln]
        return lines[-1][:300] if lines else "(no message)"

    def restart(self) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        try:
            self.conn.close()
        finally:
            self.srv.stop()


def run_graphs(
    graphs: int, seed: int, mutations: int = 5, pattern: str | None = None, out: TextIO = sys.stdout
) -> dict:
    """`graphs` op cases (chosen at random with `seed`), each computed as it is and then mutated
    `mutations` times. Returns the counts and the failures (deaths, writes outside, wrong answers)."""
    from pyggml.testing.engine import cases as case_registry

    rng = random.Random(seed)
    pool = [c for c in case_registry.select(pattern) if isinstance(c, case_registry.OpCase)]
    mutator = Mutator(rng)
    counts = {"graphs": 0, "skipped": 0, "mutated": 0, "refused": 0, "computed": 0}
    failures: list[str] = []
    gs = GraphServer()

    def fail(what: str) -> None:
        failures.append(what)
        out.write(f"FAIL {what}\n")
        out.flush()

    t0 = time.monotonic()
    try:
        for n in range(graphs):
            if n and n % 500 == 0:  # a long run shows where it is
                out.write(f"[{n}/{graphs}] {counts} {len(failures)} failures, {time.monotonic() - t0:.0f} s\n")
                out.flush()
            case = rng.choice(pool)
            try:
                arena = rpc_wire.Arena(gs.conn, size=_arena_size(case))
                g = wire_graph(case, arena)
            except Exception as e:  # noqa: BLE001 - a case this layout cannot take (too big, no storage)
                counts["skipped"] += 1
                out.write(f"skip {case.name}: {type(e).__name__}: {e}\n")
                continue
            base = gs.conn.compute(g.ids, g.all())
            if base is None or base[0] != rpc_wire.COMPUTED:
                counts["skipped"] += 1  # the server refuses the case as it is (a type the CPU cannot do)
                gs.conn.free(arena.buffer)
                continue
            reference = arena.snapshot()
            counts["graphs"] += 1
            for m in range(mutations):
                ids, tensors, writes, what = mutator.mutate(g, arena)
                tag = f"{case.name} (seed {seed}, mutation {m}): {what}"
                counts["mutated"] += 1
                try:
                    arena.conn.write(arena.buffer, arena.base, g.before)
                    for at, data in writes:
                        arena.conn.write(arena.buffer, at, data)
                    before = arena.snapshot()
                    answer = gs.conn.compute(ids, list(tensors.values()))
                    after = arena.snapshot()
                except OSError as e:
                    state = "running" if gs.running() else "dead"
                    fail(f"{tag}: the connection broke ({e}); server {state}: {gs.why()}")
                    gs.restart()
                    break
                if answer is not None and answer[0] != rpc_wire.COMPUTED:
                    counts["refused"] += 1
                    allowed: list[Desc] = (
                        [] if answer[0] == rpc_wire.REFUSED and "index" not in answer[1] else _allowed(ids, tensors)
                    )
                else:
                    counts["computed"] += 1
                    allowed = _allowed(ids, tensors)
                bad = arena.outside(arena.changed(before, after), allowed)
                if bad:
                    fail(f"{tag}: {sum(e - s for s, e in bad)} bytes changed outside the destinations ({bad[:3]})")
                arena.conn.write(arena.buffer, arena.base, g.before)
                again = gs.conn.compute(g.ids, g.all())
                if again is None or again[0] != rpc_wire.COMPUTED or arena.snapshot() != reference:
                    fail(f"{tag}: the unmutated graph then computed differently ({again})")
            else:
                gs.conn.free(arena.buffer)
    finally:
        gs.stop()
    return {**counts, "failures": failures}


def _arena_size(case: Any) -> int:
    """Room for every tensor of the case's graph with canaries around each (a guess from its inputs)."""
    total = sum(int(np.prod(i.shape)) * 8 for i in case.inputs.values())
    return int(min(64 << 20, max(1 << 20, 16 * total)))


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `python -m pyggml rpc-fuzz`."""
    p.add_argument("--messages", type=at_least(1), default=200, help="malformed messages to send (default mode)")
    p.add_argument("--graphs", type=at_least(1), help="mutate this many op cases' graphs instead (graph mode)")
    p.add_argument("--mutations", type=at_least(1), default=5, help="graph mode: mutations per graph (default 5)")
    p.add_argument("--only", metavar="PATTERN", help="graph mode: only the cases whose name matches")
    p.add_argument("--seed", type=at_least(0), default=0)


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run `python -m pyggml rpc-fuzz` with its parsed options (parser: unused, every fuzzer's main takes it)."""
    if not rpc.available():
        print("this pyggml was built without ggml's RPC backend", file=sys.stderr)
        return 2
    t = time.monotonic()
    if args.graphs:
        g = run_graphs(args.graphs, args.seed, args.mutations, args.only)
        print(
            f"{g['graphs']} graphs ({g['skipped']} skipped), {g['mutated']} mutated: {g['refused']} refused, "
            f"{g['computed']} computed; {len(g['failures'])} failures, {time.monotonic() - t:.0f} s"
        )
        return 1 if g["failures"] else 0
    res = run(args.messages, args.seed)
    print(
        f"{res['messages']} messages ({res['sent']} sent whole), {res['crashes']} server crashes, "
        f"{time.monotonic() - t:.0f} s"
    )
    return 1 if res["crashes"] else 0
