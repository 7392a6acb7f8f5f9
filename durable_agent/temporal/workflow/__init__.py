"""The workflow side of the Temporal integration: `AgentWorkflow` and its components.

Only `agent_workflow` declares Temporal handlers; every other module here is a plain class
owning one concern, reaching Temporal through `port.WorkflowPort` so it can be tested
without a server. Nothing here does I/O.
"""

from ..wire import EVENTS_TOPIC
from .agent_workflow import AgentWorkflow

__all__ = ["EVENTS_TOPIC", "AgentWorkflow"]
