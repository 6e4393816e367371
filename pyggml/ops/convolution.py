"""Convolution, pooling, resampling and padding ops."""

from __future__ import annotations

from pyggml.ops._common import exported

__all__ = exported(globals())
