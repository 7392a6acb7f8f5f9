"""`AgentWorkflow`: the agent loop as a Temporal workflow.

The loop is the same one that runs in-process; here its working nodes are activities
(`ActivityNodeRunner`), its boundaries go through the `TemporalExecutor`, and waits for
humans are `wait_condition`s fed by signals and updates. Everything here is deterministic:
no I/O, ids from `workflow.uuid4()`, time from `workflow.now()`.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Coroutine, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import to_json
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamState
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from ..agent import Agent
    from ..controller import RunController, prompt_problem, steering_problem
    from ..errors import AgentError, ConversationTooLarge, ExecutionSuspended, InvalidInput
    from ..executor import AgentCheckpoint, AgentExecutionNode
    from ..hitl import DeferredToolResult, ToolApprovalDecision
    from ..ids import new_id
    from ..messages import ModelMessage
    from ..models.base import ModelDelta
    from ..runner import Driver
    from ..state import AgentRunState, RunStatus
    from ..stream import AgentStreamRecord, StreamKind
    from ..tools import ToolDefinition
    from ..usage import Usage
    from .authorization import decision_problem
    from .executor import CONTINUE_AS_NEW, TemporalExecutor
    from .forks import LOAD_RETRIES, LOAD_TIMEOUT, fork_failure
    from .history import EMPTY_DIGEST
    from .registry import AgentRegistration, registry
    from .runner import ActivityNodeRunner, WorkflowIdSource
    from .search_attributes import AGENT_NAME, AGENT_STATUS, FORKED_FROM, PENDING_APPROVALS
    from .signing import worker_keys
    from .wire import (
        AWAITING_PROMPT,
        AgentStatusView,
        AgentWorkflowInput,
        AgentWorkflowResult,
        ApprovalSignal,
        CheckpointLookup,
        CheckpointQuery,
        CheckpointsView,
        Continuation,
        DeferredResultSignal,
        EndSessionSignal,
        ForkOrigin,
        HistoryPageQuery,
        HistorySegment,
        LoadCheckpointInput,
        LoadedCheckpoint,
        ModelDeltaBatch,
        PendingApprovalView,
        PromptRequest,
        ResumeSignal,
        RunLink,
        SessionCarry,
        SessionView,
        SteerSignal,
        SuspendSignal,
        UpdateAccepted,
    )

__all__ = ["EVENTS_TOPIC", "AgentWorkflow"]

EVENTS_TOPIC = "events"
_JSON_PLAIN = Payload(metadata={"encoding": b"json/plain"})
"""An empty plain-JSON payload, copied for each stream record (`_record_payload`)."""
"""The Workflow Stream topic every run publishes its `AgentStreamRecord`s on; an item's
offset is its record's `seq`."""
HANDOFF_RECORDS = 64
HANDOFF_BYTES = 16_384
"""The most records (and bytes of them) a run hands to its continue-as-new successor's
stream: enough for a plain Workflow Streams subscriber that lags a little to cross the
boundary without a gap, bounded so history does not carry the transcript."""
STREAM_PUBLISH_SIGNAL = "__temporal_workflow_stream_publish"
"""The Workflow Streams signal through which outside clients publish: refused here, so the
run's own records are all its stream holds and offsets stay equal to seqs."""

APPROVAL_EXPIRED = "approval expired"
DROPPED_APPROVAL = "durable-agent.approval-signal-dropped"
"""Patch-marker prefix recording that an `approval` signal was refused by the authorization
check (see `AgentWorkflow._signal_authorization`)."""
CONTINUATION_LIMIT_BYTES = 1_900_000
"""Just under Temporal's default 2 MB payload limit: a larger continuation is refused by
the server, and every workflow task after it would fail."""
SignalT = TypeVar("SignalT", bound=BaseModel)


def _fail(kind: str, message: str) -> ApplicationError:
    return ApplicationError(message, type=kind, non_retryable=True)


@workflow.defn(name="AgentWorkflow")
class AgentWorkflow:
    @workflow.init
    def __init__(self, input: AgentWorkflowInput) -> None:
        self.input = input
        self.controller: RunController | None = None
        # Handlers only, no commands: runs recorded before the stream replay unchanged.
        self.stream = WorkflowStream(_stream_state(input.continuation))
        self.events = self.stream.topic(EVENTS_TOPIC, type=AgentStreamRecord)
        self._recent: deque[int] = deque(maxlen=HANDOFF_RECORDS)
        self._plain_records: bool | None = None
        """Payload sizes of the latest records, for the continue-as-new handoff."""
        workflow.set_signal_handler(STREAM_PUBLISH_SIGNAL, self._refuse_publish)
        self.earlier_links: list[RunLink] = (
            list(input.continuation.runs) if input.continuation else []
        )
        """The earlier runs of this workflow's continue-as-new chain, oldest first."""
        self._deltas: tuple[int, int, int] | None = None
        """(step, attempt, next batch) of the model deltas published last."""
        self.executor = TemporalExecutor(
            input.suspend_at,
            on_change=self._publish,
            continue_as_new=self._should_continue_as_new,
            announce=self._announce,
        )
        self.segments: list[HistorySegment] = []
        self.earlier_runs = 0
        self._start_step = 0
        self._after_steps: int | None = None
        self.decisions: dict[str, ToolApprovalDecision] = {}
        self.decided: dict[str, ToolApprovalDecision] = {}
        """Every decision this run has accepted, kept for audit and to refuse a second one."""
        self.results: dict[str, DeferredToolResult] = {}
        self.delivered: set[str] = set()
        self.error: str | None = None
        self._published: tuple[str, int] | None = None
        self.waiting_since: datetime | None = None
        """`workflow.now()` when the run last began waiting for humans (state, not a command)."""
        self._approval_signals = 0
        self.forked_from: ForkOrigin | None = (
            input.continuation.forked_from if input.continuation else None
        )
        """For a fork or retry: the boundary it came from (carried across continue-as-new)."""
        carried = input.continuation.session if input.continuation else None
        opening = bool(input.prompt.strip() or input.resume_from)
        self._turn = carried.turn if carried else int(input.session and opening)
        """A session's turns started so far (the one its input starts, then each prompt's)."""
        self._answered = carried.answered if carried else 0
        self._answers: dict[int, AgentWorkflowResult] = {}
        """Finished turns' results, until the `send_prompt` that asked for them takes them."""
        self._prompts: list[str] = []
        self._prompt_updates = 0
        """`send_prompt` updates waiting for their turn's answer."""
        self._awaiting_prompt = bool(
            input.session and (carried.between_turns if carried else not opening)
        )
        """Set from the start when the run begins by waiting for a prompt, so a prompt that
        arrives with its first workflow task is taken."""
        self._between_turns = False
        self._ending = False
        self._idle_since: datetime | None = workflow.now() if self._awaiting_prompt else None
        self._session_steps = 0
        """Model requests of this run's earlier turns (for `continue_as_new_after_steps`)."""

    # -- the run ---------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: AgentWorkflowInput) -> AgentWorkflowResult:
        continuation = input.continuation
        if continuation is None:
            first = [AGENT_NAME.value_set(input.agent)]
            if input.resume_from is not None:
                first.append(FORKED_FROM.value_set(input.resume_from.workflow_id))
            workflow.upsert_search_attributes(first)
        registration = self._registration(input)
        overrides = input.overrides
        if continuation is None:
            runner = ActivityNodeRunner(registration, overrides=overrides)
        elif continuation.carries_history:
            carried = continuation.checkpoint.state.message_history
            runner = ActivityNodeRunner(registration, cached=len(carried), overrides=overrides)
        else:
            runner = ActivityNodeRunner(
                registration,
                history_offset=continuation.checkpoint.state.history_offset,
                history_digest=continuation.history_digest,
                overrides=overrides,
            )
        controller = RunController(
            self._agent(registration, input),
            Driver(
                runner=runner,
                executor=self.executor,
                ids=WorkflowIdSource(),
                sink=self._publish_record,
                idempotency_prefix=workflow.info().workflow_id,
                max_concurrent_tools=registration.activities.max_concurrent_tool_activities,
                model_deltas=input.stream_deltas is not False,
            ),
        )
        self.controller = controller
        if continuation is None and input.resume_from is not None:
            state, drive = await self._fork(input, controller)
        elif continuation is None and input.session and not input.prompt.strip():
            state, drive = self._open_session(input, controller)
        elif continuation is None:
            if problem := input.problem():
                raise self._failed(InvalidInput(problem))
            try:
                state = controller.new_state(
                    input.prompt,
                    message_history=input.message_history,
                    conversation_id=input.conversation_id,
                    metadata=input.metadata,
                )
            except AgentError as error:
                raise self._failed(error) from error
            drive = controller.start(state)
        elif continuation.session is not None and continuation.session.between_turns:
            state = continuation.checkpoint.state
            self._restore(continuation)
            controller.attach(state, stream_start=continuation.stream_seq)
            drive = _finished(state)
        else:
            state = continuation.checkpoint.state
            self._restore(continuation)
            drive = controller.resume(continuation.checkpoint, stream_start=continuation.stream_seq)
        self._start_step = state.run_step
        self._after_steps = registration.activities.continue_as_new_after_steps
        self._publish()
        try:
            while True:
                try:
                    state = await drive
                except ExecutionSuspended as suspended:
                    if suspended.reason != CONTINUE_AS_NEW:
                        raise
                    # Waiting subscribers get what is there and follow on to the next run.
                    self.stream.detach_pollers()
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    workflow.continue_as_new(self._continuation(suspended.checkpoint, runner))
                if state.status is not RunStatus.WAITING:
                    if not input.session:
                        break
                    following = await self._next_turn(state, controller, runner)
                    if following is None:
                        break
                    drive = following
                    continue
                await self._wait_for_humans(state)
                approvals = {
                    a.tool_call_id: self.decisions[a.tool_call_id]
                    for a in state.pending_approval_tool_returns
                }
                results = [self.results[d.tool_call_id] for d in state.deferred_tool_returns]
                self.decisions.clear()
                self.results.clear()
                drive = controller.continue_after_hitl(state, approvals, results, announce=False)
        except AgentError as error:
            failure = self._failed(error)
            if input.session:
                # A `send_prompt` waiting for this turn gets the failure as its answer.
                self.stream.detach_pollers()
                await workflow.wait_condition(workflow.all_handlers_finished)
            raise failure from error
        except asyncio.CancelledError:
            if self.state is not None:
                self.state.status = RunStatus.CANCELLED
            self._announce("run_cancelled", None, {})
            self._publish()
            raise
        self._publish()
        self.stream.detach_pollers()
        if not workflow.all_handlers_finished():
            # Subscribers waiting in a poll get the last records instead of an abandoned
            # update; runs recorded before the stream never get here.
            await workflow.wait_condition(workflow.all_handlers_finished)
        return self._result(state)

    def _result(self, state: AgentRunState) -> AgentWorkflowResult:
        return AgentWorkflowResult(
            output=state.output,
            structured_output=state.structured_output,
            status=state.status.value,
            run_id=state.run_id,
            conversation_id=state.conversation_id,
            usage=state.usage,
            run_step=state.run_step,
        )

    # -- sessions --------------------------------------------------------------------------

    def _open_session(
        self, input: AgentWorkflowInput, controller: RunController
    ) -> tuple[AgentRunState, Coroutine[Any, Any, AgentRunState]]:
        """A session started without a prompt: its conversation so far, nothing to do yet."""
        if problem := input.problem():
            raise self._failed(InvalidInput(problem))
        ids = WorkflowIdSource()
        state = AgentRunState(
            run_id=new_id(ids, "run"),
            conversation_id=input.conversation_id or new_id(ids, "conv"),
            message_history=list(input.message_history),
            metadata=dict(input.metadata),
            status=RunStatus.COMPLETED,
        )
        controller.attach(state, stream_start=0)
        return state, _finished(state)

    async def _next_turn(
        self, state: AgentRunState, controller: RunController, runner: ActivityNodeRunner
    ) -> Coroutine[Any, Any, AgentRunState] | None:
        """After a session's turn (or before its first): hands the turn's result to the
        `send_prompt` waiting for it, continues as new if history has grown enough, waits
        for the next prompt and starts its turn with the whole conversation. None: the
        session ends (`end_session`, or idle for `idle_timeout_seconds`)."""
        if self._turn > self._answered:
            self._answered = self._turn
            self._answers[self._turn] = self._result(state)
            self._session_steps += state.run_step - self._start_step
            self._start_step = state.run_step
        if self._ending:
            ended = {"reason": "end_session", "turns": self._answered}
            self._announce("session_ended", None, ended)
            self._publish()
            return None
        if self._turn_continues_as_new():
            self._between_turns = True
            self.stream.detach_pollers()
            await workflow.wait_condition(workflow.all_handlers_finished)
            assert self.executor.latest is not None
            workflow.continue_as_new(self._continuation(self.executor.latest, runner))
        self._awaiting_prompt = True
        self._idle_since = workflow.now()
        self._announce("awaiting_prompt", None, {"turns": self._answered})
        self._publish()
        idle = self.input.idle_timeout_seconds
        reason = "end_session"
        try:
            await workflow.wait_condition(
                lambda: bool(self._prompts) or self._ending,
                timeout=timedelta(seconds=idle) if idle else None,
            )
        except TimeoutError:
            self._ending = True
            reason = "idle_timeout"
        finally:
            self._awaiting_prompt = False
        if not self._prompts:
            self._announce("session_ended", None, {"reason": reason, "turns": self._answered})
            self._publish()
            return None
        prompt = self._prompts.pop(0)
        self._turn += 1
        self._start_step = 0
        following = controller.new_state(
            prompt,
            message_history=state.message_history,
            conversation_id=state.conversation_id,
            metadata=self.input.metadata,
        )
        return controller.start(following, stream_start=self._stream_seq())

    def _turn_continues_as_new(self) -> bool:
        """Between turns, as within one: when Temporal suggests it or after the steps set."""
        if self.executor.latest is None:
            return False
        if workflow.info().is_continue_as_new_suggested():
            return True
        return self._after_steps is not None and self._session_steps >= self._after_steps

    def _session_carry(self) -> SessionCarry | None:
        if not self.input.session:
            return None
        return SessionCarry(
            turn=self._turn, answered=self._answered, between_turns=self._between_turns
        )

    def _session_view(self) -> SessionView | None:
        if not self.input.session:
            return None
        idle = self.input.idle_timeout_seconds
        since = self._idle_since if self._awaiting_prompt else None
        return SessionView(
            turns=self._answered,
            awaiting_prompt=self._awaiting_prompt,
            ending=self._ending,
            idle_since=since,
            idle_expires_at=since + timedelta(seconds=idle) if since and idle else None,
        )

    def _prompt_problem(self, prompt: str) -> str | None:
        if not self.input.session:
            return "this run is not a session; start one with session=true to send prompts"
        if self._ending:
            return "the session is ending (end_session was sent); start a new one"
        if self._between_turns:
            return "the session is continuing as new; send the prompt again in a moment"
        if not self._awaiting_prompt or self._prompts:
            return (
                f"the session is busy with turn {self._turn} (status: {self._status()}); wait "
                "for its answer, or steer it"
            )
        return prompt_problem(prompt)

    @workflow.update
    async def send_prompt(self, request: PromptRequest) -> AgentWorkflowResult:
        """A session's next turn; answers with that turn's result once it has one."""
        turn = self._turn + 1
        self._prompts.append(request.prompt)
        self._prompt_updates += 1
        try:
            await workflow.wait_condition(lambda: turn in self._answers or self.error is not None)
        finally:
            self._prompt_updates -= 1
        answer = self._answers.pop(turn, None)
        if answer is None:
            raise ApplicationError(
                f"turn {turn} failed: {self.error}", type="turn_failed", non_retryable=True
            )
        return answer

    @send_prompt.validator
    def _validate_prompt(self, request: PromptRequest) -> None:
        if problem := self._prompt_problem(request.prompt):
            kind = "session_continuing" if self._between_turns else "invalid_prompt"
            raise ApplicationError(problem, type=kind, non_retryable=True)

    @workflow.signal
    def end_session(self, *inputs: Any) -> None:
        if self._signal_input(EndSessionSignal, "end_session", inputs, optional=True) is None:
            return
        if not self.input.session:
            workflow.logger.warning("end_session signal ignored: this run is not a session")
            return
        self._ending = True
        self._publish()

    @property
    def state(self) -> AgentRunState | None:
        """The run's live state: the one the loop is driving (None before it has one)."""
        loop = self.controller.loop if self.controller is not None else None
        return loop.state if loop is not None else None

    def _stream_seq(self) -> int:
        loop = self.controller.loop if self.controller is not None else None
        return loop.seq if loop is not None else 0

    # -- the event stream ------------------------------------------------------------------

    def _announce(
        self, kind: StreamKind, node: AgentExecutionNode | None, data: dict[str, Any]
    ) -> None:
        """A record of the workflow's own (a decision arrived, the run was suspended), in
        the loop's numbering; nothing before the loop exists."""
        loop = self.controller.loop if self.controller is not None else None
        if loop is not None:
            loop.emit(kind, node, **data)

    def _own_link(self) -> RunLink:
        continuation = self.input.continuation
        return RunLink(
            run_id=workflow.info().run_id,
            first_seq=continuation.stream_seq if continuation else 0,
            first_checkpoint=self.executor.earlier_checkpoints,
        )

    def _publish_record(self, record: AgentStreamRecord) -> None:
        payload = self._record_payload(record)
        self._recent.append(payload.ByteSize())
        self.events.publish(payload)

    def _record_payload(self, record: AgentStreamRecord) -> Payload:
        """The record as the worker's payload converter writes it. A step publishes some
        twenty records and a replay writes them all again, so once the converter is seen
        to write a record as plain pydantic JSON (the plugin's converter does), the rest
        are written here, the same bytes without the converter's dispatch."""
        if self._plain_records:
            plain = Payload()
            plain.CopyFrom(_JSON_PLAIN)
            plain.data = to_json(record)
            return plain
        payload = workflow.payload_converter().to_payload(record)
        if self._plain_records is None:
            self._plain_records = payload == Payload(
                metadata=_JSON_PLAIN.metadata, data=to_json(record)
            )
        return payload

    def _stream_handoff(self) -> WorkflowStreamState:
        """The stream's state for the successor, with only its latest records (at most
        `HANDOFF_RECORDS`, `HANDOFF_BYTES`): the rest stay readable in this run (the
        `__temporal_workflow_stream_poll` query) while it is retained."""
        kept = total = 0
        for size in reversed(self._recent):
            if total + size > HANDOFF_BYTES:
                break
            total += size
            kept += 1
        self.stream.truncate(self._stream_seq() - kept)
        return self.stream.get_state()

    def _refuse_publish(self, *inputs: Any) -> None:
        workflow.logger.warning(
            "Workflow Streams publish ignored: this run's stream holds only its own records "
            "(topic %r); subscribe to it instead",
            EVENTS_TOPIC,
        )

    def _take_deltas(self, batch: ModelDeltaBatch) -> None:
        """Publishes a `model_request` activity's batch of deltas as `model_delta` records.

        Only batches of the request in flight count, in order, once: a late batch of an
        earlier step, one of an attempt already superseded, and a resent batch are dropped.
        The first batch of a newer attempt after an older attempt published text emits
        `model_retry` first, so clients drop the superseded text."""
        loop = self.controller.loop if self.controller is not None else None
        node = self.executor.node
        if (
            loop is None
            or not loop.driving
            or node is not AgentExecutionNode.BEFORE_MODEL_REQUEST
            or batch.run_step != loop.state.run_step + 1
        ):
            workflow.logger.debug("model_deltas of step %d dropped: not in flight", batch.run_step)
            return
        step, attempt, expected = self._deltas or (batch.run_step, batch.attempt, 0)
        if step != batch.run_step:
            step, attempt, expected = batch.run_step, batch.attempt, 0
        if batch.attempt < attempt or (batch.attempt == attempt and batch.batch < expected):
            return
        if batch.attempt > attempt:
            if self._deltas is not None and self._deltas[0] == step:
                loop.emit(
                    "model_retry",
                    AgentExecutionNode.BEFORE_MODEL_REQUEST,
                    run_step=step,
                    attempt=batch.attempt,
                    superseded=attempt,
                )
            attempt, expected = batch.attempt, 0
        for part, text in _merged(batch.deltas):
            loop.emit_delta(step, attempt, part, text)
        self._deltas = (step, attempt, batch.batch + 1)

    @workflow.signal(name="model_deltas")
    def model_deltas(self, *inputs: Any) -> None:
        """Deltas from this run's `model_request` activity (never sent by people)."""
        batch = self._signal_input(ModelDeltaBatch, "model_deltas", inputs)
        if batch is not None:
            self._take_deltas(batch)

    def _failed(self, error: AgentError) -> ApplicationError:
        """Records why the run failed and makes it a non-retryable workflow failure."""
        self.error = f"{error.kind}: {error.message}"
        self._publish()
        return _fail(error.kind, error.message)

    # -- continue-as-new -------------------------------------------------------------------

    def _should_continue_as_new(self, checkpoint: AgentCheckpoint) -> bool:
        """Only at `prepare_model_request`: no tool batch or human decision is in flight."""
        if checkpoint.node is not AgentExecutionNode.PREPARE_MODEL_REQUEST:
            return False
        if self._prompt_updates:
            # A `send_prompt` waits for this turn's answer: continue after answering it.
            return False
        if workflow.info().is_continue_as_new_suggested():
            return True
        steps = self._session_steps + checkpoint.run_step - self._start_step
        return self._after_steps is not None and steps >= self._after_steps

    def _continuation(
        self, checkpoint: AgentCheckpoint, runner: ActivityNodeRunner
    ) -> AgentWorkflowInput:
        state = checkpoint.state
        if state.history_offset:
            return self._continuation_without_history(checkpoint, runner)
        assert self.controller is not None
        kept = self.controller.agent.process_history(state.message_history)
        carried = state.model_copy(update={"message_history": kept})
        continued = self.input.model_copy(
            update={
                "message_history": [],
                "continuation": Continuation(
                    checkpoint=checkpoint.model_copy(update={"state": carried}),
                    stream_seq=self._stream_seq(),
                    history_digest=EMPTY_DIGEST,
                    decided=self.decided,
                    delivered=sorted(self.delivered),
                    checkpoint_count=self.executor.checkpoint_count,
                    pause_reason=self.executor.pause_reason,
                    carries_history=True,
                    forked_from=self.forked_from,
                    session=self._session_carry(),
                    earlier_runs=self.earlier_runs + 1,
                    stream=self._stream_handoff(),
                    runs=[*self.earlier_links, self._own_link()],
                ),
            }
        )
        if workflow.info().task_queue not in registry.external_storage_queues:
            size = len(continued.model_dump_json())
            if size > CONTINUATION_LIMIT_BYTES:
                raise ConversationTooLarge(
                    f"continuing as new would carry {size} bytes ({len(kept)} messages), more "
                    f"than Temporal accepts in one payload ({CONTINUATION_LIMIT_BYTES}); "
                    "configure external storage (DURABLE_AGENT_STORAGE, see the README) so "
                    "large payloads leave history, or bound the history with "
                    "AgentBuilder.history_processor(keep_last_messages(n))"
                )
        workflow.logger.info(
            "continuing as new",
            extra={"node": checkpoint.node.value, "messages": len(kept)},
        )
        return continued

    def _continuation_without_history(
        self, checkpoint: AgentCheckpoint, runner: ActivityNodeRunner
    ) -> AgentWorkflowInput:
        """How runs started by release 0.1 go on: their earlier messages stay in the runs
        that hold them (`segments`), as they did when those runs began."""
        state = checkpoint.state
        held = state.history_offset + len(state.message_history)
        digest = runner.digest_of(state.message_history)
        segment = HistorySegment(
            run_id=workflow.info().run_id, start=state.history_offset, end=held
        )
        trimmed = state.model_copy(update={"message_history": [], "history_offset": held})
        workflow.logger.info(
            "continuing as new", extra={"node": checkpoint.node.value, "messages": held}
        )
        return self.input.model_copy(
            update={
                "message_history": [],
                "continuation": Continuation(
                    checkpoint=checkpoint.model_copy(update={"state": trimmed}),
                    stream_seq=self._stream_seq(),
                    history_digest=digest,
                    segments=[*self.segments, segment],
                    forked_from=self.forked_from,
                    decided=self.decided,
                    delivered=sorted(self.delivered),
                    checkpoint_count=self.executor.checkpoint_count,
                    pause_reason=self.executor.pause_reason,
                    stream=self._stream_handoff(),
                    runs=[*self.earlier_links, self._own_link()],
                ),
            }
        )

    def _restore(self, continuation: Continuation) -> None:
        self.segments = list(continuation.segments)
        self.earlier_runs = continuation.earlier_runs or len(continuation.segments)
        self.decided = dict(continuation.decided)
        self.delivered = set(continuation.delivered)
        self.executor.latest = continuation.checkpoint
        self.executor.earlier_checkpoints = continuation.checkpoint_count
        self.executor.pause_reason = continuation.pause_reason

    def _agent(self, registration: AgentRegistration, input: AgentWorkflowInput) -> Agent[Any]:
        """The registered agent, with the run's overrides (a model it does not allow fails
        the run at once, before any activity)."""
        try:
            return registration.agent_for(input.overrides)
        except AgentError as error:
            raise self._failed(error) from error

    async def _fork(
        self, input: AgentWorkflowInput, controller: RunController
    ) -> tuple[AgentRunState, Coroutine[Any, Any, AgentRunState]]:
        """A fork's first state is another run's checkpoint: `load_checkpoint` reads it
        (a bad source fails the fork there, before any model or tool activity), then the
        fork resumes from it as a continued-as-new run does, as a run of its own."""
        if problem := input.problem():
            raise self._failed(InvalidInput(problem))
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
            raise self._failed(fork_failure(error)) from error
        origin = loaded.origin
        self.forked_from = origin
        instructions = input.overrides.instructions if input.overrides else None
        try:
            drive = controller.resume(
                loaded.checkpoint,
                stream_start=0,
                instructions=instructions,
                run_id=new_id(WorkflowIdSource(), "run"),
            )
        except AgentError as error:
            raise self._failed(error) from error
        loop = controller.loop
        assert loop is not None
        self.executor.latest = loaded.checkpoint.model_copy(update={"state": loop.state.snapshot()})
        loop.emit(
            "forked",
            None,
            workflow_id=origin.workflow_id,
            workflow_run_id=origin.run_id,
            index=origin.index,
            checkpoint_id=origin.checkpoint_id,
            node=origin.node.value,
            run_step=origin.run_step,
            source_run_id=loaded.checkpoint.run_id,
        )
        workflow.logger.info("forked", extra={"source": source.describe(), "node": origin.node})
        return loop.state, drive

    def _registration(self, input: AgentWorkflowInput) -> AgentRegistration:
        try:
            return registry.get(input.agent)
        except AgentError as error:
            raise self._failed(error) from error

    async def _wait_for_humans(self, state: AgentRunState) -> None:
        self.waiting_since = workflow.now()
        self._publish()
        timeout = self.input.approval_timeout_seconds
        try:
            await workflow.wait_condition(
                self._all_decided, timeout=timedelta(seconds=timeout) if timeout else None
            )
        except TimeoutError:
            for approval in state.pending_approval_tool_returns:
                if approval.tool_call_id not in self.decisions:
                    expired = ToolApprovalDecision.deny(APPROVAL_EXPIRED, decided_by="system")
                    self.decisions[approval.tool_call_id] = expired
                    self._announce_decision(approval.tool_call_id, expired)
            self._publish()
            await workflow.wait_condition(self._all_decided)

    def _all_decided(self) -> bool:
        state = self.state
        assert state is not None
        return all(
            a.tool_call_id in self.decisions for a in state.pending_approval_tool_returns
        ) and all(d.tool_call_id in self.results for d in state.deferred_tool_returns)

    # -- visibility ------------------------------------------------------------------------

    def _status(self) -> str:
        if self.error is not None:
            return RunStatus.FAILED.value
        if self._awaiting_prompt:
            return AWAITING_PROMPT
        if self.state is None:
            return RunStatus.STARTING.value
        if self.executor.is_suspended:
            return RunStatus.WAITING.value
        return self.state.status.value

    def _undecided(self) -> list[PendingApprovalView]:
        if self.state is None:
            return []
        return [
            PendingApprovalView(
                tool_call_id=a.tool_call_id,
                tool_name=a.tool_name,
                arguments=a.arguments,
                reason=a.reason,
                decided=a.decision is not None or a.tool_call_id in self.decisions,
                **self._wait_view(a.tool_name, approval=True),
            )
            for a in self.state.pending_approval_tool_returns
        ]

    def _wait_view(self, tool_name: str, *, approval: bool) -> dict[str, Any]:
        """When a pending call began waiting, when it expires, who may decide it and whether
        its arguments may be replaced: for the inbox, from the run's own state."""
        since = self.waiting_since
        timeout = self.input.approval_timeout_seconds
        agent = self.controller.agent if self.controller is not None else None
        allowed = agent.approvers_of(tool_name) if agent is not None and approval else None
        listings = self.state.toolset_listings if self.state is not None else []
        validated = (agent is not None and tool_name in agent.tools) or any(
            tool.name == tool_name for listing in listings for tool in listing.tools
        )
        return {
            "waiting_since": since,
            "expires_at": since + timedelta(seconds=timeout)
            if since is not None and timeout and approval
            else None,
            "approvers": sorted(allowed) if allowed is not None else None,
            "overridable": approval and validated,
        }

    def _publish(self) -> None:
        status = self._status()
        ended = status in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)
        # A run that ended waits for nobody, whatever calls its last state still lists.
        pending = [] if ended else [p for p in self._undecided() if not p.decided]
        key = (status, len(pending))
        if key != self._published:
            self._published = key
            workflow.upsert_search_attributes(
                [AGENT_STATUS.value_set(status), PENDING_APPROVALS.value_set(len(pending))]
            )
        workflow.set_current_details(self._details(status, pending))

    def _details(self, status: str, pending: list[PendingApprovalView]) -> str:
        node = self.executor.node.value if self.executor.node else "-"
        step = self.state.run_step if self.state else 0
        lines = [
            f"**Agent** `{self.input.agent}` · **status** `{status}` · **node** `{node}` · "
            f"**step** {step}"
        ]
        if self.executor.suspended_reason:
            lines.append(f"\n**Suspended:** {self.executor.suspended_reason} (send `resume`)")
        if pending:
            lines.append("\n**Pending approvals**\n")
            lines.extend(
                f"- `{p.tool_call_id}` · tool `{p.tool_name}` · arguments "
                f"`{json.dumps(p.arguments, default=str)}`"
                for p in pending
            )
            lines.append('\nSend the `approval` signal: `{"tool_call_id": ..., "approved": true}`')
        if self.error:
            lines.append(f"\n**Failed:** {self.error}")
        return "\n".join(lines)

    @workflow.query
    def status(self) -> AgentStatusView:
        state = self.state
        deferred = [
            PendingApprovalView(
                tool_call_id=d.tool_call_id,
                tool_name=d.tool_name,
                arguments=d.arguments,
                reason=d.reason,
                decided=d.tool_call_id in self.results,
                **self._wait_view(d.tool_name, approval=False),
            )
            for d in (state.deferred_tool_returns if state else [])
        ]
        return AgentStatusView(
            agent=self.input.agent,
            status=self._status(),
            node=self.executor.node.value if self.executor.node else None,
            run_step=state.run_step if state else 0,
            run_id=state.run_id if state else None,
            conversation_id=state.conversation_id if state else None,
            suspend_reason=self.executor.suspended_reason,
            pending_approvals=self._undecided(),
            deferred_calls=deferred,
            usage=state.usage if state else Usage(),
            output=state.output if state else None,
            error=self.error,
            checkpoint_count=self.executor.checkpoint_count,
            continued_as_new=self.earlier_runs,
            steering=list(state.pending_steering) if state else [],
            forked_from=self.forked_from,
            session=self._session_view(),
        )

    @workflow.query
    def checkpoints(self) -> CheckpointsView:
        """This run's boundaries; `earlier_runs` hold the ones before (continue-as-new)."""
        return CheckpointsView(
            run_id=workflow.info().run_id,
            first_index=self.executor.earlier_checkpoints,
            checkpoints=self.executor.evidence,
            earlier_runs=self.earlier_links,
        )

    @workflow.query
    def runs(self) -> list[RunLink]:
        """Every run of this workflow's continue-as-new chain, this one last: where each
        one's stream records and checkpoints begin."""
        return [*self.earlier_links, self._own_link()]

    @workflow.query
    def latest_checkpoint(self) -> AgentCheckpoint | None:
        return self.executor.latest

    @workflow.query
    def checkpoint_at(self, query: CheckpointQuery) -> CheckpointLookup:
        """One boundary's whole checkpoint, for forks: by index over the chain, by id, or
        (neither) the latest a run can go on from, i.e. not a `run_failed`. `checkpoint`
        is None when this run did not record it; `previous_run_id` names the run to ask."""
        executor = self.executor
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
        info = workflow.info()
        return CheckpointLookup(
            agent=self.input.agent,
            run_id=info.run_id,
            checkpoint=executor.recorded(position) if position is not None else None,
            index=first + position if position is not None else None,
            first_index=first,
            count=count,
            previous_run_id=info.continued_run_id,
        )

    @workflow.query
    def message_history_page(self, page: HistoryPageQuery) -> list[ModelMessage]:
        """Messages from global index `page.offset`, as far as this run holds them.

        Serves the model-request activity when its cache misses (another worker, a
        restart); earlier messages are held by the runs `history_segments` names.
        """
        if self.state is None:
            return []
        start = page.offset - self.state.history_offset
        if start < 0:
            return []
        return self.state.message_history[start : start + page.limit]

    @workflow.query
    def history_segments(self) -> list[HistorySegment]:
        """Which workflow run holds which messages, this run last."""
        state = self.state
        if state is None:
            return list(self.segments)
        own = HistorySegment(
            run_id=workflow.info().run_id,
            start=state.history_offset,
            end=state.history_offset + len(state.message_history),
        )
        return [*self.segments, own]

    @workflow.query
    def toolset_tools(self) -> list[ToolDefinition]:
        """The run's listed toolset tools as the model is shown them: serves the
        model-request activity when its cache misses (model requests carry only a digest)."""
        loop = self.controller.loop if self.controller is not None else None
        return loop.toolset_definitions() if loop is not None else []

    # -- human input -----------------------------------------------------------------------

    def _approval_problem(self, signal: ApprovalSignal) -> str | None:
        if self.controller is None:
            return f"run is {self._status()}, not waiting for an approval"
        state = self.state
        problem = self.controller.approval_problem(
            state, signal.tool_call_id, decided=self.decided, status=self._status()
        )
        if problem is None and signal.approved and state is not None:
            problem = self.controller.override_problem(
                state, signal.tool_call_id, signal.override_arguments
            )
        return problem

    def _authorization_problem(self, signal: ApprovalSignal) -> str | None:
        """Whether the sender may make this decision: the tool's approvers and, when this
        worker has approval keys, a valid signature. Asked once `_approval_problem` found
        the call pending; reads state and the worker's keys only."""
        state = self.state
        assert self.controller is not None
        assert state is not None
        tool = next(
            a.tool_name
            for a in state.pending_approval_tool_returns
            if a.tool_call_id == signal.tool_call_id
        )
        info = workflow.info()
        return decision_problem(
            self.controller.agent,
            tool,
            signal,
            workflow_id=info.workflow_id,
            keys=worker_keys.get(info.task_queue),
            now=workflow.now(),
        )

    def _signal_authorization(self, signal: ApprovalSignal) -> str | None:
        """`_authorization_problem` for a signal, whose verdict must replay unchanged.

        A signal cannot be refused, only dropped, and whether it is dropped depends on this
        worker's keys and the agent's approvers, which history does not hold. So a drop is
        recorded as a patch marker (one per signal that gets this far): a replay, on a
        worker with other keys or none, drops exactly the signals that were dropped.
        """
        self._approval_signals += 1
        marker = f"{DROPPED_APPROVAL}-{self._approval_signals}"
        if workflow.unsafe.is_replaying_history_events():
            return "dropped when it arrived" if workflow.patched(marker) else None
        problem = self._authorization_problem(signal)
        if problem is not None:
            workflow.patched(marker)
        return problem

    def _deferred_problem(self, tool_call_id: str) -> str | None:
        if self.controller is None:
            return f"run is {self._status()}, not waiting for a deferred result"
        return self.controller.deferred_problem(
            self.state, tool_call_id, delivered=self.delivered, status=self._status()
        )

    def _record_approval(self, signal: ApprovalSignal) -> None:
        if signal.approved:
            decision = ToolApprovalDecision.approve(
                override_arguments=signal.override_arguments, decided_by=signal.decided_by
            )
        else:
            decision = ToolApprovalDecision.deny(
                signal.reason or "denied", decided_by=signal.decided_by
            )
        self.decisions[signal.tool_call_id] = decision
        self.decided[signal.tool_call_id] = decision
        self._announce_decision(signal.tool_call_id, decision)
        workflow.logger.info(
            "approval recorded",
            extra={
                "tool_call_id": signal.tool_call_id,
                "approved": signal.approved,
                "decided_by": signal.decided_by,
            },
        )
        self._publish()

    def _record_result(self, signal: DeferredResultSignal) -> None:
        self.delivered.add(signal.tool_call_id)
        self.results[signal.tool_call_id] = DeferredToolResult(
            tool_call_id=signal.tool_call_id, status=signal.status, response=signal.response
        )
        loop = self.controller.loop if self.controller is not None else None
        state = self.state
        if loop is not None and state is not None:
            name = next(
                (
                    d.tool_name
                    for d in state.deferred_tool_returns
                    if d.tool_call_id == signal.tool_call_id
                ),
                "",
            )
            loop.announce_result(signal.tool_call_id, name, signal.status)
        self._publish()

    def _announce_decision(self, tool_call_id: str, decision: ToolApprovalDecision) -> None:
        loop = self.controller.loop if self.controller is not None else None
        state = self.state
        if loop is None or state is None:
            return
        name = next(
            (
                a.tool_name
                for a in state.pending_approval_tool_returns
                if a.tool_call_id == tool_call_id
            ),
            "",
        )
        loop.announce_decision(tool_call_id, name, decision)

    def _accepted(self, message: str, *, resumes: bool = False) -> UpdateAccepted:
        """`status` is what the run does next: an accepted resume, or the last missing
        decision, sets it running again."""
        status = self._status()
        if status == RunStatus.WAITING.value and (
            resumes
            or (
                self.state is not None
                and self.state.status is RunStatus.WAITING
                and not self.executor.is_suspended
                and self._all_decided()
            )
        ):
            status = RunStatus.RUNNING.value
        return UpdateAccepted(message=message, status=status)

    def _signal_input(
        self, model: type[SignalT], name: str, inputs: tuple[Any, ...], *, optional: bool = False
    ) -> SignalT | None:
        """Signals cannot be refused, so a malformed one is logged and dropped here; raising
        would fail the workflow task over and over."""
        if not inputs and optional:
            return model()
        if len(inputs) != 1 or (inputs[0] is None and not optional):
            workflow.logger.warning(
                "%s signal ignored: expected one JSON object as input, got %d input(s)",
                name,
                len(inputs),
            )
            return None
        try:
            return model.model_validate(inputs[0] if inputs[0] is not None else {})
        except ValidationError as error:
            workflow.logger.warning("%s signal ignored: malformed input: %s", name, error)
            return None

    @workflow.signal(dynamic=True)
    def unknown_signal(self, name: str, args: Sequence[RawValue]) -> None:
        workflow.logger.warning(
            "unknown signal %r ignored; this workflow accepts: approval, deferred_result, "
            "resume, suspend, steer, end_session",
            name,
        )

    @workflow.signal
    def approval(self, *inputs: Any) -> None:
        signal = self._signal_input(ApprovalSignal, "approval", inputs)
        if signal is None:
            return
        problem = self._approval_problem(signal) or self._signal_authorization(signal)
        if problem:
            workflow.logger.warning("approval signal ignored: %s", problem)
            return
        self._record_approval(signal)

    @workflow.update
    def submit_approval(self, request: ApprovalSignal) -> UpdateAccepted:
        self._record_approval(request)
        verdict = "approved" if request.approved else "denied"
        return self._accepted(f"tool call {request.tool_call_id!r} {verdict}")

    @submit_approval.validator
    def _validate_approval(self, request: ApprovalSignal) -> None:
        problem = self._approval_problem(request)
        if problem:
            raise ApplicationError(problem, type="invalid_approval", non_retryable=True)
        problem = self._authorization_problem(request)
        if problem:
            raise ApplicationError(problem, type="unauthorized_approval", non_retryable=True)

    @workflow.signal
    def deferred_result(self, *inputs: Any) -> None:
        signal = self._signal_input(DeferredResultSignal, "deferred_result", inputs)
        if signal is None:
            return
        problem = self._deferred_problem(signal.tool_call_id)
        if problem:
            workflow.logger.warning("deferred_result signal ignored: %s", problem)
            return
        self._record_result(signal)

    @workflow.update
    def submit_deferred_result(self, request: DeferredResultSignal) -> UpdateAccepted:
        self._record_result(request)
        return self._accepted(f"result for deferred call {request.tool_call_id!r} recorded")

    @submit_deferred_result.validator
    def _validate_deferred(self, request: DeferredResultSignal) -> None:
        problem = self._deferred_problem(request.tool_call_id)
        if problem:
            raise ApplicationError(problem, type="invalid_deferred_result", non_retryable=True)

    @workflow.signal
    def resume(self, *inputs: Any) -> None:
        signal = self._signal_input(ResumeSignal, "resume", inputs, optional=True)
        if signal is None:
            return
        if not self.executor.request_resume(signal.reason):
            workflow.logger.warning(
                "resume signal ignored: run is %s, not suspended", self._status()
            )

    @workflow.update
    def resume_run(self, request: ResumeSignal) -> UpdateAccepted:
        self.executor.request_resume(request.reason)
        return self._accepted("run resumed", resumes=True)

    @resume_run.validator
    def _validate_resume(self, request: ResumeSignal) -> None:
        if not self.executor.is_suspended:
            hint = " (it waits for approvals: send them instead)" if self._undecided() else ""
            raise ApplicationError(
                f"run is not suspended (status: {self._status()}){hint}",
                type="not_suspended",
                non_retryable=True,
            )

    @workflow.signal
    def suspend(self, *inputs: Any) -> None:
        signal = self._signal_input(SuspendSignal, "suspend", inputs)
        if signal is None:
            return
        if self.state is not None and self.state.status in (
            RunStatus.COMPLETED,
            RunStatus.FAILED,
            RunStatus.CANCELLED,
        ):
            workflow.logger.warning("suspend signal ignored: run is %s", self.state.status.value)
            return
        self.executor.request_pause(signal.reason)

    # -- steering --------------------------------------------------------------------------

    def _steering_problem(self, message: str) -> str | None:
        """Only a run whose loop can still read it may be steered: running, or waiting for
        a human or a resume (the message then waits for the run to go on)."""
        status = self._status()
        loop = self.controller.loop if self.controller is not None else None
        if loop is None or status not in (RunStatus.RUNNING.value, RunStatus.WAITING.value):
            if status == AWAITING_PROMPT:
                return "the session waits for its next prompt; send it with send_prompt"
            return f"run is {status}; only a running or waiting run can be steered"
        return steering_problem(message)

    def _record_steering(self, message: str) -> None:
        loop = self.controller.loop if self.controller is not None else None
        assert loop is not None, "steering is checked by _steering_problem first"
        loop.steer(message)
        workflow.logger.info("steering message queued", extra={"chars": len(message)})

    @workflow.signal
    def steer(self, *inputs: Any) -> None:
        signal = self._signal_input(SteerSignal, "steer", inputs)
        if signal is None:
            return
        if problem := self._steering_problem(signal.message):
            workflow.logger.warning("steer signal ignored: %s", problem)
            return
        self._record_steering(signal.message)

    @workflow.update
    def steer_run(self, request: SteerSignal) -> UpdateAccepted:
        self._record_steering(request.message)
        return self._accepted("steering message queued for the model's next request")

    @steer_run.validator
    def _validate_steer(self, request: SteerSignal) -> None:
        if problem := self._steering_problem(request.message):
            raise ApplicationError(problem, type="invalid_steering", non_retryable=True)


async def _finished(state: AgentRunState) -> AgentRunState:
    """The drive of a session that has no turn to run yet: it goes straight to waiting."""
    return state


def _stream_state(continuation: Continuation | None) -> WorkflowStreamState | None:
    """Where this run's stream begins: where the run before it stopped (continuations
    from before the event stream carry only `stream_seq`)."""
    if continuation is None:
        return None
    if continuation.stream is not None:
        return continuation.stream
    return WorkflowStreamState(base_offset=continuation.stream_seq)


def _merged(deltas: Sequence[ModelDelta]) -> list[tuple[str, str]]:
    """Consecutive deltas of one kind joined: one record per run of text or thinking."""
    out: list[tuple[str, str]] = []
    for delta in deltas:
        if out and out[-1][0] == delta.kind:
            out[-1] = (delta.kind, out[-1][1] + delta.text)
        elif delta.text:
            out.append((delta.kind, delta.text))
    return out
