"""delta_net cases for `check`: the gated delta-net layer (pyggml/models/delta_net.py) drafting tokens and
rolling back, on every backend.

A scenario: a prompt ubatch, a draft of n tokens per sequence, then sequence s keeps the first
n - j[s] tokens (reads slot j[s] of both caches) and goes on with a continuation ubatch and one
decode step. The same backend runs it twice: with the rollback, and with only the accepted tokens
(a rerun, batched by acceptance). The rollback property: both give the same outputs and the same
states of every cell in both caches, bit for bit where the backend's arithmetic for a token does
not depend on the ubatch's width (`ROLLBACK_BOUNDS`). Then the rollback run's outputs and states are
compared with the NumPy reference (token by token, float64) within the case's bounds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pyggml.models.delta_net import DeltaNet, DeltaNetConfig, random_weights
from pyggml.runner import Runner
from pyggml.target import Target
from pyggml.testing.engine.cases import Case, Mismatch, register
from pyggml.testing.engine.opdb import Bound
from pyggml.testing.engine.oracles.delta_net import DeltaNetReference
from pyggml.testing.engine.verdict import compare

PROMPT, CONTINUATION = 3, 2

# The largest error (relative to the output's scale) allowed between the rollback run and the rerun of
# the accepted tokens on the same backend. The CPU computes every token's values with the same
# instructions in the same order whatever the ubatch's width, and so does a meta device of CPUs:
# bit-exact (measured over every case). Vulkan multiplies a narrow single-sequence ubatch (up to 8
# columns) with its matrix-vector shader in F32, and a wider or multi-sequence one with its matrix
# shader, which rounds F32 operands to F16 (docs/findings.md): the draft (all sequences in one ubatch)
# and the rerun (fewer tokens, sequences grouped by acceptance) take different shaders, and differ by up
# to 2.5e-3 of the output's scale after two layers of the recurrence (measured): the bound is NMSE 1e-5
# (the F16-input bound) and 1e-2 for one element. (NMSE bound, largest-error bound) by backend:
ROLLBACK_BOUNDS = {"cpu": (0.0, 0.0), "meta:cpu": (0.0, 0.0)}
ROLLBACK_BOUND_OTHER = (1e-5, 1e-2)


def rollback_bound(backend: str) -> tuple[float, float]:
    """The (NMSE, largest error) a rollback may differ by from a rerun on `backend`: its kind's in
    `ROLLBACK_BOUNDS` (`pyggml.target.Target.matches`), else `ROLLBACK_BOUND_OTHER`."""
    target = Target.parse(backend)
    return next((b for kind, b in ROLLBACK_BOUNDS.items() if target.matches(kind)), ROLLBACK_BOUND_OTHER)


@dataclass
class Scenario:
    config: DeltaNetConfig
    K: int
    cache_type: str
    n_draft: int
    rollback: list[int]  # tokens dropped per sequence (< min(n_draft, K))
    kv_head: int = 1
    continue_at: int = 1  # the continuation's cells (states read from the draft's cells)
    seed: int = 0
    mem_size: int = field(init=False)

    def __post_init__(self):
        ns = len(self.rollback)
        self.mem_size = max(self.kv_head, self.continue_at) + ns + 1
        limit = min(self.n_draft, self.K)
        if any(not 0 <= j < limit for j in self.rollback):
            raise ValueError(f"rollback {self.rollback}: each must be below min(n_draft, K) = {limit}")

    @property
    def n_seqs(self) -> int:
        return len(self.rollback)

    def inputs(self) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(self.seed)
        E, ns = self.config.n_embd, self.n_seqs
        return {
            "prompt": rng.standard_normal((ns, PROMPT, E)).astype(np.float32),
            "draft": rng.standard_normal((ns, self.n_draft, E)).astype(np.float32),
            "cont": rng.standard_normal((ns, CONTINUATION, E)).astype(np.float32),
            "decode": rng.standard_normal((ns, 1, E)).astype(np.float32),
        }

    def cells(self, head: int) -> list[int]:
        return [head + s for s in range(self.n_seqs)]

    def run_rollback(self, model: DeltaNet | DeltaNetReference) -> list[np.ndarray]:
        """Prompt, draft, rollback + continuation, decode; outputs and the final states.
        `model` is a DeltaNet or a DeltaNetReference (same step/row interface)."""
        x, out = self.inputs(), []
        h, c = self.kv_head, self.continue_at
        out.append(model.step(x["prompt"], [_row(model, cell) for cell in self.cells(h)], h))
        out.append(model.step(x["draft"], [_row(model, cell) for cell in self.cells(h)], h))
        out.append(model.step(x["cont"], [_row(model, cell, j) for cell, j in zip(self.cells(h), self.rollback)], c))
        out.append(model.step(x["decode"], [_row(model, cell) for cell in self.cells(c)], c))
        return out + self.final_states(model)

    def run_accepted(self, model: DeltaNet | DeltaNetReference) -> list[np.ndarray]:
        """The same with only the accepted tokens drafted: sequences that keep the same number of tokens
        share a ubatch (a ubatch holds sequences of equal length); the draft's output is padded with
        the rollback run's values past the accepted tokens (not compared: see `accepted_mask`)."""
        x, out = self.inputs(), []
        h, c = self.kv_head, self.continue_at
        out.append(model.step(x["prompt"], [_row(model, cell) for cell in self.cells(h)], h))
        draft = np.full(x["draft"].shape, np.nan)
        kept = [self.n_draft - j for j in self.rollback]
        for a in sorted(set(kept)):
            seqs = [s for s in range(self.n_seqs) if kept[s] == a]
            for run in _contiguous(seqs):  # one ubatch writes contiguous cells
                y = model.step(x["draft"][run, :a], [_row(model, h + s) for s in run], h + run[0])
                draft[run, :a] = y
        out.append(draft)
        out.append(model.step(x["cont"], [_row(model, cell) for cell in self.cells(h)], c))
        out.append(model.step(x["decode"], [_row(model, cell) for cell in self.cells(c)], c))
        return out + self.final_states(model)

    def accepted_mask(self) -> np.ndarray:
        m = np.zeros((self.n_seqs, self.n_draft, 1), bool)
        for s, j in enumerate(self.rollback):
            m[s, : self.n_draft - j] = True
        return m

    def final_states(self, model: DeltaNet | DeltaNetReference) -> list[np.ndarray]:
        """Both caches of every layer at every slot the last ubatch wrote, for the continuation's cells."""
        out = []
        for il in range(self.config.n_layer):
            for cell in self.cells(self.continue_at):
                conv, ssm = model.states(il, _row(model, cell, 0))
                out += [conv, ssm]
        return out


def _row(model, cell, rollback=0):
    if isinstance(model, DeltaNet):
        return model.row(cell, rollback)
    return rollback * model.mem_size + cell


def _contiguous(seqs: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for s in seqs:
        if runs and runs[-1][-1] == s - 1:
            runs[-1].append(s)
        else:
            runs.append([s])
    return runs


def check_rollback(scenario: Scenario, runner: Runner, backend: str) -> list[np.ndarray]:
    """Run the scenario with rollback and with the accepted tokens only on `runner`; raise Mismatch when
    they differ beyond the backend's rollback bound; return the rollback run's outputs."""
    rolled = scenario.run_rollback(_model(scenario, runner))
    rerun = scenario.run_accepted(_model(scenario, runner))
    bound = rollback_bound(backend)
    rolled_cmp = list(rolled)
    rolled_cmp[1] = np.where(scenario.accepted_mask(), rolled[1], np.nan)
    names = ["prompt", "accepted draft", "continuation", "decode"] + [
        f"layer {il} cell {cell} {which} state"
        for il in range(scenario.config.n_layer)
        for cell in scenario.cells(scenario.continue_at)
        for which in ("conv", "recurrent")
    ]
    for name, a, b in zip(names, rolled_cmp, rerun):
        v = compare(a, b, *bound)
        if not v.ok:
            raise Mismatch(f"rollback != rerun of the accepted tokens on {backend}: {name}: {v.message}")
    return rolled


def _model(scenario: Scenario, runner: Runner) -> DeltaNet:
    return DeltaNet(
        runner,
        scenario.config,
        K=scenario.K,
        mem_size=scenario.mem_size,
        cache_type=scenario.cache_type,
        seed=scenario.seed,
    )


class DeltaNetCase(Case):
    def __init__(self, name: str, scenario: Scenario, nmse: float, vulkan_nmse: float | None = None) -> None:
        self.name, self.scenario = name, scenario
        self.op, self.types, self.variant = "delta_net", frozenset({scenario.cache_type}), name.split("/", 2)[-1]
        self.params = {"op": "delta_net", "type": scenario.cache_type, "K": scenario.K}
        self.nmse_bound = nmse
        self.max_error = 30 * nmse**0.5
        vk = vulkan_nmse or VULKAN_NMSE
        self.bounds = [Bound(vk, backend=b, why=VULKAN_WHY) for b in ("vulkan", "meta:vulkan")]

    def execute(self, runner: Runner) -> list[np.ndarray]:
        return check_rollback(self.scenario, runner, runner.name)

    def expected(self) -> list[np.ndarray]:
        sc = self.scenario
        dtype = np.float16 if sc.cache_type == "f16" else np.float32
        weights = random_weights(sc.config, sc.seed)
        return sc.run_rollback(DeltaNetReference(sc.config, weights, sc.K, sc.mem_size, dtype))


# Bounds against the float64 reference: F32 caches hold the states as computed (the layer's F32
# arithmetic: NMSE about 1e-12 on the CPU); F16 caches round every state the next ubatch reads to
# 11 bits (relative error 2^-11, NMSE about 1e-7 once it has gone through the layer).
NMSE_BY_CACHE = {"f32": 1e-9, "f16": 1e-5}

# ggml-vulkan's matrix shader (ubatches over 8 tokens, or several sequences) caches F32 operands in F16
# shared memory on devices with F16 arithmetic, lavapipe included (docs/findings.md): relative error
# about 3e-4 per product, through two layers of the recurrence
VULKAN_NMSE = 1e-5
VULKAN_WHY = "ggml-vulkan's matrix shader rounds F32 operands to F16 (docs/findings.md)"
# the wide layer (1024 conv channels, 32 value heads; Qwen3-Next's two value heads per key head) reaches
# NMSE 1.4e-5 on the prompt's output (measured on lavapipe; 3e-13 with GGML_VK_DISABLE_F16=1)
VULKAN_NMSE_WIDE = 5e-5

_CONFIGS = {
    "kv2": DeltaNetConfig(n_embd=32, n_layer=2, head_dim=16, n_k_heads=2, n_v_heads=2),
    "kv2x2": DeltaNetConfig(n_embd=24, n_layer=2, head_dim=16, n_k_heads=2, n_v_heads=4),
}

for _K in range(1, 9):
    for _dtype in ("f32", "f16"):
        # ubatches shorter than K-1 (n_draft < K) and longer (n_draft > K), two sequences rolling back
        # by different amounts, and a continuation written to other cells than it reads
        for _n in sorted({max(1, _K - 2), _K + 2}):
            limit = min(_n, _K)
            _rollback = [limit - 1, (limit - 1) // 2]
            for _cfg_name, _cfg in _CONFIGS.items():
                _at = 0 if (_K + _n) % 2 else 1
                register(
                    DeltaNetCase(
                        f"delta_net/{_dtype}/K{_K}/n{_n}/{_cfg_name}",
                        Scenario(_cfg, _K, _dtype, _n, _rollback, kv_head=1, continue_at=_at),
                        NMSE_BY_CACHE[_dtype],
                    )
                )

# llama.cpp's own layouts ([q | k | v]; Qwen3-Next's and Qwen3.5's value-head broadcasts), as
# pyggml.models.llama_twin loads them from a model file: a few K, F32 caches. On a meta device they take
# llama.cpp's own split (delta_net.llama_split_policy), which cuts shares at 128 channels: the small layer
# (2 key heads of 16) sits whole on one device, a different one for each layer; the wide one (16 key heads)
# puts 8 key heads and their value heads on each of two devices, in several segments.
_LLAMA_CONFIGS = {
    "": dict(n_embd=24, n_k_heads=2, n_v_heads=4),
    "-wide": dict(n_embd=24, n_k_heads=16, n_v_heads=32),
}
for _layout in ("qwen3next", "qwen35"):
    for _suffix, _dims in _LLAMA_CONFIGS.items():
        _cfg = DeltaNetConfig(n_layer=2, head_dim=16, layout=_layout, **_dims)
        for _K, _n in ((1, 3), (4, 6)) if _suffix else ((1, 3), (4, 2), (4, 6)):
            limit = min(_n, _K)
            register(
                DeltaNetCase(
                    f"delta_net/f32/K{_K}/n{_n}/{_layout}{_suffix}",
                    Scenario(_cfg, _K, "f32", _n, [limit - 1, (limit - 1) // 2], kv_head=1, continue_at=_K % 2),
                    NMSE_BY_CACHE["f32"],
                    VULKAN_NMSE_WIDE if _suffix else None,
                )
            )
