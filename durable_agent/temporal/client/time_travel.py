"""Time travel from a run: a fork from one of its boundaries, a retry of it once it failed.

Functions of the run they start from (`SourceRun`: an `AgentRunHandle` is one), starting
the new run on a `Connection`; the handle's `fork` and `retry` call them and wrap the run
they started in a handle of its own.
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol

from temporalio.client import WorkflowExecutionDescription, WorkflowExecutionStatus

from durable_agent import AgentExecutionNode, AgentOverrides, AgentResumeEvidence, ModelSettings

from ..run_errors import AgentRunError, AlreadyStarted
from ..search_attributes import AGENT_NAME
from ..wire import AgentStatusView, AgentWorkflowInput, ResumeFrom
from .calls import RunCalls
from .connection import Connection, RunHandle

__all__ = ["RETRY_DROPPED_FIELDS", "SourceRun", "fork_run", "retry_run"]


class SourceRun(Protocol):
    """What time travel reads of the run it starts from."""

    @property
    def id(self) -> str: ...

    @property
    def run_id(self) -> str | None: ...

    async def describe(self) -> WorkflowExecutionDescription: ...

    async def status(self) -> AgentStatusView: ...

    async def checkpoints(self) -> list[AgentResumeEvidence]: ...


RETRY_DROPPED_FIELDS = frozenset(
    {"agent", "prompt", "message_history", "conversation_id", "continuation", "resume_from"}
)
"""What a retry does not take from the failed run's input: its checkpoint has all that."""


async def fork_run(
    handle: SourceRun,
    connection: Connection,
    at: int | str | None,
    workflow_id: str | None,
    *,
    model: str | None,
    model_settings: ModelSettings | None,
    instructions: str | None,
    **input_fields: Any,
) -> tuple[RunHandle, str]:
    """`AgentRunHandle.fork`: the fork's run and task queue."""
    if isinstance(at, bool) or not isinstance(at, int | str | None):
        raise TypeError(f"at must be a checkpoint index or id, got {at!r}")
    description = await handle.describe()
    agent = description.typed_search_attributes.get(AGENT_NAME) or (await handle.status()).agent
    # The run as it is now, not whichever run holds the id when the fork reads it: a retry
    # may start a new run under the same id before the fork has loaded its checkpoint.
    source = ResumeFrom(
        workflow_id=handle.id,
        run_id=handle.run_id or description.run_id,
        index=at if isinstance(at, int) else None,
        checkpoint_id=at if isinstance(at, str) else None,
    )
    overrides = AgentOverrides(
        model=model, model_settings=model_settings, instructions=instructions
    )
    return await connection.start_run(
        agent,
        "",
        workflow_id=workflow_id or f"{handle.id}-fork-{uuid.uuid4().hex[:6]}",
        task_queue=description.task_queue,
        resume_from=source,
        overrides=None if overrides.empty else overrides,
        **input_fields,
    )


async def retry_run(
    handle: SourceRun, connection: Connection, calls: RunCalls
) -> tuple[RunHandle, str]:
    """`AgentRunHandle.retry` (`calls`: the source run's): the new run and its task queue."""
    description = await handle.describe()
    status = description.status
    if status in (None, WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.COMPLETED):
        state = "still running" if status != WorkflowExecutionStatus.COMPLETED else "completed"
        raise AgentRunError(
            f"run {handle.id!r} is {state}; retry is for a run that failed, was cancelled, "
            f"terminated or timed out (to try again from a boundary: durable-agent fork "
            f"{handle.id} --at N)",
            workflow_id=handle.id,
        )
    await _refuse_retry_without_a_boundary(handle)
    original = await calls.call(
        "history", lambda: _start_input(connection, handle.id, description.run_id)
    )
    fields = original.model_dump(exclude=set(RETRY_DROPPED_FIELDS))
    fields["resume_from"] = ResumeFrom(workflow_id=handle.id, run_id=description.run_id)
    start = connection.start_run
    queue = description.task_queue
    try:
        return await start(original.agent, "", workflow_id=handle.id, task_queue=queue, **fields)
    except AlreadyStarted:
        fresh = f"{handle.id}-retry-{uuid.uuid4().hex[:6]}"
        return await start(original.agent, "", workflow_id=fresh, task_queue=queue, **fields)


async def _refuse_retry_without_a_boundary(handle: SourceRun) -> None:
    """A run that failed before its first resumable boundary (an unknown agent, a bad
    input) has nothing to go on from: a retry would only fail again, hiding why."""
    failed = AgentExecutionNode.RUN_FAILED
    resumable = [c for c in await handle.checkpoints() if c.node is not failed]
    if resumable:
        return
    view = await handle.status()
    why = f" ({view.error})" if view.error else ""
    raise AgentRunError(
        f"run {handle.id!r} failed before its first checkpoint{why}; there is nothing to "
        "retry from: fix the cause and start a new run",
        workflow_id=handle.id,
    )


async def _start_input(connection: Connection, workflow_id: str, run_id: str) -> AgentWorkflowInput:
    """The input run `run_id` was started with (its first history event)."""
    client = connection.client
    run = client.get_workflow_handle(workflow_id, run_id=run_id)
    async for event in run.fetch_history_events(page_size=1):
        payloads = event.workflow_execution_started_event_attributes.input.payloads
        decoded = await client.data_converter.decode(list(payloads), [AgentWorkflowInput])
        workflow_input: AgentWorkflowInput = decoded[0]
        return workflow_input
    raise AgentRunError(f"run {run_id} of {workflow_id!r} has no history", workflow_id=workflow_id)
