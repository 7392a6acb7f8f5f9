"""Listing agent runs from the visibility store (`AgentClient.list`)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel
from temporalio.client import (
    WorkflowExecution,
    WorkflowExecutionStatus,
)

from durable_agent import (
    RunStatus,
)

from ..quota.wire import QUOTA_MEMO, QuotaWaitView
from ..search_attributes import AGENT_NAME, AGENT_STATUS, PENDING_APPROVALS
from ..wire import AWAITING_PROMPT, WORKFLOW_TYPE

__all__ = ["OPEN_STATUSES", "WORKFLOW_TYPE", "ListedRun", "execution_status", "list_query"]

OPEN_STATUSES = frozenset({"starting", "running", "waiting", AWAITING_PROMPT})


class ListedRun(BaseModel):
    """One agent run as the visibility store sees it (what `AgentClient.list` yields)."""

    workflow_id: str
    run_id: str
    agent: str | None
    status: str
    """The run's `AgentStatus` while it runs; once closed, how the execution ended."""
    execution_status: str
    pending_approvals: int
    start_time: datetime
    cost: float | None = None
    """The run's cost in US dollars as of its last status change (its `cost` memo); None
    when nothing it ran was priced."""
    quota_wait: QuotaWaitView | None = None
    """The model quota the run waits for now (its `quota_wait` memo, as the `status`
    query's), None when it waits for none."""


def _quote(value: str) -> str:
    if '"' not in value:
        return f'"{value}"'
    if "'" not in value:
        return f"'{value}'"
    raise ValueError(f"cannot search for a value with both kinds of quotes: {value!r}")


def list_query(
    status: RunStatus | str | None = None,
    agent: str | None = None,
    forked_from: str | None = None,
    *,
    top_level: bool = False,
) -> str:
    """The visibility query `AgentClient.list` sends.

    An open status also requires a running execution: a run that ended without its last
    `AgentStatus` update (terminated, timed out) would otherwise be listed as waiting.
    `forked_from` keeps the forks and retries of that workflow id; `top_level` leaves out
    sub-agents' runs (child workflows)."""
    parts = [f'WorkflowType="{WORKFLOW_TYPE}"']
    if top_level:
        parts.append("ParentWorkflowId IS NULL")
    if status:
        value = _status_value(status)
        parts.append(f"AgentStatus={_quote(value)}")
        if value in OPEN_STATUSES:
            parts.append('ExecutionStatus="Running"')
    if agent:
        parts.append(f"AgentName={_quote(agent)}")
    if forked_from:
        parts.append(f"ForkedFrom={_quote(forked_from)}")
    return " AND ".join(parts)


def _status_value(status: RunStatus | str) -> str:
    value = status.value if isinstance(status, RunStatus) else status
    known = [*(s.value for s in RunStatus), AWAITING_PROMPT]
    if value not in known:
        raise ValueError(f"unknown run status {value!r}; expected one of {', '.join(known)}")
    return value


def execution_status(status: WorkflowExecutionStatus | None) -> str:
    """How the server says an execution stands, in words: `running`, `completed`,
    `failed`, `cancelled` (`RunStatus`'s spelling, not the server's `canceled`),
    `terminated`, `timed_out`, `continued_as_new`."""
    if status is None:
        return "unknown"
    if status is WorkflowExecutionStatus.CANCELED:
        return RunStatus.CANCELLED.value
    return status.name.lower()


def _listed(
    execution: WorkflowExecution,
    cost: float | None = None,
    quota_wait: QuotaWaitView | None = None,
) -> ListedRun:
    attributes = execution.typed_search_attributes
    running = execution.status == WorkflowExecutionStatus.RUNNING
    agent_status = attributes.get(AGENT_STATUS)
    return ListedRun(
        workflow_id=execution.id,
        run_id=execution.run_id,
        agent=attributes.get(AGENT_NAME),
        status=(agent_status or "starting") if running else execution_status(execution.status),
        execution_status=execution_status(execution.status),
        pending_approvals=(attributes.get(PENDING_APPROVALS) or 0) if running else 0,
        start_time=execution.start_time,
        cost=cost,
        quota_wait=quota_wait if running else None,
    )


async def memo_cost(execution: WorkflowExecution) -> float | None:
    """The `cost` memo (see `workflow.costs`), None when absent or unreadable."""
    if "cost" not in execution.raw_info.memo.fields:
        return None
    try:
        value = await execution.memo_value("cost", None)
    except Exception:
        return None
    return float(value) if isinstance(value, int | float) else None


async def memo_quota_wait(execution: WorkflowExecution) -> QuotaWaitView | None:
    """The `quota_wait` memo (see `quota.gate`), None when absent or unreadable."""
    if QUOTA_MEMO not in execution.raw_info.memo.fields:
        return None
    try:
        value = await execution.memo_value(QUOTA_MEMO, None)
        return QuotaWaitView.model_validate(value) if value else None
    except Exception:
        return None


# -- helpers --------------------------------------------------------------------------------
