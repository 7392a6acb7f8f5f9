"""The agent loop: a state machine over `AgentRunState`, written once for both drivers.

`engine` drives a run through its nodes and boundaries, `tools` holds its tool steps, and
`hitl` applies people's decisions to a waiting run.
"""

from .engine import AgentLoop
from .hitl import apply_hitl_decisions

__all__ = ["AgentLoop", "apply_hitl_decisions"]
