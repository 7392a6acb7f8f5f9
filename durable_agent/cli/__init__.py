"""`durable-agent`, the command line for people and scripts (built on `AgentClient`)."""

from __future__ import annotations

from .app import amain, main

__all__ = ["amain", "main"]
