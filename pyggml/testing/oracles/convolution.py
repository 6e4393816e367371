"""Oracles of convolution, pooling, resampling and padding ops."""

from __future__ import annotations





