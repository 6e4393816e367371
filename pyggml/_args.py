"""Argument checks shared by the methods of the Python layer: a wrong kind of argument is a
TypeError naming it, an integer out of the range ggml can take a ValueError, never an
AttributeError or OverflowError from deep inside a call."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")


def integer(what: str, value: object, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{what} must be an integer, got {type(value).__name__} {value!r}")
    v = value.__index__()
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError(f"{what} must be in {lo}..{hi}, got {v}")
    return v


def at_least(lo: int) -> Callable[[str], int]:
    """An argparse type: an integer >= lo, refused with one line otherwise."""
    import argparse

    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
        if n < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo}, got {n}")
        return n

    return parse


def instance(what: str, value: object, cls: type[_T] | tuple[type[_T], ...]) -> _T:
    if not isinstance(value, cls):
        names = "/".join(c.__name__ for c in cls) if isinstance(cls, tuple) else cls.__name__
        raise TypeError(f"{what} must be a {names}, got {type(value).__name__}")
    return value


def text(what: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}")
    return value
