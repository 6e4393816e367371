"""Fuzz GGUF loading (ggml's gguf reader + pyggml.gguf): `python -m pyggml gguf-fuzz --files N --seed S`.

Valid files (written by pyggml.gguf.save and by the gguf package's GGUFWriter when it is
installed: every value type, arrays of numbers and strings, F32/F16/quantized tensors, alignment
32 and 64, no tensors, no keys) are mutated: bit flips, random bytes, truncations, bytes inserted
or deleted, and, on fields found by walking the file's structure, lies: counts of keys and
tensors, string lengths, value and array types, array lengths, dimension counts, extents, ggml
types and data offsets set to 0, -1, huge, off by one, doubled... Each mutated file is loaded
with `read_info` and `load`; a file that loads is saved again and reloaded, and must give the
same metadata (types included) and tensor bytes.

Outcomes: `loaded`, `raised` (GGUFError, ValueError, TypeError, MemoryError), `off-contract` (any
other exception, or a loaded file that cannot be saved back), `wrong` (the round trip differs),
`death` (the process died or hung). Mutations run in batches in child processes
(pyggml.testing.engine.child); a death ends
its batch, which resumes after the dying file; the dying file is written next to the report
(--keep) as a reproducer. Every mutation is deterministic from (seed, index).
Exit status 1 if any death, wrong or off-contract outcome.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import struct
import sys
import tempfile
import time
from collections import Counter
from typing import Any, TextIO

from pyggml._args import at_least
from pyggml.testing.check_options import backend_name, unavailable
from pyggml.testing.engine import child

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # GGUF scalar types' sizes
STRING, ARRAY = 8, 9


# --- valid files --------------------------------------------------------------------------------
def base_files(folder: str) -> list[bytes]:
    """A few valid GGUF files, the same bytes in every process."""
    import numpy as np

    import pyggml as gg
    from pyggml import gguf

    rng = np.random.default_rng(0)
    ctx = gg.Context(mem_size=1 << 20, no_alloc=False)
    q8 = ctx.tensor("q8_0", (2, 64), "q8")
    q8.set(rng.standard_normal((2, 64)))
    q4k = ctx.tensor("q4_k", (1, 256), "q4k")
    q4k.set(rng.standard_normal((1, 256)))
    V = gguf.Value
    meta = {
        "general.architecture": "llama",
        "general.name": "fuzz",
        "u8": V("u8", 7),
        "i8": V("i8", -3),
        "u16": V("u16", 600),
        "i16": V("i16", -600),
        "u32": V("u32", 70000),
        "i32": -5,
        "f32": 0.5,
        "u64": V("u64", 2**40),
        "i64": -(2**40),
        "f64": V("f64", 0.25),
        "b": True,
        "tokens": ["<s>", "</s>", "hello", "wörld"],
        "scores": [0.0, -1.5, 2.0],
        "ids": [1, 2, 3],
        "flags": [True, False],
        "empty": V("i32", []),
    }
    tensors: dict[str, Any] = {
        "w": rng.standard_normal((3, 5)).astype(np.float32),
        "h": np.arange(8, dtype=np.float16),
        "q8": q8,
        "q4k": q4k,
        "i": np.arange(4, dtype=np.int32),
    }
    specs = [
        (meta, tensors),
        ({**meta, "general.alignment": 64}, tensors),
        (meta, {}),
        ({}, {"w": tensors["w"], "q8": q8}),
    ]
    out = []
    for k, (m, t) in enumerate(specs):
        path = os.path.join(folder, f"base{k}.gguf")
        gguf.save(path, m, t)
        with open(path, "rb") as fh:
            out.append(fh.read())
    try:
        out.append(_gguf_package_file(folder, rng))
    except ImportError:  # the gguf package is optional
        pass
    return out


def _gguf_package_file(folder: str, rng) -> bytes:
    import gguf as gp
    import numpy as np

    path = os.path.join(folder, "base_gp.gguf")
    w = gp.GGUFWriter(path, "llama")
    w.add_uint8("u8", 1)
    w.add_int16("i16", -2)
    w.add_uint64("u64", 3)
    w.add_float64("f64", 0.125)
    w.add_bool("b", False)
    w.add_string("s", "text")
    w.add_array("a", [1, 2, 3])
    w.add_array("sa", ["a", "bc"])
    w.add_tensor("x", rng.standard_normal((4, 32)).astype(np.float32))
    w.add_tensor("y", np.arange(6, dtype=np.int16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(path, "rb") as fh:
        return fh.read()


# --- the structure of a file ----------------------------------------------------------------------
def fields(data: bytes) -> list[tuple[int, int, str]]:
    """(offset, size, kind) of every header field of a valid file."""
    out: list[tuple[int, int, str]] = [(4, 4, "version"), (8, 8, "n_tensors"), (16, 8, "n_kv")]
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
    pos = 24

    def string(kind: str) -> None:
        nonlocal pos
        out.append((pos, 8, kind))
        (n,) = struct.unpack_from("<Q", data, pos)
        pos += 8 + n

    for _ in range(n_kv):
        string("key_len")
        out.append((pos, 4, "value_type"))
        (t,) = struct.unpack_from("<i", data, pos)
        pos += 4
        n = 1
        if t == ARRAY:
            out.append((pos, 4, "array_type"))
            out.append((pos + 4, 8, "array_len"))
            t, n = struct.unpack_from("<iQ", data, pos)
            pos += 12
        for _ in range(n):
            if t == STRING:
                string("string_len")
            else:
                out.append((pos, SIZES[t], "value"))
                pos += SIZES[t]
    for _ in range(n_tensors):
        string("name_len")
        out.append((pos, 4, "n_dims"))
        (n_dims,) = struct.unpack_from("<I", data, pos)
        pos += 4
        for _ in range(n_dims):
            out.append((pos, 8, "ne"))
            pos += 8
        out.append((pos, 4, "ggml_type"))
        out.append((pos + 4, 8, "data_offset"))
        pos += 12
    return out


# --- mutations ------------------------------------------------------------------------------------
def mutate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """One mutated copy of a valid file and what was done to it."""
    b = bytearray(data)
    kind = rng.random()
    header_end = max(off + size for off, size, _ in fields(data))
    if kind < 0.45:  # lie in one header field
        off, size, what = rng.choice(fields(data))
        fmt = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}[size]
        (old,) = struct.unpack_from(fmt, b, off)
        top = (1 << (8 * size)) - 1
        if what in ("value_type", "array_type"):
            new = rng.choice([*range(14), ARRAY, STRING, 255, top, 1 << 31])
        elif what == "ggml_type":
            new = rng.choice([*range(44), 4, 31, 36, 42, 43, 255, top, 1 << 31])
        elif what == "n_dims":
            new = rng.choice([0, 1, 2, 3, 4, 5, 64, top])
        else:
            new = rng.choice(
                [
                    0,
                    1,
                    old - 1,
                    old + 1,
                    old * 2,
                    old + 4096,
                    top,
                    top >> 1,
                    (top >> 1) + 1,
                    1 << 30,
                    1 << 32,
                    rng.getrandbits(8 * size),
                ]
            )
        struct.pack_into(fmt, b, off, new % (top + 1))
        return bytes(b), f"{what} at {off}: {old} -> {new % (top + 1)}"
    if kind < 0.65:  # flip bits, mostly in the header
        n = rng.choice([1, 1, 2, 4, 16])
        span = header_end if rng.random() < 0.8 else len(b)
        spots = [rng.randrange(span) for _ in range(n)]
        for p in spots:
            b[p] ^= 1 << rng.randrange(8)
        return bytes(b), f"{n} bit flips at {spots[:4]}"
    if kind < 0.8:  # truncate
        cut = rng.randrange(header_end + 8) if rng.random() < 0.7 else rng.randrange(len(b))
        return bytes(b[:cut]), f"truncated at {cut}"
    if kind < 0.88:  # random bytes
        p = rng.randrange(len(b))
        n = rng.choice([1, 4, 8, 32])
        b[p : p + n] = bytes(rng.getrandbits(8) for _ in range(n))
        return bytes(b), f"{n} random bytes at {p}"
    if kind < 0.96:  # insert or delete bytes inside the header
        p = rng.randrange(header_end)
        n = rng.choice([1, 3, 8])
        if rng.random() < 0.5:
            del b[p : p + n]
            return bytes(b), f"deleted {n} bytes at {p}"
        b[p:p] = bytes(rng.getrandbits(8) for _ in range(n))
        return bytes(b), f"inserted {n} bytes at {p}"
    extra = bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 7, 64])))
    return bytes(b) + extra, f"appended {len(extra)} bytes"


def case(bases: list[bytes], seed: int, i: int) -> tuple[bytes, str]:
    rng = random.Random(f"{seed}:{i}")
    k = rng.randrange(len(bases))
    data, what = mutate(bases[k], rng)
    return data, f"base {k}: {what}"


# --- one mutation, in a child -------------------------------------------------------------------
def _same(a, b) -> bool:
    """Metadata equality where NaN equals NaN (values compared by their repr)."""
    return repr(a) == repr(b)


def check_one(path: str, out_path: str, backend: str | None) -> tuple[str, str]:
    from pyggml import gguf
    from pyggml.errors import GGMLError

    documented = (GGMLError, ValueError, TypeError, MemoryError)
    try:
        gguf.read_info(path)
        f = gguf.load(path, backend)
    except documented as e:
        return "raised", type(e).__name__
    except Exception as e:  # noqa: BLE001 - anything else is off the contract
        return "off-contract", f"{type(e).__name__}: {e}"
    try:
        gguf.save(out_path, f.fields, f.tensors)
        g = gguf.load(out_path, backend)
    except Exception as e:  # noqa: BLE001 - a file that loaded must save and load again
        return "off-contract", f"round trip: {type(e).__name__}: {e}"
    if list(f.fields) != list(g.fields) or any(
        f.fields[k].type != g.fields[k].type or not _same(f.fields[k].value, g.fields[k].value) for k in f.fields
    ):
        return "wrong", "metadata differs after save and load"
    if list(f.tensors) != list(g.tensors) or any(
        f.tensors[k].type != g.tensors[k].type
        or f.tensors[k].ne != g.tensors[k].ne
        or f.tensors[k].raw_bytes().tobytes() != g.tensors[k].raw_bytes().tobytes()
        for k in f.tensors
    ):
        return "wrong", "tensors differ after save and load"
    return "loaded", ""


def check_batch(seed: int, start: int, count: int, backend: str | None) -> None:
    """Mutations start..start+count, in a child process (run): each announced on stdout before it loads
    and its outcome after, so that the parent knows which file killed the child."""
    import logging

    logging.getLogger("pyggml.ggml").setLevel(logging.CRITICAL)  # ggml says why each file is bad
    with tempfile.TemporaryDirectory() as folder:
        bases = base_files(folder)
        path, out_path = os.path.join(folder, "case.gguf"), os.path.join(folder, "again.gguf")
        for i in range(start, start + count):
            data, _ = case(bases, seed, i)
            with open(path, "wb") as fh:
                fh.write(data)
            print(json.dumps({"begin": i}), flush=True)
            outcome, detail = check_one(path, out_path, backend)
            print(json.dumps({"i": i, "outcome": outcome, "detail": detail}), flush=True)


# --- the driver -----------------------------------------------------------------------------------
def run(
    files: int,
    seed: int,
    batch: int = 250,
    backend: str | None = None,
    keep: str | None = None,
    out: TextIO = sys.stdout,
) -> dict:
    """Run `files` mutations; returns the counts and the deaths/wrong/off-contract cases."""
    counts: Counter = Counter()
    raised: Counter = Counter()
    bad: list[dict] = []
    bases: list[bytes] | None = None
    i = 0
    while i < files:
        n = min(batch, files - i)
        outcome = child.run(check_batch, (seed, i, n, backend), timeout=60 + n)
        begun, done = None, i
        for line in outcome.stdout.splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if "begin" in rec:
                begun = rec["begin"]
                continue
            counts[rec["outcome"]] += 1
            done = rec["i"] + 1
            if rec["outcome"] == "raised":
                raised[rec["detail"]] += 1
            elif rec["outcome"] != "loaded":
                bad.append(rec)
                out.write(f"{rec['outcome'].upper()} at {rec['i']} (seed {seed}): {rec['detail']}\n")
        if done == i + n:
            i = done
            continue
        # the process died (or hung) in file `begun`, or before its first file
        dead = begun if begun is not None and begun >= done else done
        if bases is None:
            with tempfile.TemporaryDirectory() as folder:
                bases = base_files(folder)
        data, what = case(bases, seed, dead)
        where = os.path.join(keep or tempfile.gettempdir(), f"gguf_fuzz_death_{seed}_{dead}.gguf")
        with open(where, "wb") as fh:
            fh.write(data)
        if outcome.status == "timeout":
            why = "hang"
        elif outcome.status == "raised":  # the fuzzer's own code failed in the child
            why = f"raised {outcome.error_type}: {outcome.message}"
        else:
            last = outcome.stderr.strip().splitlines()[-1:]
            why = f"exit {outcome.exit_code}: {last[0] if last else '(no message)'}"
        counts["death"] += 1
        bad.append({"i": dead, "outcome": "death", "detail": f"{what}; {why}; file {where}"})
        out.write(f"DEATH at {dead} (seed {seed}): {what}; {why}; reproducer {where}\n")
        i = dead + 1
    return {"files": files, "seed": seed, "counts": dict(counts), "raised": dict(raised), "bad": bad}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `python -m pyggml gguf-fuzz`."""
    p.add_argument("--files", type=at_least(1), default=1000, help="how many mutated files")
    p.add_argument("--seed", type=at_least(0), default=0)
    p.add_argument("--batch", type=at_least(1), default=250, help="files per child process")
    p.add_argument(
        "--backend",
        default=None,
        type=backend_name,
        help="load the tensors onto this device (default: host memory)",
    )
    p.add_argument("--keep", default=None, help="folder for the reproducers of deaths (default: the temp folder)")
    p.add_argument("--json", metavar="FILE", help="write the result here")


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run `python -m pyggml gguf-fuzz` with its parsed options; parser reports a --backend this build lacks (each
    file would be refused by it)."""
    why = unavailable([args.backend]) if args.backend is not None else None
    if why:
        parser.error(f"--backend {why}")
    t = time.monotonic()
    res = run(args.files, args.seed, args.batch, args.backend, args.keep)
    c = res["counts"]
    raised = ", ".join(f"{k} {v}" for k, v in sorted(res["raised"].items()))
    print(
        f"{args.files} mutated files (seed {args.seed}): {c.get('loaded', 0)} loaded, {c.get('raised', 0)} raised "
        f"({raised}), {c.get('off-contract', 0)} off-contract, {c.get('wrong', 0)} wrong, {c.get('death', 0)} deaths; "
        f"{time.monotonic() - t:.0f} s"
    )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)
    return 1 if any(c.get(k) for k in ("death", "wrong", "off-contract")) else 0
