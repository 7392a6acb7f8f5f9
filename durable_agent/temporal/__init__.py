"""The Temporal integration: `AgentWorkflow`, its executor and activities, the plugin that
hosts agents on a worker, and the client people and scripts drive runs with."""

from __future__ import annotations

from ..engine.quotas import ModelQuota
from .client import AgentClient, AgentRunHandle
from .executor import TemporalExecutor
from .plugin import DurableAgentPlugin
from .queues import DEFAULT_TASK_QUEUE
from .registry import ActivityConfig, AgentActivityConfig, AgentRegistration, AgentRegistry
from .runtime import WorkerRuntime, runtime_of
from .search_attributes import (
    AGENT_NAME,
    AGENT_STATUS,
    FORKED_FROM,
    PENDING_APPROVALS,
    SEARCH_ATTRIBUTES,
)
from .streams import CheckpointChain, MissingCheckpoints, StreamPastEnd
from .wire import (
    EVENTS_TOPIC,
    AgentStatusView,
    AgentWorkflowInput,
    AgentWorkflowResult,
    ApprovalSignal,
    DeferredResultSignal,
    ForkOrigin,
    HistoryPageQuery,
    PendingApprovalView,
    ResumeFrom,
    ResumeSignal,
    RunLink,
    SuspendSignal,
    UpdateAccepted,
)
from .workflow import AgentWorkflow

__all__ = [
    "AGENT_NAME",
    "AGENT_STATUS",
    "DEFAULT_TASK_QUEUE",
    "EVENTS_TOPIC",
    "FORKED_FROM",
    "PENDING_APPROVALS",
    "SEARCH_ATTRIBUTES",
    "ActivityConfig",
    "AgentActivityConfig",
    "AgentClient",
    "AgentRegistration",
    "AgentRegistry",
    "AgentRunHandle",
    "AgentStatusView",
    "AgentWorkflow",
    "AgentWorkflowInput",
    "AgentWorkflowResult",
    "ApprovalSignal",
    "CheckpointChain",
    "DeferredResultSignal",
    "DurableAgentPlugin",
    "ForkOrigin",
    "HistoryPageQuery",
    "MissingCheckpoints",
    "ModelQuota",
    "PendingApprovalView",
    "ResumeFrom",
    "ResumeSignal",
    "RunLink",
    "StreamPastEnd",
    "SuspendSignal",
    "TemporalExecutor",
    "UpdateAccepted",
    "WorkerRuntime",
    "runtime_of",
]
