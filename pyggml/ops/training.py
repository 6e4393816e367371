"""Losses and optimizer steps."""

from __future__ import annotations

from pyggml.ops._common import exported

__all__ = exported(globals())
