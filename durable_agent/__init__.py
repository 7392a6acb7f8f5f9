"""durable-agent: an agent loop with durable checkpoints, a Python port of starweaver's."""

from __future__ import annotations

from .agent.agent import Agent, AgentResult
from .agent.builder import AgentBuilder
from .agent.in_process import DirectNodeRunner
from .contract.checkpoint import (
    AgentCheckpoint,
    AgentCheckpointMetadata,
    AgentExecutionDecision,
    AgentExecutionDecisionAdapter,
    AgentExecutionNode,
    AgentExecutor,
    AgentResumeCursor,
    AgentResumeEvidence,
    Continue,
    DirectAgentExecutor,
    ExecutionSuspended,
    Suspend,
)
from .contract.decisions import (
    DeferredToolCall,
    DeferredToolResult,
    PendingToolApproval,
    ToolApprovalDecision,
)
from .contract.environment import Workspace
from .contract.errors import (
    AgentError,
    AgentExecutorError,
    ApprovalRequired,
    CallDeferred,
    ConversationTooLarge,
    EnvironmentRestoreFailed,
    HitlDecisionError,
    InvalidInput,
    MaxStepsExceeded,
    ModelHTTPError,
    ModelRetry,
    OutputRetryLimitExceeded,
    ToolResultNotSerializable,
    ToolResultTooLarge,
    ToolRetryLimitExceeded,
    UnexpectedModelBehavior,
    UnknownAgentError,
    UsageLimitExceeded,
    UserError,
    WorkspaceError,
)
from .contract.messages import (
    InstructionPart,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextContent,
    TextPart,
    ThinkingPart,
    ToolCall,
    ToolCallPart,
    ToolReturn,
    ToolReturnPart,
    UserPromptPart,
)
from .contract.records import AgentStreamRecord
from .contract.state import AgentRunState, RunError, RunStatus
from .contract.tools import ToolContext, ToolDefinition
from .contract.trace_context import TraceContext
from .contract.usage import Usage, UsageLimits
from .engine.controller import RunController
from .engine.ids import IdSource, SystemIdSource
from .engine.loop import AgentLoop, apply_hitl_decisions
from .engine.overrides import AgentOverrides
from .engine.quotas import ModelQuota
from .engine.runner import Driver, NodeRunner
from .engine.tools import Tool
from .models import (
    AgentInfo,
    FunctionModel,
    Model,
    ModelDelta,
    ModelRequestParameters,
    ModelSettings,
    TestModel,
)

__all__ = [
    "Agent",
    "AgentBuilder",
    "AgentCheckpoint",
    "AgentCheckpointMetadata",
    "AgentError",
    "AgentExecutionDecision",
    "AgentExecutionDecisionAdapter",
    "AgentExecutionNode",
    "AgentExecutor",
    "AgentExecutorError",
    "AgentInfo",
    "AgentLoop",
    "AgentOverrides",
    "AgentResult",
    "AgentResumeCursor",
    "AgentResumeEvidence",
    "AgentRunState",
    "AgentStreamRecord",
    "ApprovalRequired",
    "CallDeferred",
    "Continue",
    "ConversationTooLarge",
    "EnvironmentRestoreFailed",
    "DeferredToolCall",
    "DeferredToolResult",
    "DirectAgentExecutor",
    "DirectNodeRunner",
    "Driver",
    "ExecutionSuspended",
    "FunctionModel",
    "HitlDecisionError",
    "InvalidInput",
    "IdSource",
    "InstructionPart",
    "MaxStepsExceeded",
    "Model",
    "ModelDelta",
    "ModelHTTPError",
    "ModelMessage",
    "ModelMessagesTypeAdapter",
    "ModelQuota",
    "ModelRequest",
    "ModelRequestParameters",
    "ModelResponse",
    "ModelRetry",
    "ModelSettings",
    "NodeRunner",
    "OpenAIChatModel",
    "OutputRetryLimitExceeded",
    "PendingToolApproval",
    "RunController",
    "RetryPromptPart",
    "RunError",
    "RunStatus",
    "Suspend",
    "SystemIdSource",
    "SystemPromptPart",
    "TestModel",
    "TextContent",
    "TextPart",
    "ThinkingPart",
    "Tool",
    "ToolApprovalDecision",
    "ToolCall",
    "ToolCallPart",
    "ToolContext",
    "ToolDefinition",
    "ToolResultNotSerializable",
    "ToolResultTooLarge",
    "ToolRetryLimitExceeded",
    "ToolReturn",
    "ToolReturnPart",
    "TraceContext",
    "UnexpectedModelBehavior",
    "UnknownAgentError",
    "Usage",
    "UsageLimitExceeded",
    "UsageLimits",
    "UserError",
    "Workspace",
    "WorkspaceError",
    "UserPromptPart",
    "apply_hitl_decisions",
]


def __getattr__(name: str) -> object:
    if name == "OpenAIChatModel":
        from .models.openai import OpenAIChatModel

        return OpenAIChatModel
    raise AttributeError(f"module 'durable_agent' has no attribute {name!r}")
