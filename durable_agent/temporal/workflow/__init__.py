"""The workflow side of the Temporal integration: `AgentWorkflow` and its components.

Only `agent_workflow` declares Temporal handlers; every other module here is a plain class
owning one concern, reaching Temporal through `port.WorkflowPort` so it can be tested
without a server. Nothing here does I/O.
"""

from .agent_workflow import AgentWorkflow
from .events import EVENTS_TOPIC

__all__ = ["EVENTS_TOPIC", "AgentWorkflow"]
