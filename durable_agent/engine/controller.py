"""The run controller: how a run starts, resumes and goes on after a human's decision.

Both drivers go through it: `Agent.run` / `resume` / `resume_after_hitl` in-process, and
`AgentWorkflow` on Temporal. Only the node runner, the executor, the id source and the
idempotency prefix differ between them, so the same scenario gives the same checkpoints,
stream records and messages wherever it runs.
"""

from __future__ import annotations

from collections.abc import Collection, Coroutine, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from ..contract._fields import settled
from ..contract.checkpoint import AgentCheckpoint, AgentExecutionNode
from ..contract.decisions import DeferredToolResult, ToolApprovalDecision
from ..contract.environment import ENVIRONMENT_REF
from ..contract.errors import HitlDecisionError, InvalidInput, UserError
from ..contract.messages import ModelMessage
from ..contract.records import RunStartData
from ..contract.state import AgentRunState, RunStatus
from .ids import new_id
from .loop import AgentLoop, apply_hitl_decisions
from .output import format_validation_error
from .overrides import with_instructions
from .runner import Driver
from .spec import AgentSpec

__all__ = [
    "MAX_PROMPT_BYTES",
    "MAX_PROMPT_CHARS",
    "RunController",
    "prompt_problem",
    "size_problem",
    "steering_problem",
]

MAX_PROMPT_CHARS = 1_000_000
"""Longer prompts are refused: large documents belong behind a tool, not in every request."""

MAX_PROMPT_BYTES = 1_900_000
"""A prompt (or steering message) of more UTF-8 bytes is refused, however few characters
it has: a run's input carries it in one Temporal payload (2 MB by default), and an emoji
is four bytes. A prompt of 470,000 '🚀' (1.88 MB) still starts."""


def check_prompt(prompt: object) -> str:
    if not isinstance(prompt, str):
        raise UserError(f"prompt must be a string, got {type(prompt).__name__}")
    if not prompt.strip():
        raise InvalidInput("the prompt is empty; send the task for the agent")
    if problem := size_problem(prompt, "prompt"):
        raise InvalidInput(problem)
    return prompt


def size_problem(text: str, what: str) -> str | None:
    """Why `text` is too large to send as `what` ("prompt", "steering message"), or None.
    Characters bound what a model is sent; UTF-8 bytes bound what a payload carries, and
    one character may be four bytes (an emoji) or more. Clients check this before they
    send, as the workflow does, since the server refuses a payload over its limit before
    any validator could."""
    if len(text) > MAX_PROMPT_CHARS:
        return (
            f"the {what} has {len(text)} characters, more than the {MAX_PROMPT_CHARS} "
            "allowed; send large documents through a tool instead"
        )
    if len(text) * 4 <= MAX_PROMPT_BYTES:
        return None  # no character is more than four bytes of UTF-8
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_PROMPT_BYTES:
        return (
            f"the {what} is {size} bytes as UTF-8, more than the {MAX_PROMPT_BYTES} one "
            "Temporal payload carries with room for the rest of the run's input; send large "
            "documents through a tool instead"
        )
    return None


def prompt_problem(prompt: object) -> str | None:
    """Why `prompt` cannot start a run (or a session's next turn), or None."""
    try:
        check_prompt(prompt)
    except UserError as error:
        return error.message
    return None


def steering_problem(message: object) -> str | None:
    """Why `message` cannot steer a run, or None: the same rules as a prompt's."""
    if not isinstance(message, str):
        return f"the steering message must be a string, got {type(message).__name__}"
    if not message.strip():
        return "the steering message is empty; send the text the model should read"
    return size_problem(message, "steering message")


class RunController:
    """Starts, resumes and continues runs of one agent under one `Driver`.

    `loop` is the loop of the latest drive: the workflow reads its state and stream
    position when a run fails or continues as new.
    """

    def __init__(self, agent: AgentSpec, driver: Driver) -> None:
        self.agent = agent
        self.driver = driver
        self.loop: AgentLoop | None = None

    # -- the three ways a run goes on --------------------------------------------------------

    def new_state(
        self,
        prompt: str,
        *,
        message_history: Sequence[ModelMessage] | None = None,
        conversation_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> AgentRunState:
        """The first state of a run; refuses a prompt no model should be sent. A run of an
        agent with a workspace starts with its initial tree, unless `metadata` names the
        tree to start from (a sub-agent's: its parent's as of the call)."""
        meta = dict(metadata or {})
        workspace = self.agent.workspace
        if workspace is not None and ENVIRONMENT_REF not in meta:
            meta[ENVIRONMENT_REF] = workspace.start_ref()
        # The state and its copies at every boundary share one fields set (`settled`); the
        # messages it starts from are the caller's, left as they are.
        return settled(
            AgentRunState(
                run_id=new_id(self.driver.ids, "run"),
                conversation_id=conversation_id or new_id(self.driver.ids, "conv"),
                message_history=list(message_history or []),
                metadata=meta,
                pending_prompt=check_prompt(prompt),
                status=RunStatus.RUNNING,
            ),
            deep=False,
        )

    def start(
        self, state: AgentRunState, *, stream_start: int = 0
    ) -> Coroutine[Any, Any, AgentRunState]:
        """Each of these three sets up `loop` at once and returns the drive to await, so a
        caller (the workflow's queries) sees the run's live state from the start.

        `stream_start` numbers the records on from an earlier turn's (a session's next
        turn is a new run in the same stream)."""
        loop = self._loop(state, stream_start=stream_start)
        loop.emit(None, RunStartData(conversation_id=state.conversation_id, agent=self.agent.name))
        return loop.drive(AgentExecutionNode.RUN_START)

    def resume(
        self,
        checkpoint: AgentCheckpoint,
        *,
        stream_start: int | None = None,
        instructions: str | None = None,
        run_id: str | None = None,
    ) -> Coroutine[Any, Any, AgentRunState]:
        """Does the checkpoint's node's work and goes on; nothing recorded before it is redone.

        The stream goes on after the checkpoint's own two records (`node_start`,
        `checkpoint`) unless the caller knows better (a continued-as-new run does, a fork
        starts its own at 0). `instructions` replace the conversation's (an override);
        `run_id` makes the run a new one (a fork) instead of the checkpoint's run going on.
        """
        if checkpoint.node is AgentExecutionNode.RUN_FAILED:
            raise UserError(
                f"checkpoint {checkpoint.checkpoint_id} records a failed run; resume from an "
                "earlier checkpoint instead"
            )
        start = checkpoint.resume.cursor.stream_cursor + 2 if stream_start is None else stream_start
        state = checkpoint.state.snapshot()
        if instructions is not None:
            state = with_instructions(state, instructions)
        if run_id is not None:
            state.run_id = run_id
        loop = self._loop(state, stream_start=start)
        return loop.drive(checkpoint.node, skip_boundary=True)

    def continue_after_hitl(
        self,
        state: AgentRunState,
        approvals: Mapping[str, ToolApprovalDecision | bool] | None = None,
        deferred_results: Sequence[DeferredToolResult] | None = None,
        *,
        announce: bool = True,
    ) -> Coroutine[Any, Any, AgentRunState]:
        """Goes on once every pending call of a waiting run has a decision or a result.

        `announce` emits an `approval_decided` / `deferred_result` record for each first; a
        driver that emitted them as each decision arrived (the workflow) passes False."""
        for call_id, decision in (approvals or {}).items():
            if isinstance(decision, ToolApprovalDecision) and decision.approved:
                problem = self.override_problem(state, call_id, decision.override_arguments)
                if problem:
                    raise HitlDecisionError(problem)
        resumed = apply_hitl_decisions(state, approvals, deferred_results)
        loop = self._loop(resumed, stream_start=state.stream_seq)
        if announce:
            for approval in resumed.pending_approval_tool_returns:
                if approval.decision is not None:
                    loop.announce_decision(
                        approval.tool_call_id, approval.tool_name, approval.decision
                    )
            for deferred in resumed.deferred_tool_returns:
                if deferred.result is not None:
                    loop.announce_result(
                        deferred.tool_call_id, deferred.tool_name, deferred.result.status
                    )
        return loop.drive(AgentExecutionNode.TOOL_CALL)

    def steer(self, message: str) -> None:
        """Queues `message` for the next model request of the run this controller drives
        (or of a run waiting for a human: it reaches the model once the run goes on)."""
        if problem := steering_problem(message):
            raise InvalidInput(problem)
        loop = self.loop
        if loop is None or loop.state.status not in (RunStatus.RUNNING, RunStatus.WAITING):
            status = loop.state.status.value if loop is not None else "not started"
            raise UserError(
                f"cannot steer a run that is {status}; steer a running or waiting run, or "
                "start a new one with the message as its prompt"
            )
        loop.steer(message)

    def attach(self, state: AgentRunState, *, stream_start: int) -> AgentLoop:
        """Makes `state` the current run without driving it: a session between turns keeps
        its last turn (or, before the first, its conversation so far) where its queries and
        records find it while it waits for the next prompt."""
        return self._loop(state, stream_start=stream_start)

    # -- checks on what humans send, shared by both drivers ---------------------------------

    def approval_problem(
        self,
        state: AgentRunState | None,
        tool_call_id: str,
        *,
        decided: Mapping[str, ToolApprovalDecision],
        status: str,
    ) -> str | None:
        """Why a decision for `tool_call_id` cannot be taken now, or None.

        `decided` holds every decision already accepted (the first one stands); `status`
        is the run's status as the caller reports it.
        """
        earlier = decided.get(tool_call_id)
        if earlier is not None:
            verdict = "approved" if earlier.approved else "denied"
            who = f" by {earlier.decided_by}" if earlier.decided_by else ""
            return f"tool call {tool_call_id!r} was already {verdict}{who}"
        if state is None or state.status is not RunStatus.WAITING:
            return f"run is {status}, not waiting for an approval"
        pending = [a.tool_call_id for a in state.pending_approval_tool_returns]
        if tool_call_id not in pending:
            return (
                f"no pending approval for tool call id {tool_call_id!r}; "
                f"pending: {pending or 'none'}"
            )
        return None

    def override_problem(
        self, state: AgentRunState, tool_call_id: str, arguments: dict[str, Any] | None
    ) -> str | None:
        """Why approved `override_arguments` cannot be used, so the human can fix them
        before the decision is spent (and before the model is blamed for them)."""
        if arguments is None:
            return None
        pending = {a.tool_call_id: a for a in state.pending_approval_tool_returns}
        approval = pending.get(tool_call_id)
        if approval is None:
            return None
        name = approval.tool_name
        tool = self.agent.tools.get(name)
        if tool is None:
            problem = self._toolset_argument_problem(state, name, arguments)
        else:
            try:
                tool.validate_arguments(arguments)
                problem = None
            except ValidationError as error:
                problem = format_validation_error(error)
        if problem is None:
            return None
        call = f"tool {name!r} (call {tool_call_id!r})"
        return f"override_arguments for {call} are invalid: {problem}"

    def _toolset_argument_problem(
        self, state: AgentRunState, name: str, arguments: dict[str, Any]
    ) -> str | None:
        """Checks against the schema the run listed, as the call itself will."""
        for listing in state.toolset_listings:
            for listed in listing.tools:
                if listed.name == name:
                    toolset = self.agent.toolset(listed.toolset)
                    return toolset.argument_problem(listed, arguments)
        return None

    def deferred_problem(
        self,
        state: AgentRunState | None,
        tool_call_id: str,
        *,
        delivered: Collection[str],
        status: str,
    ) -> str | None:
        if tool_call_id in delivered:
            return f"deferred call {tool_call_id!r} already has a result"
        if state is None or state.status is not RunStatus.WAITING:
            return f"run is {status}, not waiting for a deferred result"
        waiting = [d.tool_call_id for d in state.deferred_tool_returns]
        if tool_call_id not in waiting:
            return f"no deferred call with id {tool_call_id!r}; deferred calls: {waiting or 'none'}"
        return None

    # -- internals ---------------------------------------------------------------------------

    def _loop(self, state: AgentRunState, *, stream_start: int) -> AgentLoop:
        self.loop = AgentLoop(self.agent, state, self.driver, stream_start=stream_start)
        return self.loop
