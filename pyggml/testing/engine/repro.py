"""Reproducers: one node of a graph, saved with the inputs it received, computed again on its own.

`check --model` saves the first failing nodes of each backend (`--save-failures DIR`, by default
`pyggml-failures/`), and any node asked for (`--save-node PATTERN`); `check --repro FILE_OR_DIR` reruns
them. A reproducer is two files of one stem:

- `STEM.json`, readable: the node's op and kind, its 64 bytes of op_params (as 16 int32 and as 16 float32),
  its type, ne, nb and NumPy shape, and the same for each source by slot; the bound it was judged with and
  what it showed (NMSE, message); where it came from (model, backend, its index in the graph);
- `STEM.npz`: each source's bytes as the node read them (`srcN_raw`: the whole span of a strided view, in
  ggml's own encoding, quantized blocks and all) and those bytes decoded (`srcN_values`: what the oracle got).

Rerunning one makes each source a tensor of its saved type, ne and nb (so a permuted or strided view stays
one) in a buffer of the backend, writes the saved bytes, and makes the node as ggml's op made it: a tensor of
the saved type, ne and nb whose op, op_params and sources are the saved ones (a node that writes into a
source's memory, as set_rows or cpy do, is again a view of that source at the same offset). The node checker
then judges it with the same oracle and the saved bound, and checks that the sources it read back are the
saved values. A node whose memory lies in a tensor that is not one of its sources cannot be rebuilt on its
own: its record says so (skipped), it never passes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pyggml import types
from pyggml._native import ffi, lib
from pyggml.context import Context
from pyggml.graph import Graph
from pyggml.runner import Runner
from pyggml.tensor import Tensor, set_rank
from pyggml.testing.engine import verdict
from pyggml.testing.engine.nodes import Capture, NodeChecker, NodeVerdict, Source, observing
from pyggml.testing.engine.verdict import Record, attempt
from pyggml.types import Op

FORMAT = "pyggml-node-repro"
VERSION = 1
DEFAULT_DIR = "pyggml-failures"
MAX_FAILURES = 5  # reproducers saved per backend by check --model


@dataclass
class Repro:
    """A saved node: its capture, the bound it was judged with, and where it came from."""

    stem: str
    capture: Capture
    bound: float
    origin: dict  # model, backend, index, step, status, nmse, message: as the JSON file has them

    @property
    def case(self) -> str:
        """Its records' case name."""
        return f"repro/{self.stem}"


def stem_for(model: str, backend: str, v: NodeVerdict) -> str:
    """A file stem naming the node: model, backend, index and kind (safe in a file name)."""
    raw = f"{Path(model).stem}-{backend}-n{v.index:04d}-{v.kind}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", raw)


def save(directory: str | Path, v: NodeVerdict, model: str, backend: str) -> Path:
    """Write the reproducer of verdict v (which must hold its capture: NodeChecker(keep=...)) into directory
    (made when missing); returns the JSON file's path."""
    c = v.capture
    if c is None:
        raise ValueError(f"node {v.index} {v.kind} {v.name!r}: its inputs were not kept (NodeChecker(keep=...))")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    stem = stem_for(model, backend, v)
    arrays: dict[str, np.ndarray] = {}
    for s in c.sources:
        if s is not None:
            arrays[f"src{s.slot}_raw"], arrays[f"src{s.slot}_values"] = s.raw, s.values
    np.savez_compressed(out / f"{stem}.npz", **arrays)  # type: ignore[arg-type]
    cmp = v.comparison
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "model": Path(model).name,
        "backend": backend,
        "index": v.index,
        "step": v.step,
        "status": str(verdict.of_node(v)),
        "nmse": None if cmp is None else cmp.nmse,
        "max_error": None if cmp is None else cmp.max_error,
        "message": "" if cmp is None else cmp.message,
        "bound": v.nmse_bound,
        "op": c.op,
        "kind": c.kind,
        "op_params": np.frombuffer(c.op_params, np.int32).tolist(),
        "op_params_f32": [float(x) for x in np.frombuffer(c.op_params, np.float32)],  # to read; not loaded
        "name": c.name,
        "type": c.type,
        "ne": list(c.ne),
        "nb": list(c.nb),
        "shape": list(c.shape),
        "view_of": None if c.view_of is None else {"slot": c.view_of[0], "offset": c.view_of[1]},
        "not_standalone": c.not_standalone,
        "sources": [
            None
            if s is None
            else {
                "slot": s.slot,
                "name": s.name,
                "type": s.type,
                "ne": list(s.ne),
                "nb": list(s.nb),
                "shape": list(s.shape),
            }
            for s in c.sources
        ],
        "arrays": f"{stem}.npz",
    }
    path = out / f"{stem}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def load(path: str | Path) -> Repro:
    """Read a reproducer's JSON file and its arrays. ValueError naming the file and what is wrong with it."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a readable reproducer ({e})") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f'{path}: not a pyggml node reproducer (no "format": "{FORMAT}")')
    if doc.get("version") != VERSION:
        raise ValueError(f"{path}: reproducer version {doc.get('version')!r}; this pyggml reads version {VERSION}")
    try:
        with np.load(path.parent / doc["arrays"]) as npz:
            arrays = {k: npz[k] for k in npz.files}
        params = np.asarray(doc["op_params"], np.int32)
        if params.size != 16:
            raise ValueError(f"op_params has {params.size} values, ggml keeps 16")
        sources: list[Source | None] = []
        for s in doc["sources"]:
            if s is None:
                sources.append(None)
                continue
            slot = int(s["slot"])
            raw, vals = arrays[f"src{slot}_raw"], arrays[f"src{slot}_values"]
            sources.append(
                Source(slot, s["name"], s["type"], tuple(s["ne"]), tuple(s["nb"]), tuple(s["shape"]), raw, vals)
            )
        view = doc["view_of"]
        c = Capture(
            doc["op"],
            doc["kind"],
            params.tobytes(),
            doc["name"],
            doc["type"],
            tuple(doc["ne"]),
            tuple(doc["nb"]),
            tuple(doc["shape"]),
            sources,
            None if view is None else (int(view["slot"]), int(view["offset"])),
            doc["not_standalone"],
        )
        bound = float(doc["bound"])
        Op[c.op]  # noqa: B018 - a KeyError for an op this ggml does not have
        for t in [c.type] + [x.type for x in sources if x is not None]:
            types.as_type(t)
    except (KeyError, TypeError, ValueError, OSError) as e:
        raise ValueError(f"{path}: a reproducer with a missing or wrong entry: {type(e).__name__}: {e}") from e
    origin = {k: doc.get(k) for k in ("model", "backend", "index", "step", "status", "nmse", "message")}
    return Repro(path.stem, c, bound, origin)


def find(target: str | Path) -> list[Path]:
    """The reproducers' JSON files: the file itself, or every *.json in a folder (sorted). ValueError when
    there is none."""
    p = Path(target)
    if p.is_dir():
        files = sorted(p.glob("*.json"))
        if not files:
            raise ValueError(f"{p}: no reproducer (*.json) in this folder")
        return files
    if p.is_file():
        return [p]
    raise ValueError(f"{p}: no such file or folder")


def build(r: Repro, runner: Runner) -> tuple[Graph, Tensor]:
    """The node of r made again in the runner's memory, its sources written: a graph of that one node."""
    c = r.capture
    if c.not_standalone:
        raise ValueError(f"cannot be rebuilt on its own: {c.not_standalone}")
    leaves = Context(n_tensors=16)
    srcs: list[Tensor | None] = []
    for s in c.sources:
        if s is None:
            srcs.append(None)
            continue
        leaf = leaves.new_tensor(s.type, list(s.ne), name=s.name or None)
        for i, b in enumerate(s.nb):
            leaf.ptr.nb[i] = b  # the source's own strides: a view stays one (its span is what was saved)
        if lib.ggml_nbytes(leaf.ptr) != s.raw.size:
            raise ValueError(f"src{s.slot}: {s.raw.size} bytes saved for a tensor of {lib.ggml_nbytes(leaf.ptr)}")
        set_rank(leaf.ptr, len(s.shape))
        srcs.append(leaf)
    if any(t is not None for t in srcs):
        runner.backend.alloc_tensors(leaves)
    for t, s in zip(srcs, c.sources):
        if t is not None and s is not None:
            lib.ggml_backend_tensor_set(t.ptr, ffi.from_buffer(s.raw), 0, s.raw.size)
    ctx = Context(n_tensors=4)
    node = ctx.new_tensor(c.type, list(c.ne), name=c.name or None)
    p = node.ptr
    p.op = int(Op[c.op])
    ffi.memmove(p.op_params, c.op_params, len(c.op_params))
    for i, b in enumerate(c.nb):
        p.nb[i] = b
    for slot, t in enumerate(srcs):  # c.sources is by slot, None for an empty one
        if t is not None:
            p.src[slot] = t.ptr
            ctx.adopt(t)
    if c.view_of is not None:
        slot, offset = c.view_of
        viewed = srcs[slot] if slot < len(srcs) else None
        if viewed is None:
            raise ValueError(f"view_of names slot {slot}, which has no source")
        p.view_src, p.view_offs = viewed.ptr, offset
    set_rank(p, len(c.shape))
    return Graph(ctx).build_forward_expand(node), node


def rerun(r: Repro, backend: str, runner: Runner | None = None) -> Record:
    """Compute r's node on `backend` from its saved inputs and judge it with its oracle and saved bound: a
    check record (pass, fail, error, unsupported; skipped, saying why, for a node that cannot be rebuilt)."""
    if r.capture.not_standalone:
        return verdict.skip(r.case, backend, f"cannot be rebuilt on its own: {r.capture.not_standalone}")
    checker = NodeChecker(tolerance=lambda t, b: r.bound, keep=lambda v: True)

    def run() -> None:
        nonlocal runner
        if runner is None:
            runner = Runner(backend, fallback=False)
        graph, node = build(r, runner)
        with observing(runner, checker):
            runner.allocate(graph, [node])
            runner.compute(graph)

    _, failed = attempt(r.case, backend, run)
    if failed is not None:
        return failed
    mine = [v for v in checker.verdicts if v.kind == r.capture.kind]
    if len(mine) != 1:
        return verdict.error(r.case, backend, f"the rebuilt graph showed {len(mine)} {r.capture.kind} nodes, not 1")
    v = mine[0]
    if v.unread:
        return verdict.skip(r.case, backend, f"unread: {v.error}")
    if v.comparison is None:
        return verdict.skip(r.case, backend, f"the oracle could not model it: {v.error or 'no oracle'}")
    assert v.capture is not None
    for got, saved in zip(v.capture.sources, r.capture.sources):
        if (got is None) != (saved is None) or (
            got is not None and saved is not None and not np.array_equal(got.values, saved.values, equal_nan=True)
        ):
            slot = (got or saved).slot  # type: ignore[union-attr]
            return verdict.error(r.case, backend, f"src{slot} did not read back as saved")
    # the saved bound (the node's when it was saved), and the op's known disagreement on this backend
    rules = verdict.Policy(r.bound, verdict.default_max_error(r.bound), v.known or None)
    where = f"node in {v.buffer or 'host'} memory"
    return verdict.rule(r.case, backend, [v.comparison], rules, note=where, ops=[r.capture.kind])


def main(args: argparse.Namespace) -> int:
    """`check --repro FILE_OR_DIR [--backend B]...`: rerun the reproducers on each backend named (default:
    the backend each one was saved from); exit 1 when one fails, 2 for what cannot be read."""
    from pyggml.testing.engine.junit import reports_error, write_report
    from pyggml.testing.engine.session import backend_error, table

    why = reports_error(args.json, args.junit)
    if why:
        print(f"check: {why}", file=sys.stderr)
        return 2
    try:
        repros = [load(p) for p in find(args.repro)]
    except ValueError as e:
        print(f"check: --repro: {e}", file=sys.stderr)
        return 2
    named = [b.lower() for b in args.backend or []]
    for b in dict.fromkeys(named):
        why = backend_error(b)
        if why:
            print(f"check: --backend {b}: {why}", file=sys.stderr)
            return 2
    runners: dict[str, Runner] = {}
    records: list[Record] = []
    for r in repros:
        for b in named or [str(r.origin.get("backend") or "cpu")]:
            if b not in runners:
                try:
                    runners[b] = Runner(b, fallback=False)
                except Exception as e:  # noqa: BLE001 - the reproducer's backend may be missing here
                    records.append(verdict.unavailable(b, e, r.case))
                    continue
            records.append(rerun(r, b, runners[b]))
    out = sys.stderr if args.json == "-" else sys.stdout
    print(table(records, quiet=args.quiet), file=out)
    for kind, path in (("JSON", args.json), ("JUnit", args.junit)):
        if path:
            write_report(kind, path, records, "pyggml.check.repro")
    return 1 if any(r.status.bad for r in records) else 0
