"""Reading another run's checkpoint for a fork: the `load_checkpoint` activity.

A fork (`AgentWorkflowInput.resume_from`) starts from a boundary some other run recorded.
Reading it is I/O (queries to that run, and to the runs before it in its continue-as-new
chain), so it is an activity; the workflow then resumes from the checkpoint exactly as a
continued-as-new run does. Every way the source can be wrong (no such workflow, not an
agent run, another agent's run, an index past its end, an unknown checkpoint id, a run
retention has deleted) fails the activity for good with an error naming the bad value, so
the fork fails at once and nothing runs.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity
from temporalio.client import Client, WorkflowHandle, WorkflowQueryFailedError
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from durable_agent import AgentError, AgentExecutionNode

from .runner import NodeActivityFailed
from .wire import (
    CheckpointLookup,
    CheckpointQuery,
    ForkOrigin,
    LoadCheckpointInput,
    LoadedCheckpoint,
    ResumeFrom,
)

__all__ = [
    "FORK_ERRORS",
    "LOAD_RETRIES",
    "LOAD_TIMEOUT",
    "QUERY_TIMEOUT",
    "find_checkpoint",
    "fork_failure",
    "load_checkpoint",
]

QUERY_TIMEOUT = timedelta(seconds=10)
"""How long one query to the source waits for a worker; the activity's retries go on."""
FORK_ERRORS = (
    "source_not_found",
    "source_run_deleted",
    "not_an_agent_run",
    "agent_mismatch",
    "checkpoint_not_found",
    "index_out_of_range",
    "checkpoint_not_resumable",
)
"""The error types of a fork whose source is wrong: none of them is retried."""
LOAD_TIMEOUT = timedelta(seconds=60)
LOAD_RETRIES = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=5,
    non_retryable_error_types=list(FORK_ERRORS),
)
"""A source whose worker is down or busy is asked again a few times, then the fork fails."""


def _bad(kind: str, message: str) -> ApplicationError:
    return ApplicationError(message, type=kind, non_retryable=True)


@activity.defn(name="load_checkpoint")
async def load_checkpoint(input: LoadCheckpointInput) -> LoadedCheckpoint:
    """The checkpoint `input.resume_from` names, from whichever run of the chain holds it."""
    return await find_checkpoint(activity.client(), input.agent, input.resume_from)


async def find_checkpoint(client: Client, agent: str, source: ResumeFrom) -> LoadedCheckpoint:
    query = CheckpointQuery(index=source.index, checkpoint_id=source.checkpoint_id)
    handle = client.get_workflow_handle(source.workflow_id, run_id=source.run_id)
    await _check_source(handle, source, client.namespace)
    searched: list[str] = []
    first: CheckpointLookup | None = None
    while True:
        lookup = await _lookup(handle, query)
        searched.append(lookup.run_id)
        first = first or lookup
        if lookup.agent != agent:
            raise _bad(
                "agent_mismatch",
                f"workflow {source.workflow_id!r} is a run of agent {lookup.agent!r}, not "
                f"{agent!r}: a fork runs the agent of its source (start it with agent "
                f"{lookup.agent!r})",
            )
        if lookup.checkpoint is not None and lookup.index is not None:
            return _loaded(source, lookup)
        earlier = source.index is None or source.index < lookup.first_index
        if not earlier or lookup.previous_run_id is None:
            raise _missing(source, first, searched)
        handle = client.get_workflow_handle(source.workflow_id, run_id=lookup.previous_run_id)
        try:
            await handle.describe(rpc_timeout=QUERY_TIMEOUT)
        except RPCError as error:
            if error.status != RPCStatusCode.NOT_FOUND:
                raise
            held = f"checkpoint {_named(source)}" if source.index is not None else "it"
            raise _bad(
                "source_run_deleted",
                f"{held} is in run {lookup.previous_run_id} of workflow "
                f"{source.workflow_id!r}, an earlier run of its continue-as-new chain that "
                "the namespace's retention has deleted; fork from a later checkpoint (index "
                f"{lookup.first_index} or above)",
            ) from None


async def _check_source(
    handle: WorkflowHandle[object, object], source: ResumeFrom, namespace: str
) -> None:
    try:
        description = await handle.describe(rpc_timeout=QUERY_TIMEOUT)
    except RPCError as error:
        if error.status != RPCStatusCode.NOT_FOUND:
            raise
        what = f"run {source.run_id} of workflow" if source.run_id else "workflow"
        raise _bad(
            "source_not_found",
            f"no {what} {source.workflow_id!r} to fork in namespace {namespace!r}",
        ) from None
    if description.workflow_type != "AgentWorkflow":
        raise _bad(
            "not_an_agent_run",
            f"workflow {source.workflow_id!r} is not an agent run (its type is "
            f"{description.workflow_type!r}); only AgentWorkflow runs have checkpoints",
        )


async def _lookup(
    handle: WorkflowHandle[object, object], query: CheckpointQuery
) -> CheckpointLookup:
    try:
        lookup: CheckpointLookup = await handle.query(
            "checkpoint_at", query, result_type=CheckpointLookup, rpc_timeout=QUERY_TIMEOUT
        )
    except WorkflowQueryFailedError as error:
        raise _bad(
            "not_an_agent_run",
            f"workflow {handle.id!r} cannot list its checkpoints ({error.message}); is it a "
            "run of this release's AgentWorkflow?",
        ) from None
    except RPCError as error:
        if error.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
            # Retried: the source's worker may be starting, or busy.
            raise ApplicationError(
                f"no worker answered the checkpoint_at query of workflow {handle.id!r} within "
                f"{QUERY_TIMEOUT.total_seconds():g}s; is a worker running on its task queue?",
                type="no_worker",
            ) from None
        raise
    return lookup


def _loaded(source: ResumeFrom, lookup: CheckpointLookup) -> LoadedCheckpoint:
    checkpoint = lookup.checkpoint
    assert checkpoint is not None
    assert lookup.index is not None
    if checkpoint.node is AgentExecutionNode.RUN_FAILED:
        raise _bad(
            "checkpoint_not_resumable",
            f"checkpoint #{lookup.index} ({checkpoint.checkpoint_id}) of workflow "
            f"{source.workflow_id!r} records the run's failure; fork from #{lookup.index - 1}, "
            "the boundary before it",
        )
    if checkpoint.state.history_offset:
        raise _bad(
            "checkpoint_not_resumable",
            f"checkpoint #{lookup.index} of workflow {source.workflow_id!r} belongs to a run "
            "started by release 0.1, which left its earlier messages in other runs; it cannot "
            "be forked",
        )
    origin = ForkOrigin(
        workflow_id=source.workflow_id,
        run_id=lookup.run_id,
        index=lookup.index,
        checkpoint_id=checkpoint.checkpoint_id,
        node=checkpoint.node,
        run_step=checkpoint.run_step,
    )
    return LoadedCheckpoint(checkpoint=checkpoint, origin=origin)


def _named(source: ResumeFrom) -> str:
    return f"#{source.index}" if source.index is not None else repr(source.checkpoint_id)


def _missing(
    source: ResumeFrom, latest: CheckpointLookup | None, searched: list[str]
) -> ApplicationError:
    """The error for a boundary no run of the chain holds."""
    total = latest.first_index + latest.count if latest is not None else 0
    name = source.workflow_id
    if source.index is not None:
        last = f"0 to {total - 1}" if total else "none yet"
        return _bad(
            "index_out_of_range",
            f"checkpoint index {source.index} is out of range for workflow {name!r}: it has "
            f"{total} checkpoint(s) so far (indexes {last})",
        )
    if source.checkpoint_id is not None:
        runs = ", ".join(searched)
        return _bad(
            "checkpoint_not_found",
            f"workflow {name!r} has no checkpoint with id {source.checkpoint_id!r} (searched "
            f"run(s) {runs}); `durable-agent checkpoints {name}` lists them",
        )
    return _bad(
        "checkpoint_not_found",
        f"workflow {name!r} has recorded no checkpoint a run can go on from yet",
    )


def fork_failure(error: ActivityError) -> AgentError:
    """A `load_checkpoint` that failed for good, as the error the fork fails with (the
    activity's own type and message: `index_out_of_range: ...`)."""
    cause = error.cause
    if isinstance(cause, ApplicationError):
        return NodeActivityFailed(
            cause.type or "load_failed", cause.message, node="load_checkpoint"
        )
    reason = str(cause) if cause is not None else str(error)
    return NodeActivityFailed("load_failed", reason, node="load_checkpoint")
