"""What users build and run in-process: `AgentBuilder`, `Agent`, and the in-process
driver (`in_process`: nodes run here, sub-agents as loops of their own)."""

from .agent import Agent, AgentResult
from .builder import AgentBuilder

__all__ = ["Agent", "AgentBuilder", "AgentResult"]
