"""A run's first search attributes, sent with its start by the client instead of upserted by
the run.

A run started through a client with `DurableAgentPlugin` starts with `AgentName`,
`AgentStatus=running` and `PendingApprovals=0` (and a fork's `ForkedFrom`), the values its
first workflow task would upsert. It is listed under its agent from the moment it is
started, and a run whose workflow coalesces its upserts (`placement.VISIBILITY_PATCH`)
finds them there (`Visibility.begin`) and upserts nothing in its first task: one command
fewer, which the worker's cache keeps as long as the run waits.

The values the caller passes win over ours, and a caller that passes untyped (deprecated)
search attributes keeps exactly those. A namespace that has not registered our attributes
yet (a worker registers them when it starts) refuses a start that names them: the start is
sent again without them, and the run upserts them itself, as it did before.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from temporalio.client import (
    Interceptor,
    OutboundInterceptor,
    StartWorkflowInput,
    WorkflowHandle,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

from .search_attributes import AGENT_NAME, AGENT_STATUS, FORKED_FROM, PENDING_APPROVALS
from .wire import AgentWorkflowInput

__all__ = ["AGENT_WORKFLOW", "StartAttributes", "start_attributes"]

AGENT_WORKFLOW = "AgentWorkflow"
"""The workflow type whose starts carry its search attributes."""
STARTED = "running"
"""A started run's `AgentStatus` (the status its first task publishes, as Temporal lists a
started workflow as running before its first task)."""


def start_attributes(input: StartWorkflowInput) -> TypedSearchAttributes | None:
    """The search attributes `input` starts its run with, ours added; None: leave it as is
    (not a new agent run, or untyped attributes of the caller's)."""
    if input.workflow != AGENT_WORKFLOW or len(input.args) != 1:
        return None
    request = input.args[0]
    if not isinstance(request, AgentWorkflowInput) or request.continuation is not None:
        return None
    given = input.search_attributes
    if given is not None and not isinstance(given, TypedSearchAttributes):
        return None
    held = given or TypedSearchAttributes.empty
    ours: list[SearchAttributePair[Any]] = [
        SearchAttributePair(AGENT_NAME, request.agent),
        SearchAttributePair(AGENT_STATUS, STARTED),
        SearchAttributePair(PENDING_APPROVALS, 0),
    ]
    if request.resume_from is not None:
        ours.append(SearchAttributePair(FORKED_FROM, request.resume_from.workflow_id))
    added = [pair for pair in ours if held.get(pair.key) is None]
    return held.updated(*added) if added else None


class StartAttributes(Interceptor):
    """The client interceptor `DurableAgentPlugin` adds (see the module's docstring)."""

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Starting(next)


class _Starting(OutboundInterceptor):
    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle[Any, Any]:
        attributes = start_attributes(input)
        if attributes is None:
            return await super().start_workflow(input)
        try:
            return await super().start_workflow(
                dataclasses.replace(input, search_attributes=attributes)
            )
        except RPCError as error:
            if not _unregistered(error):
                raise
        return await super().start_workflow(input)


def _unregistered(error: RPCError) -> bool:
    """The server refused a search attribute it does not know (not registered yet)."""
    return (
        error.status == RPCStatusCode.INVALID_ARGUMENT
        and "search attribute" in error.message.lower()
    )
