"""The workflow-side node runner: each working node becomes an activity.

What each activity input leaves out (model requests send only the messages added since the
previous request, plus a digest of the prefix the activity should already hold) is the
packer's business (`compaction.packer`): that keeps each step's history cost constant
instead of growing with the conversation.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, RootModel
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, RetryState

from durable_agent import (
    AgentError,
    AgentOverrides,
    ModelMessage,
    ModelRequest,
    ModelResponse,
)
from durable_agent.contract.environment import EnvironmentChange
from durable_agent.contract.toolsets import ToolsetListing
from durable_agent.engine import nodes
from durable_agent.engine.ids import uuid4_text
from durable_agent.engine.node_io import (
    ListToolsInput,
    ModelRequestInput,
    OutputOutcome,
    PrepareModelRequestInput,
    ToolCallInput,
    ToolCallOutcome,
    ValidateOutputInput,
    WorkspaceMergeInput,
)
from durable_agent.engine.quotas import ModelQuota, estimate_tokens, model_key
from durable_agent.engine.spec import AgentSpec
from durable_agent.engine.subagents import SubagentCall
from durable_agent.models.base import DeltaSink, Model
from durable_agent.models.fallback import FallbackModel, model_label

from .compaction.digest import EMPTY_DIGEST
from .compaction.packer import RequestPacker
from .placement import NodePlacement
from .quota.gate import QuotaGate
from .quota.wire import QuotaTicket, keeper_id
from .registry import AgentRegistration, LocalNode
from .roles import Role, role_queue
from .wire import (
    ListToolsActivityInput,
    ModelRequestActivityInput,
    PrepareActivityInput,
    ValidateOutputActivityInput,
    WorkspaceMergeActivityInput,
)

__all__ = [
    "CANCEL_PATCH",
    "ActivityNodeRunner",
    "NodeActivityFailed",
    "SubagentCaller",
    "WorkflowIdSource",
]

SubagentCaller = Callable[[SubagentCall], Awaitable[ToolCallOutcome]]
"""Runs one sub-agent call as a child workflow (`workflow.subagents.SubagentRuns.call`)."""


class WorkflowIdSource:
    """Replay-safe ids and time."""

    def uuid4(self) -> uuid.UUID:
        return workflow.uuid4()

    def uuid4_text(self) -> str:
        """`str(workflow.uuid4())`: the same random bits, so the same ids on replay."""
        return uuid4_text(workflow.random().getrandbits(128))

    def now(self) -> datetime:
        return workflow.now()


class NodeActivityFailed(AgentError):
    """An activity failed for good; `kind` is the error type the activity reported."""

    def __init__(self, kind: str, message: str, *, node: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.node = node


FALLBACK_PATCH = "durable-agent-fallback-model"
"""Marks the histories in which a `FallbackModel` moved on to its next member: a release
that never scheduled a second member's activity replays them as it recorded them."""


def _falls_back(error: ActivityError) -> bool:
    """Whether a member's activity failed in a way the next model may fix: after its retry
    policy gave up on errors a retry could have fixed (429, 5xx, lost connections,
    timeouts), not for a non-retryable error (the request itself is bad) or a cancel."""
    cause = error.cause
    if isinstance(cause, CancelledError):
        return False
    if isinstance(cause, ApplicationError) and cause.non_retryable:
        return False
    return error.retry_state != RetryState.NON_RETRYABLE_FAILURE


def _unwrap(error: ActivityError, node: str) -> NodeActivityFailed:
    cause = error.cause
    if isinstance(cause, ApplicationError):
        return NodeActivityFailed(cause.type or "ApplicationError", cause.message, node=node)
    if isinstance(cause, CancelledError):
        return NodeActivityFailed("cancelled", f"{node} activity was cancelled", node=node)
    reason = str(cause) if cause is not None else str(error)
    return NodeActivityFailed(type(cause).__name__ if cause else "ActivityError", reason, node=node)


async def _execute(
    activity: str,
    arg: BaseModel,
    result_type: Any,
    *,
    summary: str,
    options: dict[str, Any],
    node: str,
    local: bool = False,
) -> Any:
    """Schedules one node activity (or local activity); a final failure becomes
    `NodeActivityFailed`."""
    try:
        if local:
            return await workflow.execute_local_activity(
                activity, arg, result_type=result_type, summary=summary, **options
            )
        return await workflow.execute_activity(
            activity, arg, result_type=result_type, summary=summary, **options
        )
    except ActivityError as error:
        if _cancelled_with_run(error):
            # The run is being cancelled and its activity with it: the run ends cancelled
            # (runs recorded before ended failed).
            raise asyncio.CancelledError(f"{node} activity was cancelled") from error
        raise _unwrap(error, node) from error


def _with_ticket(
    packed: ModelRequestActivityInput, ticket: QuotaTicket | None
) -> ModelRequestActivityInput:
    return packed if ticket is None else packed.model_copy(update={"quota": ticket})


CANCEL_PATCH = "durable-agent.cancelled-mid-node"
"""Marks a run cancelled while it awaited an activity or a sub-agent: it ends cancelled,
with no model request after the cancellation (runs recorded before ended failed, or handed
their model a sub-agent's cancellation as a tool error and went on)."""


def _cancelled_with_run(error: ActivityError) -> bool:
    cancelled = isinstance(error.cause, CancelledError)
    return (
        cancelled and workflow.cancellation_reason() is not None and workflow.patched(CANCEL_PATCH)
    )


class _OutputOutcomeResult(RootModel[OutputOutcome]):
    """`OutputOutcome` read as a model. The SDK builds a type adapter per result type per
    run (each run has a converter of its own): for a model that reuses the class's
    validator, for a bare union or dict it builds a schema every time. Same JSON."""


class _ToolOutcomeResult(RootModel[dict[str, Any]]):
    """The tool activity's compact outcome read as a model, for the same reason."""


class ActivityNodeRunner:
    """`history_offset`/`history_digest` describe messages held by earlier runs of the
    workflow (after continue-as-new); the activity cache is assumed to hold them."""

    def __init__(
        self,
        registration: AgentRegistration,
        agent: AgentSpec,
        *,
        subagents: SubagentCaller | None = None,
        quota_gate: QuotaGate | None = None,
        quotas: Mapping[str, ModelQuota] | None = None,
        role_split: bool = False,
        history_offset: int = 0,
        history_digest: str = EMPTY_DIGEST,
        cached: int | None = None,
        overrides: AgentOverrides | None = None,
    ) -> None:
        """`agent` is the run's agent: the registered one with the run's `overrides` (a
        fork's model, settings, instructions), which also go to the activities that need
        them (`prepare_model_request` and `model_request`). `subagents` starts a sub-agent
        call's child workflow; model requests wait at `quota_gate` for the grant of their
        key's quota among this task queue's `quotas`; `role_split`: model and tool
        activities go to the role workers' queues (the last two from the worker's
        `Hosting`). `cached`: how many of the run's first messages the activity cache may
        hold already (a continued run's carried conversation, cached by the run before
        it)."""
        self.registration = registration
        self.agent = agent
        self.overrides = overrides if overrides is not None and not overrides.empty else None
        self.name = registration.agent.name
        self.config = registration.activities
        self.subagents = subagents
        self.quota_gate = quota_gate
        self.quotas: Mapping[str, ModelQuota] = quotas if quotas is not None else {}
        self.role_split = role_split
        self.packer = RequestPacker(
            history_offset=history_offset, history_digest=history_digest, cached=cached
        )
        self._chain: tuple[Model, ...] | None = None
        self._limited: tuple[str, ModelQuota] | tuple[()] | None = None
        self.placement = NodePlacement(agent, self.config)

    async def subagent_call(self, call: SubagentCall) -> ToolCallOutcome:
        """A child workflow per call (`workflow.subagents`), started by the workflow's
        `subagents`."""
        assert self.subagents is not None, "the workflow gives the runner its subagents"
        return await self.subagents(call)

    def digest_of(self, messages: list[ModelMessage]) -> str:
        """The digest of the whole conversation so far (for continue-as-new)."""
        return self.packer.digest_of(messages)

    async def _quick(
        self, node: LocalNode, arg: BaseModel, result_type: Any, *, summary: str
    ) -> Any:
        """A quick node, as this run runs it: a local activity or an activity."""
        local = self.placement.local(node)
        options = self.config.local_options(node) if local else self.config.options(node)
        return await _execute(
            node, arg, result_type, summary=summary, options=options, node=node, local=local
        )

    async def prepare_model_request(self, input: PrepareModelRequestInput) -> ModelRequest:
        if self.placement.inline("prepare_model_request"):
            return await nodes.prepare_model_request(self.agent, input)
        request: ModelRequest = await self._quick(
            "prepare_model_request",
            PrepareActivityInput(agent=self.name, input=input, overrides=self.overrides),
            ModelRequest,
            summary=f"prepare_model_request · step {input.run_step}",
        )
        return request

    async def model_request(
        self, input: ModelRequestInput, deltas: DeltaSink | None = None
    ) -> ModelResponse:
        """With `deltas` the activity streams: it signals batches of deltas to this
        workflow (`model_deltas`), which publishes them; `deltas` itself is not called.

        When this worker's task queue has a quota for the model's key, the request waits
        for its grant first (`quota_gate`) and gives the provider's token count back."""
        packed = self.packer.model_request(
            self.name, input, overrides=self.overrides, stream=deltas is not None
        )
        summary = f"model_request · step {input.run_step + 1}"
        options = self._routed(self.config.options("model_request"), "models")
        chain = self._fallback_chain()
        if chain:
            response = await self._fallback_request(packed, input, chain, summary, options)
        else:
            response = await self._within_quota(
                self._quota(),
                input,
                lambda ticket: _execute(
                    "model_request",
                    _with_ticket(packed, ticket),
                    ModelResponse,
                    summary=summary,
                    options=options,
                    node="model_request",
                ),
            )
        return self.packer.answered(input, response)

    async def _within_quota(
        self,
        limited: tuple[str, ModelQuota] | None,
        input: ModelRequestInput,
        request: Callable[[QuotaTicket | None], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        """`request(ticket)` once the key's grant came (at once without a quota), then the
        grant given back with the provider's token count (none when the request failed).
        The ticket lets the activity tell the keeper when the request goes out."""
        if limited is None or self.quota_gate is None:
            return await request(None)
        key, quota = limited
        grant = await self.quota_gate.acquire(key, quota, estimate_tokens(input.messages))
        if grant is None:
            return await request(None)
        ask = grant.ask_id
        try:
            ticket = QuotaTicket(
                keeper=keeper_id(workflow.info().task_queue, key),
                ask_id=ask,
                not_before=grant.not_before,
            )
            response = await request(ticket)
        except BaseException:
            self.quota_gate.give_back(key, ask)
            raise
        try:
            await self.quota_gate.release(key, ask, response.usage.total_tokens or None)
        except BaseException:  # cancelled while telling: the grant still goes back
            self.quota_gate.give_back(key, ask)
            raise
        return response

    def _routed(self, options: dict[str, Any], role: Role) -> dict[str, Any]:
        """On a queue served by role workers, model and tool activities go to theirs (unless
        the agent's activity options name a queue)."""
        if self.role_split and "task_queue" not in options:
            return {**options, "task_queue": role_queue(workflow.info().task_queue, role)}
        return options

    def _quota(self) -> tuple[str, ModelQuota] | None:
        """The run's model key and its quota on this task queue, if it has one."""
        if self._limited is None:
            self._limited = self._quota_of(self.agent.model)
        return self._limited or None

    def _quota_of(self, model: Model) -> tuple[str, ModelQuota] | tuple[()]:
        key = model_key(model)
        quota = self.quotas.get(key) if key is not None else None
        return (key, quota) if key is not None and quota is not None else ()

    async def _fallback_request(
        self,
        packed: ModelRequestActivityInput,
        input: ModelRequestInput,
        chain: tuple[Model, ...],
        summary: str,
        options: dict[str, Any],
    ) -> ModelResponse:
        for index, member in enumerate(chain):
            # One activity per member, each with the node's retry policy: every attempt is
            # in history, and a member that answered is never asked again.
            name = model_label(member)

            def ask(
                ticket: QuotaTicket | None, index: int = index, name: str = name
            ) -> Awaitable[ModelResponse]:
                return workflow.execute_activity(
                    "model_request",
                    _with_ticket(packed.model_copy(update={"model_index": index}), ticket),
                    result_type=ModelResponse,
                    summary=f"{summary} · {name}",
                    **options,
                )

            # Each member is limited under its own key, as that model is in any other run
            # (the chain's key, `provider:fallback:a,b`, matches no quota: fallback runs
            # recorded before this asked no keeper, carry no `QUOTA_PATCH` marker, and
            # replay as they ran).
            try:
                return await self._within_quota(self._quota_of(member) or None, input, ask)
            except ActivityError as error:
                if (
                    index + 1 < len(chain)
                    and _falls_back(error)
                    and workflow.patched(FALLBACK_PATCH)
                ):
                    workflow.logger.warning(
                        "model %s failed for good (%s); %s answers instead",
                        name,
                        error.cause or error,
                        chain[index + 1].model_name,
                    )
                    continue
                raise _unwrap(error, "model_request") from error
        raise AssertionError("the last member of a fallback chain answers or raises")

    def _fallback_chain(self) -> tuple[Model, ...]:
        """The members of the run's `FallbackModel`, if its model is one (else empty)."""
        if self._chain is None:
            model = self.agent.model
            self._chain = model.models if isinstance(model, FallbackModel) else ()
        return self._chain

    async def list_tools(self, input: ListToolsInput) -> ToolsetListing:
        kind = self._toolset_kind(input.toolset)
        listing: ToolsetListing = await _execute(
            "list_tools",
            ListToolsActivityInput(agent=self.name, input=input),
            ToolsetListing,
            summary=f"list_tools · {kind} {input.toolset}",
            options=self._routed(self.config.options("list_tools", toolset=input.toolset), "tools"),
            node=f"list_tools {kind} {input.toolset}",
        )
        return listing

    def _toolset_kind(self, name: str) -> str:
        """`mcp` for MCP servers: what summaries call the toolset."""
        return str(getattr(self.registration.agent.toolset(name), "kind", "toolset"))

    async def tool_call(self, input: ToolCallInput) -> ToolCallOutcome:
        call = input.call
        listed = input.toolset_tool
        if listed is None:
            summary = f"tool {call.name} · {call.id}"
            node = f"tool {call.name}"
            options = self._routed(self.config.options("tool_call", call.name), "tools")
        else:
            node = f"{self._toolset_kind(listed.toolset)} {listed.toolset}:{listed.remote_name}"
            summary = f"{node} · {call.id}"
            options = self._routed(
                self.config.options("tool_call", call.name, toolset=listed.toolset), "tools"
            )
        outcome: _ToolOutcomeResult = await _execute(
            "tool_call",
            self.packer.tool_call(self.name, input, workflow.info().workflow_id),
            _ToolOutcomeResult,
            summary=summary,
            options=options,
            node=node,
        )
        return self.packer.tool_outcome(outcome.root, input)

    async def workspace_merge(self, input: WorkspaceMergeInput) -> EnvironmentChange:
        """An activity on the tools' workers (they hold the store and the trees): asked
        only by runs with a workspace, so runs without one schedule what they always did."""
        merged: EnvironmentChange = await _execute(
            "workspace_merge",
            WorkspaceMergeActivityInput(agent=self.name, input=input),
            EnvironmentChange,
            summary=f"workspace_merge · step {input.run_step} · {len(input.changes)} changes",
            options=self._routed(self.config.options("tool_call"), "tools"),
            node="workspace_merge",
        )
        return merged

    async def validate_output(self, input: ValidateOutputInput) -> OutputOutcome:
        if self.placement.inline("validate_output"):
            return await nodes.validate_output(self.agent, input)
        validated: _OutputOutcomeResult = await self._quick(
            "validate_output",
            ValidateOutputActivityInput(agent=self.name, input=input),
            _OutputOutcomeResult,
            summary=f"validate_output · step {input.run_step}",
        )
        return validated.root
