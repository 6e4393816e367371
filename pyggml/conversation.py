"""A conversation with a llama.cpp model, decoded step by step as users run one.

    from pyggml import llama
    model = llama.Model.load("model.gguf")
    script = llama.Script.from_text(model, "The capital of France is", generate=4, sequences=2, speculative=3)
    ctx = llama.Context(model, **script.context_args(model))
    talk = llama.converse(ctx, script)                  # prefill, step 1..4, draft, after rollback
    talk.steps[0].label, talk.steps[0].logits.shape     # ("prefill", (2, n_vocab)): one row per sequence

The steps, in order:

- `prefill`: every sequence's prompt in one batch (the sequences' ids 0..S-1), logits of each one's last token;
- `step i`: one token per sequence in one batch, each the greedy choice (argmax) of its own last logits;
- `draft` (with `speculative=K`): the pending token of each sequence and K drafted tokens after it, in one
  batch with every token's logits; the draft is the K tokens that followed the pending token's last earlier
  occurrence in that sequence (prompt lookup, one of llama.cpp's own drafting methods), random ids where it
  never occurred. The drafted tokens the model's greedy choices confirm are kept, the others removed from the
  memory (`memory_seq_rm`: the KV cache's cells, and on recurrent and hybrid models the recurrent state rolled
  back to its snapshot: llama.cpp's `n_rs_seq`, the seed's conv-state slots);
- `after rollback`: each sequence's next greedy token decoded alone, reading the memory that was rolled back.

`converse(ctx, script, follow=earlier)` decodes exactly the batches of an earlier transcript (the same tokens,
the same rollbacks) instead of choosing its own: how one run is held against another (another backend, another
file of the same vocabulary) on the same tokens. `no_draft(ctx, transcript)` decodes the same accepted tokens
without the draft: the logits after a rollback must equal those of a run that never drafted.

`on_step(label)` is called before each step's decode, so an observer (`Context(observe=...)`) can say which
step a node belongs to.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict, Unpack

import numpy as np

from pyggml._native import ffi, lib

if TYPE_CHECKING:
    from pyggml.llama import Context, Model

__all__ = [
    "ContextArgs",
    "Script",
    "ScriptOptions",
    "Step",
    "Transcript",
    "converse",
    "conversing",
    "no_draft",
    "cannot_roll_back",
    "tokenize",
    "detokenize",
    "has_tokenizer",
]

PREFILL, DRAFT, AFTER_ROLLBACK = "prefill", "draft", "after rollback"


def has_tokenizer(model: Model) -> bool:
    """Whether llama.cpp reads a tokenizer from the model (its vocab type is not LLAMA_VOCAB_TYPE_NONE).

    Args:
        model: the Model.

    Returns:
        True when `tokenize` can turn text into the model's ids.
    """
    return int(lib.llama_vocab_type(model.vocab)) != int(lib.LLAMA_VOCAB_TYPE_NONE)


def tokenize(model: Model, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
    """Text as the model's token ids, by the model's own tokenizer (`llama_tokenize`).

    Args:
        model: the Model.
        text: the text.
        add_special: add the special tokens the model asks for (BOS, ...), as llama.cpp's tools do.
        parse_special: read special tokens written in the text (`<|im_start|>`) as themselves.

    Returns:
        The ids.

    Raises:
        TypeError: `text` is not a str.
        ValueError: the model has no tokenizer llama.cpp can read (`has_tokenizer`), or llama.cpp could not
            tokenize the text.
    """
    if not isinstance(text, str):
        raise TypeError(f"tokenize: text must be a str, not {type(text).__name__}")
    if not has_tokenizer(model):
        raise ValueError(f"tokenize: {model.path} has no tokenizer llama.cpp can read (vocab type none)")
    raw = text.encode("utf-8")
    size = len(raw) + 16
    for _ in range(2):
        out = ffi.new("llama_token[]", size)
        n = int(lib.llama_tokenize(model.vocab, raw, len(raw), out, size, add_special, parse_special))
        if n >= 0:
            return [int(out[i]) for i in range(n)]
        if n == int(np.iinfo(np.int32).min):
            break
        size = -n  # llama.cpp says how many it needs
    raise ValueError(f"tokenize: llama.cpp could not tokenize {text[:40]!r} with {model.path}'s tokenizer")


def detokenize(model: Model, tokens: Sequence[int]) -> str:
    """The text of the ids, piece by piece (`llama_token_to_piece`; special tokens shown as written).

    Args:
        model: the Model.
        tokens: the ids.

    Returns:
        The text (bytes that are no UTF-8 shown as the replacement character).
    """
    buf = ffi.new("char[]", 256)
    parts = []
    for t in tokens:
        n = int(lib.llama_token_to_piece(model.vocab, int(t), buf, 256, 0, True))
        parts.append(bytes(ffi.buffer(buf, max(n, 0))))
    return b"".join(parts).decode("utf-8", "replace")


class ContextArgs(TypedDict):
    """The `llama.Context` sizes a conversation needs (`Script.context_args`)."""

    n_ctx: int
    n_batch: int
    n_ubatch: int
    n_seq_max: int
    n_rs_seq: int


class ScriptOptions(TypedDict, total=False):
    """`Script`'s fields besides its prompts, as keywords of `Script.from_tokens` and `Script.from_text`
    (each described in `Script`'s Attributes)."""

    generate: int
    speculative: int
    seed: int
    prefill_logits: str


def _token_ids(tokens: Sequence[int] | np.ndarray) -> tuple[int, ...]:
    """The ids as ints; TypeError for anything else (a float id would be truncated to another token)."""
    if isinstance(tokens, (str, bytes)):
        raise TypeError(f"Script: token ids must be ints, not {type(tokens).__name__}")
    out = []
    for t in tokens:
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)):
            raise TypeError(f"Script: token ids must be ints, found {t!r} ({type(t).__name__})")
        out.append(int(t))
    return tuple(out)


@dataclass(frozen=True)
class Script:
    """What a conversation decodes.

    Attributes:
        prompts: each sequence's prompt, token ids (one sequence per prompt, decoded together).
        generate: tokens generated after the prompt, one decode per token (for every sequence at once).
        speculative: draft length K: after the generated tokens, K drafted tokens decoded and verified, the
            rejected ones rolled back, then one more step (0: no draft).
        seed: the draft's random ids where prompt lookup finds none.
        prefill_logits: "all": the prefill outputs every prompt token's logits (what a run is held against
            another on, as llama-perplexity does over a text); "last": each sequence's last token's only.
    """

    prompts: tuple[tuple[int, ...], ...]
    generate: int = 0
    speculative: int = 0
    seed: int = 0
    prefill_logits: str = "all"

    def __post_init__(self) -> None:
        if not self.prompts or any(len(p) == 0 for p in self.prompts):
            raise ValueError("Script: every sequence needs a prompt of at least one token")
        for p in self.prompts:
            _token_ids(p)
        if self.prefill_logits not in ("last", "all"):
            raise ValueError(f"Script: prefill_logits must be 'last' or 'all', not {self.prefill_logits!r}")
        for name in ("generate", "speculative"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"Script: {name} must be an int >= 0, not {value!r}")

    @classmethod
    def from_tokens(cls, tokens: Sequence[int], sequences: int = 1, **options: Unpack[ScriptOptions]) -> Script:
        """One prompt for every sequence, each at another offset: sequence i drops the prompt's first i tokens
        after its first (the BOS a tokenizer adds stays), so the sequences differ in length and content.

        Args:
            tokens: the prompt's ids (at least `sequences` of them).
            sequences: the number of sequences, S >= 1.
            **options: the other fields, by keyword (`generate`, `speculative`, `seed`, `prefill_logits`: see
                the class).

        Returns:
            The Script.

        Raises:
            ValueError: fewer than `sequences` tokens, or sequences < 1.
            TypeError: an id that is not an int (a float, a bool, a str).
        """
        toks = _token_ids(tokens)
        if not isinstance(sequences, int) or sequences < 1:
            raise ValueError(f"Script: sequences must be an int >= 1, not {sequences!r}")
        if len(toks) < sequences:
            raise ValueError(f"Script: a prompt of {len(toks)} tokens cannot start {sequences} sequences at offsets")
        prompts = tuple(toks[:1] + toks[1 + i :] if i else toks for i in range(sequences))
        return cls(prompts, **options)

    @classmethod
    def from_text(cls, model: Model, text: str, sequences: int = 1, **options: Unpack[ScriptOptions]) -> Script:
        """`from_tokens` of the text, tokenized by the model's own tokenizer (`tokenize`).

        Args:
            model: the Model whose tokenizer reads the text.
            text: the prompt.
            sequences: as `from_tokens`'.
            **options: as `from_tokens`'.

        Returns:
            The Script.

        Raises:
            ValueError: no tokenizer llama.cpp reads, or fewer tokens than sequences.
        """
        return cls.from_tokens(tokenize(model, text), sequences, **options)

    @property
    def sequences(self) -> int:
        """The number of sequences."""
        return len(self.prompts)

    def positions(self) -> int:
        """The most positions one sequence takes in the memory at any time.

        Returns:
            Its prompt, the generated tokens, the pending token with its draft, and the step after the rollback.
        """
        draft = self.speculative + 2 if self.speculative else 1
        return max(len(p) for p in self.prompts) + self.generate + draft

    def check_fits(self, n_ctx: int, n_seq_max: int) -> None:
        """Raise ValueError, with the numbers, where the conversation does not fit a context.

        Args:
            n_ctx: the context's length in tokens (llama.cpp shares it among the sequences).
            n_seq_max: its sequences.

        Raises:
            ValueError: more sequences than the context has, or a sequence longer than its share of n_ctx.
        """
        if self.sequences > n_seq_max:
            raise ValueError(f"{self.sequences} sequences, the context has n_seq_max {n_seq_max}")
        need, share = self.positions(), n_ctx // max(1, n_seq_max)
        if need > share:
            longest = max(len(p) for p in self.prompts)
            raise ValueError(
                f"the conversation does not fit the context: a prompt of {longest} tokens, {self.generate} "
                f"generated and {self.speculative} drafted need {need} positions per sequence, the context has "
                f"{share} ({n_ctx} tokens for {n_seq_max} sequences)"
            )

    def largest_batch(self) -> int:
        """The most tokens one decode of the conversation takes: the prompts together, or the drafts.

        Returns:
            The count of tokens.
        """
        return max(sum(len(p) for p in self.prompts), self.sequences * (self.speculative + 1))

    def context_args(self, model: Model, n_ctx: int | None = None) -> ContextArgs:
        """The `llama.Context` arguments that fit the conversation: n_ctx (the positions each sequence needs,
        rounded up to 256, times the sequences), n_batch and n_ubatch (the prefill in one batch), n_seq_max,
        n_rs_seq (the draft's rollback).

        Its generated tokens and draft must fit the length the model was trained for (`Model.n_ctx_train`), or
        the prompt's when that is longer (a long prompt of random ids is a fair check of the kernels; llama.cpp
        too goes past the trained length when told to): a `--generate 100000` would otherwise be taken as asked
        and run for hours. Give `n_ctx` to set the context on purpose.

        Args:
            model: the Model.
            n_ctx: the context's length in tokens, set on purpose (then checked with `check_fits`, past the
                trained length allowed); None: what the conversation needs.

        Returns:
            The keyword arguments.

        Raises:
            ValueError: with the numbers, generated tokens or a draft past the trained length (n_ctx None), or a
                conversation longer than its share of `n_ctx`.
        """
        batch = self.largest_batch()
        n_rs_seq = min(self.speculative, 64)
        if n_rs_seq:  # a recurrent state's rollback: llama.cpp asserts n_ubatch > n_rs_seq + 1 (`Context`)
            batch = max(batch, n_rs_seq + 2)
        args = ContextArgs(
            n_ctx=n_ctx or -(-self.positions() // 256) * 256 * self.sequences,
            n_batch=batch,
            n_ubatch=batch,
            n_seq_max=self.sequences,
            n_rs_seq=n_rs_seq,
        )
        if n_ctx:
            self.check_fits(n_ctx, self.sequences)
            return args
        trained, longest = model.n_ctx_train, max(len(p) for p in self.prompts)
        if trained and self.positions() > max(trained, longest + 1):
            raise ValueError(
                f"--generate past the context: a prompt of {longest} tokens, {self.generate} generated and "
                f"{self.speculative} drafted need {self.positions()} positions per sequence, and "
                f"{os.path.basename(model.path)} was trained for {trained} (n_ctx_train); generate fewer, or set the "
                "context's size on purpose to go past it (--ctx-size N of check --model and compare, n_ctx=N)"
            )
        return args


@dataclass
class Step:
    """One decode of a conversation.

    Attributes:
        label: "prefill", "step 1", ..., "draft", "after rollback".
        tokens: per sequence, the ids decoded in this step.
        logits: the logits of every output, in batch order: (outputs, n_vocab); one output per sequence but in
            the draft, where every token has one (K + 1 per sequence).
        next_tokens: per output, the id decoded after it in the conversation (-1 where none was).
        rolled_back: per sequence, the first position removed after this step (-1: none).
    """

    label: str
    tokens: list[list[int]]
    logits: np.ndarray
    next_tokens: list[int] = field(default_factory=list)
    rolled_back: list[int] = field(default_factory=list)


@dataclass
class Transcript:
    """All a conversation decoded.

    Attributes:
        script: the Script.
        steps: the decodes in order.
        tokens: per sequence, the ids it holds at the end (prompt, generated, accepted).
        accepted: per sequence, the drafted tokens the model confirmed (empty without a draft).
    """

    script: Script
    steps: list[Step] = field(default_factory=list)
    tokens: list[list[int]] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)

    def logits(self) -> np.ndarray:
        """Every output's logits of every step, in order.

        Returns:
            (outputs, n_vocab) float32.
        """
        return np.concatenate([s.logits for s in self.steps]) if self.steps else np.zeros((0, 0), np.float32)

    def next_tokens(self) -> np.ndarray:
        """The token that came next after each output.

        Returns:
            Per output of `logits()`, the id decoded after it (-1 where none was).
        """
        return np.array([t for s in self.steps for t in s.next_tokens], dtype=np.int64)

    def labels(self) -> list[str]:
        """The step of each output.

        Returns:
            Per output of `logits()`, its step's label.
        """
        return [s.label for s in self.steps for _ in range(len(s.logits))]


def _draft(history: list[int], pending: int, k: int, rng: np.random.Generator, n_vocab: int) -> list[int]:
    """K tokens after `pending`: those that followed its last earlier occurrence (prompt lookup), random ids
    for the rest."""
    out: list[int] = []
    for at in range(len(history) - 1, -1, -1):
        if history[at] == pending:
            out = history[at + 1 : at + 1 + k]
            break
    return out + [int(t) for t in rng.integers(0, n_vocab, k - len(out))]


def cannot_roll_back(ctx: Context, script: Script) -> str:
    """Why the script's draft cannot be rolled back in this context, or "".

    A model with a recurrent state (recurrent or hybrid) rolls back only from the snapshots llama.cpp keeps
    (n_rs_seq), and llama.cpp keeps them only for the architectures of its `llm_arch_supports_rs_rollback`
    (qwen35, qwen35moe, lfm2, ...): for the others it clamps n_rs_seq to 0. The KV cache always rolls back.

    Args:
        ctx: the context.
        script: the conversation.

    Returns:
        The reason, in words; "" where the draft can be rolled back (or there is none).
    """
    model = ctx.model
    recurrent = bool(lib.llama_model_is_recurrent(model.ptr)) or bool(lib.llama_model_is_hybrid(model.ptr))
    if not script.speculative or not recurrent or ctx.n_rs_seq >= script.speculative:
        return ""
    return (
        f"--speculative {script.speculative}: {model.arch} keeps a recurrent state that llama.cpp cannot roll back "
        f"(this context keeps {ctx.n_rs_seq} snapshots, n_rs_seq: llama.cpp keeps them only for the architectures "
        "of llm_arch_supports_rs_rollback, e.g. qwen35, qwen35moe, lfm2)"
    )


def converse(
    ctx: Context,
    script: Script,
    follow: Transcript | None = None,
    on_step: Callable[[str], None] | None = None,
) -> Transcript:
    """Decode the script's conversation on `ctx` (see the module's docstring for the steps).

    Args:
        ctx: a llama.Context with room for it (`script.context_args`); its memory is cleared first.
        script: what to decode.
        follow: an earlier transcript (of this script) whose batches and rollbacks are decoded instead of this
            run's own greedy choices and drafts: the same tokens on another backend or file.
        on_step: called with each step's label before its decode.

    Returns:
        The Transcript.

    Raises:
        ValueError: the conversation does not fit the context (`Script.check_fits`); `follow` is of another
            script; a draft on a model whose memory cannot roll back (a recurrent model without `n_rs_seq`, or
            one whose architecture llama.cpp does not roll back: it clamps n_rs_seq to 0).
        pyggml.errors.LlamaError: llama.cpp failed to decode (its reason).
    """
    out = Transcript(script, tokens=[[] for _ in script.prompts])
    for label in conversing(ctx, script, out, follow):
        if on_step is not None:
            on_step(label)
    return out


def conversing(
    ctx: Context, script: Script, out: Transcript, follow: Transcript | None = None
) -> Generator[str, None, None]:
    """`converse`, one decode at a time: yields each step's label before its decode, filling `out` as it goes.

    Two conversations advanced in turns (`pyggml.llama.record_pair`) hold one run's nodes against the other's
    while both still have them: B follows A's transcript as A writes it, a step behind.

    Args:
        ctx: as `converse`'s.
        script: as `converse`'s.
        out: the Transcript to fill, made empty for `script` (`Transcript(script, tokens=[[] ...])`).
        follow: as `converse`'s; it may still be growing (in turns): a step is read when this run reaches it.

    Returns:
        A generator of the labels (close it to stop the conversation where it is).

    Raises:
        ValueError, LlamaError: as `converse`, when it is advanced.
    """
    script.check_fits(ctx.n_ctx, ctx.n_seq_max)
    if follow is not None and follow.script != script:
        raise ValueError("converse: follow is the transcript of another script")
    why = cannot_roll_back(ctx, script)
    if why:
        raise ValueError(why)
    model = ctx.model
    ctx.memory_clear()
    n_seq, n_vocab = script.sequences, model.n_vocab
    rng = np.random.default_rng(script.seed)
    planned = iter(follow.steps) if follow is not None else None

    def decode(label: str, batch: list[list[int]], every: bool) -> Iterator[str]:
        yield label  # before a followed step is read: in turns, the followed run decodes it meanwhile
        if planned is not None:
            step = next(planned, None)  # None: a followed run that stopped short (in turns: it has not decoded it)
            if step is None:
                raise ValueError(f"converse: follow has no step {label!r}")
            if step.label != label:
                raise ValueError(f"converse: follow has {step.label!r} where this run decodes {label!r}")
            batch = [list(t) for t in step.tokens]
        toks = [t for seq in batch for t in seq]
        seqs = [s for s, seq in enumerate(batch) for _ in seq]
        pos = [len(out.tokens[s]) + i for s, seq in enumerate(batch) for i in range(len(seq))]
        flags = [every or i == len(seq) - 1 for seq in batch for i in range(len(seq))]
        ctx.decode(toks, positions=pos, seq_ids=seqs, logits=flags)
        for s, seq in enumerate(batch):
            out.tokens[s] += seq
        out.steps.append(Step(label, batch, ctx.all_logits()))

    def last_outputs(step: Step) -> list[int]:  # per sequence, the row of its last token's logits
        every = len(step.logits) > n_seq  # a row per token, or a row per sequence
        return [int(e) for e in np.cumsum([len(t) if every else 1 for t in step.tokens]) - 1]

    def greedy(step: Step) -> list[int]:  # each sequence's next id: the argmax of its last output
        return [int(np.argmax(step.logits[e])) for e in last_outputs(step)]

    def chosen(own: list[int]) -> list[int]:  # the next step's ids: the followed run's, or this run's own
        if follow is None:
            return own
        if len(out.steps) < len(follow.steps):
            return [follow.steps[len(out.steps)].tokens[s][0] for s in range(n_seq)]
        # a followed run a step ahead (conversing in turns) has chosen them, not decoded them: its next tokens
        ref = follow.steps[len(out.steps) - 1]
        nexts = [ref.next_tokens[e] for e in last_outputs(ref)] if len(ref.next_tokens) == len(ref.logits) else []
        return nexts if nexts and min(nexts) >= 0 else own

    yield from decode(PREFILL, [list(p) for p in script.prompts], every=script.prefill_logits == "all")
    prefill = out.steps[-1]
    pending = chosen(greedy(prefill)) if (script.generate or script.speculative) else []
    last = prefill
    if script.prefill_logits == "all":  # after each prompt token its next; after the last, what was generated
        prefill.next_tokens = [t for p in script.prompts for t in p[1:] + (-1,)]

    def set_next(step: Step, nexts: list[int]) -> None:  # the sequences' last outputs are followed by nexts
        if len(step.next_tokens) != len(step.logits):
            step.next_tokens = [-1] * len(step.logits)
        for s, e in enumerate(last_outputs(step)):
            step.next_tokens[e] = nexts[s]

    for i in range(script.generate):
        set_next(last, pending)
        yield from decode(f"step {i + 1}", [[t] for t in pending], every=False)
        last = out.steps[-1]
        pending = chosen(greedy(last))
    set_next(last, pending if pending else [-1] * n_seq)
    if not script.speculative:
        return

    k = script.speculative
    batch = [[pending[s], *_draft(out.tokens[s], pending[s], k, rng, n_vocab)] for s in range(n_seq)]
    yield from decode(DRAFT, batch, every=True)  # following: the followed run's draft
    draft = out.steps[-1]
    pending = []
    for s in range(n_seq):
        drafted = draft.tokens[s][1:]
        choices = [int(np.argmax(r)) for r in draft.logits[s * (k + 1) : (s + 1) * (k + 1)]]
        accepted = 0
        while accepted < k and drafted[accepted] == choices[accepted]:
            accepted += 1
        if follow is not None:  # the followed run's decision, whatever this run's logits say: its next token
            accepted = follow.accepted[s]  # after the accepted ones, as its draft's next_tokens keep it
            choices[accepted] = follow.steps[len(out.steps) - 1].next_tokens[s * (k + 1) + accepted]
        out.accepted.append(accepted)
        first_removed = len(out.tokens[s]) - (k - accepted)
        if accepted < k:
            if not ctx.memory_seq_rm(s, first_removed, -1):
                raise ValueError(
                    f"--speculative {k}: llama.cpp could not remove positions {first_removed}.. of sequence {s} "
                    f"from {model.arch}'s memory (no rollback snapshot for them)"
                )
            del out.tokens[s][first_removed:]
        draft.rolled_back.append(first_removed if accepted < k else -1)
        pending.append(choices[accepted])
        # after output i: the accepted draft token, then the model's own choice; nothing after a rejected one
        draft.next_tokens += [*drafted[:accepted], pending[s], *([-1] * (k - accepted))]
    yield from decode(AFTER_ROLLBACK, [[t] for t in pending], every=False)
    out.steps[-1].next_tokens = [-1] * len(out.steps[-1].logits)


def no_draft(ctx: Context, transcript: Transcript) -> np.ndarray:
    """The logits of the step after a transcript's rollback, from a run that never drafted: the same prompts
    and generated tokens, the accepted draft tokens decoded one step at a time, then the step after.

    Equal, within rounding, to the transcript's `after rollback` logits when the rollback restored the memory.

    Args:
        ctx: a context like the transcript's (its memory is cleared first).
        transcript: a transcript with a draft.

    Returns:
        (sequences, n_vocab) logits.

    Raises:
        ValueError: the transcript has no draft.
    """
    script = transcript.script
    if not script.speculative:
        raise ValueError("no_draft: the transcript has no draft")
    ctx.memory_clear()
    n_seq = script.sequences
    prompts = [list(p) for p in script.prompts]
    ctx.decode(
        [t for p in prompts for t in p],
        positions=[i for p in prompts for i in range(len(p))],
        seq_ids=[s for s, p in enumerate(prompts) for _ in p],
        logits="none",
    )
    held = [len(p) for p in prompts]
    last: dict[int, np.ndarray] = {}
    while len(last) < n_seq:  # one token per sequence and step, until each holds all its tokens
        batch = [(s, transcript.tokens[s][held[s]]) for s in range(n_seq) if held[s] < len(transcript.tokens[s])]
        ctx.decode(
            [t for _, t in batch], positions=[held[s] for s, _ in batch], seq_ids=[s for s, _ in batch], logits="all"
        )
        rows = ctx.all_logits()
        for row, (s, _) in zip(rows, batch):
            held[s] += 1
            if held[s] == len(transcript.tokens[s]):
                last[s] = row
    return np.stack([last[s] for s in range(n_seq)])
