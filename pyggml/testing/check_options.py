"""The options of `python -m pyggml check`, declared where the command is (without importing the suite, so
that `pyggml --help` and the other commands start fast); `pyggml.testing.check` runs them."""

from __future__ import annotations

import argparse
from typing import Any


class Once(argparse.Action):
    """An option that may be given once: a second value is a usage error, not the last one silently winning."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{option} given twice ({getattr(namespace, self.dest)} and {values}): give it once")
        setattr(namespace, self.dest, values)


def backend_name(value: str) -> str:
    """An argparse type: a backend's name as `pyggml.target.Target.parse` takes it, as given; a name that is no
    backend's (`meta:`, `meta:meta:cpu`, "") is the command line's error, one line naming it and the names there are.

    Args:
        value: the name on the command line.

    Returns:
        The name.

    Raises:
        argparse.ArgumentTypeError: a name Target.parse refuses.
    """
    from pyggml.target import Target

    try:
        Target.parse(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def meta_devices(value: str) -> str:
    """An argparse type: a meta device's devices, comma-separated (`cpu,cpu`, `vulkan0,vulkan1`), as given.

    Args:
        value: the list on the command line.

    Returns:
        The list.

    Raises:
        argparse.ArgumentTypeError: a list that names no device, or names a meta device.
    """
    from pyggml.target import META_PREFIX, Target

    try:
        Target.parse(META_PREFIX + value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a list of single devices: DEV,DEV,..., e.g. cpu,cpu or vulkan0,vulkan1"
        ) from None
    return value


def unavailable(names: list[str], provided: tuple[str, ...] = ()) -> str | None:
    """Why a backend named on the command line cannot be had in this build (the first such), for a command that
    would otherwise report each of its runs failed: `pyggml.testing.engine.session.backend_error`.

    Args:
        names: the backends' names (each one Target.parse takes).
        provided: device families the command provides itself (`rpc`: script-fuzz starts local RPC servers).

    Returns:
        `NAME: why`, None when each can be had.
    """
    from pyggml import rpc
    from pyggml.target import Target
    from pyggml.testing.engine.session import backend_error

    for name in names:
        t = Target.parse(name)
        for device, family in zip(t.devices, t.families):
            if family in provided:
                why = None if family != "rpc" or rpc.available() else "this pyggml was built without ggml's RPC backend"
            else:
                why = backend_error(device)
            if why:
                return f"{name}: " + "; ".join(line.strip().rstrip(".;") for line in why.splitlines() if line.strip())
    return None


def add_backend_option(p: argparse.ArgumentParser, text: str) -> None:
    """Declare `--backend NAME` (repeatable), as check, compare, coverage and findings take it: a name that is no
    backend's is a usage error (`backend_name`).

    Args:
        p: the command's parser.
        text: the option's help: what the command does with the backends, and its default.
    """
    p.add_argument("--backend", action="append", metavar="NAME", type=backend_name, help=text)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Declare check's options on its parser.

    Args:
        p: the `check` subcommand's parser.
    """
    add_backend_option(
        p,
        "backend to run on (cpu, vulkan0, meta:cpu,cpu, cpu:zen4 (one of ggml's CPU variants), cpu:all (every "
        "variant this machine runs), ...; repeatable; default: all available)",
    )
    p.add_argument("--only", metavar="PATTERN", help="cases whose name contains PATTERN (or matches it as a regex)")
    p.add_argument(
        "--json",
        metavar="FILE",
        help="write the records (case, backend, status, error, ...) here "
        "(- : to stdout, the table then goes to stderr; `coverage --from FILE` reads it)",
    )
    p.add_argument(
        "--junit",
        metavar="FILE",
        help="write JUnit XML here (a testsuite per backend, a testcase per case; - : to stdout)",
    )
    p.add_argument("--op", action="append", metavar="OP", help="cases of this op (repeatable)")
    p.add_argument(
        "--type",
        action="append",
        metavar="TYPE",
        help="cases involving this ggml type (repeatable); with --arch: the models' file types (f32, q8_0, q4_k_m, ...)",
    )
    p.add_argument("--list", action="store_true", help="list the selected cases (name, op, types) and stop")
    p.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="run the cases in N worker processes, at most one per case (default: as many as the selection is "
        "worth, at most the cores this process may run on: docs/suite.md; a worker's death is its case's error; "
        "0: in this process). RPC devices run in this process",
    )
    p.add_argument(
        "--slow",
        action="store_true",
        help="also run the cases lavapipe needs minutes to compile shaders for (see docs/findings.md)",
    )
    p.add_argument(
        "--mode",
        choices=("test", "grad", "perf"),
        default="test",
        help="test: outputs against the oracles; grad: gradients against finite differences; perf: each case's "
        "graph timed on each backend (us/run, GFLOPS or GB/s, and the fraction of the backend's measured limits)",
    )
    p.add_argument(
        "--perf-time",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="--mode perf: time each case on each backend for this long (default 1)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="the CPU's threads: --mode perf's CPU backend (default: half the machine's cores, as test-backend-ops); "
        "--model/--arch: llama.cpp's (default: the cores this process may run on)",
    )
    p.add_argument(
        "--model",
        action="append",
        metavar="FILE.gguf",
        help="run llama.cpp's forward pass of this model on each --backend (cpu, vulkan0, rpc0, meta:vulkan0,vulkan1) "
        "and check every node it computes against its oracle (make one: python -m pyggml make-model ARCH FILE); "
        "repeatable",
    )
    p.add_argument(
        "--arch",
        action="append",
        metavar="ARCH",
        help="like --model, on the model `make-model ARCH` writes, once per --type (file types: f32, q8_0, "
        "q4_k_m, ...; default f32); repeatable; `all`: every architecture of make-model --list",
    )
    p.add_argument(
        "--tokens", type=int, default=8, metavar="N", help="--model: the tokens decoded in one batch (default 8)"
    )
    p.add_argument(
        "--prompt",
        metavar="TEXT",
        help="--model: decode this text, tokenized by the model's own tokenizer (a model without one: --tokens "
        "random ids, said so); every prompt token's logits are compared across backends",
    )
    p.add_argument("--prompt-file", metavar="FILE", help="--model: the prompt's text from a file")
    p.add_argument(
        "--generate",
        type=int,
        default=0,
        metavar="N",
        help="--model: after the prompt, N tokens decoded one at a time (greedy), every node of every step checked",
    )
    p.add_argument(
        "--sequences",
        type=int,
        default=1,
        metavar="S",
        help="--model: S sequences (the prompt at S offsets) decoded together in one batch, then stepping together",
    )
    p.add_argument(
        "--speculative",
        type=int,
        default=0,
        metavar="K",
        help="--model: after the generated tokens, a draft of K tokens decoded, the tokens the model rejects "
        "rolled back from the memory (KV cache, recurrent state), one more step; its logits must equal a run's "
        "that never drafted",
    )
    p.add_argument(
        "--ctx-size",
        type=int,
        default=0,
        metavar="N",
        help="--model: the context's tokens (default: what the conversation needs, the generated tokens within "
        "what the model was trained for)",
    )
    p.add_argument(
        "--save-failures",
        metavar="DIR",
        help="--model: save the first failing nodes of each backend (up to 5) here as reproducers, "
        "written only when a node fails (default: pyggml-failures)",
    )
    p.add_argument(
        "--save-node",
        action="append",
        metavar="PATTERN",
        help="--model: also save every node whose name or op kind matches (fnmatch: 'attn_norm-*', MUL_MAT; "
        "repeatable), passing or not",
    )
    p.add_argument(
        "--no-repack",
        action="store_true",
        help="--model: keep the CPU's weights out of its extra buffer types (CPU_REPACK, AMX), as llama.cpp's "
        "--no-repack; by default llama.cpp puts Q4_0, Q4_K, IQ4 ... weights there, and the checker reads them "
        "from the model file",
    )
    p.add_argument(
        "--oracle",
        choices=("full", "projected"),
        default="full",
        help="--model: how products are judged: full (default: every element against the oracle's product, "
        "within its modelled rounding) or projected (each product's weight projected once, kept on disk: "
        "python -m pyggml cache; cheaper, weaker against an error in one row; a node it fails is rechecked in full)",
    )
    p.add_argument(
        "--projection-seed",
        type=int,
        action=Once,
        metavar="N",
        help="--oracle projected: the seed of the weights' projections (default 58, or $PYGGML_PROJECTION_SEED); "
        "each seed's projections are kept apart",
    )
    p.add_argument(
        "--node-nmse",
        type=float,
        metavar="BOUND",
        help="--model: judge every node of an inexact op within this NMSE instead of its op's bound "
        "(exact ops stay bit-exact); a tiny one shows the nodes furthest from their oracle",
    )
    p.add_argument(
        "--repro",
        metavar="FILE_OR_DIR",
        help="rerun saved nodes (a reproducer's .json, or a folder of them) on each --backend "
        "(default: the backend each was saved from) against their oracle and saved bound",
    )
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress, no row per case: only the counts per backend and the failures",
    )
