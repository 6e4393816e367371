"""The seed's conv-state rollback against the NumPy model, on the CPU."""

import numpy as np
import pytest

import pyggml as gg
from pyggml.models.conv_state import (
    SLOT_INDEX_NAME,
    STRATEGIES,
    ConvStateGraph,
    DeltaNetConv,
    RecurrentMemory,
    Ubatch,
    windows_written,
)
from pyggml.testing.engine.oracles.conv_state import ConvStateOracle

L, D, C, M = 3, 4, 5, 6


def setup(strategy, K, dtype="f32", seed=0, backend_name="cpu"):
    rng = np.random.default_rng(seed)
    runner = gg.Runner(backend_name)
    mem = RecurrentMemory(runner.backend, L, D, C, M, K - 1, dtype)
    npd = np.float16 if dtype == "f16" else np.float32
    initial = [rng.standard_normal((M * K, (D - 1) * C)).astype(npd) for _ in range(L)]
    for il in range(L):
        mem.write(il, initial[il])
    oracle = ConvStateOracle(L, D, C, M, K - 1, npd, strategy, initial)
    return rng, DeltaNetConv(mem, runner, strategy), oracle, initial


def ubatch(rng, n, n_seqs, kv_head, K):
    qkv = [rng.standard_normal((n_seqs, n, C)).astype(np.float32) for _ in range(L)]
    return Ubatch(qkv, [int(x) for x in rng.integers(0, M * K, n_seqs)], kv_head)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("K", range(1, 9))
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_strategy_matches_the_model_bit_for_bit(strategy, K, dtype, backend_name):
    rng, model, oracle, _ = setup(strategy, K, dtype, seed=K, backend_name=backend_name)
    # token counts below, at and above K-1; kv_head != 0; mem_size > n_seqs; a repeated shape
    for n, n_seqs, kv_head in [(1, 2, 3), (K - 1 or 1, 3, 1), (K + 1, 2, 4), (K + 1, 2, 4), (2, 4, 2)]:
        ub = ubatch(rng, n, n_seqs, kv_head, K)
        got = model.step(ub)
        want = oracle.step(ub.qkv, ub.s_copy, ub.kv_head)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        for il in range(L):
            assert model.mem.read(il).tobytes() == oracle.caches[il].tobytes()


@pytest.mark.parametrize("K", [3, 4, 8])
def test_copies_differ_from_the_seed_only_where_documented(K, backend_name):
    """n < K-1: the seed leaves slots >= Kw alone; the old copies write the oldest window there."""
    n, n_seqs, kv_head = 1, 2, 1
    Kw = windows_written(n, K)
    assert Kw < K
    results = {}
    for strategy in ("host_index", "copies"):
        rng, model, _, initial = setup(strategy, K, seed=7, backend_name=backend_name)
        ub = ubatch(rng, n, n_seqs, kv_head, K)
        model.step(ub)
        results[strategy] = [model.mem.read(il) for il in range(L)]
    for il in range(L):
        seed, copies, old = results["host_index"][il], results["copies"][il], initial[il]
        cells = kv_head + np.arange(n_seqs)
        for slot in range(K):
            rows = slot * M + cells
            if slot < Kw:
                np.testing.assert_array_equal(seed[rows], copies[rows])
            else:
                np.testing.assert_array_equal(seed[rows], old[rows])  # unwritten, bit for bit
                # copies wrote window 0 = the gathered state of each sequence
                np.testing.assert_array_equal(copies[rows], old[ub.s_copy])
        other = np.ones(M * K, bool)
        other[[s * M + c for s in range(K) for c in cells]] = False
        np.testing.assert_array_equal(seed[other], old[other])


def test_host_index_graph_has_one_set_rows_per_layer_and_one_shared_index():
    runner = gg.Runner("cpu")
    mem = RecurrentMemory(runner.backend, L, D, C, M, 3)
    g = ConvStateGraph(mem, n_seq_tokens=2, n_seqs=2, kv_head=0, strategy="host_index")
    ops = g.graph.op_counts()
    assert ops["SET_ROWS"] == L
    assert ops["ARANGE"] == 0 and ops["ARGSORT"] == 0 and ops["CPY"] == 0
    index = [t for t in g.graph.leafs() if t.name == SLOT_INDEX_NAME]
    assert len(index) == 1
    assert index[0].type == gg.Type.I32 and index[0].ne[0] == windows_written(2, 4) and index[0].is_input
    set_rows = [n for n in g.graph.nodes if n.op == gg.Op.SET_ROWS]
    assert len(set_rows) == L and all(n.src[1] == index[0] for n in set_rows)  # set_rows: src = (b, c, a)


def test_device_index_and_copies_graphs():
    runner = gg.Runner("cpu")
    mem = RecurrentMemory(runner.backend, L, D, C, M, 3)
    dev = ConvStateGraph(mem, 2, 2, 0, "device_index").graph.op_counts()
    assert dev["SET_ROWS"] == L and dev["ARANGE"] == 1 and dev["ARGSORT"] == 1
    cop = ConvStateGraph(mem, 2, 2, 0, "copies").graph.op_counts()
    assert cop["CPY"] == L * 4 and cop["SET_ROWS"] == 0
    zero = RecurrentMemory(runner.backend, L, D, C, M, 0)
    for s in STRATEGIES:
        ops = ConvStateGraph(zero, 2, 2, 0, s).graph.op_counts()
        assert ops["CPY"] == L and ops["SET_ROWS"] == 0  # n_rs_seq == 0: a single copy into slot 0


def test_index_is_filled_on_the_host_with_the_reversed_slots(backend_name):
    rng, model, _, _ = setup("host_index", 4, backend_name=backend_name)
    model.step(ubatch(rng, 1, 2, 0, 4))
    index = model.graph.inp.s_slot_rev
    assert index.is_host
    np.testing.assert_array_equal(index.numpy(), [1, 0])
    model.step(ubatch(rng, 5, 2, 0, 4))
    np.testing.assert_array_equal(model.graph.inp.s_slot_rev.numpy(), [3, 2, 1, 0])


def test_graph_is_reused_for_the_same_shape_and_rebuilt_when_it_changes():
    rng, model, _, _ = setup("host_index", 4)
    for n in (2, 2, 2, 5, 5, 2):
        model.step(ubatch(rng, n, 2, 1, 4))
    assert model.builds == 3 and model.reuses == 3


def test_inputs_need_memory_before_they_are_set():
    runner = gg.Runner("cpu")
    mem = RecurrentMemory(runner.backend, 1, D, C, M, 3)
    g = ConvStateGraph(mem, 2, 2, 0, "host_index")
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="no memory"):
        g.set_inputs(Ubatch([rng.standard_normal((2, 2, C))], [0, 1], 0))


def test_bad_ubatches_are_rejected():
    rng, model, _, _ = setup("host_index", 4)
    with pytest.raises(ValueError, match="s_copy"):
        model.step(Ubatch(ubatch(rng, 1, 2, 0, 4).qkv, [0, 99], 0))
    with pytest.raises(ValueError, match="mem_size"):
        model.step(ubatch(rng, 1, 3, M - 1, 4))
    with pytest.raises(ValueError, match="strategy"):
        DeltaNetConv(model.mem, model.runner, "bogus").step(ubatch(rng, 1, 2, 0, 4))
