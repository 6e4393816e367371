"""ggml-rpc's wire protocol spoken from Python, for what no ggml client would send: the server's fuzzers
(`pyggml.testing.fuzzers.rpc_fuzz`) and the graph attacks (`pyggml.testing.fuzzers.rpc_attacks`).

A request is | cmd (1 byte) | size (8) | payload |, a response | size (8) | payload |, every structure
packed (ggml-rpc.cpp). A tensor travels as `rpc_tensor` (296 bytes): id, type, buffer, ne[4] and nb[4]
as uint32, op, 16 int32 op_params, flags, 10 source ids, view_src, view_offs, data, name, use_count.
Ids are the client's to choose (ggml's client sends its tensor pointers); 0 means none.

`Connection` does the handshake, allocates buffers and moves bytes; `Arena` lays tensors out in one
server buffer with canary bytes between them and says afterwards which bytes changed.
"""

from __future__ import annotations

import dataclasses
import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ALLOC_BUFFER, GET_ALIGNMENT, GET_MAX_SIZE, BUFFER_GET_BASE, FREE_BUFFER, BUFFER_CLEAR = 0, 1, 2, 3, 4, 5
SET_TENSOR, SET_TENSOR_HASH, GET_TENSOR, COPY_TENSOR, GRAPH_COMPUTE, GET_DEVICE_MEMORY = 6, 7, 8, 9, 10, 11
INIT_TENSOR, GET_ALLOC_SIZE, HELLO, DEVICE_COUNT, GRAPH_RECOMPUTE, MEMSET_TENSOR = 12, 13, 14, 15, 16, 17
GRAPH_ANSWERS = 18  # pyggml's extension (patch 0030): answer graph commands on this connection
N_CMDS = 21
OFFERS_GRAPH_ANSWERS = 1  # a pyggml server's HELLO sets this bit of its padding byte (upstream's clients ignore it)
TENSOR_FORMAT = "<QIQ4I4II16iI10QQQQ64si"
TENSOR_SIZE = struct.calcsize(TENSOR_FORMAT)  # 296
MAX_SRC, N_OP_PARAMS = 10, 16
GRAPH_ANSWER_SIZE = 128  # rpc_msg_graph_compute_rsp: status, message[127] (patches 0023, 0030)
COMPUTED, REFUSED, FAILED = 0, 1, 2
I8 = 24  # GGML_TYPE_I8: the type of a plain byte range


def request(cmd: int, payload: bytes, declared: int | None = None) -> bytes:
    return struct.pack("<BQ", cmd, len(payload) if declared is None else declared) + payload


def recv_exact(s: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(min(n - len(out), 1 << 20))
        if not chunk:
            raise ConnectionError("the server closed the connection")
        out += chunk
    return bytes(out)


def call(s: socket.socket, cmd: int, payload: bytes) -> bytes:
    s.sendall(request(cmd, payload))
    (size,) = struct.unpack("<Q", recv_exact(s, 8))
    return recv_exact(s, size)


def hello(s: socket.socket) -> tuple[int, int, int] | None:
    """The server's protocol version (major, minor, patch), or None if it did not answer as one."""
    answer = hello_answer(s)
    return answer[:3] if answer is not None else None


def hello_answer(s: socket.socket) -> tuple[int, int, int, int] | None:
    """HELLO as upstream's 7.0 client sends it (24 zero bytes of transport caps): the answer's major, minor,
    patch and padding byte (OFFERS_GRAPH_ANSWERS from a pyggml server), or None if it did not answer as one."""
    try:
        rsp = call(s, HELLO, bytes(24))
    except OSError:
        return None
    return (rsp[0], rsp[1], rsp[2], rsp[3]) if len(rsp) == 28 else None


def params(*values: int | float, offset: int = 0) -> bytes:
    """op_params from int32 and float32 values (starting at int32 slot `offset`), zero elsewhere."""
    out = bytearray(4 * N_OP_PARAMS)
    for i, v in enumerate(values):
        struct.pack_into("<f" if isinstance(v, float) else "<i", out, 4 * (offset + i), v)
    return bytes(out)


@dataclass
class Desc:
    """One rpc_tensor. `src` holds source ids; every field goes on the wire as it is."""

    id: int
    type: int
    ne: tuple[int, ...]  # 4 extents, ggml order
    nb: tuple[int, ...]  # 4 byte strides
    buffer: int = 0
    data: int = 0
    op: int = 0
    op_params: bytes = bytes(4 * N_OP_PARAMS)
    flags: int = 16  # GGML_TENSOR_FLAG_COMPUTE: ggml-cpu skips nodes without it
    src: tuple[int, ...] = ()
    view_src: int = 0
    view_offs: int = 0
    name: bytes = b""
    use_count: int = 1

    def pack(self) -> bytes:
        """The 296 bytes; every field wraps to its width on the wire, as a client's bytes would."""
        u32, u64 = (1 << 32) - 1, (1 << 64) - 1
        srcs = [x & u64 for x in (list(self.src) + [0] * MAX_SRC)[:MAX_SRC]]
        words = struct.unpack(f"<{N_OP_PARAMS}i", self.op_params.ljust(4 * N_OP_PARAMS, b"\0")[: 4 * N_OP_PARAMS])
        return struct.pack(
            TENSOR_FORMAT,
            self.id & u64,
            self.type & u32,
            self.buffer & u64,
            *(x & u32 for x in self.ne),
            *(x & u32 for x in self.nb),
            self.op & u32,
            *words,
            (self.flags + (1 << 31)) % (1 << 32) - (1 << 31),
            *srcs,
            self.view_src & u64,
            self.view_offs & u64,
            self.data & u64,
            self.name[:63].ljust(64, b"\0"),
            (self.use_count + (1 << 31)) % (1 << 32) - (1 << 31),
        )

    def with_(self, **changes: Any) -> Desc:
        return dataclasses.replace(self, **changes)

    @property
    def nbytes(self) -> int:
        from pyggml import types

        if any(n == 0 for n in self.ne):
            return 0
        blck = types.block_size(self.type)
        if blck == 1:
            return types.type_size(self.type) + sum((n - 1) * b for n, b in zip(self.ne, self.nb))
        return self.ne[0] * self.nb[0] // blck + sum((n - 1) * b for n, b in zip(self.ne[1:], self.nb[1:]))


def graph_message(device: int, nodes: Sequence[int], tensors: Sequence[Desc]) -> bytes:
    return (
        struct.pack("<II", device, len(nodes))
        + b"".join(struct.pack("<Q", i) for i in nodes)
        + struct.pack("<I", len(tensors))
        + b"".join(t.pack() for t in tensors)
    )


class Connection:
    """One client connection: HELLO first, then commands. The server serves one connection at a time.

    `graph_answers`: ask a server that offers them (a pyggml server, patch 0030) to answer GRAPH_COMPUTE and
    GRAPH_RECOMPUTE with a status and a reason; False speaks upstream's protocol 7.0 byte for byte, as
    llama.cpp's own client does (then a refused graph closes the connection)."""

    def __init__(self, host: str, port: int, timeout: float = 60.0, graph_answers: bool = True) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(timeout)
        answer = hello_answer(self.sock)
        if answer is None:
            self.sock.close()
            raise ConnectionError(f"{host}:{port} did not answer HELLO")
        self.version, self.offers_graph_answers = answer[:3], bool(answer[3] & OFFERS_GRAPH_ANSWERS)
        self.answers_graphs = False
        if graph_answers and self.offers_graph_answers:
            if call(self.sock, GRAPH_ANSWERS, b"") != b"\x01":
                self.sock.close()
                raise ConnectionError(f"{host}:{port} offered graph answers and did not give them")
            self.answers_graphs = True

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def alloc(self, size: int, device: int = 0) -> tuple[int, int]:
        """A buffer of `size` bytes: (its remote handle, its base address); (0, 0) when refused."""
        buffer, _ = struct.unpack("<QQ", call(self.sock, ALLOC_BUFFER, struct.pack("<IQ", device, size)))
        if buffer == 0:
            return 0, 0
        (base,) = struct.unpack("<Q", call(self.sock, BUFFER_GET_BASE, struct.pack("<Q", buffer)))
        return buffer, base

    def free(self, buffer: int) -> None:
        self.sock.sendall(request(FREE_BUFFER, struct.pack("<Q", buffer)))

    @staticmethod
    def _bytes(buffer: int, data: int, n: int) -> Desc:
        return Desc(0, I8, (n, 1, 1, 1), (1, n, n, n), buffer=buffer, data=data)

    def write(self, buffer: int, data: int, payload: bytes) -> None:
        """SET_TENSOR of raw bytes at address `data` of `buffer` (no answer)."""
        body = self._bytes(buffer, data, max(len(payload), 1)).pack() + struct.pack("<BQ", 0, 0) + payload
        self.sock.sendall(request(SET_TENSOR, body))

    def read(self, buffer: int, data: int, n: int) -> bytes:
        return call(self.sock, GET_TENSOR, self._bytes(buffer, data, n).pack() + struct.pack("<QQ", 0, n))

    def compute(self, nodes: Sequence[int], tensors: Sequence[Desc], device: int = 0) -> tuple[int, str] | None:
        """GRAPH_COMPUTE: (status, reason) on a connection with graph answers; None on one without, where the
        server answers nothing (a ping, DEVICE_COUNT, waits for the compute: it raises if the server closed
        the connection)."""
        return self._graph(GRAPH_COMPUTE, graph_message(device, nodes, tensors))

    def recompute(self, device: int = 0) -> tuple[int, str] | None:
        return self._graph(GRAPH_RECOMPUTE, struct.pack("<I", device))

    def _graph(self, cmd: int, payload: bytes) -> tuple[int, str] | None:
        self.sock.sendall(request(cmd, payload))
        if self.answers_graphs:
            (size,) = struct.unpack("<Q", recv_exact(self.sock, 8))
            rsp = recv_exact(self.sock, size)
            return rsp[0], rsp[1:].split(b"\0", 1)[0].decode(errors="replace")
        call(self.sock, DEVICE_COUNT, b"")
        return None


@dataclass
class Arena:
    """Tensors laid out in one server buffer, each with `gap` canary bytes before and after it. `snapshot`
    reads the whole buffer; `changed` compares two snapshots and lists the byte ranges that differ."""

    conn: Connection
    size: int = 1 << 20
    gap: int = 256
    buffer: int = 0
    base: int = 0
    used: int = 0
    next_id: int = 1
    canary: bytes = b"\xa5"
    tensors: list[Desc] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.buffer, self.base = self.conn.alloc(self.size)
        if self.buffer == 0:
            raise MemoryError(f"the server refused a buffer of {self.size} bytes")
        self.conn.write(self.buffer, self.base, self.canary * self.size)
        self.used = self.gap

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def place(self, type: int, ne: Sequence[int], nbytes: int | None = None, **fields: Any) -> Desc:
        """A contiguous tensor of `type` and `ne` (ggml order) at the next free place of the buffer."""
        from pyggml import types

        ne4 = tuple(list(ne) + [1] * (4 - len(ne)))
        ts, blck = types.type_size(type), types.block_size(type)
        nb = [ts, ts * (ne4[0] // blck)]
        nb += [nb[1] * ne4[1], nb[1] * ne4[1] * ne4[2]]
        size = nb[3] * ne4[3] if nbytes is None else nbytes
        at = self.used
        self.used = (at + size + self.gap + 63) // 64 * 64
        if self.used > self.size:
            raise MemoryError("the arena is full")
        d = Desc(self.new_id(), int(type), ne4, tuple(nb), buffer=self.buffer, data=self.base + at, **fields)
        self.tensors.append(d)
        return d

    def set(self, t: Desc, values: np.ndarray) -> None:
        self.conn.write(self.buffer, t.data, np.ascontiguousarray(values).tobytes())

    def get(self, t: Desc, dtype: Any = np.float32) -> np.ndarray:
        raw = self.conn.read(self.buffer, t.data, t.nbytes)
        return np.frombuffer(raw, dtype=dtype).reshape(tuple(reversed(t.ne)))

    def snapshot(self) -> bytes:
        return self.conn.read(self.buffer, self.base, self.size)

    @staticmethod
    def changed(before: bytes, after: bytes) -> list[tuple[int, int]]:
        """The [start, end) byte ranges (buffer offsets) where two snapshots differ."""
        a, b = np.frombuffer(before, np.uint8), np.frombuffer(after, np.uint8)
        diff = np.flatnonzero(a != b)
        if diff.size == 0:
            return []
        breaks = np.flatnonzero(np.diff(diff) > 1)
        starts = np.concatenate(([diff[0]], diff[breaks + 1]))
        ends = np.concatenate((diff[breaks], [diff[-1]])) + 1
        return list(zip(starts.tolist(), ends.tolist()))

    def outside(self, ranges: list[tuple[int, int]], allowed: Sequence[Desc]) -> list[tuple[int, int]]:
        """The parts of `ranges` that lie outside every tensor in `allowed` (by its data and nbytes)."""
        spans = sorted((d.data - self.base, d.data - self.base + d.nbytes) for d in allowed if d.buffer == self.buffer)
        out = []
        for start, end in ranges:
            cur = start
            for s0, s1 in spans:
                if s1 <= cur or s0 >= end:
                    continue
                if s0 > cur:
                    out.append((cur, s0))
                cur = max(cur, s1)
            if cur < end:
                out.append((cur, end))
        return out
