"""The activity side of the format: the whole request a packed input means.

The prefix comes from the worker's history cache (or, on a miss, from the workflow by
query), the new messages are rebuilt from their packed form (tool returns from the tool
result cache) and checked against the digest the workflow sent; on any difference they are
read back from the workflow. Requests scheduled by release 0.2 and before carry their
new messages whole (`legacy_v02`).
"""

from __future__ import annotations

from collections.abc import Callable

from durable_agent import ModelResponse, ToolDefinition
from durable_agent.contract.tools import OUTPUT_TOOL_NAME
from durable_agent.engine import nodes

from ..wire import ModelRequestActivityInput, ToolCallActivityInput
from .caches import PayloadCaches
from .digest import extend_digest
from .format import default_idempotency_key, unpack_messages
from .legacy_v02 import whole_request

__all__ = ["remember_answer", "resolve_request", "resolve_tool_call"]


async def resolve_request(
    caches: PayloadCaches, input: ModelRequestActivityInput, workflow_id: str, run_id: str
) -> tuple[nodes.ModelRequestInput, str]:
    """The whole request the workflow means, and the digest of its messages (each message
    hashed once: the check of the rebuilt ones gives it)."""
    histories = caches.histories
    prefix, digest = await histories.resolve_with_digest(workflow_id, run_id, input.history)
    if input.input is not None:
        request, new, digest = whole_request(input.input, digest)
    else:
        rebuilt = unpack_messages(
            input.messages,
            previous=prefix[-1] if prefix else None,
            timestamp=input.timestamp,
            tool_return=lambda call_id: caches.tool_returns.take(workflow_id, call_id),
        )
        through = input.through or ""
        if rebuilt is not None and (whole := extend_digest(digest, rebuilt)).startswith(through):
            new, digest = rebuilt, whole
        else:
            start = len(prefix)
            new, digest = await histories.read_tail(
                workflow_id,
                run_id,
                start,
                start + len(input.messages),
                after=digest,
                through=through,
            )
        last = new[-1] if new else (prefix[-1] if prefix else None)
        request = nodes.ModelRequestInput.model_construct(
            run_id=(last.run_id if last else None) or "",
            conversation_id=(last.conversation_id if last else None) or "",
            run_step=input.run_step,
            timestamp=input.timestamp,
            metadata={},
            messages=[],
            toolset_tools=[],
        )
    update: dict[str, object] = {"messages": [*prefix, *new]}
    if input.toolset_digest is not None:
        tools: list[ToolDefinition] = await caches.tool_definitions.resolve(
            workflow_id, run_id, input.toolset_digest
        )
        update["toolset_tools"] = tools
    return request.model_copy(update=update), digest


def remember_answer(
    caches: PayloadCaches,
    workflow_id: str,
    request: nodes.ModelRequestInput,
    response: ModelResponse,
    digest: str,
    *,
    waits: Callable[[str], bool],
) -> None:
    """The history the next request of this run will name: this one's and its answer; none
    when the answer ends the run (no tool to call but the output tool), nor when it calls a
    tool that `waits` for a person (one that needs approval).

    A run whose output is accepted makes no further request unless it goes on (an output
    retry, a session's next turn), which then reads its history back once; a cache full of
    ended runs' conversations would hold most of a busy worker's objects. Decided here, not
    when `validate_output` accepts the output: that node runs in the workflow itself when it
    is pure (`inline_quick_nodes`), so no activity would ever say the run ended. A run that
    waits for a person may wait for days, its conversation kept in the worker twice (its
    workflow holds it too) until 512 other runs push it out; its next request, once the
    decision comes, reads it back once instead."""
    calls = response.tool_calls
    if all(call.name == OUTPUT_TOOL_NAME for call in calls) or any(waits(c.name) for c in calls):
        caches.histories.forget(workflow_id)
        return
    caches.histories.store(
        workflow_id, [*request.messages, response], extend_digest(digest, [response])
    )


def resolve_tool_call(input: ToolCallActivityInput, workflow_id: str) -> nodes.ToolCallInput:
    """The tool call's input with the idempotency key the workflow left out derived again."""
    request = input.input
    if request.idempotency_key:
        return request
    key = default_idempotency_key(workflow_id, request.call.id)
    return request.model_copy(update={"idempotency_key": key})
