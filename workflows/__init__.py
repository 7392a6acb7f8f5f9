"""The Temporal side: `AgentWorkflow`, its executor and runner, inputs and the plugin."""

from __future__ import annotations

from .agent_workflow import AgentWorkflow
from .inputs import (
    AgentStatusView,
    AgentWorkflowInput,
    AgentWorkflowResult,
    ApprovalSignal,
    DeferredResultSignal,
    HistoryPageQuery,
    PendingApprovalView,
    ResumeSignal,
    SuspendSignal,
    UpdateAccepted,
)
from .plugin import DurableAgentPlugin
from .search_attributes import AGENT_NAME, AGENT_STATUS, PENDING_APPROVALS, SEARCH_ATTRIBUTES
from .temporal_executor import TemporalExecutor

__all__ = [
    "AGENT_NAME",
    "AGENT_STATUS",
    "DEFAULT_TASK_QUEUE",
    "PENDING_APPROVALS",
    "SEARCH_ATTRIBUTES",
    "AgentStatusView",
    "AgentWorkflow",
    "AgentWorkflowInput",
    "AgentWorkflowResult",
    "ApprovalSignal",
    "DeferredResultSignal",
    "DurableAgentPlugin",
    "HistoryPageQuery",
    "PendingApprovalView",
    "ResumeSignal",
    "SuspendSignal",
    "TemporalExecutor",
    "UpdateAccepted",
]

DEFAULT_TASK_QUEUE = "durable-agent"
