"""A backend as pyggml's users name it, parsed once: `cpu`, `vulkan0`, `cuda0`, `rpc0`, `cpu:zen4` (one of ggml's
CPU variants, `pyggml.cpu_variants`), `meta:vulkan0,vulkan1` (a meta device over those devices: one graph split
over them; llama.cpp's tensor split for a model).

Runner, `check` and its modes, `check --model`, `compare`, the verdict, the findings and the workers take a backend by
its name and ask `Target.parse` what it is (its family, its devices, whether it is meta, RPC, a CPU variant, and
which rules written for kinds of backend, `vulkan` or `meta:cpu`, hold for it: `Target.matches`); the name of a
ggml buffer type (`Vulkan0`, `RPC0[host:port]`, `Meta(CPU,CPU)`) is taken apart by `Buffer.parse`. No other
module takes a backend's or a buffer's name apart (`pyggml.backend_kinds.split` splits a device's name in two);
tests/test_target.py looks for the ways they were.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyggml import backend_kinds, cpu_variants
from pyggml._args import text

META_PREFIX = "meta:"
EXAMPLES = "cpu, vulkan0, cuda0, rpc0, cpu:zen4, meta:vulkan0,vulkan1"
META_EXAMPLES = "meta:cpu,cpu or meta:vulkan0,vulkan1"


@dataclass(frozen=True)
class Target:
    """A backend by name, taken apart.

    Attributes:
        name: the name, lower case (`meta:cpu,cpu`).
        devices: the devices it computes on, by name: the one device, or a meta device's, in order.
        meta: whether it is a meta device (one graph split over `devices`).
    """

    name: str
    devices: tuple[str, ...]
    meta: bool = False

    @classmethod
    def parse(cls, name: str) -> Target:
        """Take a backend's name apart.

        Args:
            name: `cpu`, `vulkan0`, `cpu:zen4`, `meta:DEV,DEV,...`, in any case.

        Returns:
            The Target.

        Raises:
            TypeError: a name that is not a str.
            ValueError: a meta device that names no device.
        """
        name = text("backend name", name).strip().lower()
        if not name:
            raise ValueError(f"an empty backend name: name one ({EXAMPLES})")
        if name.startswith(META_PREFIX):
            devices = tuple(d.strip() for d in name[len(META_PREFIX) :].split(",") if d.strip())
            if not devices:
                raise ValueError(f"backend {name!r}: a meta backend names its devices, e.g. {META_EXAMPLES}")
            nested = [d for d in devices if d.startswith(META_PREFIX)]
            if nested:
                raise ValueError(
                    f"backend {name!r}: a meta backend's devices are single devices, not {nested[0]!r} "
                    f"(meta:DEV,DEV,..., e.g. {META_EXAMPLES})"
                )
            return cls(name, devices, meta=True)
        if "," in name:
            raise ValueError(f"backend {name!r}: several devices make a meta backend: meta:{name}")
        return cls(name, (name,))

    @property
    def variant(self) -> str | None:
        """The CPU variant a `cpu:NAME` backend names (`zen4`), None for any other."""
        if self.meta or not self.name.startswith(cpu_variants.PREFIX):
            return None
        return self.name[len(cpu_variants.PREFIX) :]

    @property
    def is_cpu(self) -> bool:
        """Whether it is one CPU device: `cpu`, or one of ggml's CPU variants."""
        return not self.meta and _cpu_device(self.name)

    @property
    def on_cpu(self) -> bool:
        """Whether every device it computes on is a CPU (`cpu`, `cpu:zen4`, `meta:cpu,cpu`)."""
        return all(_cpu_device(d) for d in self.devices)

    @property
    def kinds(self) -> tuple[backend_kinds.BackendKind | None, ...]:
        """The kind of each device (`pyggml.backend_kinds`), None for one pyggml does not know."""
        return tuple(backend_kinds.kind(f) for f in self.families)

    @property
    def families(self) -> tuple[str, ...]:
        """The family of each device (`cpu` for `cpu` and its variants, `vulkan` for vulkan0; a name pyggml does not
        know less its index)."""
        return tuple(_family(d) for d in self.devices)

    @property
    def family(self) -> str:
        """`meta` for a meta device, else its one device's family (`cpu`, `vulkan`, `cuda`, `rpc`, ...)."""
        return "meta" if self.meta else self.families[0]

    @property
    def index(self) -> int | None:
        """The index of its one device (vulkan1 -> 1), None for a meta device and a device without one (cpu)."""
        return None if self.meta or self.is_cpu else backend_kinds.split(self.name)[1]

    @property
    def rpc(self) -> bool:
        """Whether a device it computes on is an RPC server's (`rpc0`, `meta:rpc0,rpc1`)."""
        return "rpc" in self.families

    @property
    def rpc_indices(self) -> tuple[int, ...]:
        """The indices of its RPC devices (`meta:rpc0,rpc2` -> (0, 2)), in order."""
        return tuple(Target.parse(d).index or 0 for d, f in zip(self.devices, self.families) if f == "rpc")

    def matches(self, pattern: str) -> bool:
        """Whether a rule written for `pattern` holds here: "" for every backend; a family (`cpu`, `vulkan`) for a
        single device of it (`cpu` for the CPU variants too); `meta` for every meta device; `meta:FAMILY`
        (`meta:vulkan`) for a meta device whose devices are all of that family (a meta device over several
        families matches only "" and `meta`); or the backend's own name.

        Args:
            pattern: the rule's backend (`Bound.backend`, a key of a table of bounds by kind).

        Returns:
            True when the rule holds for this backend.
        """
        pattern = pattern.strip().lower()
        if not pattern or pattern == self.name:
            return True
        if pattern == "meta" or pattern.startswith(META_PREFIX):
            wanted = pattern[len(META_PREFIX) :]
            return self.meta and (not wanted or set(self.families) == {wanted})
        return not self.meta and self.family == pattern


def _cpu_device(name: str) -> bool:
    return name == "cpu" or name.startswith(cpu_variants.PREFIX)


def _family(device: str) -> str:
    return "cpu" if _cpu_device(device) else backend_kinds.split(device)[0]


def matches(backend: str, pattern: str) -> bool:
    """`Target.matches` for a backend by name; a backend not known ("") matches only the rules for every backend.

    Args:
        backend: the backend's name, "" when not known.
        pattern: the rule's backend (`Target.matches`).

    Returns:
        True when the rule holds for it.
    """
    return Target.parse(backend).matches(pattern) if backend.strip() else not pattern


@dataclass(frozen=True)
class Buffer:
    """The name of a ggml buffer type, taken apart: `CPU`, `CPU_Mapped`, `Vulkan0`, `Vulkan_Host`, `CUDA0`,
    `RPC0[host:port]`, `Meta(Vulkan0,Vulkan1)`.

    Attributes:
        name: the name as ggml gives it.
        family: the kind of backend whose buffer it is (`cpu`, `vulkan`, `cuda`, `rpc`, `meta`; the name's first
            word, lower case, for one pyggml does not know).
        device: the device whose memory it is, as a backend is named (`cpu`, `vulkan0`, `rpc0`); None for a meta
            buffer and for any other buffer of a kind (a device's host memory `Vulkan_Host`, `CPU_Mapped`,
            `CPU_REPACK`).
        index: the device's index (`Vulkan1` -> 1), None without one.
        parts: a meta buffer's buffers, in order; () for any other.
    """

    name: str
    family: str
    device: str | None = None
    index: int | None = None
    parts: tuple[Buffer, ...] = ()

    @classmethod
    def parse(cls, name: str) -> Buffer:
        """Take a buffer type's name apart.

        Args:
            name: the name (`ggml_backend_buffer_name`).

        Returns:
            The Buffer.

        Raises:
            TypeError: a name that is not a str.
        """
        name = text("buffer name", name)
        if name.startswith("Meta(") and name.endswith(")"):
            return cls(name, "meta", parts=tuple(cls.parse(p) for p in name[5:-1].split(",")))
        m = re.fullmatch(r"([A-Za-z]*)(\d*)(.*)", name.split("[")[0], re.DOTALL)
        assert m is not None  # the pattern matches every string
        word, digits, rest = m.groups()
        k = backend_kinds.kind(word)
        family = k.family if k is not None else word.lower()
        index = int(digits) if digits else None
        if k is None or rest:
            return cls(name, family, index=index)
        if family == "cpu" and index is None:
            return cls(name, family, "cpu")
        return cls(name, family, f"{word.lower()}{index}" if index is not None else None, index)

    @property
    def on_cpu(self) -> bool:
        """Whether its memory is a CPU backend's (`CPU`, `CPU_Mapped`, `CPU_REPACK`), a meta buffer's when each of its
        parts is."""
        return all(p.on_cpu for p in self.parts) if self.parts else self.family == "cpu"


def expand(names: list[str]) -> list[str]:
    """The backends a list of names stands for, each once: `cpu:all` is every CPU variant this machine runs,
    `cpu:best` the best one.

    Args:
        names: backend names, as given.

    Returns:
        Lower-case names in order; a name that stands for nothing here (`cpu:all` without variants) kept, for the
        check that refuses it to say why.
    """
    out = [n for name in names for n in (cpu_variants.names_for(name.strip().lower()) or [name.strip().lower()])]
    return list(dict.fromkeys(out))


def refusal(name: str, available: set[str]) -> str | None:
    """Why a backend named for a model's run cannot be had here, before anything loads.

    Args:
        name: the backend's name.
        available: the device names this build has (`pyggml.testing.check.available_backends`).

    Returns:
        The reason (a name that is no backend, a CPU variant not built or not for this CPU, a device not in
        `available`), None when it can be had.
    """
    try:
        devices = Target.parse(name).devices
    except ValueError as e:
        return str(e)
    variants = [d for d in devices if Target.parse(d).variant is not None]
    why = next((w for d in variants if (w := cpu_variants.error(d))), None)
    if why:
        return why
    missing = [d for d in devices if d not in available and d not in variants]
    if missing:
        return f"no backend {', '.join(missing)} in this build (available: {', '.join(sorted(available))})"
    return None
