"""pyggml's command line: `info` (what this build has), `check` (the differential suite), `compare` (one run of
a llama.cpp model against another, node by node), `coverage`, `findings` (which upstream bugs this build still
has), `rpc-server` (serve a local device to other processes over ggml's RPC backend), `gguf` (summarize a GGUF
file), `make-model` (write a small random-weight GGUF model that llama.cpp loads, quantized with `--type`),
`quantize` (llama.cpp's quantizer), `cache` (the weights' projections `check --model --oracle projected` keeps;
`--clear`), `notebooks` (execute the examples: compare or --refresh their outputs) and the
fuzzers `fuzz`, `meta-fuzz`, `script-fuzz`, `gguf-fuzz` and `rpc-fuzz` (docs/fuzzing.md)."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import re
import shutil
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

CPU_FEATURES = (
    "sse3",
    "ssse3",
    "avx",
    "avx_vnni",
    "avx2",
    "bmi2",
    "f16c",
    "fma",
    "avx512",
    "avx512_vbmi",
    "avx512_vnni",
    "avx512_bf16",
    "amx_int8",
    "neon",
    "arm_fma",
    "fp16_va",
    "dotprod",
    "matmul_int8",
    "sve",
    "sme",
    "sme2",
    "riscv_v",
    "vsx",
    "vxe",
    "wasm_simd",
    "llamafile",
)

# the fuzzers' commands: each module has add_arguments(parser) and main(args, parser)
FUZZERS = {
    "fuzz": ("pyggml.testing.fuzzers.fuzz", "call every public op and method with random arguments (the Python layer)"),
    "meta-fuzz": (
        "pyggml.testing.fuzzers.meta_fuzz",
        "random small graphs split over a meta device against one device",
    ),
    "script-fuzz": (
        "pyggml.testing.fuzzers.script_fuzz",
        "random whole programs as users script them (runs, reruns, reads of every node, weights elsewhere)",
    ),
    "gguf-fuzz": ("pyggml.testing.fuzzers.gguf_fuzz", "load mutated GGUF files, each batch in a child process"),
    "rpc-fuzz": ("pyggml.testing.fuzzers.rpc_fuzz", "send malformed messages to ggml's RPC server"),
}


def ggml_info() -> dict:
    """ggml's version, the pin it was fetched by and the patches on it, and the CPU features ggml-cpu uses.
    The pin and patches come from the build's record when it has them, else from the source tree of an
    editable install (vendor/ggml), else they are unknown (None)."""
    import tomllib
    from pathlib import Path

    from pyggml import build_info, lib
    from pyggml._native import cstr

    built = build_info()
    tree = built.get("tree")  # tools/fetch_ggml.py's record: every build since it wrote one
    data: dict = {
        "version": cstr(lib.ggml_version()),
        "commit": cstr(lib.ggml_commit()),
        "tree": tree,
        "pin": tree["pin"] if tree and tree["tree"] == "pin" else None,
        "patches": [p["name"] for p in tree["patches"] if p["state"] in ("applied", "already in the source")]
        if tree
        else None,
        "pin_from": "build" if tree else None,
    }
    if tree:
        return _with_cpu_features(data)
    vendor = Path(__file__).resolve().parent.parent / "vendor" / "ggml"
    if data["pin"] is None and (vendor / "pin.toml").is_file():
        pin = tomllib.loads((vendor / "pin.toml").read_text())
        data["pin"] = {k: pin[k] for k in ("package", "version", "sha256") if k in pin}
        data["pin_from"] = "source tree's vendor/ggml/pin.toml"
    if data["patches"] is None and (vendor / "patches").is_dir():
        data["patches"] = sorted(p.name for p in (vendor / "patches").glob("*.patch"))
    return _with_cpu_features(data)


def _with_cpu_features(data: dict) -> dict:
    from pyggml import lib
    from pyggml._native import has

    data["cpu_features"] = [f for f in CPU_FEATURES if has(f"ggml_cpu_has_{f}") and getattr(lib, f"ggml_cpu_has_{f}")()]
    return data


def _variants_info() -> dict:
    """ggml's CPU variants built (pyggml.cpu_variants): each with its features, ggml's score here and what this
    machine lacks for it; the one ggml would load here (`best`); `cpu` is this build's own CPU backend."""
    from pyggml import cpu_variants

    built = cpu_variants.built()
    best = cpu_variants.best()
    # those ggml scores above the best were passed over: their probe died (cpu_variants.probe, findings 37)
    died = {v.name: cpu_variants.probe(v.name) for v in built.values() if best and v.score > best.score}
    return {
        "built": {
            v.name: {
                "features": list(v.features),
                "score": v.score,
                "runs_here": v.runs_here,
                "lacks": v.lacking(),
                "probe": died.get(v.name),
            }
            for v in built.values()
        },
        "best": best.name if best else None,
        "in_use": getattr(cpu_variants.in_use(), "name", None),
        "why_in_use": cpu_variants.why_in_use(),
    }


def _print_variants(variants: dict) -> None:
    built = variants["built"]
    if not built:
        print("CPU variants: none built (cpu is this build's own CPU backend; ggml's run-time variants, cpu:zen4, ...:")
        print('  CMAKE_ARGS="-DPYGGML_CPU_VARIANTS=all" pip install -e .)')
        return
    runs = [n for n, v in built.items() if v["runs_here"]]
    print(f"CPU variants built ({len(built)}): {', '.join(built)}")
    print(f"  this machine runs ({len(runs)}): {', '.join(runs) or 'none'} (check --backend cpu:all)")
    for name, v in built.items():
        if not v["runs_here"]:
            print(f"  not {name}: it lacks {', '.join(v['lacks']) if v['lacks'] else 'a feature (ggml scores it 0)'}")
        elif v.get("probe"):
            print(f"  not chosen: {name}: {v['probe']}")
    if variants["best"]:
        feats = " ".join(built[variants["best"]]["features"]) or "no SIMD extension"
        print(f"  cpu:best, the one ggml would load here: {variants['best']} ({feats})")
    if variants["in_use"]:
        print(f"  in use as cpu (and libllama's CPU): {variants['in_use']} ({variants['why_in_use']})")
    else:
        print(
            f"  in use as cpu (and libllama's CPU): this build's own CPU backend, built as above ({variants['why_in_use']})"
        )


def info(args: argparse.Namespace) -> int:
    from pyggml import backend_kinds, build_info, devices
    from pyggml._native import adaptations
    from pyggml.backend import backend_features

    data: dict = {"build": build_info(), "ggml": ggml_info(), "devices": [], "backend_features": {}}
    data["ggml"]["adapted"] = adaptations()
    for d in devices():
        free, total = d.memory()
        data["devices"].append(
            {
                "name": d.name,
                "description": d.description,
                "type": d.type.name,
                "backend": d.backend_name,
                "memory_free": free,
                "memory_total": total,
            }
        )
    data["cpu_variants"] = _variants_info()
    from pyggml.transport import extra_buffer_types

    # where llama.cpp keeps weights of its own layout on this CPU unless told not to (--no-repack)
    data["cpu_extra_buffer_types"] = sorted(set(extra_buffer_types().values()))
    # the CPU's features are ggml_info's cpu_features
    data["backend_features"] = {k: v for k, v in backend_features().items() if k != "CPU"}
    if args.json:
        print(json.dumps(data, indent=1))
        return 0
    g = data["ggml"]
    print(f"ggml {g['version']} (build commit {g['commit'] or 'unknown'})")
    tree = g["tree"]
    _print_tree_and_patches(g, tree)
    print("ggml-cpu built with:", " ".join(f.upper() for f in g["cpu_features"]) or "none of the SIMD extensions")
    from pyggml.threads import cores

    print(f"CPU threads by default: {cores()}, the cores this process may run on (pyggml.threads.cores)")
    extra = ", ".join(data["cpu_extra_buffer_types"]) or "none"
    print(f"CPU extra buffer types (llama.cpp keeps weights there unless --no-repack): {extra}")
    _print_variants(data["cpu_variants"])
    print("backends built:", ", ".join(data["build"]["backends"]))
    for reg, features in data["backend_features"].items():
        if features:
            print(f"{reg} built with:", " ".join(f"{k}={v}" for k, v in features.items()))
    print("devices:")
    for d in data["devices"]:
        mem = f", {d['memory_total'] / 2**30:.1f} GiB" if d["memory_total"] else ""
        print(f"  {d['name'].lower():<10} {d['type']:<5} {d['description']}{mem}")
    built = data["build"]["backends"]
    listed = {backend_kinds.split(d["name"])[0] for d in data["devices"]}
    for k in backend_kinds.KINDS:  # a kind built whose devices are missing: why (pyggml.backend_kinds)
        if k.family in built and k.missing and (k.family not in listed or k.family == "vulkan"):
            print(f"  (no {k.label} device: {k.missing})" if k.family not in listed else f"note: {k.missing}")
    wanted = [k for k in backend_kinds.KINDS if k.family in ("vulkan", "cuda") and k.family not in built]
    if wanted:
        print("not built: " + ", ".join(f"{k.label} ({backend_kinds.build_hint(k)})" for k in wanted))
    return 0


class _Progress(logging.Handler):
    """On a terminal, one line on stderr saying what a long command does now: its stage, and the tensor
    llama.cpp's quantizer is at (`[ 12/ 310] blk.1.attn_q.weight`, from its log); nothing elsewhere (a pipe, a
    file, a test), where the command prints its one line of result only."""

    TENSOR = re.compile(r"^\[\s*(\d+)/\s*(\d+)\]\s+(\S+)")

    def __init__(self, command: str) -> None:
        super().__init__(logging.DEBUG)
        self.command = command
        self.on = sys.stderr.isatty()
        self.width = 0
        self.shown = logging.WARNING
        self.saved: tuple[int, bool] = (logging.NOTSET, True)

    def stage(self, text: str) -> None:
        """Say what the command does now."""
        if self.on:
            line = f"{self.command}: {text}"[: shutil.get_terminal_size().columns - 1]
            sys.stderr.write("\r" + line.ljust(self.width))
            sys.stderr.flush()
            self.width = len(line)

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= self.shown:  # a warning goes where it always went, below the line
            sys.stderr.write("\r" + " " * self.width + "\r")
            self.width = 0
            logging.getLogger().handle(record)
            return
        m = self.TENSOR.match(record.getMessage())
        if m:
            self.stage(f"quantizing tensor {m.group(1)} of {m.group(2)}: {m.group(3)}")

    def __enter__(self) -> _Progress:
        if self.on:  # ggml's INFO lines (the quantizer's) come here, and only what was shown before goes on
            log = logging.getLogger("pyggml.ggml")
            self.shown = log.getEffectiveLevel()
            self.saved = log.level, log.propagate
            log.setLevel(min(self.shown, logging.INFO))
            log.propagate = False
            log.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.on:
            log = logging.getLogger("pyggml.ggml")
            log.removeHandler(self)
            log.level, log.propagate = self.saved
            if self.width:
                sys.stderr.write("\r" + " " * self.width + "\r")
                sys.stderr.flush()


def _print_tree_and_patches(g: dict, tree: dict | None) -> None:
    """`info`'s lines on the tree built (the pin or the user's) and the patches applied."""
    from pyggml._native import adaptations

    if tree and tree["tree"] == "user":
        print(f"tree: the user's: ggml from {tree['ggml_source']}, llama.cpp from {tree['llama_source'] or '(none)'}")
        print(f"patches ({tree['patch_choice']}{', strict' if tree['strict'] else ''}):")
        for p in tree["patches"]:
            if p["state"] != "not chosen":
                print(f"  {p['name']}: {p['state']}{': ' + p['reason'] if p.get('reason') else ''}")
        if all(p["state"] == "not chosen" for p in tree["patches"]):
            print("  none applied")
        a = adaptations()
        print(
            f"adapted to this tree: {len(a['missing'])} of the pin's functions missing, {len(a['changed'])} with "
            f"another C type ({', '.join(a['changed']) or 'none'}), {len(a['absent'])} enum members absent: their "
            "wrappers raise Unsupported saying so"
        )
    elif g["pin"]:
        pin = g["pin"]
        print(
            f"pin: {pin.get('package')}=={pin.get('version')}, sdist sha256 {pin.get('sha256')} "
            f"(from the {g['pin_from']})"
        )
    else:
        print("pin: not recorded in this build (see vendor/ggml/pin.toml in pyggml's source)")
    if tree and tree["tree"] == "user":
        pass
    elif g["patches"] is not None:
        from pyggml.testing.engine.session import _wrap

        names = [p.removesuffix(".patch") for p in g["patches"]]
        # ggml's series, then llama.cpp's: each numbered from 0001
        cut = next((i for i in range(1, len(names)) if names[i][:4] <= names[i - 1][:4]), len(names))
        print(
            f"patches: {len(names)}, applied at build ({'recorded by the build' if tree else 'read from the source tree'}):"
        )
        print(f"  ggml's (vendor/ggml/patches), {cut}:\n{_wrap(names[:cut], indent='    ')}")
        if names[cut:]:
            print(f"  llama.cpp's (vendor/llama/patches), {len(names) - cut}:\n{_wrap(names[cut:], indent='    ')}")
    else:
        print("patches: not recorded in this build")


def _make_quantized(args: argparse.Namespace, write: Callable[[str], None]) -> None:
    """make-model --type: the F32 file written to a temporary folder, then quantized by llama.cpp's quantizer (with
    an importance matrix where the type needs one) into args.file."""
    import tempfile

    from pyggml import llama

    if args.type.lower() not in llama.file_types():
        raise ValueError(f"--type {args.type}: not a file type of this libllama ({', '.join(llama.file_types())})")
    from pyggml.models import imatrix

    with tempfile.TemporaryDirectory() as tmp, _Progress("make-model") as progress:
        f32 = os.path.join(tmp, "f32.gguf")
        progress.stage(f"writing {args.arch}'s F32 weights")
        write(f32)
        importance = None
        if args.type.lower() in imatrix.NEEDED_BY:
            progress.stage("computing the importance matrix (llama.cpp decodes the model)")
            importance = imatrix.compute(f32)
        progress.stage(f"quantizing to {args.type.lower()}")
        llama.quantize(f32, args.file, args.type, imatrix=importance)


def make_model_main(args: argparse.Namespace) -> int:
    """`make-model ARCH FILE [--type TYPE]` writes the file (F32, or quantized by llama.cpp's quantizer) and prints
    what it holds; `make-model --list` prints the architectures, one per line. pyggml's own tables make their
    architectures (`--layers` works there); llama.cpp's generator (`pyggml.models.llama_archs`) makes the rest,
    or any of its own with `--generator llama.cpp`. A bad argument or an unwritable file is an error message and
    exit status 2."""

    from pyggml.models import llama_archs
    from pyggml.models.make_model import architectures, make_model

    def ours() -> bool:
        return args.generator == "pyggml" or (args.generator is None and args.arch in architectures())

    def write(path: str) -> None:
        if ours():
            make_model(args.arch, path, seed=args.seed, layers=args.layers, like=args.like)
        elif args.layers is not None or args.like is not None:
            flag = "--layers" if args.layers is not None else "--like"
            raise ValueError(f"{flag}: only pyggml's own architectures take it ({', '.join(architectures())})")
        else:
            llama_archs.generate(args.arch, path, seed=args.seed)

    try:
        if args.list:
            names = llama_archs.names()
            print("\n".join(names + [a for a in architectures() if a not in names]))
            return 0
        if args.arch is None or args.file is None:
            raise ValueError("give ARCH and FILE (or --list to see the architectures)")
        if not ours() and args.arch not in llama_archs.names() and args.generator is None:
            raise ValueError(
                f"unknown architecture {args.arch!r}: pyggml makes {', '.join(architectures())}, llama.cpp's "
                f"generator {len(llama_archs.names())} (python -m pyggml make-model --list)"
            )
        if args.type is not None and args.type.lower() != "f32":
            _make_quantized(args, write)
        else:
            with _Progress("make-model") as progress:
                progress.stage(f"writing {args.arch}'s weights")
                write(args.file)
        from pyggml import gguf

        info = gguf.read_info(args.file)
    except (ValueError, OSError, RuntimeError) as e:
        print(f"make-model: {e}", file=sys.stderr)
        return 2
    meta = info.metadata
    arch = meta["general.architecture"]
    kind = (args.type or "f32").lower()
    print(
        f"{args.file}: {arch}, {meta.get(f'{arch}.block_count', '?')} layers, {len(info.tensor_info)} tensors, "
        f"{kind}, {os.path.getsize(args.file)} bytes (made by {'pyggml' if ours() else 'llama.cpp'})"
    )
    return 0


def quantize_main(args: argparse.Namespace) -> int:
    """`quantize IN OUT TYPE`: llama.cpp's quantizer, with an importance matrix computed from IN where the type
    needs one (or --imatrix asks); its refusal is an error message and exit status 2."""
    from pyggml import llama
    from pyggml.errors import GGMLError
    from pyggml.models import imatrix

    try:
        with _Progress("quantize") as progress:
            importance = None
            if args.imatrix or (args.imatrix is None and args.type.lower() in imatrix.NEEDED_BY):
                progress.stage("computing the importance matrix (llama.cpp decodes the model)")
                importance = imatrix.compute(args.src, n_tokens=args.imatrix_tokens)
            progress.stage(f"quantizing to {args.type.lower()}")
            llama.quantize(args.src, args.dst, args.type, n_threads=args.threads, imatrix=importance)
    except (ValueError, OSError, GGMLError) as e:  # LlamaError, and GGUFError from the importance matrix's read
        print(f"quantize: {e}", file=sys.stderr)
        return 2
    print(f"{args.dst}: {args.type.lower()}, {os.path.getsize(args.dst)} bytes")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; a reader that goes away (`| head`) ends it quietly, as with other command-line tools.
    Started by a pyggml process that names itself in the environment (`pyggml.parent.ENV`: `rpc.Server`),
    it ends when that process ends."""
    from pyggml import parent

    parent.end_with_env()
    try:
        rc = _main(argv)
        sys.stdout.flush()
        return rc
    except BrokenPipeError:
        # nothing more can be written: point stdout and stderr at /dev/null so that Python's own
        # flush at exit does not complain, and exit as a process killed by SIGPIPE would (128 + 13)
        devnull = os.open(os.devnull, os.O_WRONLY)
        for stream in (sys.stdout, sys.stderr):
            try:
                os.dup2(devnull, stream.fileno())
            except (OSError, ValueError):
                pass
        return 128 + signal.SIGPIPE


# each command's examples (its --help ends with them and the exit codes)
EXAMPLES = {
    "info": ["info", "info --json"],
    "check": [
        "check",
        "check --backend cpu --backend vulkan0 --op mul_mat -j 2",
        "check --model model.gguf --backend cpu --backend vulkan0 --prompt 'The capital of France is' --generate 4",
        "check --arch qwen35 --type q4_k_m --backend meta:cpu,cpu --speculative 3",
    ],
    "compare": [
        "compare model-f32.gguf model-q4_k_m.gguf --plot drift.png",
        "compare model.gguf --backend cpu --backend vulkan0",
    ],
    "coverage": ["coverage", "coverage --from report.json"],
    "findings": ["findings", "findings --backend cpu"],
    "rpc-server": ["rpc-server --port 50052 --threads 2"],
    "gguf": ["gguf model.gguf", "gguf model.gguf --json"],
    "make-model": ["make-model llama tiny.gguf", "make-model qwen35 q35.gguf --like qwen35-0.8b --type q4_k_m"],
    "quantize": ["quantize model-f32.gguf model-q8_0.gguf q8_0"],
    "notebooks": ["notebooks examples/*.ipynb", "notebooks examples/quantization_drift.ipynb --refresh"],
}
# what each command's exit status means
EXIT_CODES = {
    "check": "0 every case or node passed (or is known or unsupported), 1 failures, 2 bad input",
    "findings": "0 the report was made, 1 a finding's case failed otherwise than its finding says, 2 bad input",
    "compare": "0 both runs completed, whatever the figures (a comparison measures), 2 bad input",
    "notebooks": "0 every notebook's outputs match, 1 one differs or fails, 2 bad input",
}


def _command(sub: Any, name: str, summary: str, description: str | None = None) -> argparse.ArgumentParser:
    """A subcommand's parser: its summary, a description, examples and the exit codes in its --help."""
    examples = "\n".join(f"  python -m pyggml {e}" for e in EXAMPLES.get(name, [name]))
    codes = EXIT_CODES.get(name, "0 done, 1 it failed (the reason on stderr), 2 bad input")
    return sub.add_parser(
        name,
        help=summary,
        description=description or summary[0].upper() + summary[1:] + ".",
        epilog=f"examples:\n{examples}\n\nexit status: {codes}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


class _Version(argparse.Action):
    """`pyggml --version`: pyggml's version and the ggml it was built with (imported only when asked)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kw: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=kw.get("help"))  # type: ignore[arg-type]

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        import pyggml
        from pyggml._native import cstr, lib

        print(f"pyggml {pyggml.__version__}, ggml {cstr(lib.ggml_version())}")
        parser.exit()


def _parser(
    argv: Sequence[str] | None,
) -> tuple[argparse.ArgumentParser, dict[str, tuple[ModuleType, argparse.ArgumentParser]]]:
    """The command line: each command's parser (the fuzzers' options only for the fuzzer chosen), and the fuzzers'
    modules and parsers by name."""
    parser = argparse.ArgumentParser(prog="pyggml", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="show ggml's log")
    parser.add_argument("--version", action=_Version, help="print pyggml's and ggml's versions and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    # the command's own modules only: `check` does not pay for importing the fuzzers and make_model
    chosen = next((a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")), None)
    analysis = _analysis_commands(sub)
    p_rpc = _file_and_server_commands(sub, chosen)
    fuzzers = _fuzzer_commands(sub, chosen)
    for sub_parser in analysis:
        sub_parser.add_argument(
            "--rpc",
            metavar="HOST:PORT[,HOST:PORT...]",
            help="add these RPC servers' devices first (rpc0, rpc1, ... in this order)",
        )
    for sub_parser in (*analysis, p_rpc):
        sub_parser.add_argument(
            "--vk-devices",
            metavar="LIST",
            default="0",
            help="GGML_VK_VISIBLE_DEVICES when it is not set (default 0): ggml lists CPU-type "
            "Vulkan devices such as lavapipe only when named; 0,0 shows device 0 twice",
        )
    return parser, fuzzers


def _analysis_commands(sub: Any) -> tuple[argparse.ArgumentParser, ...]:
    """info, check, compare, coverage and findings: the commands that use devices; their parsers."""
    from pyggml.testing import check_options
    from pyggml.testing import compare as compare_command

    p_info = _command(
        sub, "info", "ggml's version, pin, patches and CPU features; the built backends and their devices"
    )
    p_info.add_argument("--json", action="store_true", help="print JSON")
    p_check = _command(
        sub,
        "check",
        "run every case on every backend against its NumPy oracle",
        "Run the differential suite: every case of every ggml op on every --backend, each result against its "
        "NumPy oracle; or, with --model/--arch, every node of llama.cpp's forward pass (a prompt, generated "
        "tokens, sequences, a rolled-back draft) against the ops' oracles, and the logits against the CPU's; "
        "--mode grad checks gradients, --mode perf times the cases; --repro reruns saved nodes.",
    )
    check_options.add_arguments(p_check)

    p_cmp = _command(
        sub,
        "compare",
        "hold one run of a llama.cpp model against another (two files, or two backends), node by node",
        compare_command.__doc__,
    )
    compare_command.add_arguments(p_cmp)
    p_cov = _command(
        sub,
        "coverage",
        "for every ggml op kind: wrapper, cases, and their results per backend "
        "(runs the whole suite unless --from gives a check --json report)",
    )
    p_find = _command(
        sub,
        "findings",
        "which of docs/findings.md's upstream bugs this build still has: each finding's cases rerun in "
        "worker processes, with the patch or upstream version that fixes it",
    )
    # both run cases on backends and print a table or JSON; their own options follow
    for p, default in ((p_cov, "all available"), (p_find, "all")):
        check_options.add_backend_option(p, f"backends to run on (default: {default})")
        p.add_argument("--json", action="store_true", help="print JSON")
    p_cov.add_argument(
        "--from",
        dest="from_file",
        metavar="FILE",
        help="read the results from a `check --json FILE` report instead of running the suite (- : from stdin)",
    )
    p_cov.add_argument("-q", "--quiet", action="store_true", help="no progress")
    p_find.add_argument(
        "--export",
        metavar="DIR",
        help="write each finding's cases for upstream instead: test-backend-ops --test-file lines and a script",
    )
    p_find.add_argument("-j", "--jobs", type=int, default=2, help="worker processes (default 2)")
    return p_info, p_check, p_cmp, p_cov, p_find


def _file_and_server_commands(sub: Any, chosen: str | None) -> argparse.ArgumentParser:
    """rpc-server, gguf, make-model, quantize and notebooks; the RPC server's parser (it takes --vk-devices)."""
    from pyggml.testing import check_options

    p_rpc = _command(sub, "rpc-server", "serve one local device over ggml's RPC backend (TCP)")
    p_rpc.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1; anything else is reachable from the network: "
        "ggml's RPC server is not secure)",
    )
    p_rpc.add_argument("--port", type=int, default=50052, help="port (default 50052)")
    p_rpc.add_argument(
        "--device",
        default="cpu",
        type=check_options.backend_name,
        help="the device to serve: cpu, vulkan0, ... (default cpu)",
    )
    p_rpc.add_argument("--threads", type=int, default=None, help="CPU threads (default: the machine's cores)")
    p_rpc.add_argument(
        "--trust-clients",
        action="store_true",
        help="compute CUSTOM and MAP_CUSTOM nodes, which make the server call a function at an address the "
        "client gives: only for clients you trust completely (refused by default)",
    )
    p_gguf = _command(sub, "gguf", "summarize a GGUF file: header, metadata, tensors (read by ggml's gguf)")
    p_gguf.add_argument("file", help="the GGUF file")
    p_gguf.add_argument("--json", action="store_true", help="print JSON (metadata values in full)")
    p_gguf.set_defaults(vk_devices="0")  # no device is used
    _model_commands(sub, chosen)
    return p_rpc


def _model_commands(sub: Any, chosen: str | None) -> None:
    """make-model, quantize and notebooks."""

    def architectures() -> list[str]:
        if chosen not in (None, "make-model"):
            return ["..."]
        from pyggml.models.make_model import architectures as archs

        return archs()

    p_mm = _command(
        sub,
        "make-model",
        f"write a small random-weight GGUF model of a llama.cpp architecture: pyggml's own "
        f"({', '.join(architectures())}) or any of llama.cpp's generator's (make-model --list lists them all)",
    )
    p_mm.add_argument(
        "arch",
        metavar="ARCH",
        nargs="?",
        help=f"the architecture: pyggml's own ({', '.join(architectures())}) or any llama.cpp's generator makes "
        "(--list)",
    )
    p_mm.add_argument("file", metavar="FILE", nargs="?", help="the GGUF file to write")
    p_mm.add_argument("--list", action="store_true", help="print the architectures, one per line, and exit")
    p_mm.add_argument(
        "--generator",
        choices=("pyggml", "llama.cpp"),
        default=None,
        help="who makes the model: pyggml's tables (its own architectures) or llama.cpp's generator "
        "(tests/test-llama-archs.cpp); default pyggml's where it has the architecture",
    )
    p_mm.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    p_mm.add_argument("--layers", type=int, default=None, help="number of layers (default: the architecture's, 2)")
    p_mm.add_argument(
        "--like",
        metavar="PRESET",
        default=None,
        help="the configuration of a real model, with random weights: llama-1b, qwen3-0.6b, gemma3-1b, qwen35-0.8b",
    )
    p_mm.add_argument(
        "--type",
        default=None,
        metavar="TYPE",
        help="quantize it with llama.cpp's quantizer (q4_0, q4_k_m, q8_0, bf16, ...: `pyggml.llama.file_types()`); "
        "default f32",
    )
    _quantize_and_notebook_commands(sub)


def _quantize_and_notebook_commands(sub: Any) -> None:
    """quantize and notebooks."""
    p_q = _command(
        sub, "quantize", "write a GGUF model in another file type with llama.cpp's own quantizer (llama-quantize)"
    )
    p_q.add_argument("src", metavar="IN", help="the model file (F32, F16 or BF16 weights)")
    p_q.add_argument("dst", metavar="OUT", help="the file to write")
    p_q.add_argument(
        "type", metavar="TYPE", help="q4_0, q4_k_m, q5_k_m, q6_k, q8_0, iq4_nl, bf16, ... (llama.h's ftypes)"
    )
    p_q.add_argument("--threads", type=int, default=0, help="quantizer threads (default 0: the machine's cores)")
    p_q.add_argument(
        "--imatrix",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="compute an importance matrix by decoding IN on the CPU and quantize with it (default: where TYPE "
        "needs one: IQ1, IQ2, IQ3_XXS, IQ3_XS, Q2_K_S)",
    )
    p_q.add_argument("--imatrix-tokens", type=int, default=64, help="tokens decoded for the importance matrix")
    p_cache = _command(
        sub, "cache", "the projections `check --model --oracle projected` keeps on disk: where, how many, --clear"
    )
    p_cache.add_argument("--clear", action="store_true", help="remove every projection kept")
    p_nb = _command(
        sub, "notebooks", "execute the example notebooks: compare their outputs with the committed ones, or --refresh"
    )
    p_nb.add_argument("notebooks", nargs="+", type=Path)
    p_nb.add_argument("--refresh", action="store_true", help="store the fresh outputs in the notebooks")


def cache_main(args: argparse.Namespace) -> int:
    """`cache [--clear]`: the projection cache's folder, entries and bytes; --clear removes them."""
    from pyggml.testing.engine.projected import ProjectionCache

    cache = ProjectionCache()
    if args.clear:
        print(f"removed {cache.clear()} projections from {cache.folder}")
        return 0
    entries = cache.entries()
    size = sum(p.stat().st_size for p in entries)
    print(f"{cache.folder}: {len(entries)} projections, {size / 2**20:.1f} MiB (limit {cache.limit / 2**20:.0f} MiB)")
    return 0


def _fuzzer_commands(sub: Any, chosen: str | None) -> dict[str, tuple[ModuleType, argparse.ArgumentParser]]:
    """The fuzzers, listed; the chosen one's module and parser, its options read from the module."""
    fuzzers: dict[str, tuple[ModuleType, argparse.ArgumentParser]] = {}
    for name, (module_name, summary) in FUZZERS.items():
        if chosen != name:  # listed by `pyggml --help`; its options are read only when it is the command
            sub.add_parser(name, help=summary)
            continue
        module = importlib.import_module(module_name)
        p_fuzz = sub.add_parser(
            name, help=summary, description=" ".join((module.__doc__ or summary).split("\n\n")[0].split())
        )
        module.add_arguments(p_fuzz)
        fuzzers[name] = module, p_fuzz
    return fuzzers


def _main(argv: Sequence[str] | None = None) -> int:
    parser, fuzzers = _parser(argv)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format="%(name)s: %(message)s")
    if args.command == "notebooks":  # needs the [test] extra (nbclient); the tests' devices, set by notebooks.main
        from pyggml.testing import notebooks

        return notebooks.main(args)
    if args.command == "make-model":  # no device is used
        return make_model_main(args)
    if args.command == "cache":
        return cache_main(args)
    if args.command == "quantize":
        return quantize_main(args)
    if args.command in fuzzers:  # they pick their devices themselves: no --vk-devices default is imposed
        module, p_fuzz = fuzzers[args.command]
        return module.main(args, p_fuzz)
    from pyggml.backend import enable_cpu_vulkan_devices

    enable_cpu_vulkan_devices(args.vk_devices)
    if args.command == "rpc-server":
        return rpc_server_main(args)
    if getattr(args, "rpc", None):
        from pyggml import rpc

        try:
            rpc.add_servers(args.rpc)
        except (rpc.RpcError, ValueError, RuntimeError) as e:
            print(f"{args.command}: --rpc {args.rpc}: {e}", file=sys.stderr)
            return 2
    if args.command == "gguf":
        from pyggml import gguf

        return gguf.main(args)
    if args.command == "info":
        return info(args)
    if args.command == "compare":
        from pyggml.testing import compare as compare_command

        return compare_command.main(args)
    if args.command == "coverage":
        from pyggml.testing import coverage

        return coverage.main(args)
    if args.command == "findings":
        from pyggml.testing import check
        from pyggml.testing.engine import findings
        from pyggml.testing.engine.session import available_backends

        # the meta findings show on a split: two CPUs make one wherever pyggml runs
        default = [*available_backends(), *([] if "meta:cpu,cpu" in available_backends() else ["meta:cpu,cpu"])]
        return findings.main(args, check.run_check, args.backend or default)
    from pyggml.testing import check

    stop_on_sigterm()
    return check.main(args)


def rpc_server_main(args: argparse.Namespace) -> int:
    """`rpc-server`: serve a device until stopped; a bad port or thread count is exit status 2."""
    from pyggml import rpc

    if not 0 < args.port < 65536 or (args.threads is not None and args.threads < 1):
        print("rpc-server: --port must be in 1..65535 and --threads at least 1", file=sys.stderr)
        return 2
    try:
        return rpc.serve(args.host, args.port, args.device, args.threads, trust_clients=args.trust_clients)
    except ValueError as e:
        print(f"rpc-server: {e}", file=sys.stderr)
        return 2


def stop_on_sigterm() -> None:
    """SIGTERM (a CI timeout, `kill`) ends `check` as Ctrl-C does: as an exception, so every `finally` that
    kills a worker or model child runs; by default it would end this process alone and leave them computing,
    orphaned. Only for commands that wait in Python: a handler runs between bytecodes, never inside a long C
    call (rpc-server keeps the default)."""

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


if __name__ == "__main__":
    sys.exit(main())
