"""ggml's enums as Python IntEnums, read from the compiled headers at import, so they follow the
pinned ggml. Their stub (_enums.pyi) is generated with the C layer, for IDEs and type checkers."""

from __future__ import annotations

import enum

from pyggml._native import ffi


def _enum(name: str, c_enum: str, prefix: str) -> type[enum.IntEnum]:
    members = {k[len(prefix):]: v for k, v in ffi.typeof(c_enum).relements.items()
               if k.startswith(prefix) and not k.endswith("_COUNT")}
    return enum.IntEnum(name, members)  # type: ignore[return-value]


Type = _enum("Type", "enum ggml_type", "GGML_TYPE_")
Op = _enum("Op", "enum ggml_op", "GGML_OP_")
UnaryOp = _enum("UnaryOp", "enum ggml_unary_op", "GGML_UNARY_OP_")
Status = _enum("Status", "enum ggml_status", "GGML_STATUS_")
SortOrder = _enum("SortOrder", "enum ggml_sort_order", "GGML_SORT_ORDER_")
DeviceType = _enum("DeviceType", "enum ggml_backend_dev_type", "GGML_BACKEND_DEVICE_TYPE_")
