"""A backend as pyggml's users name it, parsed once: `cpu`, `vulkan0`, `cuda0`, `rpc0`, `cpu:zen4` (one of ggml's
CPU variants, `pyggml.cpu_variants`), `meta:vulkan0,vulkan1` (a meta device over those devices: one graph split
over them; llama.cpp's tensor split for a model).

Runner, `check` and its modes, `check --model`, `compare`, the verdict and the workers take a backend by its name
and ask `Target.parse` what it is; no other module takes the name apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyggml import backend_kinds, cpu_variants
from pyggml._args import text

META_PREFIX = "meta:"


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
        if name.startswith(META_PREFIX):
            devices = tuple(d for d in name[len(META_PREFIX) :].split(",") if d)
            if not devices:
                raise ValueError(
                    f"backend {name!r}: a meta backend names its devices, e.g. meta:cpu,cpu or meta:vulkan0,vulkan1"
                )
            return cls(name, devices, meta=True)
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
        return tuple(backend_kinds.kind("cpu") if _cpu_device(d) else backend_kinds.of_device(d) for d in self.devices)


def _cpu_device(name: str) -> bool:
    return name == "cpu" or name.startswith(cpu_variants.PREFIX)


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
