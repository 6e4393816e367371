"""One RPC server for every client (patch 0030): pyggml's server speaks upstream's protocol 7.0 to a client
that speaks it, byte for byte as llama.cpp's own client does, and gives graph answers (refusals with their
reasons) only to a client that asks for them."""

from __future__ import annotations

import socket
import struct

import pytest

from pyggml import rpc
from pyggml.testing.fuzzers.rpc_attacks import ATTACKS, G, _benign
from pyggml.testing.fuzzers.rpc_wire import (
    GRAPH_ANSWERS,
    HELLO,
    REFUSED,
    Arena,
    Connection,
    call,
    hello_answer,
    recv_exact,
    request,
)

REFUSED_ATTACK = next(a for a in ATTACKS if a.outcome == "refused")


@pytest.fixture(scope="module")
def server():
    with rpc.Server() as srv:
        yield srv


def test_hello_is_upstreams_7_0_with_the_offer_in_a_byte_old_clients_ignore(server):
    with socket.create_connection((server.host, server.port), timeout=30) as s:
        major, minor, patch, padding = hello_answer(s)
    # upstream's client accepts a server whose major is 7 and whose minor is not above its own 0
    assert (major, minor, patch) == (7, 0, 0)
    assert padding == 1  # RPC_HELLO_OFFERS_GRAPH_ANSWERS


def test_a_7_0_client_computes_right_and_reads_no_bytes_it_does_not_expect(server):
    with Connection(server.host, server.port, graph_answers=False) as conn:
        assert not conn.answers_graphs
        assert _benign(conn, REFUSED_ATTACK)  # computed right, nothing answered to GRAPH_COMPUTE
        conn.sock.settimeout(0.5)
        with pytest.raises(TimeoutError):  # nothing was left unread on the connection
            conn.sock.recv(1)


def test_a_refused_graph_closes_only_the_7_0_clients_own_connection(server):
    """The server serves one connection at a time: the next one is served once the refused one is closed."""
    with Connection(server.host, server.port, graph_answers=False) as conn:
        arena = Arena(conn, size=1 << 20)
        built = REFUSED_ATTACK.build(G(arena), True)
        with pytest.raises(OSError):  # closed, as upstream's server closes it when a graph fails
            conn.compute(built.ids(), built.tensors(arena))
    assert server.proc.poll() is None
    with Connection(server.host, server.port, graph_answers=False) as after:
        assert _benign(after, REFUSED_ATTACK)


def test_a_client_that_asks_gets_the_refusal_with_its_reason_and_goes_on(server):
    with Connection(server.host, server.port) as conn:
        assert conn.answers_graphs
        arena = Arena(conn, size=1 << 20)
        built = REFUSED_ATTACK.build(G(arena), True)
        status, reason = conn.compute(built.ids(), built.tensors(arena))
        assert status == REFUSED and reason
        assert _benign(conn, REFUSED_ATTACK)


def test_the_extension_command_is_answered_with_one_byte(server):
    with socket.create_connection((server.host, server.port), timeout=30) as s:
        call(s, HELLO, bytes(24))
        s.sendall(request(GRAPH_ANSWERS, b""))
        (size,) = struct.unpack("<Q", recv_exact(s, 8))
        assert recv_exact(s, size) == b"\x01"


# pyggml's own client against this server: tests/test_rpc.py (it asks for graph answers and gets them)


# --- pyggml's client against upstream's server: a pyggml built without patches 0023 and 0030 (tests/builds.py)
# serves RPC as upstream's server does (protocol 7.0, no graph checks, no answers; 0020's checks of malformed
# tensors stay)
CLIENT = """
import sys
import numpy as np
import pyggml as gg
from pyggml import rpc
[dev] = rpc.add_server(sys.argv[1])
ctx = gg.Context()
a = ctx.tensor("f32", (3, 8), "a", input=True)
y = ctx.mul_mat(a, ctx.exp(a))
graph = gg.Graph(ctx).build_forward_expand(y)
x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(3, 8)
got = gg.Runner(dev.name.lower()).run(graph, {a: x}, y)
want = np.exp(x) @ x.T
assert np.allclose(got, want, rtol=1e-5), (got, want)
print("computed on", dev.name)
"""


@pytest.fixture(scope="module")
def upstream_server_build(tmp_path_factory):
    from builds import pyggml_without_patches

    return pyggml_without_patches(tmp_path_factory.mktemp("upstream-rpc"))


@pytest.mark.rebuild  # a second pyggml without the patches (tests/conftest.py: opt-in, CI runs it)
def test_pyggmls_client_computes_on_upstreams_server(upstream_server_build):
    import os
    import site
    import stat
    import subprocess
    import sys

    # the other build's `python -m pyggml rpc-server`: -S, so that no .pth file (this build's editable
    # install) shadows the package first on PYTHONPATH
    python = upstream_server_build / "python-S"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    path = os.pathsep.join([str(upstream_server_build), *site.getsitepackages()])
    with rpc.Server(python=str(python), cwd=str(upstream_server_build), env={"PYTHONPATH": path}) as srv:
        with socket.create_connection((srv.host, srv.port), timeout=30) as s:
            assert hello_answer(s) == (7, 0, 0, 0)  # upstream's answer: no offer of graph answers
        with Connection(srv.host, srv.port) as conn:  # asks only a server that offers
            assert not conn.answers_graphs and _benign(conn, REFUSED_ATTACK)
        client = subprocess.run(
            [sys.executable, "-c", CLIENT, srv.endpoint], capture_output=True, text=True, timeout=300
        )
        assert client.returncode == 0 and "computed on RPC" in client.stdout, client.stdout + client.stderr
