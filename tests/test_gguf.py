"""GGUF files through ggml's gguf API (pyggml.gguf): round trips for every ggml type, interop
with the gguf package (llama.cpp's reference reader and writer) both ways, loading onto backends,
corrupt and truncated files (in child processes: a crash fails a test, not pytest), the CLI, and
bad arguments to save."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap
from collections.abc import Mapping

import numpy as np
import pytest

import pyggml as gg
from pyggml import gguf, lib, types
from pyggml.gguf import GGUFError, GGUFType, Value
from pyggml.testing.check import available_backends

gp = pytest.importorskip("gguf")  # llama.cpp's gguf package

# every ggml type a GGUF file can hold: all of this ggml's types (the removed ones are not in Type)
ALL_TYPES = list(gg.Type)


def run_child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


def make_tensor(ctx: gg.Context, t: gg.Type, rng, rows: int = 3) -> gg.Tensor:
    """A host tensor of type t: values where ggml can convert floats, else random bytes."""
    x = ctx.tensor(t, (rows, 2 * types.block_size(t)), t.name.lower())
    if types.is_integer(t):
        x.set(rng.integers(-100, 100, x.shape))
    else:
        try:
            x.set(rng.standard_normal(x.shape))
        except TypeError:  # needs an importance matrix, or ggml has no quantizer: any bytes make a valid file
            x.set_raw(rng.integers(0, 256, x.nbytes, dtype=np.uint8))
    return x


ALL_VALUES = {
    "u8": Value("u8", 255),
    "i8": Value("i8", -128),
    "u16": Value("u16", 65535),
    "i16": Value("i16", -32768),
    "u32": Value("u32", 2**32 - 1),
    "i32": Value("i32", -(2**31)),
    "f32": Value("f32", 0.5),
    "u64": Value("u64", 2**64 - 1),
    "i64": Value("i64", -(2**63)),
    "f64": Value("f64", 0.1),
    "bool": Value("bool", True),
    "str": Value("str", "héllo wörld"),
    "empty_str": Value("str", ""),
    "a_u8": Value("u8", [0, 255]),
    "a_i8": Value("i8", [-1, 1]),
    "a_u16": Value("u16", [1, 2]),
    "a_i16": Value("i16", [-3]),
    "a_u32": Value("u32", [7]),
    "a_i32": Value("i32", [1, -1]),
    "a_f32": Value("f32", [1.5, -2.25]),
    "a_u64": Value("u64", [2**63]),
    "a_i64": Value("i64", [-(2**62)]),
    "a_f64": Value("f64", [0.1, 1e300]),
    "a_bool": Value("bool", [True, False, True]),
    "a_str": Value("str", ["a", "", "ü"]),
    "a_empty": Value("i32", []),
}


def assert_same_file(a: gguf.GGUFFile, b: gguf.GGUFFile):
    assert list(a.fields) == list(b.fields)
    for k in a.fields:
        assert a.fields[k].type == b.fields[k].type and a.fields[k].value == b.fields[k].value, k
    assert list(a.tensors) == list(b.tensors)
    for k in a.tensors:
        assert a.tensors[k].type == b.tensors[k].type and a.tensors[k].ne == b.tensors[k].ne
        assert a.tensors[k].raw_bytes().tobytes() == b.tensors[k].raw_bytes().tobytes(), k


# --- round trips ------------------------------------------------------------------------------------
def test_round_trip_every_type_and_value(tmp_path):
    rng = np.random.default_rng(0)
    ctx = gg.Context(mem_size=1 << 22, no_alloc=False)
    tensors = {t.name: make_tensor(ctx, t, rng) for t in ALL_TYPES}
    tensors["np_f32_3d"] = rng.standard_normal((2, 3, 4)).astype(np.float32)
    tensors["np_i64"] = np.arange(5, dtype=np.int64)
    path = tmp_path / "all.gguf"
    gguf.save(path, ALL_VALUES, tensors)
    f = gguf.load(path)
    assert (f.version, f.alignment) == (3, 32)
    assert {k: (v.type, v.value) for k, v in f.fields.items()} == {k: (v.type, v.value) for k, v in ALL_VALUES.items()}
    assert list(f.tensors) == list(tensors)
    for name, src in tensors.items():
        t = f.tensors[name]
        if isinstance(src, gg.Tensor):
            assert (t.type, t.ne, t.name) == (src.type, src.ne, name)
            assert t.raw_bytes().tobytes() == src.raw_bytes().tobytes(), name
        else:
            assert t.shape == src.shape and t.numpy().dtype == src.dtype
            np.testing.assert_array_equal(t.numpy(), src)
    # what was loaded saves to the same bytes, and those are the bytes ggml's own writer writes
    again = tmp_path / "again.gguf"
    gguf.save(again, f.fields, f.tensors)
    assert again.read_bytes() == path.read_bytes()
    g, _, _keep = gguf._build(ALL_VALUES, tensors)  # _keep: the bytes ggml's writer reads
    assert lib.gguf_write_to_file(g, str(tmp_path / "ggml.gguf").encode(), False)
    assert (tmp_path / "ggml.gguf").read_bytes() == path.read_bytes()


def test_inferred_value_types(tmp_path):
    md = {
        "i": 1,
        "big": 2**40,
        "huge": 2**63,
        "neg": -(2**40),
        "f": 0.5,
        "b": False,
        "s": "x",
        "ints": [1, 2**33],
        "floats": [1, 2.5],
        "strs": ["a", "b"],
        "bools": [True],
        "np_u16": np.uint16(3),
        "np_f64": np.float64(0.1),
        "np_arr": np.array([1, 2], np.int8),
        "np_f64s": [np.float64(1)],
        "np_strs": np.array(["x", "yz"]),
        "tuple": (1, 2),
        "np0d": np.array(7, np.uint32),
    }
    gguf.save(tmp_path / "t.gguf", md)
    got = {k: v.type_name for k, v in gguf.read_info(tmp_path / "t.gguf").fields.items()}
    assert got == {
        "i": "i32",
        "big": "i64",
        "huge": "u64",
        "neg": "i64",
        "f": "f32",
        "b": "bool",
        "s": "str",
        "ints": "arr[i64]",
        "floats": "arr[f32]",
        "strs": "arr[str]",
        "bools": "arr[bool]",
        "np_u16": "u16",
        "np_f64": "f64",
        "np_arr": "arr[i8]",
        "np_f64s": "arr[f64]",
        "np_strs": "arr[str]",
        "tuple": "arr[i32]",
        "np0d": "u32",
    }


def test_ggml_writer_honours_general_alignment(tmp_path):
    """Patch 0021: setting general.alignment sets the context's alignment (before the patch ggml
    stored the key, padded to 32 and could not read its own file back), also for tensors added
    before the key, and removing the key restores the default."""
    from pyggml import ffi

    ctx = gg.Context(mem_size=1 << 20, no_alloc=False)
    a, b = ctx.tensor("f32", (3,), "a").set(np.ones(3)), ctx.tensor("f32", (5,), "b").set(np.ones(5))
    g = ffi.gc(lib.gguf_init_empty(), lib.gguf_free)
    lib.gguf_add_tensor(g, a.ptr)
    lib.gguf_set_val_u32(g, b"general.alignment", 64)
    lib.gguf_add_tensor(g, b.ptr)
    assert lib.gguf_get_alignment(g) == 64 and lib.gguf_get_tensor_offset(g, 1) == 64
    path = str(tmp_path / "w.gguf").encode()
    assert lib.gguf_write_to_file(g, path, False)
    params = ffi.new("struct gguf_init_params *", {"no_alloc": True, "ctx": ffi.NULL})
    back = lib.gguf_init_from_file(path, params[0])
    assert back != ffi.NULL and lib.gguf_get_alignment(back) == 64
    lib.gguf_free(back)
    lib.gguf_remove_key(g, b"general.alignment")
    assert lib.gguf_get_alignment(g) == 32 and lib.gguf_get_tensor_offset(g, 1) == 32


def test_alignment(tmp_path):
    """A file saved with general.alignment = 64 is what it says, in ggml and in the gguf package."""
    ctx = gg.Context(mem_size=1 << 20, no_alloc=False)
    q = ctx.tensor("q4_0", (1, 32), "q").set(np.ones(32))
    tensors = {"a": np.ones(3, np.float32), "q": q, "b": np.ones(5, np.float16)}
    path = tmp_path / "a.gguf"
    gguf.save(path, {"x": 1, "general.alignment": 64, "y": 2}, tensors)
    f = gguf.load(path)
    assert f.alignment == 64 and f.data_offset % 64 == 0 and list(f.metadata) == ["x", "general.alignment", "y"]
    assert all(i.offset % 64 == 0 for i in f.tensor_info.values())
    r = gp.GGUFReader(path)
    assert r.alignment == 64
    assert [t.data_offset % 64 for t in r.tensors] == [0, 0, 0]
    np.testing.assert_array_equal(np.asarray(r.tensors[2].data), np.ones(5, np.float16))


def test_a_loaded_file_unpacks_into_what_save_takes(tmp_path):
    path = tmp_path / "u.gguf"
    gguf.save(path, {"general.name": "u", "n": 3}, {"w": np.arange(6, dtype=np.float32).reshape(2, 3)})
    metadata, tensors = gguf.load(path)
    assert metadata == {"general.name": "u", "n": 3} and list(tensors) == ["w"]
    np.testing.assert_array_equal(tensors["w"].numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))
    gguf.save(tmp_path / "again.gguf", metadata, tensors)
    assert (tmp_path / "again.gguf").read_bytes() == path.read_bytes()


def test_loaded_tensors_keep_their_memory(tmp_path):
    import gc

    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    gguf.save(tmp_path / "w.gguf", {}, {"w": w})
    t = gguf.load(tmp_path / "w.gguf").tensors["w"]
    gc.collect()
    for _ in range(20):  # churn that would reuse freed memory
        gguf.load(tmp_path / "w.gguf").tensors["w"].set(np.zeros((3, 4)))
    np.testing.assert_array_equal(t.numpy(), w)


# --- interop with the gguf package ---------------------------------------------------------------------
def _gp_types() -> list[gg.Type]:
    """The types the gguf package knows with ggml's sizes. Not Q8_1: the package gives its block 40
    bytes, ggml 36 (two halves and 32 int8), so the two disagree on every Q8_1 tensor's size."""

    def sizes_agree(t: gg.Type) -> bool:
        return gp.GGML_QUANT_SIZES[gp.GGMLQuantizationType[t.name]] == (types.block_size(t), types.type_size(t))

    return [t for t in ALL_TYPES if t.name in gp.GGMLQuantizationType.__members__ and sizes_agree(t)]


def test_gguf_package_files_load(tmp_path):
    rng = np.random.default_rng(1)
    path = tmp_path / "gp.gguf"
    w = gp.GGUFWriter(path, "llama")
    V = gp.GGUFValueType
    w.add_uint8("u8", 200)
    w.add_int8("i8", -100)
    w.add_uint16("u16", 60000)
    w.add_int16("i16", -30000)
    w.add_uint32("u32", 4_000_000_000)
    w.add_int32("i32", -2_000_000_000)
    w.add_float32("f32", 0.25)
    w.add_uint64("u64", 2**64 - 2)
    w.add_int64("i64", -(2**60))
    w.add_float64("f64", 0.1)
    w.add_bool("bool", True)
    w.add_string("str", "tëxt")
    w.add_array("a_i32", [1, 2, 3])
    w.add_array("a_f32", [0.5, 1.5])
    w.add_array("a_str", ["<s>", "", "wörd"])
    w.add_array("a_bool", [True, False])
    for sub, vals in [(V.UINT8, [1, 255]), (V.INT16, [-5, 5]), (V.UINT64, [2**64 - 1]), (V.FLOAT64, [0.1, 0.2])]:
        w.add_key_value(f"a_{sub.name.lower()}", vals, V.ARRAY, sub_type=sub)
    expected = {}
    for t in _gp_types():
        qt = gp.GGMLQuantizationType[t.name]
        rows, cols = 2, 2 * types.block_size(t)
        if types.has_raw_dtype(t):
            arr = (rng.standard_normal((rows, cols)) * 50).astype(types.host_dtype(t))
            w.add_tensor(t.name, arr)
        else:
            arr = rng.integers(0, 256, (rows, types.row_size(t, cols)), dtype=np.uint8)
            w.add_tensor(t.name, arr, raw_dtype=qt)
        expected[t.name] = (t, (cols, rows, 1, 1), arr.tobytes())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    f = gguf.load(path)
    want = {
        "general.architecture": ("str", "llama"),
        "u8": ("u8", 200),
        "i8": ("i8", -100),
        "u16": ("u16", 60000),
        "i16": ("i16", -30000),
        "u32": ("u32", 4_000_000_000),
        "i32": ("i32", -2_000_000_000),
        "f32": ("f32", 0.25),
        "u64": ("u64", 2**64 - 2),
        "i64": ("i64", -(2**60)),
        "f64": ("f64", 0.1),
        "bool": ("bool", True),
        "str": ("str", "tëxt"),
        "a_i32": ("arr[i32]", [1, 2, 3]),
        "a_f32": ("arr[f32]", [0.5, 1.5]),
        "a_str": ("arr[str]", ["<s>", "", "wörd"]),
        "a_bool": ("arr[bool]", [True, False]),
        "a_uint8": ("arr[u8]", [1, 255]),
        "a_int16": ("arr[i16]", [-5, 5]),
        "a_uint64": ("arr[u64]", [2**64 - 1]),
        "a_float64": ("arr[f64]", [0.1, 0.2]),
    }
    assert {k: (v.type_name, v.value) for k, v in f.fields.items()} == want
    assert list(f.tensors) == list(expected)
    for name, (t, ne, raw) in expected.items():
        x = f.tensors[name]
        assert (x.type, x.ne) == (t, ne)
        assert x.raw_bytes().tobytes() == raw, name


def test_pyggml_files_read_in_gguf_package(tmp_path):
    rng = np.random.default_rng(2)
    ctx = gg.Context(mem_size=1 << 22, no_alloc=False)
    tensors = {t.name: make_tensor(ctx, t, rng) for t in _gp_types()}
    md = {k: v for k, v in ALL_VALUES.items() if k != "a_empty"}  # the package reads no type for an empty array
    path = tmp_path / "pg.gguf"
    gguf.save(path, md, tensors)
    r = gp.GGUFReader(path)
    fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
    assert list(fields) == list(md)
    for k, v in md.items():
        f = fields[k]
        if v.is_array:
            assert [int(x) for x in f.types] == [GGUFType.ARRAY, v.type], k
        else:
            assert [int(x) for x in f.types] == [v.type], k
        got = f.contents()
        if v.type == GGUFType.FLOAT32 and v.is_array:
            got = [float(np.float32(x)) for x in got]
        assert got == v.value, k
    assert [t.name for t in r.tensors] == list(tensors)
    for rt in r.tensors:
        src = tensors[rt.name]
        assert rt.tensor_type.name == src.type.name
        assert list(rt.shape) + [1] * (4 - len(rt.shape)) == list(src.ne)
        assert np.asarray(rt.data).tobytes() == src.raw_bytes().tobytes(), rt.name


# --- onto a backend ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["cpu", "vulkan0", None])
def test_load_onto_backend_and_compute(tmp_path, name):
    if name is not None and name not in available_backends():
        pytest.skip(f"no {name} in this build")
    rng = np.random.default_rng(3)
    W = rng.standard_normal((16, 64)).astype(np.float32)
    ctx = gg.Context(mem_size=1 << 20, no_alloc=False)
    wq = ctx.tensor("q8_0", (16, 64), "wq").set(W)
    b = rng.standard_normal(16).astype(np.float32)
    gguf.save(tmp_path / "m.gguf", {"n": 16}, {"w": W, "wh": W.astype(np.float16), "wq": wq, "b": b})
    f = gguf.load(tmp_path / "m.gguf", name)
    assert all(t.is_host for t in f.tensors.values()) == (name != "vulkan0")
    c = gg.Context()
    x = c.tensor("f32", (3, 64), "x", input=True)
    outs = [c.add(c.mul_mat(f.tensors[k], x), f.tensors["b"]) for k in ("w", "wh", "wq")]
    graph = gg.Graph(c)
    for o in outs:
        graph.build_forward_expand(o)
    X = rng.standard_normal((3, 64)).astype(np.float32)
    got = gg.Runner(name or "cpu").run(graph, {x: X}, outs)
    for y, wk in zip(got, [W, W.astype(np.float16).astype(np.float32), wq.numpy()]):
        want = X @ wk.T + b
        # the CPU multiplies F16/Q8_0 weights with x converted to their type (F16 / Q8_0)
        assert np.linalg.norm(y - want) <= 1e-2 * np.linalg.norm(want)
    np.testing.assert_array_equal(f.tensors["w"].numpy(), W)


def test_load_arguments(tmp_path):
    gguf.save(tmp_path / "e.gguf", {"k": 1})
    assert gguf.load(tmp_path / "e.gguf").tensors == {}
    with pytest.raises(TypeError, match="backend"):
        gguf.load(tmp_path / "e.gguf", 3)
    gguf.save(tmp_path / "w.gguf", {}, {"w": np.ones(2, np.float32)})
    with pytest.raises(ValueError, match="no device named"):
        gguf.load(tmp_path / "w.gguf", "nope0")
    with pytest.raises(FileNotFoundError):
        gguf.load(tmp_path / "missing.gguf")
    with pytest.raises(IsADirectoryError):
        gguf.load(tmp_path)


# --- corrupt and truncated files ------------------------------------------------------------------------
CHILD = """
import json, os, random, sys, tempfile
import logging; logging.getLogger("pyggml.ggml").setLevel(logging.CRITICAL)
import numpy as np, pyggml as gg
from pyggml import gguf
from pyggml.errors import GGMLError
_tmp = tempfile.TemporaryDirectory()  # removed when the child exits
folder = _tmp.name
src = os.path.join(folder, "src.gguf")
ctx = gg.Context(mem_size=1 << 20, no_alloc=False)
q = ctx.tensor("q4_k", (1, 256), "q").set(np.ones(256))
gguf.save(src, {"s": "abc", "a": [1, 2], "t": ["x", "yz"], "f": 0.5}, {"w": np.ones((2, 3), np.float32), "q": q})
data = open(src, "rb").read()
info = gguf.read_info(src)
end = max(info.data_offset + i.offset + i.nbytes for i in info.tensor_info.values())
out = {"size": len(data), "end": end, "loaded": [], "raised": 0, "other": []}
def attempt(i, blob):
    p = os.path.join(folder, "m.gguf")
    open(p, "wb").write(blob)
    try:
        gguf.load(p)
        out["loaded"].append(i)
    except (GGMLError, ValueError, TypeError, MemoryError):
        out["raised"] += 1
    except Exception as e:
        out["other"].append(f"{i}: {type(e).__name__}: {e}")
"""


def test_truncated_files_raise():
    proc = run_child(
        CHILD
        + """
for cut in range(len(data)):
    attempt(cut, data[:cut])
print(json.dumps(out))
"""
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["other"] == []
    # cut anywhere before the last tensor's last byte: an error; cut in the final padding: loads
    assert out["loaded"] == list(range(out["end"], out["size"]))
    assert out["raised"] == out["end"]


def test_random_byte_flips_raise_or_load():
    proc = run_child(
        CHILD
        + """
rng = random.Random(0)
for i in range(400):
    b = bytearray(data)
    for _ in range(rng.choice([1, 2, 8])):
        b[rng.randrange(info.data_offset)] = rng.getrandbits(8)
    attempt(i, bytes(b))
print(json.dumps(out))
"""
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["other"] == [] and out["raised"] > 100


def _header(n_tensors: int, kvs: bytes, n_kv: int, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv) + kvs


def _s(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def _tensor(name: bytes, ne: list[int], ggml_type: int, offset: int = 0) -> bytes:
    dims = struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}q", *ne)
    return _s(name) + dims + struct.pack("<iQ", ggml_type, offset)


@pytest.mark.parametrize(
    "blob, match",
    [  # ids: the message expected
        (b"", "failed to read magic"),
        (b"GGUX" + bytes(20), "invalid magic"),
        (_header(0, b"", 0, version=1), "GGUFv1"),
        (_header(0, b"", 0, version=4), "version 4"),
        (_header(0, b"", 2**62), "number of key value pairs"),
        (_header(0, _s(b"k") + struct.pack("<iiQ", 9, 9, 1) + struct.pack("<iQ", 5, 0), 1), "nested arrays"),
        (_header(0, _s(b"k") + struct.pack("<i", 13), 1), "invalid GGUF type 13"),
        (_header(0, _s(b"k") + struct.pack("<iQ", 8, 2**40), 1), "string length"),
        (
            _header(0, _s(b"k") + struct.pack("<i", 5) + b"\0\0\0\0" + _s(b"k") + struct.pack("<i", 5) + b"\0" * 4, 2),
            "duplicate key",
        ),
        (_header(0, _s(b"\0k") + struct.pack("<iB", 0, 1), 1), "empty"),
        (_header(0, _s(b"a\0x") + struct.pack("<iB", 0, 1) + _s(b"a\0y") + struct.pack("<iB", 0, 1), 2), "twice"),
        (_header(0, _s(b"general.alignment") + struct.pack("<iI", 4, 3), 1), "power of 2"),
        (_header(0, _s(b"general.alignment") + struct.pack("<iQ", 10, 64), 1), "must be of type u32"),
        (_header(1, _tensor(b"w", [4], 4), 0) + bytes(64), "block size"),
        (_header(1, _tensor(b"w", [4], 43), 0) + bytes(64), "invalid ggml type"),
        (_header(1, _tensor(b"w", [5], 2), 0) + bytes(64), "block size"),
        (_header(1, _tensor(b"w", [4], 0, 32), 0) + bytes(64), "offset"),
        (_header(1, _tensor(b"w", [2**20, 2**20], 0), 0) + bytes(64), "truncated"),
        (_header(1, _tensor(b"w", [2**40, 2**40], 0), 0) + bytes(64), "overflow"),
        (_header(1, _tensor(b"w", [4, 0], 0), 0) + bytes(64), "no elements"),
        (_header(1, _tensor(b"w" * 64, [4], 0), 0) + bytes(64), "too long"),
        (_header(2, _tensor(b"w\0a", [4], 0) + _tensor(b"w\0b", [4], 0, 32), 0) + bytes(64), "twice"),
        (_header(1, _tensor(b"w", [4, 1, 1, 1, 1], 0), 0) + bytes(64), "number of dimensions"),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_bad_files(tmp_path, blob: bytes, match: str):
    p = tmp_path / "bad.gguf"
    p.write_bytes(blob)
    with pytest.raises(GGUFError, match=match):
        gguf.load(p)


def test_big_endian_and_nested_files_from_the_gguf_package(tmp_path):
    w = gp.GGUFWriter(tmp_path / "be.gguf", "llama", endianess=gp.GGUFEndian.BIG)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    with pytest.raises(GGUFError, match="endian"):
        gguf.load(tmp_path / "be.gguf")
    w = gp.GGUFWriter(tmp_path / "n.gguf", "llama")
    w.add_array("nested", [[1, 2], [3]])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    with pytest.raises(GGUFError, match="nested arrays"):
        gguf.load(tmp_path / "n.gguf")


def test_fuzz_loop_no_deaths():
    from pyggml.testing.fuzzers import gguf_fuzz

    res = gguf_fuzz.run(300, seed=7, batch=300)
    c = res["counts"]
    assert sum(c.values()) == 300 and res["bad"] == [], res["bad"]
    assert c.get("raised", 0) > 100 and c.get("loaded", 0) > 10


# --- the command line -----------------------------------------------------------------------------------
def test_cli(tmp_path):
    p = tmp_path / "c.gguf"
    gguf.save(
        p,
        {"general.name": "tiny", "ids": list(range(100)), "b": True},
        {"w": np.ones((2, 3), np.float32), "h": np.ones(4, np.float16)},
    )
    out = subprocess.run([sys.executable, "-m", "pyggml", "gguf", str(p)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "GGUF version 3, alignment 32" in text
    assert "general.name" in text and "'tiny'" in text and "arr[i32,100]" in text and "... 92 more" in text
    assert "F32" in text and "2x3" in text and "24 bytes" in text
    assert "total: 2 tensors, 10 elements, 32 bytes" in text
    out = subprocess.run(
        [sys.executable, "-m", "pyggml", "gguf", "--json", str(p)], capture_output=True, text=True, timeout=60
    )
    d = json.loads(out.stdout)
    assert d["metadata"]["ids"] == {"type": "arr[i32]", "value": list(range(100))}
    assert d["tensors"][0] == {
        "name": "w",
        "type": "F32",
        "shape": [2, 3],
        "ne": [3, 2, 1, 1],
        "offset": 0,
        "nbytes": 24,
    }
    assert d["totals"] == {"keys": 3, "tensors": 2, "elements": 10, "nbytes": 32}
    (tmp_path / "bad.gguf").write_bytes(b"GGUF")
    out = subprocess.run(
        [sys.executable, "-m", "pyggml", "gguf", str(tmp_path / "bad.gguf")], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and "cannot read this GGUF file" in out.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "pyggml", "gguf", str(tmp_path / "missing.gguf")],
        capture_output=True,
        text=True,
        timeout=60,
    )  # bad input exits 2, as everywhere else (it exited 1)
    assert missing.returncode == 2 and "missing.gguf" in missing.stderr and "Traceback" not in missing.stderr


# --- bad arguments to save ---------------------------------------------------------------------------------
class Pairs(Mapping):
    """A mapping that lists the same key twice (a dict cannot)."""

    def __init__(self, items):
        self._items = items

    def __getitem__(self, k):
        return dict(self._items)[k]

    def __iter__(self):
        return iter(k for k, _ in self._items)

    def __len__(self):
        return len(self._items)

    def items(self):
        return list(self._items)


@pytest.mark.parametrize(
    "md, exc, match",
    [
        ({"k": None}, TypeError, "no GGUF type for NoneType"),
        ({"k": b"x"}, TypeError, "no GGUF type for bytes"),
        ({"k": {"a": 1}}, TypeError, "no GGUF type for dict"),
        ({"k": 1j}, TypeError, "no GGUF type for complex"),
        ({"k": np.float16(1)}, TypeError, "float16"),
        ({"k": [[1, 2], [3]]}, TypeError, "nested arrays"),
        ({"k": np.ones((2, 2))}, TypeError, "nested arrays"),
        ({"k": [1, "a"]}, TypeError, "mixes"),
        ({"k": []}, ValueError, "empty list"),
        ({"k": 2**64}, ValueError, "does not fit"),
        ({"k": Value("u8", 256)}, ValueError, "does not fit in UINT8"),
        ({"k": Value("u32", -1)}, ValueError, "does not fit in UINT32"),
        ({"k": Value("i32", True)}, TypeError, "a bool for a INT32"),
        ({"k": Value("i32", 1.0)}, TypeError, "must be an integer"),
        ({"k": Value("bool", 1)}, TypeError, "must be a bool"),
        ({"k": Value("str", 1)}, TypeError, "must be a str"),
        ({"k": Value("f32", "1")}, TypeError, "must be a number"),
        ({"k": Value("f32", 1e39)}, ValueError, "too large for FLOAT32"),
        ({"k": Value("f32", np.array([1e39]))}, ValueError, "too large for FLOAT32"),
        ({"k": Value("u8", np.array([300]))}, ValueError, "do not fit in UINT8"),
        ({"k": Value("i32", np.array([1.5]))}, TypeError, "float64 for a INT32"),
        ({"k": Value("u8", [1, [2]])}, TypeError, "must be an integer"),
        ({"k": "a\0b"}, ValueError, "NUL"),
        ({"a\0b": 1}, ValueError, "NUL"),
        ({"": 1}, ValueError, "empty key"),
        ({1: 1}, TypeError, "keys must be str"),
        ({"general.alignment": 3}, ValueError, "power of two"),
        ({"general.alignment": 2**31}, ValueError, "more than pyggml writes"),
        ({"general.alignment": "64"}, TypeError, "must be an integer"),
        ({"general.alignment": Value("u64", 64)}, ValueError, "must be a UINT32"),
        ({"general.alignment": [64]}, TypeError, "must be an integer"),
        (Pairs([("k", 1), ("k", 2)]), ValueError, "appears twice"),
        ([("k", 1)], TypeError, "metadata must be a mapping"),
    ],
)
def test_bad_metadata(tmp_path, md, exc, match):
    with pytest.raises(exc, match=match):
        gguf.save(tmp_path / "x.gguf", md)
    assert not (tmp_path / "x.gguf").exists()  # checked before the file is opened


def test_bad_value_types():
    with pytest.raises(ValueError, match="unknown GGUF value type 'u7'"):
        Value("u7", 1)
    with pytest.raises(ValueError, match="element type"):
        Value("arr", [1])
    with pytest.raises(TypeError):
        Value(None, 1)
    assert Value("UINT8", 1).type == Value(GGUFType.UINT8, 1).type == Value(0, 1).type == GGUFType.UINT8


def test_bad_tensors(tmp_path):
    p = tmp_path / "x.gguf"
    ctx = gg.Context(mem_size=1 << 20, no_alloc=False)
    m = ctx.tensor("f32", (4, 6), "m").set(np.arange(24).reshape(4, 6))
    no_mem = gg.Context().tensor("f32", (4,), "n")
    cases = [
        ({"w" * 64: np.ones(2, np.float32)}, ValueError, "GGML_MAX_NAME"),
        ({"w\0": np.ones(2, np.float32)}, ValueError, "NUL"),
        ({3: np.ones(2, np.float32)}, TypeError, "names must be str"),
        ({"w": np.ones(2, np.uint8)}, TypeError, "no ggml type for NumPy uint8"),
        ({"w": np.ones(2, bool)}, TypeError, "no ggml type for NumPy bool"),
        ({"w": np.ones(2, np.complex64)}, TypeError, "no ggml type"),
        ({"w": np.ones((0, 3), np.float32)}, ValueError, "no elements"),
        ({"w": np.ones((1,) * 5, np.float32)}, ValueError, "at most 4"),
        ({"w": [1.0, 2.0]}, TypeError, "NumPy array or a pyggml Tensor"),
        ({"w": ctx.transpose(m)}, ValueError, "not contiguous"),
        ({"w": no_mem}, ValueError, "no memory"),
        (Pairs([("w", np.ones(2, np.float32)), ("w", np.ones(3, np.float32))]), ValueError, "appears twice"),
    ]
    for tensors, exc, match in cases:
        with pytest.raises(exc, match=match):
            gguf.save(p, {}, tensors)
        assert not p.exists()
    # handled rather than refused: strided, Fortran-order and big-endian arrays, a view tensor, 0-d arrays
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    ok = {
        "strided": a[:, ::2],
        "fortran": np.asfortranarray(a),
        "big": a.astype(">i4"),
        "row": ctx.view_2d(m, 6, 2, m.nb[1], m.nb[1]),
        "scalar": np.array(5.0, np.float64),
    }
    gguf.save(p, {}, ok)
    f = gguf.load(p)
    np.testing.assert_array_equal(f.tensors["strided"].numpy(), a[:, ::2])
    np.testing.assert_array_equal(f.tensors["fortran"].numpy(), a)
    np.testing.assert_array_equal(f.tensors["big"].numpy(), a.astype(np.int32))
    np.testing.assert_array_equal(f.tensors["row"].numpy(), np.arange(6, 18).reshape(2, 6))
    assert f.tensors["scalar"].numpy().tolist() == [5.0]


def test_device_tensors_save(tmp_path):
    names = [n for n in ("vulkan0",) if n in available_backends()] or pytest.skip("no device backend")
    be = gg.backend(names[0])
    ctx = gg.Context()
    t = ctx.tensor("q8_0", (2, 32), "t")
    be.alloc_tensors(ctx)
    t.set(np.linspace(-1, 1, 64).reshape(2, 32))
    gguf.save(tmp_path / "d.gguf", {}, {"t": t})
    assert gguf.load(tmp_path / "d.gguf").tensors["t"].raw_bytes().tobytes() == t.raw_bytes().tobytes()
