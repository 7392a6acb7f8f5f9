"""`durable-agent`, the command line for people and scripts."""

from __future__ import annotations

from .app import main

__all__ = ["main"]
