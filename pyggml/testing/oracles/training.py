"""Oracles of losses and optimizer steps."""

from __future__ import annotations





