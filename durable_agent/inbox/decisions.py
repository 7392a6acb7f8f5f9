"""A person's decision in the inbox: what the inbox checks before it sends it, and what
the answer reads as in the browser.

The routes (`app`) say who is asking and render the result; this module says what a
decision means: the run must still wait, the call must be pending and undecided, the
person must be one of its approvers, a denial must give a reason and replaced arguments
must parse. The workflow checks everything again and is the judge; these checks give a
clear message before anything is sent, and refuse a non-approver even on a worker without
approval keys. Each outcome is a message and an HTTP status.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Any, Literal

from starlette.datastructures import FormData

from durable_agent.contract.decisions import denial_problem, read_deferred_response
from durable_agent.engine.approvers import approver_problem
from durable_agent.temporal.client import (
    AgentClient,
    AgentRunError,
    NotAnAgentRun,
    NoWorker,
    Rejected,
    RunClosed,
    RunNotFound,
)
from durable_agent.temporal.wire import PendingApprovalView

from .auth import Identity

__all__ = ["Action", "act", "answer", "http_status", "refusal"]

Action = Literal["approve", "deny", "deferred", "resume"]
"""What a person can do from a run's card."""


async def act(
    agents: AgentClient,
    action: Action,
    workflow_id: str,
    call_id: str,
    form: FormData,
    identity: Identity,
    holder: str | None = None,
) -> tuple[str, int]:
    """Checks what the inbox can check, then sends the update; (message, HTTP status).
    `holder` is the workflow that holds the call (a sub-agent's), part of its address: two
    sub-agents of one run may wait on calls of the same id.

    The workflow checks everything again (and is the judge): these checks are for a
    clear message before anything is sent, and for refusing a non-approver even on a
    worker without approval keys."""
    handle = agents.get(workflow_id)
    if action == "resume":
        await handle.resume(f"resumed by {identity.user} in the inbox")
        return f"run {workflow_id} resumed", 200
    view = await handle.status()
    if view.status != "waiting":
        return f"run {workflow_id} is {view.status}; it is no longer waiting for anyone", 409
    if action == "deferred":
        return await _deliver(handle, view.deferred_calls, call_id, form)
    if holder == workflow_id:
        holder = None  # the run's own call
    matching = _undecided(view.pending_approvals, call_id, holder)
    if len(matching) > 1:
        where = ", ".join(c.workflow_id or workflow_id for c in matching)
        return f"tool call id {call_id!r} is pending in more than one workflow ({where})", 409
    if not matching:
        return await _not_pending(agents, view.pending_approvals, call_id, workflow_id, holder)
    call = matching[0]
    allowed = frozenset(call.approvers) if call.approvers is not None else None
    refused = approver_problem(call.tool_name, allowed, identity.user, identity.groups)
    if refused is not None:
        return f"you may not decide this call: {refused}", 403
    groups = list(identity.groups)
    note = str(form.get("note") or "").strip() or None
    if action == "deny":
        reason = str(form.get("reason") or "").strip()
        if problem := denial_problem(reason):
            return problem, 400
        await handle.deny(
            call_id, reason, by=identity.user, note=note, groups=groups, holder=call.workflow_id
        )
        return f"denied {call.tool_name} ({call_id}) as {identity.user}: {reason}", 200
    override, problem = _override(call, form.get("arguments"))
    if problem is not None:
        return problem, 400
    accepted = await handle.approve(
        call_id,
        by=identity.user,
        override_arguments=override,
        note=note,
        groups=groups,
        holder=call.workflow_id,
    )
    changed = " with your arguments" if override is not None else ""
    return (
        f"approved {call.tool_name} ({call_id}){changed} as {identity.user}; the run is "
        f"{accepted.status}",
        200,
    )


async def answer(acting: Awaitable[tuple[str, int]]) -> tuple[str, int]:
    """What the inbox tells a person who acted: `act`'s answer, or, when the run or Temporal
    refused the call, why and as which HTTP status. The losing side of a race may learn it
    either way: from the run's view (the call is decided already) or, when the view was read
    before the other side's decision reached it, from the workflow's refusal; both are 409."""
    try:
        return await acting
    except AgentRunError as error:
        return refusal(error), http_status(error)


async def _deliver(
    handle: Any, calls: list[PendingApprovalView], call_id: str, form: FormData
) -> tuple[str, int]:
    found = _undecided(calls, call_id, None)
    call = found[0] if found else None
    if call is None:
        if not any(c.tool_call_id == call_id for c in calls):
            return f"run {handle.id} has no deferred call {call_id!r}", 404
        return f"deferred call {call_id!r} no longer waits for a result", 409
    try:
        response = read_deferred_response(str(form.get("response") or ""))
    except ValueError as error:
        return str(error), 400
    status: Literal["success", "error"] = "error" if form.get("status") == "error" else "success"
    await handle.deferred(call_id, response, status)
    return f"result for {call.tool_name} ({call_id}) delivered ({status})", 200


def http_status(error: AgentRunError) -> int:
    """What a client error means for the browser: the run is not there (404), the workflow
    refused (409), or Temporal could not be asked (502, 504)."""
    if isinstance(error, RunNotFound | NotAnAgentRun):
        return 404
    if isinstance(error, Rejected | RunClosed):
        return 409
    if isinstance(error, NoWorker):
        return 504
    return 502


async def _not_pending(
    agents: AgentClient,
    calls: list[PendingApprovalView],
    call_id: str,
    workflow_id: str,
    holder: str | None,
) -> tuple[str, int]:
    """Why `call_id` cannot be decided: unknown in this run (or in the sub-agent's workflow
    that held it), or already decided (or expired): the losing side of a race."""
    listed = any(c.tool_call_id == call_id and c.workflow_id == holder for c in calls)
    if not listed and holder is not None:
        # A sub-agent's call leaves its lead's list once decided: ask the holder.
        try:
            held = await agents.get(holder).status()
        except RunNotFound:
            return f"run {workflow_id} has no sub-agent workflow {holder!r}", 404
        listed = held.status != "waiting" or any(
            c.tool_call_id == call_id for c in held.pending_approvals
        )
    if not listed:
        return f"run {workflow_id} has no pending call {call_id!r}", 404
    return (
        f"tool call {call_id!r} of run {workflow_id} is no longer waiting for a decision "
        "(someone decided it, or it expired)",
        409,
    )


def _undecided(
    calls: list[PendingApprovalView], call_id: str, holder: str | None
) -> list[PendingApprovalView]:
    """The undecided calls of that id (of `holder`'s workflow, when named)."""
    return [
        c
        for c in calls
        if c.tool_call_id == call_id
        and not c.decided
        and (holder is None or c.workflow_id == holder)
    ]


def _override(call: PendingApprovalView, raw: object) -> tuple[dict[str, Any] | None, str | None]:
    """The override arguments of an approval form: None when unchanged."""
    text = str(raw or "").strip()
    if not text:
        return None, None
    try:
        arguments = json.loads(text)
    except json.JSONDecodeError as error:
        return None, f"the arguments are not valid JSON: {error.msg} (line {error.lineno})"
    if arguments == call.arguments:
        return None, None
    if not call.overridable:
        return None, f"tool {call.tool_name!r} does not take replaced arguments"
    if not isinstance(arguments, dict):
        return None, f"the arguments must be a JSON object, not {type(arguments).__name__}"
    return arguments, None


def refusal(error: AgentRunError) -> str:
    if isinstance(error, Rejected):
        return f"the run refused it: {error.message}"
    if isinstance(error, RunClosed):
        return f"{error.message}; nothing was changed"
    return error.message
