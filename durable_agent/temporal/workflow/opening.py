"""How a run begins: from a prompt, from another run's boundary (a fork), as a session
waiting for its first prompt, or from its predecessor's checkpoint (continue-as-new).

Each way answers the run's first state and the coroutine that drives it. Bad input fails
the run here with `invalid_input` (a non-retryable workflow failure), never the workflow
task, which Temporal would retry for ever.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from ...contract.errors import AgentError, InvalidInput
    from ...contract.records import ForkedData
    from ...contract.state import AgentRunState, RunStatus
    from ...engine.controller import RunController
    from ...engine.ids import new_id
    from ...engine.spec import AgentSpec
    from ..compaction.digest import EMPTY_DIGEST
    from ..executor import TemporalExecutor
    from ..forks import LOAD_RETRIES, LOAD_TIMEOUT, fork_failure
    from ..hosting import Hosting
    from ..quota.gate import QuotaGate
    from ..registry import AgentRegistration
    from ..runner import ActivityNodeRunner, WorkflowIdSource
    from ..wire import AgentWorkflowInput, LoadCheckpointInput, LoadedCheckpoint
    from .continuation import Chain
    from .sessions import finished
    from .subagents import SubagentRuns

__all__ = ["Drive", "Hosted", "Opening", "hosted_run", "node_runner"]

Drive = Coroutine[Any, Any, AgentRunState]
Fail = Callable[[AgentError], ApplicationError]
Hosted = tuple[AgentRegistration, AgentSpec, ActivityNodeRunner]
"""The registered agent, it with the run's overrides, and the run's node runner."""


class Opening:
    """Picks the run's first state and drive from its input."""

    def __init__(
        self,
        input: AgentWorkflowInput,
        controller: RunController,
        executor: TemporalExecutor,
        chain: Chain,
        fail: Fail,
    ) -> None:
        self._input = input
        self._controller = controller
        self._executor = executor
        self._chain = chain
        self._fail = fail

    async def begin(self) -> tuple[AgentRunState, Drive]:
        input, controller = self._input, self._controller
        continuation = input.continuation
        if continuation is None and input.resume_from is not None:
            return await self._fork()
        if continuation is None and input.session and not input.prompt.strip():
            return self._open_session()
        if continuation is None:
            self._check_input()
            try:
                state = controller.new_state(
                    input.prompt,
                    message_history=input.message_history,
                    conversation_id=input.conversation_id,
                    metadata=input.metadata,
                )
            except AgentError as error:
                raise self._fail(error) from error
            return state, controller.start(state)
        state = continuation.checkpoint.state
        self._chain.restore(continuation)
        if continuation.session is not None and continuation.session.between_turns:
            controller.attach(state, stream_start=continuation.stream_seq)
            return state, finished(state)
        return state, controller.resume(
            continuation.checkpoint, stream_start=continuation.stream_seq
        )

    def _check_input(self) -> None:
        if problem := self._input.problem():
            raise self._fail(InvalidInput(problem))

    def _open_session(self) -> tuple[AgentRunState, Drive]:
        """A session started without a prompt: its conversation so far, nothing to do yet."""
        self._check_input()
        input = self._input
        ids = WorkflowIdSource()
        state = AgentRunState(
            run_id=new_id(ids, "run"),
            conversation_id=input.conversation_id or new_id(ids, "conv"),
            message_history=list(input.message_history),
            metadata=dict(input.metadata),
            status=RunStatus.COMPLETED,
        )
        self._controller.attach(state, stream_start=0)
        return state, finished(state)

    async def _fork(self) -> tuple[AgentRunState, Drive]:
        """A fork's first state is another run's checkpoint: `load_checkpoint` reads it
        (a bad source fails the fork there, before any model or tool activity), then the
        fork resumes from it as a continued-as-new run does, as a run of its own."""
        self._check_input()
        input, controller = self._input, self._controller
        source = input.resume_from
        assert source is not None
        try:
            loaded: LoadedCheckpoint = await workflow.execute_activity(
                "load_checkpoint",
                LoadCheckpointInput(agent=input.agent, resume_from=source),
                result_type=LoadedCheckpoint,
                summary=f"load_checkpoint · {source.describe()}",
                start_to_close_timeout=LOAD_TIMEOUT,
                retry_policy=LOAD_RETRIES,
            )
        except ActivityError as error:
            raise self._fail(fork_failure(error)) from error
        origin = loaded.origin
        self._chain.forked_from = origin
        instructions = input.overrides.instructions if input.overrides else None
        try:
            drive = controller.resume(
                loaded.checkpoint,
                stream_start=0,
                instructions=instructions,
                run_id=new_id(WorkflowIdSource(), "run"),
            )
        except AgentError as error:
            raise self._fail(error) from error
        loop = controller.loop
        assert loop is not None
        # The fork's first boundary is the one it starts from, as a boundary of its own run:
        # listed by `checkpoints`, and a fork or retry of the fork can start there (even when
        # the fork goes straight into a wait for a human and records nothing else).
        self._executor.record(
            loaded.checkpoint.model_copy(
                update={"state": loop.state.snapshot(), "run_id": loop.state.run_id}
            )
        )
        loop.emit(
            None,
            ForkedData(
                workflow_id=origin.workflow_id,
                workflow_run_id=origin.run_id,
                index=origin.index,
                checkpoint_id=origin.checkpoint_id,
                node=origin.node.value,
                run_step=origin.run_step,
                source_run_id=loaded.checkpoint.run_id,
            ),
        )
        workflow.logger.info("forked", extra={"source": source.describe(), "node": origin.node})
        return loop.state, drive


def hosted_run(
    input: AgentWorkflowInput,
    problem: str | None,
    hosting: Hosting,
    subagents: SubagentRuns,
    quota_gate: QuotaGate,
) -> Hosted | AgentError:
    """What this worker runs the run with; or why the run fails at once, before any
    activity: its input's `problem`, an unknown agent, a model the agent does not allow.
    Issues no command."""
    if problem is not None:
        return InvalidInput(problem)
    try:
        registration = hosting.agents.get(input.agent)
        agent = hosting.agents.agent_for(input.agent, input.overrides)
    except AgentError as error:
        return error
    return (
        registration,
        agent,
        node_runner(registration, agent, input, hosting, subagents, quota_gate),
    )


def node_runner(
    registration: AgentRegistration,
    agent: AgentSpec,
    input: AgentWorkflowInput,
    hosting: Hosting,
    subagents: SubagentRuns,
    quota_gate: QuotaGate,
) -> ActivityNodeRunner:
    """The activity node runner of a run of `agent` (the registered agent with the run's
    overrides), told what the run's first model request can rely on: a continued run's
    cached conversation (or, for 0.1's runs, its offset and digest); its sub-agents' and
    quota's components and its worker's quotas and queues given at once."""
    continuation = input.continuation
    offset, digest, cached = 0, EMPTY_DIGEST, None
    if continuation is not None and continuation.carries_history:
        cached = len(continuation.checkpoint.state.message_history)
    elif continuation is not None:
        offset = continuation.checkpoint.state.history_offset
        digest = continuation.history_digest
    return ActivityNodeRunner(
        registration,
        agent,
        subagents=subagents.call,
        quota_gate=quota_gate,
        quotas=hosting.quotas,
        role_split=hosting.role_split,
        history_offset=offset,
        history_digest=digest,
        cached=cached,
        overrides=input.overrides,
    )
