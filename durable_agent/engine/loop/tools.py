"""The loop's tool steps: listing toolsets, planning a response's tool calls, dispatching
them to the node runner (concurrently, bounded), and applying their outcomes in call order
(the apply step, and the sub-agents held for humans, in `outcomes`).

A mixin of `AgentLoop`: these methods read and write the loop's run state and emit its
stream records; they are kept apart because they are the half of the loop a change to how
tools run touches.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from ...contract.checkpoint import (
    AgentCheckpoint,
    AgentExecutionNode,
    AgentExecutor,
    ExecutionSuspended,
)
from ...contract.decisions import PendingToolApproval, ToolApprovalDecision
from ...contract.errors import AgentExecutorError
from ...contract.messages import ToolCall
from ...contract.state import AgentRunState, RunStatus
from ...contract.tools import OUTPUT_TOOL_NAME, ToolDefinition
from ...contract.toolsets import (
    ToolsetListing,
    ToolsetTool,
    check_approval_names,
    index_toolset_tools,
)
from ..ids import IdSource
from ..node_io import ListToolsInput, RunRef, ToolCallInput
from ..nodes import unknown_tool
from ..runner import NodeRunner
from ..spec import AgentSpec
from ..subagents import SubagentCall, SubagentResume, SubagentSuspended, child_id, subagent_depth
from .outcomes import Outcome, OutcomeSteps

__all__ = ["ToolSteps"]


N = AgentExecutionNode


class ToolSteps(OutcomeSteps):
    """`AgentLoop`'s tool and toolset steps (applying outcomes: `OutcomeSteps`)."""

    agent: AgentSpec
    state: AgentRunState
    runner: NodeRunner
    executor: AgentExecutor
    ids: IdSource
    max_concurrent_tools: int | None
    idempotency_prefix: str
    _indexed: list[ToolsetListing] | None
    _index: dict[str, tuple[ToolsetTool, str]]
    _definitions: list[ToolDefinition]
    _resumes: dict[str, SubagentResume | AgentCheckpoint]
    _checkpoint: Callable[..., AgentCheckpoint]
    emit: Callable[..., int]
    emit_built: Callable[..., int]
    _ref: Callable[[], RunRef]

    # -- toolsets --------------------------------------------------------------------------

    async def _list_toolsets(self) -> None:
        """Lists each toolset this run has no fresh listing of, and keeps the listings in
        state: later steps, resumes and replays use them instead of asking again."""
        state = self.state
        known = {listing.toolset: listing for listing in state.toolset_listings}
        wanted = [
            toolset.name
            for toolset in self.agent.toolsets
            if (listing := known.get(toolset.name)) is None or listing.stale
        ]
        if not wanted:
            return
        ref = self._ref()
        inputs = [ListToolsInput.for_run(ref, toolset=name) for name in wanted]
        if len(inputs) == 1:
            fresh = [await self.runner.list_tools(inputs[0])]
        else:
            fresh = list(await asyncio.gather(*(self.runner.list_tools(i) for i in inputs)))
        for name, listing in zip(wanted, fresh, strict=True):
            known[name] = listing.model_copy(update={"toolset": name})
        listings = [known[toolset.name] for toolset in self.agent.toolsets]
        reserved = [OUTPUT_TOOL_NAME] if self.agent.output_type is not None else []
        index = index_toolset_tools(listings, self.agent.tools, reserved)
        if not state.toolset_listings:
            # Only at a run's first listing: a tool the server dropped later must not fail it.
            check_approval_names(self.agent.approval_required, self.agent.tools, index)
            check_approval_names(self.agent.approvers, self.agent.tools, index, setting="approvers")
        state.toolset_listings = listings

    def _toolset_index(self) -> dict[str, tuple[ToolsetTool, str]]:
        """The run's listed toolset tools by name, with their listing's digest."""
        listings = self.state.toolset_listings
        if self._indexed is not listings:
            self._index = {
                tool.name: (tool, listing.digest) for listing in listings for tool in listing.tools
            }
            self._definitions = [tool.definition() for tool, _ in self._index.values()]
            self._indexed = listings
        return self._index

    def toolset_definitions(self) -> list[ToolDefinition]:
        """What the model is shown of the run's toolset tools (the same list object until
        the listings change, so a runner can remember what it derived from it)."""
        if not self.agent.toolsets:
            return []
        self._toolset_index()
        return self._definitions

    def _mark_stale(self, tool_name: str) -> None:
        entry = self._toolset_index().get(tool_name)
        if entry is None:
            return
        self.state.toolset_listings = [
            listing.model_copy(update={"stale": True})
            if listing.toolset == entry[0].toolset
            else listing
            for listing in self.state.toolset_listings
        ]

    def _max_retries(self, tool_name: str) -> int:
        entry = self._toolset_index().get(tool_name) if self.agent.toolsets else None
        if entry is not None:
            return self.agent.toolset(entry[0].toolset).max_retries
        return self.agent.tool_max_retries(tool_name)

    # -- tools -----------------------------------------------------------------------------

    def _call_order(self) -> dict[str, int]:
        response = self.state.latest_response
        if response is None:
            return {}
        return {c.id: i for i, c in enumerate(response.tool_calls)}

    def _parallel(self) -> bool:
        """Async tools run concurrently unless the agent asks for sequential execution."""
        if not self.agent.parallel_tool_calls:
            return False
        tools = self.agent.tools
        return all(
            (tool := tools.get(c.name)) is None or tool.is_async
            for c in self.state.pending_tool_calls
        )

    def _next_call(self) -> ToolCall | None:
        calls = self.state.pending_tool_calls
        ids = [c.id for c in calls]
        active = self.state.active_tool_call_id
        index = ids.index(active) + 1 if active in ids else 0
        return calls[index] if index < len(calls) else None

    def _active_call(self) -> ToolCall:
        for call in self.state.pending_tool_calls:
            if call.id == self.state.active_tool_call_id:
                return call
        raise AgentExecutorError(
            f"no pending tool call {self.state.active_tool_call_id!r} to run; the checkpoint "
            "state is inconsistent"
        )

    async def _tool_call(self) -> AgentExecutionNode:
        state = self.state
        if self._parallel():
            following = self._next_call()
            if following is not None:
                state.active_tool_call_id = following.id
                return N.TOOL_CALL
            await self._execute(state.pending_tool_calls)
            state.active_tool_call_id = state.pending_tool_calls[0].id
        else:
            await self._execute([self._active_call()])
        return N.TOOL_RETURN

    def _tool_return(self) -> AgentExecutionNode | None:
        state = self.state
        following = self._next_call()
        if following is not None:
            state.active_tool_call_id = following.id
            return N.TOOL_RETURN if self._parallel() else N.TOOL_CALL
        state.active_tool_call_id = None
        if state.pending_approval_tool_returns or state.deferred_tool_returns:
            state.status = RunStatus.WAITING
            self.emit(
                "waiting",
                N.TOOL_RETURN,
                pending_approvals=[a.tool_call_id for a in state.pending_approval_tool_returns],
                deferred=[d.tool_call_id for d in state.deferred_tool_returns],
            )
            return None
        return N.PREPARE_MODEL_REQUEST

    async def _execute(self, calls: Sequence[ToolCall]) -> None:
        """Runs the calls that have no outcome yet; outcomes are applied in call order."""
        state = self.state
        agent = self.agent
        done = {r.tool_call_id for r in state.pending_tool_returns}
        approvals = {a.tool_call_id: a for a in state.pending_approval_tool_returns}
        deferred = {d.tool_call_id: d for d in state.deferred_tool_returns}
        planned: list[ToolCallInput] = []
        self._resumes = {}
        for call in calls:
            if call.id in done:
                continue
            if call.id in state.subagent_runs:
                resume = self._take_held(call.id)
                if resume is None:
                    continue  # its sub-agent still waits for a decision
                self._resumes[call.id] = resume
                planned.append(self._planned(call, None))
                continue
            if call.id in state.suspended_subagents:
                kept = dict(state.suspended_subagents)
                stored = kept.pop(call.id)
                state.suspended_subagents = kept
                self._resumes[call.id] = AgentCheckpoint.model_validate(stored)
                planned.append(self._planned(call, None))
                continue
            approval = approvals.get(call.id)
            waiting = deferred.get(call.id)
            if waiting is not None:
                if waiting.result is not None:
                    self._resolve_deferred(waiting, waiting.result)
                continue
            if approval is not None:
                if approval.decision is None:
                    continue
                if not approval.decision.approved:
                    self._deny(approval, approval.decision)
                    continue
            elif agent.needs_approval(call.name):
                pending = PendingToolApproval.for_call(call)
                state.pending_approval_tool_returns = [
                    *state.pending_approval_tool_returns,
                    pending,
                ]
                self._announce_wait("approval_requested", pending)
                continue
            planned.append(self._planned(call, approval.decision if approval else None))
        if not planned:
            return
        agent.usage_limits.check_before_tool_calls(state.usage, len(planned))
        for item in planned:
            if item.call.id in self._resumes:
                continue  # announced when its sub-agent first ran
            self.emit(
                "tool_call",
                N.TOOL_CALL,
                tool_call_id=item.call.id,
                tool_name=item.call.name,
                arguments=item.override_arguments
                if item.override_arguments is not None
                else item.call.arguments,
            )
        for item in planned:
            if item.call.name in agent.subagents and item.call.id not in self._resumes:
                subagent = agent.subagents[item.call.name]
                self.emit(
                    "subagent_start",
                    N.TOOL_CALL,
                    tool_call_id=item.call.id,
                    agent=subagent.agent.name,
                    workflow_id=child_id(self.idempotency_prefix, subagent.name, item),
                )
        outcomes = await self._run_tools(planned)
        for item, outcome in zip(planned, outcomes, strict=True):
            self._apply_outcome(item.call, outcome)
        suspended = [o for o in outcomes if isinstance(o, SubagentSuspended)]
        if suspended:
            # Every other call's outcome is in state: resuming redoes only the suspended.
            reason = suspended[0].reason
            cursor = self.emit("suspended", N.TOOL_CALL, reason=reason)
            raise ExecutionSuspended(N.TOOL_CALL, reason, self._checkpoint(N.TOOL_CALL, cursor))

    def _planned(self, call: ToolCall, decision: ToolApprovalDecision | None) -> ToolCallInput:
        listed = self._toolset_index().get(call.name) if self.agent.toolsets else None
        return ToolCallInput.for_run(
            self._ref(),
            call=call,
            retry=self.state.tool_retries.get(call.name, 0),
            approved=decision is not None,
            override_arguments=decision.override_arguments if decision else None,
            idempotency_key=f"{self.idempotency_prefix}:{call.id}",
            toolset_tool=listed[0] if listed else None,
            toolset_digest=listed[1] if listed else None,
        )

    async def _run_tools(self, planned: list[ToolCallInput]) -> list[Outcome]:
        if self.agent.toolsets:
            return await self._run_tools_with_toolsets(planned)
        return await self._dispatch(planned)

    async def _run_tools_with_toolsets(self, planned: list[ToolCallInput]) -> list[Outcome]:
        """A name that is neither a function tool nor a listed toolset tool gets its retry
        prompt here: no node could run it, and only this run knows which tools it listed."""
        index = self._toolset_index()
        agent = self.agent
        names = sorted({*agent.tools, *agent.subagents, *index})
        local = {
            position: unknown_tool(item.call, names)
            for position, item in enumerate(planned)
            if item.call.name not in agent.tools
            and item.call.name not in agent.subagents
            and item.call.name not in index
        }
        remote = iter(await self._dispatch([p for i, p in enumerate(planned) if i not in local]))
        return [local[i] if i in local else next(remote) for i in range(len(planned))]

    async def _dispatch(self, planned: list[ToolCallInput]) -> list[Outcome]:
        if not planned:
            return []
        if len(planned) == 1:
            return [await self._run_one(planned[0])]
        limit = self.max_concurrent_tools
        if limit is None or limit >= len(planned):
            return list(await asyncio.gather(*(self._run_one(p) for p in planned)))
        semaphore = asyncio.Semaphore(limit)

        async def bounded(item: ToolCallInput) -> Outcome:
            async with semaphore:
                return await self._run_one(item)

        return list(await asyncio.gather(*(bounded(p) for p in planned)))

    def _run_one(self, item: ToolCallInput) -> Awaitable[Outcome]:
        """A sub-agent's call goes to the runner's `subagent_call` (a child run), every
        other call to its `tool_call`."""
        subagent = self.agent.subagents.get(item.call.name)
        if subagent is None:
            return self.runner.tool_call(item)
        state = self.state
        return self.runner.subagent_call(
            SubagentCall(
                input=item,
                subagent=subagent,
                parent_run_id=state.run_id,
                depth=subagent_depth(state) + 1,
                executor=self.executor,
                ids=self.ids,
                prefix=self.idempotency_prefix,
                parent_agent=self.agent.name,
                resume=self._resumes.get(item.call.id),
            )
        )
