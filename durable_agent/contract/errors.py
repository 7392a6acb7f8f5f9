"""The error hierarchy.

`AgentError` is the root of everything the runtime raises on purpose. Errors a retry cannot
fix carry `retryable = False`; the Temporal activities turn those into non-retryable
application errors so a mistake is not retried forever.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AgentError",
    "AgentExecutorError",
    "ApprovalRequired",
    "CallDeferred",
    "ConversationTooLarge",
    "EnvironmentRestoreFailed",
    "HitlDecisionError",
    "InvalidInput",
    "MaxStepsExceeded",
    "ModelHTTPError",
    "ModelRetry",
    "OutputRetryLimitExceeded",
    "ToolResultNotSerializable",
    "ToolResultTooLarge",
    "ToolRetryLimitExceeded",
    "UnexpectedModelBehavior",
    "UnknownAgentError",
    "UsageLimitExceeded",
    "UserError",
    "WorkspaceError",
]


class AgentError(Exception):
    """Base of every error the runtime raises deliberately."""

    kind: str = "agent_error"
    retryable: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UserError(AgentError):
    """The agent was configured or called wrongly; the message says how to fix it."""

    kind = "user_error"


class UnknownAgentError(UserError):
    kind = "unknown_agent"


class InvalidInput(UserError):
    """What a run was started with cannot be run (an empty prompt, say); nothing ran."""

    kind = "invalid_input"


class HitlDecisionError(UserError):
    """Approval decisions or deferred results that do not match the pending calls."""

    kind = "invalid_hitl_decision"


class UsageLimitExceeded(AgentError):
    kind = "usage_limit_exceeded"

    def __init__(self, message: str, *, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


class MaxStepsExceeded(AgentError):
    kind = "max_steps_exceeded"


class ToolRetryLimitExceeded(AgentError):
    kind = "tool_retry_limit_exceeded"


class ToolResultTooLarge(AgentError):
    """A tool returned more than the agent's `max_tool_result_bytes` allow, with
    `oversized_tool_result="fail"`."""

    kind = "tool_result_too_large"


class ToolResultNotSerializable(AgentError):
    """A tool ran but returned something that is not JSON; retrying would run it again."""

    kind = "tool_result_not_serializable"


class ConversationTooLarge(AgentError):
    """A run's conversation no longer fits in one Temporal payload, and nothing takes it
    out of history (external storage) or bounds it (a history processor)."""

    kind = "conversation_too_large"


class EnvironmentRestoreFailed(AgentError):
    """A run's environment could not be brought back as its state names it: a ref missing
    from the store, an object whose content does not match its hash, a kind no provider is
    registered for, or an agent's `initial` directory that is gone. The run fails rather
    than go on with a silently empty workspace; a retry would find the same."""

    kind = "environment_restore_failed"


class WorkspaceError(AgentError):
    """A tool asked its workspace for something it refuses (a path out of it, a device
    file, a missing file, more bytes than its limit): the model reads it as the tool's
    error return, and nothing the call wrote counts."""

    kind = "workspace_error"


class OutputRetryLimitExceeded(AgentError):
    kind = "output_retry_limit_exceeded"


class UnexpectedModelBehavior(AgentError):
    kind = "unexpected_model_behavior"


class ModelHTTPError(AgentError):
    """A model provider answered with an error status.

    `retryable` follows the status: 408, 409, 429 and 5xx may succeed later; other 4xx
    (bad request, auth, context too long) never will.
    """

    kind = "model_http_error"

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None,
        model_name: str,
        body: Any = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.model_name = model_name
        self.body = body
        self.retry_after = retry_after
        self.retryable = status_code is None or status_code in (408, 409, 429) or status_code >= 500


class AgentExecutorError(AgentError):
    """The executor itself failed while handling a checkpoint."""

    kind = "executor_error"


class ModelRetry(Exception):
    """Raised by a tool or output validator to send the model a retry prompt."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ApprovalRequired(Exception):
    """Raised by a tool to stop and ask a human before it runs."""

    def __init__(self, reason: str | None = None, metadata: dict[str, Any] | None = None) -> None:
        super().__init__(reason or "approval required")
        self.reason = reason
        self.metadata = metadata or {}


class CallDeferred(Exception):
    """Raised by a tool whose result will be delivered later from outside the run."""

    def __init__(self, reason: str | None = None, metadata: dict[str, Any] | None = None) -> None:
        super().__init__(reason or "call deferred")
        self.reason = reason
        self.metadata = metadata or {}
