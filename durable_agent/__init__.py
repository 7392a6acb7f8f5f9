"""durable-agent: an agent loop with durable checkpoints, a Python port of starweaver's."""

from __future__ import annotations

from .agent import Agent, AgentBuilder, AgentResult
from .controller import RunController
from .errors import (
    AgentError,
    AgentExecutorError,
    ApprovalRequired,
    CallDeferred,
    ConversationTooLarge,
    ExecutionSuspended,
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
)
from .executor import (
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
    Suspend,
)
from .hitl import DeferredToolCall, DeferredToolResult, PendingToolApproval, ToolApprovalDecision
from .ids import IdSource, SystemIdSource
from .loop import AgentLoop, apply_hitl_decisions
from .messages import (
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
from .models import (
    AgentInfo,
    FunctionModel,
    Model,
    ModelDelta,
    ModelRequestParameters,
    ModelSettings,
    TestModel,
)
from .overrides import AgentOverrides
from .runner import DirectNodeRunner, Driver, NodeRunner
from .state import AgentRunState, RunError, RunStatus
from .stream import AgentStreamRecord
from .tools import Tool, ToolContext, ToolDefinition
from .trace_context import TraceContext
from .usage import Usage, UsageLimits

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
    "UserPromptPart",
    "apply_hitl_decisions",
]


def __getattr__(name: str) -> object:
    if name == "OpenAIChatModel":
        from .models.openai import OpenAIChatModel

        return OpenAIChatModel
    raise AttributeError(f"module 'durable_agent' has no attribute {name!r}")
