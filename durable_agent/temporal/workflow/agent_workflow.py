"""`AgentWorkflow`: the agent loop as a Temporal workflow.

The loop is the same one that runs in-process; here its working nodes are activities
(`ActivityNodeRunner`), its boundaries go through the `TemporalExecutor`, and waits for
humans are waits fed by signals and updates. This class declares the workflow's handlers
and hands each to the component that owns its concern: `Session` (turns and prompts),
`HumanDecisions` (approvals, deferred results), `Visibility` (status, search attributes,
details), `EventStream` (records and deltas), `Chain` (continue-as-new, forks' origin) and
`Opening` (how a run begins). Everything here is deterministic: no I/O, ids from
`workflow.uuid4()`, time from `workflow.now()`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from ...contract.checkpoint import AgentCheckpoint, ExecutionSuspended
    from ...contract.errors import AgentError
    from ...contract.messages import ModelMessage
    from ...contract.state import AgentRunState, RunStatus
    from ...contract.tools import ToolDefinition
    from ...engine.controller import RunController
    from ...engine.runner import Driver
    from .._sdk import STREAM_PUBLISH_SIGNAL
    from ..executor import CONTINUE_AS_NEW, TemporalExecutor
    from ..hosting import hosting
    from ..outbox import all_sent
    from ..quota.gate import QuotaGate, quota_priority
    from ..quota.wire import GRANT_SIGNAL
    from ..runner import ActivityNodeRunner, WorkflowIdSource
    from ..tracing import begin_run, traced_sink
    from ..wire import (
        AgentStatusView,
        AgentWorkflowResult,
        ApprovalSignal,
        CheckpointLookup,
        CheckpointQuery,
        CheckpointsView,
        DeferredResultSignal,
        EndSessionSignal,
        HistoryPageQuery,
        HistorySegment,
        ModelDeltaBatch,
        PromptRequest,
        ResumeSignal,
        RunLink,
        SteerSignal,
        SuspendSignal,
        UpdateAccepted,
    )
    from .continuation import Chain
    from .control import RunControl
    from .costs import CostMemo
    from .decisions import HumanDecisions
    from .events import EventStream
    from .gates import parse_signal
    from .inputs import RawInput, read_input
    from .live import LiveRun, release_evicted
    from .lookup import checkpoint_lookup
    from .opening import Opening, hosted_run
    from .port import TemporalPort
    from .routing import ApprovalRouting
    from .sessions import Session, result_of
    from .subagents import SUBAGENT_STATUS_SIGNAL, SubagentRuns
    from .visibility import Visibility

__all__ = ["AgentWorkflow"]


def _fail(kind: str, message: str) -> ApplicationError:
    return ApplicationError(message, type=kind, non_retryable=True)


@workflow.defn(name="AgentWorkflow")
class AgentWorkflow:
    @workflow.init
    def __init__(self, input: RawInput = None) -> None:
        port = self._port = TemporalPort()
        self.hosting = hosting()
        self._cost_memo = CostMemo()
        self.input, self._input_problem = read_input(input)
        if isinstance(input, dict):
            # The SDK keeps the decoded JSON for the run's life (the arguments it passed
            # here and to `run`); what the run reads is `self.input`, so the JSON's
            # contents (a continued run's whole checkpoint among them) need not stay.
            input.clear()
        live = self.live = LiveRun(self.input)
        # One bound method each, handed to every component: a cached run keeps each one made.
        publish, status = self._publish, self._status
        self.executor = TemporalExecutor(
            self.input.suspend_at,
            on_change=publish,
            continue_as_new=self._continue_as_new_due,
            announce=live.announce,
        )
        self.events = EventStream(self.input.continuation, live, self.executor, port)
        workflow.set_signal_handler(STREAM_PUBLISH_SIGNAL, self.events.refuse_publish)
        self.session = Session(self.input, live, port)
        self.decisions = HumanDecisions(
            live, port, status=status, publish=publish, keys=self.hosting.approval_keys
        )
        self.subagents = SubagentRuns(
            port,
            publish,
            priority=self.input.priority,
            refused=self.decisions.remember_refusal,
        )
        self.quota = QuotaGate(publish, lambda: quota_priority(self.input))
        self.visibility = Visibility(
            live, self.executor, self.session, self.decisions, port, self.subagents
        )
        self.chain = Chain(
            live,
            self.executor,
            self.session,
            self.decisions,
            self.events,
            port,
            external_storage=self.hosting.external_storage,
        )
        self.control = RunControl(
            live,
            self.executor,
            port,
            status=status,
            waits_for_decisions=lambda: bool(self.visibility.undecided()),
        )
        self.routing = ApprovalRouting(live, self.decisions, self.subagents, port)

    # -- the run ---------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: RawInput = None) -> AgentWorkflowResult:
        try:
            return await self._run()
        finally:
            # A batched run's last status goes out before the command that ends the run.
            self.visibility.flush()

    async def _run(self) -> AgentWorkflowResult:
        input = self.input
        hosted = hosted_run(input, self._input_problem, self.hosting, self.subagents, self.quota)
        if isinstance(hosted, AgentError):
            self.visibility.begin(batched=False)
            raise self._failed(hosted)
        registration, agent, runner = hosted
        self.visibility.begin(batched=runner.placement.batches_visibility())
        controller = RunController(
            agent,
            Driver(
                runner=runner,
                executor=self.executor,
                ids=WorkflowIdSource(),
                sink=traced_sink(self.events.publish),
                idempotency_prefix=workflow.info().workflow_id,
                max_concurrent_tools=registration.activities.max_concurrent_tool_activities,
                model_deltas=input.stream_deltas is not False,
            ),
        )
        self.live.controller = controller
        opening = Opening(input, controller, self.executor, self.chain, self._failed)
        state, drive = await opening.begin()
        begin_run(state, forked=input.continuation is None and input.resume_from is not None)
        self.chain.start_step = state.run_step
        self.chain.after_steps = registration.activities.continue_as_new_after_steps
        self._publish()
        try:
            while True:
                try:
                    state = await drive
                    del drive  # the finished coroutine need not last through a wait
                except ExecutionSuspended as suspended:
                    if suspended.reason != CONTINUE_AS_NEW:
                        raise
                    await self._continue_as_new(suspended.checkpoint, runner)
                if state.status is not RunStatus.WAITING:
                    if not input.session:
                        break
                    following = await self._next_turn(state, controller, runner)
                    if following is None:
                        break
                    drive = following
                    continue
                # A long wait: what the run keeps is packed meanwhile (see `LiveRun.park`).
                self.executor.pack()
                self.live.park(self.executor)
                del state  # parked: the wait holds no state object
                await self.decisions.wait(input.approval_timeout_seconds)
                state = self.live.unpark(self.executor)
                approvals, results = self.decisions.take(state)
                drive = controller.continue_after_hitl(state, approvals, results, announce=False)
        except AgentError as error:
            failure = self._failed(error)
            if input.session:
                # A `send_prompt` waiting for this turn gets the failure as its answer.
                self.events.detach()
                await workflow.wait_condition(workflow.all_handlers_finished)
            await all_sent(self.quota.outbox, self.subagents.outbox)
            raise failure from error
        except asyncio.CancelledError:
            self.live.cancelled(workflow.cancellation_reason())
            self._publish()
            raise
        self._publish()
        self.events.detach()
        await all_sent(self.quota.outbox, self.subagents.outbox)
        if not workflow.all_handlers_finished():
            # Subscribers waiting in a poll get the last records instead of an abandoned
            # update; runs recorded before the stream never get here.
            await workflow.wait_condition(workflow.all_handlers_finished)
        return result_of(state)

    async def _continue_as_new(
        self, checkpoint: AgentCheckpoint, runner: ActivityNodeRunner
    ) -> None:
        # Waiting subscribers get what is there and follow on to the next run.
        self.events.detach()
        await all_sent(self.quota.outbox, self.subagents.outbox)
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(self.chain.successor(checkpoint, runner))

    async def _next_turn(
        self, state: AgentRunState, controller: RunController, runner: ActivityNodeRunner
    ) -> Any:
        """After a session's turn (or before its first): answers the `send_prompt` waiting
        for it, continues as new if history has grown enough, waits for the next prompt
        and starts its turn. None: the session ends."""
        if self.session.answer(state):
            self.chain.turn_finished(state.run_step)
        if self.session.ends_now(self._publish):
            return None
        if self.chain.due_between_turns():
            self.session.between_turns = True
            assert self.executor.latest is not None
            await self._continue_as_new(self.executor.latest, runner)
        prompt = await self.session.next_prompt(self._publish)
        if prompt is None:
            return None
        self.chain.start_step = 0
        return self.session.start_turn(controller, prompt, state)

    def _durable_agent_evicted(self) -> None:
        """The plugin's sandbox: the run has left the cache (see `live.release_evicted`)."""
        release_evicted(vars(self))

    def _continue_as_new_due(self, checkpoint: AgentCheckpoint) -> bool:
        return self.chain.due(checkpoint)

    def _failed(self, error: AgentError) -> ApplicationError:
        """Records why the run failed and makes it a non-retryable workflow failure."""
        self.live.error = f"{error.kind}: {error.message}"
        self.session.awaiting_prompt = False
        self._publish()
        return _fail(error.kind, error.message)

    def _status(self) -> str:
        return self.visibility.status()

    def _publish(self) -> None:
        self.visibility.publish()
        self._cost_memo.publish(self._status(), self.live.state.usage if self.live.state else None)

    @property
    def state(self) -> AgentRunState | None:
        """The run's live state: the one the loop is driving (None before it has one)."""
        return self.live.state

    # -- sessions --------------------------------------------------------------------------

    @workflow.update
    async def send_prompt(self, request: PromptRequest) -> AgentWorkflowResult:
        """A session's next turn; answers with that turn's result once it has one."""
        turn, answer = await self.session.answer_for(request.prompt, lambda: self.live.error)
        if answer is None:
            raise _fail("turn_failed", f"turn {turn} failed: {self.live.error}")
        return answer

    @send_prompt.validator
    def _validate_prompt(self, request: PromptRequest) -> None:
        if problem := self.session.prompt_problem(request.prompt, self._status()):
            raise _fail(self.session.problem_kind, problem)

    @workflow.signal
    def end_session(self, *inputs: Any) -> None:
        signal = parse_signal(EndSessionSignal, "end_session", inputs, self._port, optional=True)
        if signal is not None and self.session.end():
            self._publish()

    # -- the event stream ------------------------------------------------------------------

    @workflow.signal(name="model_deltas")
    def model_deltas(self, *inputs: Any) -> None:
        """Deltas from this run's `model_request` activity (never sent by people)."""
        batch = parse_signal(ModelDeltaBatch, "model_deltas", inputs, self._port)
        if batch is not None:
            self.events.take_deltas(batch)

    # -- queries ---------------------------------------------------------------------------

    @workflow.query
    def status(self) -> AgentStatusView:
        view = self.visibility.view(
            continued_as_new=self.chain.earlier_runs, forked_from=self.chain.forked_from
        )
        view.quota_wait = self.quota.waiting
        return view

    @workflow.query
    def checkpoints(self) -> CheckpointsView:
        """This run's boundaries; `earlier_runs` hold the ones before (continue-as-new)."""
        return CheckpointsView(
            run_id=workflow.info().run_id,
            first_index=self.executor.earlier_checkpoints,
            checkpoints=self.executor.evidence,
            earlier_runs=self.chain.earlier_links,
        )

    @workflow.query
    def runs(self) -> list[RunLink]:
        """Every run of this workflow's continue-as-new chain, this one last: where each
        one's stream records and checkpoints begin."""
        return self.chain.links()

    @workflow.query
    def latest_checkpoint(self) -> AgentCheckpoint | None:
        return self.executor.latest

    @workflow.query
    def checkpoint_at(self, query: CheckpointQuery) -> CheckpointLookup:
        """One boundary's whole checkpoint, for forks: by index over the chain, by id, or
        (neither) the latest a run can go on from, i.e. not a `run_failed`. `checkpoint`
        is None when this run did not record it; `previous_run_id` names the run to ask."""
        return checkpoint_lookup(self.executor, query, self.input.agent, self._port.identity())

    @workflow.query
    def message_history_page(self, page: HistoryPageQuery) -> list[ModelMessage]:
        """Messages from global index `page.offset`, as far as this run holds them: for the
        model-request activity when its cache misses (another worker, a restart); earlier
        messages are held by the runs `history_segments` names."""
        return self.chain.history_page(page)

    @workflow.query
    def history_segments(self) -> list[HistorySegment]:
        """Which workflow run holds which messages, this run last."""
        return self.chain.history_segments()

    @workflow.query
    def toolset_tools(self) -> list[ToolDefinition]:
        """The run's listed toolset tools as the model is shown them: serves the
        model-request activity when its cache misses (model requests carry only a digest)."""
        return self.live.toolset_definitions()

    # -- human input: each signal and its update go through one `Gate` ---------------------

    def _accepted(self, message: str, *, resumes: bool = False) -> UpdateAccepted:
        return self.visibility.accepted(message, resumes=resumes)

    # Handlers of the class, not set for each run (`set_signal_handler`): a cached run keeps
    # a definition and a bound method for each handler set for it.

    @workflow.signal(name=SUBAGENT_STATUS_SIGNAL)
    def _subagent_status(self, *inputs: Any) -> None:
        self.subagents.on_status(*inputs)

    @workflow.signal(name=GRANT_SIGNAL)
    def _quota_granted(self, *inputs: Any) -> None:
        self.quota.on_grant(*inputs)

    @workflow.signal(dynamic=True)
    def unknown_signal(self, name: str, args: Sequence[RawValue]) -> None:
        workflow.logger.warning(
            "unknown signal %r ignored; this workflow accepts: approval, deferred_result, "
            "resume, suspend, steer, end_session",
            name,
        )

    @workflow.signal
    def approval(self, *inputs: Any) -> None:
        if not self.routing.forwarded(inputs):
            self.decisions.approval_gate.signal(inputs)

    @workflow.update
    def submit_approval(self, request: ApprovalSignal) -> UpdateAccepted:
        self.decisions.approval_gate.record(request)
        verdict = "approved" if request.approved else "denied"
        return self._accepted(f"tool call {request.tool_call_id!r} {verdict}")

    @submit_approval.validator
    def _validate_approval(self, request: ApprovalSignal) -> None:
        self.routing.validate(request)

    @workflow.signal
    def deferred_result(self, *inputs: Any) -> None:
        self.decisions.result_gate.signal(inputs)

    @workflow.update
    def submit_deferred_result(self, request: DeferredResultSignal) -> UpdateAccepted:
        self.decisions.result_gate.record(request)
        return self._accepted(f"result for deferred call {request.tool_call_id!r} recorded")

    @submit_deferred_result.validator
    def _validate_deferred(self, request: DeferredResultSignal) -> None:
        self.decisions.result_gate.validate(request)

    @workflow.signal
    def resume(self, *inputs: Any) -> None:
        self.control.resume_gate.signal(inputs)

    @workflow.update
    def resume_run(self, request: ResumeSignal) -> UpdateAccepted:
        self.control.resume_gate.record(request)
        return self._accepted("run resumed", resumes=True)

    @resume_run.validator
    def _validate_resume(self, request: ResumeSignal) -> None:
        self.control.resume_gate.validate(request)

    @workflow.signal
    def suspend(self, *inputs: Any) -> None:
        signal = parse_signal(SuspendSignal, "suspend", inputs, self._port)
        if signal is not None:
            self.control.suspend(signal)

    @workflow.signal
    def steer(self, *inputs: Any) -> None:
        self.control.steer_gate.signal(inputs)

    @workflow.update
    def steer_run(self, request: SteerSignal) -> UpdateAccepted:
        self.control.steer_gate.record(request)
        return self._accepted("steering message queued for the model's next request")

    @steer_run.validator
    def _validate_steer(self, request: SteerSignal) -> None:
        self.control.steer_gate.validate(request)
