"""What the inbox shows: the runs waiting on a human, read through `AgentClient`.

Everything comes from the workflows themselves (the `AgentStatus` search attribute for the
list, the `status` query for each run's pending calls, the history queries for the
conversation), so the page never disagrees with the CLI or the Web UI.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from durable_agent.contract.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from durable_agent.engine.approvers import approver_problem
from durable_agent.environments.workspace import default_store_url
from durable_agent.temporal.client import AgentClient, AgentRunError, RunClosed, RunNotFound
from durable_agent.temporal.wire import AgentStatusView, PendingApprovalView

from .auth import Identity
from .workspace import WorkspaceChanges, workspace_changes

__all__ = [
    "CallCard",
    "Flash",
    "MessageLine",
    "RunCard",
    "dom_id",
    "load_run",
    "load_runs",
    "pretty_json",
    "relative",
    "version_of",
]

Role = Literal["user", "assistant", "call", "tool", "error", "retry", "system"]
CONVERSATION_TEXT_LIMIT = 2000
"""Characters of one message part shown; the rest is elided (the Web UI has it all)."""


@dataclass(frozen=True)
class Flash:
    """The outcome of the last action on a card, shown on it."""

    text: str
    ok: bool


@dataclass(frozen=True)
class MessageLine:
    role: Role
    label: str
    text: str


@dataclass
class CallCard:
    """One pending approval or deferred call, and what this person may do with it."""

    workflow_id: str
    call: PendingApprovalView
    kind: Literal["approval", "deferred"]
    refusal: str | None
    """Why this person may not decide it (None: they may)."""
    conversation: list[MessageLine] = field(default_factory=list)
    """For a sub-agent's call: the conversation of the agent that made it (the card's own
    conversation is the top-level run's)."""

    @property
    def arguments(self) -> str:
        return pretty_json(self.call.arguments)

    @property
    def can_decide(self) -> bool:
        return self.refusal is None


@dataclass
class RunCard:
    workflow_id: str
    agent: str
    status: str
    suspend_reason: str | None
    approvals: list[CallCard]
    deferred: list[CallCard]
    conversation: list[MessageLine]
    run_step: int
    error: str | None = None
    cost: float | None = None
    """What the run has cost so far in US dollars (`Usage.cost`), None when unpriced."""
    flash: Flash | None = None
    problem: str | None = None
    """Why the run's details could not be read (e.g. no worker answered)."""
    workspace: WorkspaceChanges | None = None
    """The files the run changed since it started (a run with a workspace)."""
    fingerprint: dict[str, Any] = field(default_factory=dict)

    @property
    def dom_id(self) -> str:
        return dom_id(self.workflow_id)


def dom_id(workflow_id: str) -> str:
    """A stable element id for a run's card (workflow ids may hold any character)."""
    return "run-" + hashlib.sha256(workflow_id.encode()).hexdigest()[:16]


def pretty_json(value: Any) -> str:
    try:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _clip(text: str) -> str:
    if len(text) <= CONVERSATION_TEXT_LIMIT:
        return text
    return text[:CONVERSATION_TEXT_LIMIT] + f"… ({len(text) - CONVERSATION_TEXT_LIMIT} more)"


def _content(value: Any) -> str:
    return _clip(value if isinstance(value, str) else pretty_json(value))


def conversation_lines(messages: list[ModelMessage]) -> list[MessageLine]:
    """The conversation as a person reads it; instructions are left out (they repeat)."""
    lines: list[MessageLine] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    lines.append(MessageLine("user", "user", _clip(part.text)))
                elif isinstance(part, SystemPromptPart):
                    lines.append(MessageLine("system", "system", _clip(part.content)))
                elif isinstance(part, ToolReturnPart):
                    role: Role = "error" if part.is_error else "tool"
                    lines.append(
                        MessageLine(
                            role, f"{part.name} → {part.tool_call_id}", _content(part.content)
                        )
                    )
                elif isinstance(part, RetryPromptPart):
                    lines.append(MessageLine("retry", "retry", _clip(part.content)))
        elif isinstance(message, ModelResponse):
            for response_part in message.parts:
                if isinstance(response_part, TextPart):
                    lines.append(MessageLine("assistant", "assistant", _clip(response_part.text)))
                elif isinstance(response_part, ToolCallPart):
                    lines.append(
                        MessageLine(
                            "call",
                            f"calls {response_part.name} · {response_part.id}",
                            _content(response_part.arguments),
                        )
                    )
    return lines


def _card_calls(
    workflow_id: str, view: AgentStatusView, identity: Identity
) -> tuple[list[CallCard], list[CallCard]]:
    approvals = [
        CallCard(
            workflow_id,
            call,
            "approval",
            approver_problem(
                call.tool_name,
                frozenset(call.approvers) if call.approvers is not None else None,
                identity.user,
                identity.groups,
            ),
        )
        for call in view.pending_approvals
        if not call.decided
    ]
    deferred = [
        CallCard(workflow_id, call, "deferred", None)
        for call in view.deferred_calls
        if not call.decided
    ]
    return approvals, deferred


_START_REFS: dict[tuple[str, str | None], str | None] = {}
"""Each run's tree at its first checkpoint, by (workflow id, agent run id): it never changes."""
_START_REFS_KEPT = 1024


async def _start_ref(handle: Any, run_id: str | None) -> str | None:
    key = (handle.id, run_id)
    if key not in _START_REFS:
        chain = await handle.checkpoint_chain()
        refs = [c.environment_ref for c in chain.checkpoints if c.environment_ref]
        if len(_START_REFS) >= _START_REFS_KEPT:
            _START_REFS.clear()
        _START_REFS[key] = refs[0] if refs else None
    return _START_REFS[key]


async def _workspace(
    handle: Any, view: AgentStatusView, store: str | None
) -> WorkspaceChanges | None:
    """The run's changed files since it started, when it has a workspace."""
    head = view.environment_ref
    if head is None or not head.startswith("workspace:"):
        return None
    try:
        base = await _start_ref(handle, view.run_id)
    except AgentRunError as error:
        return WorkspaceChanges(None, head, problem=f"its checkpoints: {error.message}")
    url = store or default_store_url()
    return await asyncio.to_thread(workspace_changes, url, base, head)


async def load_run(
    agents: AgentClient,
    workflow_id: str,
    identity: Identity,
    *,
    conversation: int = 30,
    flash: Flash | None = None,
    workspace_store: str | None = None,
) -> RunCard | None:
    """The card of one run; None when it is gone or no longer waits for anyone.
    `workspace_store`: where its workspace's files are (None: as a worker's default)."""
    handle = agents.get(workflow_id)
    try:
        view = await handle.status()
    except (RunNotFound, RunClosed):
        return None
    except AgentRunError as error:
        return RunCard(
            workflow_id, "?", "unknown", None, [], [], [], 0, flash=flash, problem=error.message
        )
    approvals, deferred = _card_calls(workflow_id, view, identity)
    if view.status != "waiting" and flash is None:
        return None
    lines: list[MessageLine] = []
    problem = None
    try:
        lines = conversation_lines(await handle.conversation(last=conversation))
        for item in approvals:
            held_by = item.call.workflow_id
            if held_by and held_by != workflow_id:
                held = await agents.get(held_by).conversation(last=conversation)
                item.conversation = conversation_lines(held)
    except AgentRunError as error:
        problem = f"the conversation could not be read: {error.message}"
    changes = await _workspace(handle, view, workspace_store)
    card = RunCard(
        workflow_id=workflow_id,
        agent=view.agent,
        status=view.status,
        suspend_reason=view.suspend_reason,
        approvals=approvals,
        deferred=deferred,
        conversation=lines,
        run_step=view.run_step,
        error=view.error,
        cost=view.usage.cost,
        flash=flash,
        problem=problem,
        workspace=changes,
    )
    card.fingerprint = {
        "id": workflow_id,
        "status": view.status,
        "suspend": view.suspend_reason,
        "approvals": [(c.call.tool_call_id, c.can_decide) for c in approvals],
        "deferred": [c.call.tool_call_id for c in deferred],
        "messages": len(lines),
        "problem": problem,
        "workspace": view.environment_ref,
    }
    return card


async def load_runs(
    agents: AgentClient,
    identity: Identity,
    *,
    limit: int = 50,
    conversation: int = 30,
    agent_names: tuple[str, ...] = (),
    workspace_store: str | None = None,
) -> list[RunCard]:
    """Every run whose `AgentStatus` is waiting (of `agent_names` only, when given), newest
    first, read concurrently.

    Visibility lags the runs by a second or so; a run that has moved on since is left out
    by its own `status` answer."""
    listed = []
    for name in agent_names or (None,):
        listed.extend([run async for run in agents.list(status="waiting", agent=name, limit=limit)])
    listed.sort(key=lambda run: run.start_time, reverse=True)
    listed = listed[:limit]
    cards = await asyncio.gather(
        *(
            load_run(
                agents,
                run.workflow_id,
                identity,
                conversation=conversation,
                workspace_store=workspace_store,
            )
            for run in listed
        )
    )
    return [card for card in cards if card is not None]


def version_of(cards: list[RunCard], identity: Identity) -> str:
    """Changes exactly when what the list shows changes, so a poll that finds the same
    version leaves the page (and anything being typed into it) alone."""
    body = json.dumps(
        [identity.user, sorted(identity.groups), [card.fingerprint for card in cards]],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(body.encode()).hexdigest()[:20]


def relative(moment: datetime | None, now: datetime | None = None) -> str:
    """'4 min ago' / 'in 2 h' for a person; the page refreshes it in the browser."""
    if moment is None:
        return ""
    now = now or datetime.now(UTC)
    seconds = (moment - now).total_seconds()
    future = seconds > 0
    seconds = abs(seconds)
    if seconds < 60:
        amount = f"{int(seconds)} s"
    elif seconds < 3600:
        amount = f"{int(seconds // 60)} min"
    elif seconds < 86400 * 2:
        amount = f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"
    else:
        amount = f"{int(seconds // 86400)} days"
    return f"in {amount}" if future else f"{amount} ago"
