"""May this sender make this decision? The approvers check and, with keys, the signature.

`AgentWorkflow` asks this for every decision that is otherwise valid (the call is pending
and undecided, override arguments validate): the `submit_approval` validator refuses what
it returns, and the `approval` signal handler drops it with a log line.
"""

from __future__ import annotations

from datetime import datetime

from ..engine.approvers import approver_problem
from ..engine.spec import AgentSpec
from .signing import ENV_VAR, ApprovalKeys, signed_problem
from .wire import ApprovalSignal

__all__ = ["decision_problem"]


def decision_problem(
    agent: AgentSpec,
    tool_name: str,
    signal: ApprovalSignal,
    *,
    workflow_id: str,
    keys: ApprovalKeys | None,
    now: datetime,
) -> str | None:
    """Why `signal` may not decide its call of `tool_name`, or None.

    Without `keys` the approver is whoever the decision says it is (anyone who can reach
    Temporal can claim any name); with them, only a signed approver counts.
    """
    if keys is not None:
        problem = signed_problem(keys, workflow_id, signal, now)
        if problem is not None:
            return problem
        if not signal.decided_by:
            return (
                f"the signed decision for tool call {signal.tool_call_id!r} names no approver "
                f"(decided_by); with {ENV_VAR} set every decision must say who made it"
            )
    return approver_problem(
        tool_name, agent.approvers_of(tool_name), signal.decided_by, signal.groups or ()
    )
