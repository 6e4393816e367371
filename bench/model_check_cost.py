"""What `check --model` costs on a real-sized model, against llama.cpp's own decode of the same tokens.

    python bench/model_check_cost.py [--like qwen35-0.8b] [--type q4_k_m] [--tokens 32] [--folder DIR]

Makes `make-model ARCH FILE --like PRESET --type TYPE` (kept in --folder for the next run), then, in one
process each (so that each peak resident size is its own):
- llama.cpp's decode of N tokens: `pyggml.llama` load (timed too: the check loads the model as well) and one
  `decode` of the batch (the best of three decodes, each on a new context);
- the oracles' arithmetic alone, the floor under any checker of every product: each weight of the file (each
  tensor of two dimensions or more) decoded by ggml's to_float and multiplied by N random columns in float32
  BLAS, a block of rows at a time as the product oracle does (`opdb.matmul._by_blocks_of_rows`), with no
  llama.cpp, no capture and no comparison (the file's pages read once before, as llama.cpp's load reads them);
- the same decode under the node checker (`check --model --tokens N` as `run_model` does it), timed, with
  where the time goes: reading each node's sources before it runs (capture: ggml's reads, and the weights'
  bytes from the file for a repacked weight), the oracles, the comparison, and llama.cpp's compute (the rest).
- with `--projected`, the same check with `--oracle projected` (pyggml.testing.engine.projected), twice on a
  fresh projection cache: cold (every weight projected) and warm (every projection read back).
The CPU's extra buffer types are off in both (`--no-repack`): the figures compare the same kernels, and those
of earlier rows (native builds' AMX products died before ggml patch 0037, docs/findings.md 37). Prints one
markdown table row, dated.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time

DECODE = """
import json, resource, sys, time
from pyggml import llama
from pyggml.testing.engine.model_check import tokens_for
path, n = sys.argv[1], int(sys.argv[2])
t = time.perf_counter()
model = llama.Model.load(path, use_extra_bufts=False)
load = time.perf_counter() - t
tokens = tokens_for(model.n_vocab, n)
seconds = float("inf")
for _ in range(3):  # the best of three, each on a new context (the same start as the check's)
    with llama.Context(model, n_ctx=max(64, 2 * n), n_batch=n, n_ubatch=n) as ctx:
        t = time.perf_counter()
        ctx.decode(tokens, logits="all")
        seconds = min(seconds, time.perf_counter() - t)
print(json.dumps({"seconds": seconds, "load": load, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

FLOOR = """
import json, sys, time
import numpy as np
from pyggml import gguf, types
from pyggml.testing.engine.opdb.matmul import BLOCK_OF_ROWS_VALUES
path, n = sys.argv[1], int(sys.argv[2])
info = gguf.read_info(path)
data = np.memmap(path, dtype=np.uint8, mode="r")
weights = [w for w in info.tensor_info.values() if len(w.shape) >= 2]
sum(int(data[info.data_offset + w.offset : info.data_offset + w.offset + w.nbytes : 4096].sum()) for w in weights)
columns = {}
t = time.perf_counter()
for w in weights:
    k, m = w.ne[0], w.nelements // w.ne[0]
    b = columns.setdefault(k, np.random.default_rng(0).standard_normal((n, k), dtype=np.float32))
    raw, width = data[info.data_offset + w.offset :][: w.nbytes], w.nbytes // m
    rows = max(1, BLOCK_OF_ROWS_VALUES // k)
    for r0 in range(0, m, rows):
        r1 = min(m, r0 + rows)
        block = types.decode(w.type, raw[r0 * width : r1 * width], (r1 - r0, k))
        block @ b.T
print(json.dumps({"seconds": time.perf_counter() - t, "weights": len(weights)}))
"""

CHECK = """
import json, resource, sys, time
from pyggml.testing.engine import model_check, nodes, verdict
path, n = sys.argv[1], int(sys.argv[2])
oracle = sys.argv[3] if len(sys.argv) > 3 else "full"
spent = {"capture": 0.0, "oracle and compare": 0.0}

def timed(fn, key):
    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            spent[key] += time.perf_counter() - t
    return wrapper

nodes.capture = timed(nodes.capture, "capture")
nodes.NodeChecker._judge = timed(nodes.NodeChecker._judge, "oracle and compare")
t = time.perf_counter()
run = model_check.run_model(path, "cpu", n_tokens=n, extra_bufts=False, oracle=oracle)
seconds = time.perf_counter() - t
kinds = run.by_kind().values()
print(json.dumps({
    "seconds": seconds, "spent": spent, "error": run.error,
    "projected": sum(v.oracle == "projected" for v in run.verdicts),
    "checked": sum(c["checked"] for c in kinds), "failed": sum(c["failed"] for c in kinds),
    "unread": sum(c["unread"] for c in kinds),
    "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
}))
"""


def child(program: str, path: str, n: int, env: dict[str, str] | None = None, *more: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", program, path, str(n), *more],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    if out.returncode != 0:
        raise SystemExit(f"failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--like", default="qwen35-0.8b")
    p.add_argument("--type", default="q4_k_m")
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--folder", default="bench-models")
    p.add_argument("--projected", action="store_true", help="also the check with --oracle projected, cold and warm")
    args = p.parse_args()
    from pyggml.models.make_model import PRESETS

    arch = PRESETS[args.like][0]
    os.makedirs(args.folder, exist_ok=True)
    path = os.path.join(args.folder, f"{args.like}-{args.type}.gguf")
    if not os.path.exists(path):
        t = time.perf_counter()
        cmd = [sys.executable, "-m", "pyggml", "make-model", arch, path, "--like", args.like, "--type", args.type]
        subprocess.run(cmd, check=True, capture_output=True)
        print(f"# made {path} ({os.path.getsize(path) / 2**20:.0f} MiB) in {time.perf_counter() - t:.0f} s")
    decode = child(DECODE, path, args.tokens)
    floor = child(FLOOR, path, args.tokens)
    from pyggml.testing.engine.model_check import CHILD_ENV

    # the environment `check --model` gives its children
    checks = [("full", child(CHECK, path, args.tokens, CHILD_ENV))]
    if args.projected:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="pyggml-projections-") as cache:
            env = {**CHILD_ENV, "PYGGML_CACHE_DIR": cache}
            checks.append(("projected, cold cache", child(CHECK, path, args.tokens, env, "projected")))
            checks.append(("projected, warm cache", child(CHECK, path, args.tokens, env, "projected")))
    print(
        f"# {datetime.date.today()}: python bench/model_check_cost.py {' '.join(sys.argv[1:])} ({os.cpu_count()} cores)"
    )
    print(
        "| model | tokens | oracle | llama.cpp decode s | load s | floor s (ratio) | check s | ratio | capture s | oracles s |"
        " llama.cpp and the rest s | nodes checked | by projection | failed | unread | peak MB decode / check |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for oracle, check in checks:
        spent = check["spent"]
        rest = check["seconds"] - sum(spent.values())
        print(
            f"| {args.like} {args.type} | {args.tokens} | {oracle} | {decode['seconds']:.2f} | {decode['load']:.2f} | "
            f"{floor['seconds']:.2f} ({floor['seconds'] / decode['seconds']:.1f}x) | {check['seconds']:.1f} | "
            f"{check['seconds'] / decode['seconds']:.0f}x | {spent['capture']:.1f} | {spent['oracle and compare']:.1f} | "
            f"{rest:.1f} | {check['checked']} | {check['projected']} | {check['failed']} | {check['unread']} | "
            f"{decode['peak_mb']:.0f} / {check['peak_mb']:.0f} |"
        )
        if check["error"]:
            print(f"error: {check['error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
