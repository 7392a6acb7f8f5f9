"""Activities for the agent loop's working nodes, and the agent registry they share."""

from __future__ import annotations

from .nodes import ALL_ACTIVITIES, model_request, prepare_model_request, tool_call, validate_output
from .registry import (
    ActivityConfig,
    AgentActivityConfig,
    AgentRegistration,
    AgentRegistry,
    registry,
)

__all__ = [
    "ALL_ACTIVITIES",
    "ActivityConfig",
    "AgentActivityConfig",
    "AgentRegistration",
    "AgentRegistry",
    "model_request",
    "prepare_model_request",
    "registry",
    "tool_call",
    "validate_output",
]
