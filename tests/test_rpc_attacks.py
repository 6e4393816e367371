"""Graph attacks on the RPC server (issue 23, pyggml/testing/fuzzers/rpc_attacks.py): each hostile graph against a
fresh `python -m pyggml rpc-server` is refused (or, where the hostile field cannot hurt, computed right),
the server keeps running, and the benign twin (the same graph with that field set right) computes the
right values on the same connection and on the next one."""

from __future__ import annotations

import pytest

from pyggml import rpc
from pyggml.testing.fuzzers.rpc_attacks import ATTACKS, run

pytestmark = pytest.mark.skipif(not rpc.available(), reason="built without ggml's RPC backend")


def test_every_attack_class_of_the_issue_is_here():
    assert len(ATTACKS) >= 45  # the issue's 34 kinds, a few more, and graphs with empty tensors
    names = {a.name for a in ATTACKS}
    for needed in (
        "gdn_k_past_destination",
        "gdn_qk_more_sequences_than_v",
        "custom_function_address",
        "map_custom1_function_address",
        "get_rows_index_past_rows",
        "set_rows_index_negative",
        "mul_mat_inner_sizes_disagree",
        "add_sources_disagree",
        "cpy_into_smaller_destination",
        "op_count",
        "node_id_zero",
        "source_without_storage",
        "source_chain_200000",
        "work_size_2_63",
        "get_rows_destination_too_small",
        # empty tensors (a meta device's share of a split it holds none of)
        "mul_by_empty_b",
        "mul_mat_empty_matrices",
        "mul_mat_empty_inner_size",
        "set_rows_empty_index",
        "get_rows_empty_index",
        "rms_norm_mul_empty_weight",
    ):
        assert needed in names


@pytest.mark.parametrize("atk", ATTACKS, ids=[a.name for a in ATTACKS])
def test_the_server_refuses_the_attack_and_serves_its_twin(atk):
    r = run(atk)
    assert r.hostile == atk.outcome, f"{atk.what}: {r.hostile} ({r.reason})"
    if atk.outcome == "refused":
        assert r.reason, "a refusal says why"
    assert r.benign_same_connection is True, "the client that sent it can go on"
    assert r.benign_next_connection is True, "the next client is served"
