"""Finding one recorded boundary for a fork: by index over the chain, by id, or the latest
a run can go on from (not a `run_failed`)."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ...contract.checkpoint import AgentExecutionNode
    from ..executor import TemporalExecutor
    from ..wire import CheckpointLookup, CheckpointQuery
    from .port import RunIdentity

__all__ = ["checkpoint_lookup"]


def checkpoint_lookup(
    executor: TemporalExecutor, query: CheckpointQuery, agent: str, identity: RunIdentity
) -> CheckpointLookup:
    """`checkpoint` is None when this run did not record the boundary asked for;
    `previous_run_id` then names the run of the chain to ask next."""
    first = executor.earlier_checkpoints
    count = executor.recorded_count
    position: int | None
    if query.checkpoint_id is not None:
        position = executor.position_of(query.checkpoint_id)
    elif query.index is not None:
        inside = first <= query.index < first + count
        position = query.index - first if inside else None
    else:
        failed = AgentExecutionNode.RUN_FAILED
        resumable = [i for i, node in enumerate(executor.nodes) if node is not failed]
        position = resumable[-1] if resumable else None
    return CheckpointLookup(
        agent=agent,
        run_id=identity.run_id,
        checkpoint=executor.recorded(position) if position is not None else None,
        index=first + position if position is not None else None,
        first_index=first,
        count=count,
        previous_run_id=identity.continued_run_id,
    )
