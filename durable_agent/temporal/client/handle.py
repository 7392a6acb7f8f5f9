"""`AgentRunHandle`: one agent run, its status, result, stream and the decisions a person
sends it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar

from pydantic import BaseModel
from temporalio.client import (
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowUpdateFailedError,
    WorkflowUpdateStage,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from durable_agent import (
    AgentResumeEvidence,
    AgentStreamRecord,
    ModelMessage,
    ModelSettings,
)

from ...contract.decisions import ToolApprovalDecision, denial_problem
from ...engine.controller import size_problem
from ..run_errors import NotAnAgentRun, Rejected, RunClosed, RunFailed
from ..signing import sign_signal
from ..streams import DEFAULT_POLL_INTERVAL, CheckpointChain, StreamReader
from ..wire import (
    HELD_BY_SUBAGENT,
    WORKFLOW_TYPE,
    AgentStatusView,
    AgentWorkflowResult,
    ApprovalSignal,
    DeferredResultSignal,
    EndSessionSignal,
    HistoryPageQuery,
    PromptRequest,
    ResumeSignal,
    RunLink,
    SteerSignal,
    SuspendSignal,
    UpdateAccepted,
)
from ..workflow import AgentWorkflow
from .calls import RunCalls, failure_text
from .connection import Connection, RunHandle
from .time_travel import fork_run, retry_run
from .tree_stream import follow_tree

__all__ = ["AgentRunHandle"]

SESSION_RETRY_DELAYS = (0.2, 0.5, 1.0, 2.0)
"""Waits before sending a prompt again to a session that was continuing as new."""

T = TypeVar("T")
log = logging.getLogger("durable_agent.client")


_CLOSED: dict[WorkflowExecutionStatus, tuple[str, str]] = {
    WorkflowExecutionStatus.COMPLETED: ("completed", "completed"),
    WorkflowExecutionStatus.FAILED: ("failed", "the workflow failed"),
    WorkflowExecutionStatus.CANCELED: ("cancelled", "the workflow was cancelled"),
    WorkflowExecutionStatus.TERMINATED: ("failed", "terminated: the workflow was terminated"),
    WorkflowExecutionStatus.TIMED_OUT: ("failed", "timed_out: the workflow timed out"),
}
"""How a closed execution ended, as an agent status and a reason."""


class AgentRunHandle:
    """One agent run: its status, result and the decisions a person sends it."""

    def __init__(
        self, agents: Connection, handle: RunHandle, *, task_queue: str | None = None
    ) -> None:
        """`agents` is the `AgentClient` the handle came from. `task_queue` is known (and
        the workflow known to be an agent run) for a run this client started; a handle from
        `get()` learns both from its first `describe()`."""
        self.agents = agents
        self.handle = handle
        self._verified = task_queue is not None
        self._calls = RunCalls(
            handle, timeout=agents.timeout, namespace=agents.namespace, task_queue=task_queue
        )

    @property
    def id(self) -> str:
        return self.handle.id

    @property
    def run_id(self) -> str | None:
        """The run this handle was started or fetched with (None: the latest run)."""
        return self.handle.run_id

    @property
    def _task_queue(self) -> str | None:
        """The task queue the run's workers poll, once known (named when none answers)."""
        return self._calls.task_queue

    def __repr__(self) -> str:
        return f"AgentRunHandle(id={self.id!r})"

    # -- reading ----------------------------------------------------------------------------

    async def describe(self) -> WorkflowExecutionDescription:
        """The execution as the server sees it (status, task queue, times).

        Raises `RunNotFound` or `NotAnAgentRun`; every other method checks this first."""
        description = await self._call("describe", self.handle.describe)
        if description.workflow_type != WORKFLOW_TYPE:
            raise NotAnAgentRun(self.id, description.workflow_type)
        self._verified = True
        self._calls.task_queue = description.task_queue
        return description

    async def status(self) -> AgentStatusView:
        """The `status` query: node, step, pending approvals and deferred calls, usage.

        A closed run is answered only if a worker can replay it (else `NoWorker`). The
        query answers from the run's own state, which cannot know that the run was
        terminated or timed out: for a closed run the server's word on how it ended wins,
        and nothing is pending any more."""
        description = await self.describe()
        view = await self._call("status query", lambda: self.handle.query(AgentWorkflow.status))
        ended = _CLOSED.get(description.status) if description.status else None
        if ended is None or view.status == ended[0]:
            return view
        status, how = ended
        return view.model_copy(
            update={
                "status": status,
                "error": view.error or how,
                "pending_approvals": [],
                "deferred_calls": [],
                "suspend_reason": None,
            }
        )

    async def checkpoints(self) -> list[AgentResumeEvidence]:
        """The resume evidence of every boundary of the whole run, in order, across
        continue-as-new (each run's `checkpoints` query answers for its own boundaries and
        names the runs before it). Boundaries of an earlier run that namespace retention
        deleted cannot be shown: they are left out, with a warning naming them
        (`checkpoint_chain()` says which, with every boundary's index)."""
        chain = await self.checkpoint_chain()
        for gone in chain.missing:
            log.warning(
                "checkpoints %d-%d of %r are gone with run %s (deleted by retention)",
                gone.first,
                gone.last,
                self.id,
                gone.run_id,
            )
        return chain.checkpoints

    async def checkpoint_chain(self) -> CheckpointChain:
        """`checkpoints()` with each boundary's index over the chain, and the boundaries
        that can no longer be read (`missing`)."""
        await self._ensure_agent()
        return await self._reader().checkpoints()

    async def runs(self) -> list[RunLink]:
        """The runs of this workflow's continue-as-new chain, oldest first, with the seq
        and checkpoint index each one starts at."""
        await self._ensure_agent()
        return await self._reader().links()

    async def stream(
        self,
        after: int | None = None,
        *,
        poll_interval: float | None = None,
        children: bool = False,
    ) -> AsyncIterator[AgentStreamRecord]:
        """The run's stream records, live, with a seq above `after` (all of them when None):
        after a disconnect, pass the last seq you got to go on exactly where you stopped.

        Ends once the run has ended (completed, failed, cancelled, terminated) and every
        record it published was yielded, so a finished run is replayed and the iterator
        ends; it follows the run across continue-as-new. Waits (for a running run) when
        `after` is past the last record; raises `StreamPastEnd` when the run has ended
        before it. Raises ValueError for a negative `after`, `RunNotFound` and
        `NotAnAgentRun` before reading anything. It polls the run's Workflow Stream with a
        query every `poll_interval` seconds while nothing is new (0.1 by default): queries
        add nothing to history, however many readers there are.

        `children=True` follows the run's sub-agents too, live and at any depth: their
        records come tagged with the child's `workflow_id` and `depth` (`seq` is the
        child's own), and the stream ends once every child has ended as well."""
        if after is not None and after < 0:
            raise ValueError(f"after must be a seq (0 or more) or None, got {after}")
        await self._ensure_agent()
        interval = DEFAULT_POLL_INTERVAL if poll_interval is None else poll_interval
        if not children:
            async for record in self._reader().records(after, poll_interval=interval):
                yield record
            return

        def read(workflow_id: str, start: int | None) -> AsyncIterator[AgentStreamRecord]:
            reader = StreamReader(self.agents.client, workflow_id, self.agents.timeout)
            return reader.records(start, poll_interval=interval)

        async for record in follow_tree(self.id, after, read, poll_interval=interval):
            yield record

    async def stream_position(self) -> int:
        """The seq the run's next record will get (its latest run's stream offset)."""
        await self._ensure_agent()
        return await self._reader().position()

    def _reader(self) -> StreamReader:
        return StreamReader(self.agents.client, self.id, self.agents.timeout)

    async def conversation(self, last: int = 50) -> list[ModelMessage]:
        """The last `last` messages this run holds, oldest first: what led to its pending
        calls. A run continued as new from a release-0.1 run holds only the messages since
        it began (earlier ones stay in the runs its `history_segments` query names)."""
        segments = await self._act(
            "history query", lambda: self.handle.query(AgentWorkflow.history_segments)
        )
        if not segments or last < 1:
            return []
        own = segments[-1]
        page = HistoryPageQuery(offset=max(own.start, own.end - last), limit=last)
        return await self._act(
            "history query", lambda: self.handle.query(AgentWorkflow.message_history_page, page)
        )

    async def result(self) -> AgentWorkflowResult:
        """Waits (without a timeout) for the run to end; raises `RunFailed` if it failed,
        was cancelled, terminated or timed out."""
        await self._ensure_agent()
        try:
            return await self.handle.result()
        except WorkflowFailureError as error:
            raise RunFailed(self.id, failure_text(error)) from error
        except RPCError as error:
            raise await self._calls.explain("result", error) from None
        except RuntimeError as error:
            raise self._calls.without_storage("result", error) from None

    # -- deciding ---------------------------------------------------------------------------

    async def approve(
        self,
        call_id: str,
        by: str | None = None,
        override_arguments: dict[str, Any] | None = None,
        note: str | None = None,
        *,
        groups: Sequence[str] | None = None,
        holder: str | None = None,
    ) -> UpdateAccepted:
        """Approves pending tool call `call_id`; `override_arguments` replace the model's,
        `note` is the approver's remark (the model reads it with the tool's result).

        `by` and `groups` are who decided, checked against the agent's approvers; signed
        when this client has approval keys. `holder` is the workflow that holds the call
        (a sub-agent's child workflow, as `status()` lists it): needed only when two
        workflows of this run's tree wait on calls of the same id, which is refused
        (`ambiguous_call`) listing them."""
        decision = ToolApprovalDecision.approve(override_arguments, decided_by=by, note=note)
        return await self._decide(ApprovalSignal.envelope(call_id, decision, groups, holder=holder))

    async def deny(
        self,
        call_id: str,
        reason: str,
        by: str | None = None,
        *,
        note: str | None = None,
        groups: Sequence[str] | None = None,
        holder: str | None = None,
    ) -> UpdateAccepted:
        """Denies pending tool call `call_id`: the tool never runs, the model sees `reason`
        (which must say something: refused as `invalid_approval` before anything is sent).
        `holder`: as for `approve`."""
        if problem := denial_problem(reason):
            raise Rejected(self.id, problem, "invalid_approval")
        decision = ToolApprovalDecision.deny(reason, decided_by=by, note=note)
        return await self._decide(ApprovalSignal.envelope(call_id, decision, groups, holder=holder))

    async def _decide(self, request: ApprovalSignal) -> UpdateAccepted:
        """Sends the decision to the workflow holding the call: this run, or (when this
        run says a sub-agent's child workflow holds it) that one, signed for it."""
        if request.holder is not None and request.holder != self.id:
            named = AgentRunHandle(self.agents, self.agents.run_handle(request.holder))
            return await named._decide(request)
        keys = self.agents.approval_keys
        signed = sign_signal(keys, self.id, request) if keys is not None else request
        try:
            return await self._update("approval", AgentWorkflow.submit_approval, signed)
        except Rejected as refused:
            if refused.type != HELD_BY_SUBAGENT or not refused.details:
                raise
            holder = AgentRunHandle(self.agents, self.agents.run_handle(str(refused.details[0])))
        return await holder._decide(request)

    async def deferred(
        self,
        call_id: str,
        response: Any,
        status: Literal["success", "error"] = "success",
    ) -> UpdateAccepted:
        """Delivers the result of deferred tool call `call_id` (`status="error"`: it failed)."""
        request = DeferredResultSignal(tool_call_id=call_id, status=status, response=response)
        return await self._update("deferred result", AgentWorkflow.submit_deferred_result, request)

    async def resume(self, reason: str | None = None) -> UpdateAccepted:
        """Resumes a suspended run; `Rejected` (`not_suspended`) if it is not suspended."""
        return await self._update("resume", AgentWorkflow.resume_run, ResumeSignal(reason=reason))

    async def suspend(self, reason: str) -> None:
        """Asks the run to pause at its next boundary (a signal: the workflow has no update
        for it, so there is nothing to reject; `status()` shows when it took effect)."""
        signal = SuspendSignal(reason=reason)
        await self._act("suspend", lambda: self.handle.signal(AgentWorkflow.suspend, signal))

    async def steer(self, message: str) -> UpdateAccepted:
        """Queues `message` for the model's next request (the `steer_run` update); the run
        keeps it in its state and stream. `Rejected` (`invalid_steering`) for an empty
        message or a run that is neither running nor waiting."""
        if problem := size_problem(message, "steering message"):
            raise Rejected(self.id, problem, "invalid_steering")  # the server would refuse it
        request = SteerSignal(message=message)
        return await self._update("steering message", AgentWorkflow.steer_run, request)

    # -- sessions ---------------------------------------------------------------------------

    async def send_prompt(self, prompt: str) -> AgentWorkflowResult:
        """A session's next turn (`send_prompt` update): waits, without a timeout once the
        session has taken it, for that turn's result.

        `Rejected` (`invalid_prompt`) for an empty prompt, a run that is not a session, a
        session busy with a turn or ending; `RunFailed` (`turn_failed: ...`) when the turn
        fails, and the session with it. A session that is just continuing as new between
        two turns is asked again after a moment."""
        if problem := size_problem(prompt, "prompt"):
            raise Rejected(self.id, problem, "invalid_prompt")  # the server would refuse it
        request = PromptRequest(prompt=prompt)

        def send() -> Awaitable[Any]:
            return self.handle.start_update(
                AgentWorkflow.send_prompt, request, wait_for_stage=WorkflowUpdateStage.ACCEPTED
            )

        for delay in (*SESSION_RETRY_DELAYS, None):
            try:
                update = await self._act("prompt", send)
                result: AgentWorkflowResult = await update.result()
                return result
            except RunClosed as error:
                if error.execution_status != "running" or delay is None:
                    raise  # "running": the update reached the run that just continued
            except WorkflowUpdateFailedError as error:
                cause = error.cause
                kind = cause.type if isinstance(cause, ApplicationError) else None
                message = cause.message if isinstance(cause, ApplicationError) else str(cause)
                if kind == "turn_failed":
                    raise RunFailed(self.id, f"{kind}: {message}") from error
                if kind != "session_continuing" or delay is None:
                    raise Rejected(self.id, message, kind) from None
            except RPCError as error:
                raise await self._calls.explain("prompt", error) from None
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def end_session(self) -> None:
        """Ends a session once its current turn has answered (the `end_session` signal);
        `result()` then returns the last turn's result."""
        signal = EndSessionSignal()
        await self._act(
            "end session", lambda: self.handle.signal(AgentWorkflow.end_session, signal)
        )

    # -- time travel ------------------------------------------------------------------------

    async def fork(
        self,
        at: int | str | None = None,
        workflow_id: str | None = None,
        *,
        model: str | None = None,
        model_settings: ModelSettings | None = None,
        instructions: str | None = None,
        **input_fields: Any,
    ) -> AgentRunHandle:
        """Starts a new run from one of this run's checkpoints; this run is not touched.

        `at` is an index into `checkpoints()` (over the whole continue-as-new chain) or a
        checkpoint id; None: the latest checkpoint a run can go on from. The fork does that
        boundary's work and goes on, sending no model request or tool call recorded before
        it again. `model` (a name from the agent's `allowed_models`), `model_settings` and
        `instructions` change the second try; `input_fields` are further
        `AgentWorkflowInput` fields (`suspend_at`, `approval_timeout_seconds`, ...). The
        fork's id defaults to `ID-fork-XXXXXX`; a bad `at` fails the fork at once (its
        `result()` raises `RunFailed`, e.g. `index_out_of_range: ...`)."""
        started, queue = await fork_run(
            self,
            self.agents,
            at,
            workflow_id,
            model=model,
            model_settings=model_settings,
            instructions=instructions,
            **input_fields,
        )
        return AgentRunHandle(self.agents, started, task_queue=queue)

    async def retry(self) -> AgentRunHandle:
        """Starts this failed run again from the last boundary before its failure, so
        only the work that failed is done again (after a tool is fixed or a limit raised).

        It is a new run of the same workflow id when the server allows that (`get(ID)`
        then follows it), else of `ID-retry-XXXXXX`: the returned handle's `id` says which.
        It keeps the failed run's settings (`suspend_at`, overrides, ...). Refused for a run
        that is still running or completed: fork those."""
        started, queue = await retry_run(self, self.agents, self._calls)
        return AgentRunHandle(self.agents, started, task_queue=queue)

    async def cancel(self, reason: str | None = None) -> None:
        """Requests cancellation: the run ends `cancelled` at once (a tool call in flight
        is cancelled, no model request follows), its sub-agents' runs with it; `result()`
        then raises `RunFailed` ("cancelled"). `reason` is recorded with the request and in
        the run's `run_cancelled` record."""
        description = await self.describe()
        ended = _CLOSED.get(description.status) if description.status else None
        if ended is not None:
            raise RunClosed(self.id, ended[0], "a cancellation")
        await self._act("cancel", lambda: self.handle.cancel(reason=reason or ""))

    # -- plumbing ---------------------------------------------------------------------------

    async def _update(self, action: str, update: Any, request: BaseModel) -> UpdateAccepted:
        def send() -> Awaitable[UpdateAccepted]:
            return self.handle.execute_update(update, request, result_type=UpdateAccepted)

        return await self._act(action, send)

    async def _ensure_agent(self) -> None:
        if not self._verified:
            await self.describe()

    async def _act(self, action: str, operation: Callable[[], Awaitable[T]]) -> T:
        await self._ensure_agent()
        return await self._call(action, operation)

    async def _call(self, action: str, operation: Callable[[], Awaitable[T]]) -> T:
        """Runs one call, mapping failures to AgentRunErrors (`calls.RunCalls`)."""
        return await self._calls.call(action, operation)
