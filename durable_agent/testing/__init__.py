"""Testing agents the way they run: a Temporal test environment, models that replay
recorded runs, and the replay of exported histories against today's code.

Nothing in the library imports this package; it imports `durable_agent.temporal`.
"""

from __future__ import annotations

from .environment import AgentTestEnvironment, WorkerError, test_server_binary
from .handles import TestAgentClient, TestRunHandle
from .histories import HistoryFileError, RunChain, export_chain, fetch_chain
from .recording import RecordedStep, RecordedToolResult, recorded_steps
from .replay import (
    NonDeterministicReplay,
    replay_folder,
    replay_histories,
    replay_histories_async,
)
from .replay_model import ReplayDivergence, ReplayModel

__all__ = [
    "AgentTestEnvironment",
    "HistoryFileError",
    "NonDeterministicReplay",
    "RecordedStep",
    "RecordedToolResult",
    "ReplayDivergence",
    "ReplayModel",
    "RunChain",
    "TestAgentClient",
    "TestRunHandle",
    "WorkerError",
    "export_chain",
    "fetch_chain",
    "recorded_steps",
    "replay_folder",
    "replay_histories",
    "replay_histories_async",
    "test_server_binary",
]
