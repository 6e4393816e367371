"""ggml's enums as Python IntEnums, read from the compiled headers at import, so they follow the
pinned ggml. Their stub (_enums.pyi) is generated with the C layer, for IDEs and type checkers.

`str()` and an f-string show a member's name (`F32`, not `0`); `int()` and a format spec (`f"{t:d}"`)
its value, which is what ggml's C functions take."""

from __future__ import annotations

import enum

from pyggml._native import ffi, pinned_api, tree_version


class Absent(int):
    """A member of the pin's enum that this build's ggml lacks (`Op.LIGHTNING_INDEXER` on ggml 0.15.3): equal to
    no value the tree has, so a rule or a case keyed by it never matches a node; `absent` says why. It is not a
    member of the enum (not listed, not made by `Op(n)`)."""

    name: str
    absent: str

    def __new__(cls, value: int, name: str, why: str) -> Absent:
        self = super().__new__(cls, value)
        self.name, self.absent = name, why
        return self

    def __repr__(self) -> str:
        return f"<{self.name}: absent, {self.absent}>"

    __str__ = __format__ = lambda self, *spec: self.name  # type: ignore[assignment]


class _Tolerant(enum.EnumMeta):
    """An enum type that answers a name of the pin's enum its tree lacks with an `Absent` (pyggml._native's
    pinned API record) instead of an AttributeError: code written for the pin imports on an older ggml."""

    def __getattr__(cls, name: str):
        try:
            return super().__getattr__(name)  # type: ignore[misc]
        except AttributeError:
            absent = cls.__dict__.get("_absent_", {}) if not name.startswith("_") else {}
            if name in absent:
                return absent[name]
            raise


class _Named(enum.IntEnum, metaclass=_Tolerant):
    """An IntEnum that prints as its name: `print(t.type)` shows `F32` (IntEnum prints the number)."""

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        return (
            self.name.__format__(spec) if not spec or spec[-1] not in "bcdoxXneEfFgG%" else int.__format__(self, spec)
        )


_DOCS = {
    "Type": "ggml's tensor types (enum ggml_type): F32, F16, BF16, the integer types, the block-quantized types "
    "(Q8_0, Q4_K, ...). `types.as_type` also takes a name ('f32') or a NumPy dtype.",
    "Op": "ggml's graph node kinds (enum ggml_op): `t.op` of a tensor made by an op (NONE for a leaf).",
    "UnaryOp": "The element-wise functions of ggml's UNARY node kind (enum ggml_unary_op): gelu, silu, exp, ...",
    "Status": "What a ggml compute call returns (enum ggml_status): SUCCESS, or a failure pyggml raises as GGMLError.",
    "SortOrder": "argsort's order (enum ggml_sort_order): ASC or DESC.",
    "DeviceType": "A backend device's kind (enum ggml_backend_dev_type): CPU, GPU, IGPU, ACCEL, META.",
}


def _enum(name: str, c_enum: str, prefix: str) -> type[enum.IntEnum]:
    members = {
        k[len(prefix) :]: v
        for k, v in ffi.typeof(c_enum).relements.items()
        if k.startswith(prefix) and not k.endswith("_COUNT")
    }
    cls = _Named(name, members, module=__name__)  # type: ignore[call-overload]
    cls.__doc__ = _DOCS[name]
    pinned = [k[len(prefix) :] for k in pinned_api()["enums"].get(c_enum, ()) if k.startswith(prefix)]
    why = f"not in ggml {tree_version()}"
    lacking = [k for k in pinned if k not in members and not (k == "COUNT" or k.endswith("_COUNT"))]
    type.__setattr__(
        cls, "_absent_", {k: Absent(-1 - i, k, f"{c_enum} {prefix}{k} {why}") for i, k in enumerate(lacking)}
    )
    return cls  # type: ignore[no-any-return]


Type = _enum("Type", "enum ggml_type", "GGML_TYPE_")
Op = _enum("Op", "enum ggml_op", "GGML_OP_")
UnaryOp = _enum("UnaryOp", "enum ggml_unary_op", "GGML_UNARY_OP_")
Status = _enum("Status", "enum ggml_status", "GGML_STATUS_")
SortOrder = _enum("SortOrder", "enum ggml_sort_order", "GGML_SORT_ORDER_")
DeviceType = _enum("DeviceType", "enum ggml_backend_dev_type", "GGML_BACKEND_DEVICE_TYPE_")
