"""Every way a call to a run can fail, as one `AgentRunError` each: a script or the CLI
tells them apart by type, and each message names the run and the way out.

The client's errors (`durable_agent.temporal.client` exports them), kept outside the client
package: the stream reader (`streams`) raises them too, and the client's handles use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .wire import WORKFLOW_TYPE

__all__ = [
    "AgentRunError",
    "AlreadyStarted",
    "CannotConnect",
    "NoWorker",
    "NotAnAgentRun",
    "Rejected",
    "RunClosed",
    "RunFailed",
    "RunNotFound",
]


class AgentRunError(Exception):
    """Base of every error the client raises; `str(error)` is the message for a person."""

    def __init__(self, message: str, *, workflow_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.workflow_id = workflow_id


class CannotConnect(AgentRunError):
    """The Temporal server did not answer (at connect, or the connection was lost)."""


class RunNotFound(AgentRunError):
    """No workflow with that id in the namespace."""


class NotAnAgentRun(AgentRunError):
    """The workflow exists but its type is not `AgentWorkflow`; nothing was sent to it."""

    def __init__(self, workflow_id: str, workflow_type: str) -> None:
        super().__init__(
            f"workflow {workflow_id!r} is not an agent run: its type is {workflow_type!r}, "
            f"not {WORKFLOW_TYPE!r}",
            workflow_id=workflow_id,
        )
        self.workflow_type = workflow_type


class RunClosed(AgentRunError):
    """The run has ended (completed, failed, terminated, ...): the server refused `action`."""

    def __init__(self, workflow_id: str, execution_status: str, action: str) -> None:
        super().__init__(
            f"workflow {workflow_id!r} is {execution_status}; it no longer accepts {action}",
            workflow_id=workflow_id,
        )
        self.execution_status = execution_status
        self.action = action


class Rejected(AgentRunError):
    """The workflow's update validator refused the request; it never entered history.

    `message` is the validator's own text (e.g. "no pending approval for tool call id
    'x'; pending: ['d1']") and `type` its error type (e.g. `invalid_approval`)."""

    def __init__(
        self,
        workflow_id: str,
        message: str,
        type: str | None,
        *,
        details: Sequence[Any] = (),
    ) -> None:
        super().__init__(message, workflow_id=workflow_id)
        self.type = type
        self.details = tuple(details)
        """The validator's error details (a sub-agent's call: the workflow holding it)."""


class NoWorker(AgentRunError):
    """No worker answered a query or update within the timeout. An update may still be
    applied once a worker picks it up."""


class RunFailed(AgentRunError):
    """`result()` of a run that failed, was cancelled, terminated or timed out.

    `failure` reads like `unknown_agent: no agent named 'x'`; the Temporal error is the
    `__cause__`."""

    def __init__(self, workflow_id: str, failure: str) -> None:
        super().__init__(f"run {workflow_id} failed: {failure}", workflow_id=workflow_id)
        self.failure = failure


class AlreadyStarted(AgentRunError):
    """`start(workflow_id=...)` with the id of a workflow that is still running."""
