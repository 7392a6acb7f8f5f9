"""Testing agents the way they run: a Temporal test environment, models that replay
recorded runs, and the replay of exported histories against today's code.

Nothing in the library imports this package; it imports `durable_agent.temporal`.
"""

from __future__ import annotations

from .environment import AgentTestEnvironment, WorkerError, test_server_binary
from .handles import TestAgentClient, TestRunHandle

__all__ = [
    "AgentTestEnvironment",
    "TestAgentClient",
    "TestRunHandle",
    "WorkerError",
    "test_server_binary",
]
