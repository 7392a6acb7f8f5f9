"""`AgentClient`: start, inspect and decide agent runs from Python, without Temporal's API.

    agents = await AgentClient.connect()            # TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE
    handle = await agents.start("deployer", "Deploy v2.1 to prod")
    view = await handle.status()                    # AgentStatusView
    await handle.approve(view.pending_approvals[0].tool_call_id, by="alice")
    result = await handle.result()                  # AgentWorkflowResult

It wraps a `temporalio.client.Client` connected with `DurableAgentPlugin` (the pydantic
data converter and the codec the workers use). What it adds over Temporal's own handle:

- every failure is one of a few `AgentRunError`s (`RunNotFound`, `NotAnAgentRun`,
  `RunClosed`, `Rejected`, `NoWorker`, `CannotConnect`, ...), each with a message that
  names the run and the way out, so a script or the CLI can tell them apart;
- decisions go through the workflow's updates, so a validator's refusal (a wrong call id, a
  second decision) is raised here as `Rejected` instead of being logged by the worker;
- a workflow that is not an `AgentWorkflow` is refused before anything is sent to it;
- a query or update no worker answers within `timeout` seconds raises `NoWorker` instead
  of hanging, and the server's "too many in-flight updates" refusal is retried.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from durable_agent import (
    AgentExecutionNode,
    AgentOverrides,
    AgentResumeEvidence,
    AgentStreamRecord,
    ModelMessage,
    ModelSettings,
    RunStatus,
)

from ..errors import InvalidInput
from ..hitl import denial_problem
from .encryption import EncryptionError
from .markdown import literal
from .plugin import DurableAgentPlugin
from .search_attributes import AGENT_NAME, AGENT_STATUS, PENDING_APPROVALS
from .signing import ApprovalKeys, sign_signal
from .storage import STORAGE_ENV, StorageConfigError
from .wire import (
    AWAITING_PROMPT,
    AgentStatusView,
    AgentWorkflowInput,
    AgentWorkflowResult,
    ApprovalSignal,
    DeferredResultSignal,
    EndSessionSignal,
    HistoryPageQuery,
    PromptRequest,
    ResumeFrom,
    ResumeSignal,
    SteerSignal,
    SuspendSignal,
    UpdateAccepted,
)
from .workflow import AgentWorkflow

if TYPE_CHECKING:
    from .streams import CheckpointChain, StreamReader
    from .wire import RunLink

__all__ = [
    "DEFAULT_TIMEOUT",
    "WORKFLOW_TYPE",
    "AgentClient",
    "AgentRunError",
    "AgentRunHandle",
    "AlreadyStarted",
    "CannotConnect",
    "ListedRun",
    "NoWorker",
    "NotAnAgentRun",
    "Rejected",
    "RunClosed",
    "RunFailed",
    "RunNotFound",
    "list_query",
]

WORKFLOW_TYPE = "AgentWorkflow"
DEFAULT_TASK_QUEUE = "durable-agent"
"""The same as `durable_agent.temporal.DEFAULT_TASK_QUEUE`, which is defined after the package
imports this module (tests/test_client.py checks they agree)."""
DEFAULT_TIMEOUT = 10.0
"""Seconds to wait for the server or a worker to answer one call (not for `result()`)."""
BUSY_RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0)
"""Waits before each retry of a call the server refused with RESOURCE_EXHAUSTED (e.g. more
than ~10 updates in flight on one workflow): bounded, so a stuck workflow still ends the
call. The SDK has already retried a few times itself before it gives us the refusal."""
UPDATE_ACTIONS = frozenset({"approval", "deferred result", "resume", "steering message", "prompt"})
"""The actions sent as workflow updates (named so in messages)."""
OPEN_STATUSES = frozenset({"starting", "running", "waiting", AWAITING_PROMPT})
SESSION_RETRY_DELAYS = (0.2, 0.5, 1.0, 2.0)
"""Waits before sending a prompt again to a session that was continuing as new."""
SUMMARY_PROMPT_CHARS = 60
RETRY_DROPPED_FIELDS = frozenset(
    {"agent", "prompt", "message_history", "conversation_id", "continuation", "resume_from"}
)
"""What a retry does not take from the failed run's input: its checkpoint has all that."""
INTERNAL_INPUT_FIELDS = frozenset({"agent", "prompt", "continuation"})
"""`AgentWorkflowInput` fields `start()` does not take as keywords: the first two are its
positional arguments, `continuation` is set only by the workflow itself."""

T = TypeVar("T")
Handle = WorkflowHandle[AgentWorkflow, AgentWorkflowResult]
log = logging.getLogger("durable_agent.client")


# -- errors ---------------------------------------------------------------------------------


class AgentRunError(Exception):
    """Base of every error the client raises; `str(error)` is the message for a person."""

    def __init__(self, message: str, *, workflow_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.workflow_id = workflow_id


class CannotConnect(AgentRunError):
    """The Temporal server did not answer (at connect, or the connection was lost)."""


class RunNotFound(AgentRunError):
    """No workflow with that id in the namespace."""


class NotAnAgentRun(AgentRunError):
    """The workflow exists but its type is not `AgentWorkflow`; nothing was sent to it."""

    def __init__(self, workflow_id: str, workflow_type: str) -> None:
        super().__init__(
            f"workflow {workflow_id!r} is not an agent run: its type is {workflow_type!r}, "
            f"not {WORKFLOW_TYPE!r}",
            workflow_id=workflow_id,
        )
        self.workflow_type = workflow_type


class RunClosed(AgentRunError):
    """The run has ended (completed, failed, terminated, ...): the server refused `action`."""

    def __init__(self, workflow_id: str, execution_status: str, action: str) -> None:
        super().__init__(
            f"workflow {workflow_id!r} is {execution_status}; it no longer accepts {action}",
            workflow_id=workflow_id,
        )
        self.execution_status = execution_status
        self.action = action


class Rejected(AgentRunError):
    """The workflow's update validator refused the request; it never entered history.

    `message` is the validator's own text (e.g. "no pending approval for tool call id
    'x'; pending: ['d1']") and `type` its error type (e.g. `invalid_approval`)."""

    def __init__(self, workflow_id: str, message: str, type: str | None) -> None:
        super().__init__(message, workflow_id=workflow_id)
        self.type = type


class NoWorker(AgentRunError):
    """No worker answered a query or update within the timeout. An update may still be
    applied once a worker picks it up."""


class RunFailed(AgentRunError):
    """`result()` of a run that failed, was cancelled, terminated or timed out.

    `failure` reads like `unknown_agent: no agent named 'x'`; the Temporal error is the
    `__cause__`."""

    def __init__(self, workflow_id: str, failure: str) -> None:
        super().__init__(f"run {workflow_id} failed: {failure}", workflow_id=workflow_id)
        self.failure = failure


class AlreadyStarted(AgentRunError):
    """`start(workflow_id=...)` with the id of a workflow that is still running."""


# -- listing --------------------------------------------------------------------------------


class ListedRun(BaseModel):
    """One agent run as the visibility store sees it (what `AgentClient.list` yields)."""

    workflow_id: str
    run_id: str
    agent: str | None
    status: str
    """The run's `AgentStatus` while it runs; once closed, how the execution ended."""
    execution_status: str
    pending_approvals: int
    start_time: datetime


def _quote(value: str) -> str:
    if '"' not in value:
        return f'"{value}"'
    if "'" not in value:
        return f"'{value}'"
    raise ValueError(f"cannot search for a value with both kinds of quotes: {value!r}")


def list_query(
    status: RunStatus | str | None = None,
    agent: str | None = None,
    forked_from: str | None = None,
) -> str:
    """The visibility query `AgentClient.list` sends.

    An open status also requires a running execution: a run that ended without its last
    `AgentStatus` update (terminated, timed out) would otherwise be listed as waiting.
    `forked_from` keeps the forks and retries of that workflow id."""
    parts = [f'WorkflowType="{WORKFLOW_TYPE}"']
    if status:
        value = _status_value(status)
        parts.append(f"AgentStatus={_quote(value)}")
        if value in OPEN_STATUSES:
            parts.append('ExecutionStatus="Running"')
    if agent:
        parts.append(f"AgentName={_quote(agent)}")
    if forked_from:
        parts.append(f"ForkedFrom={_quote(forked_from)}")
    return " AND ".join(parts)


def _status_value(status: RunStatus | str) -> str:
    value = status.value if isinstance(status, RunStatus) else status
    known = [*(s.value for s in RunStatus), AWAITING_PROMPT]
    if value not in known:
        raise ValueError(f"unknown run status {value!r}; expected one of {', '.join(known)}")
    return value


def _execution_status(status: WorkflowExecutionStatus | None) -> str:
    return status.name.lower() if status else "unknown"


def _listed(execution: WorkflowExecution) -> ListedRun:
    attributes = execution.typed_search_attributes
    running = execution.status == WorkflowExecutionStatus.RUNNING
    agent_status = attributes.get(AGENT_STATUS)
    return ListedRun(
        workflow_id=execution.id,
        run_id=execution.run_id,
        agent=attributes.get(AGENT_NAME),
        status=(agent_status or "starting") if running else _execution_status(execution.status),
        execution_status=_execution_status(execution.status),
        pending_approvals=(attributes.get(PENDING_APPROVALS) or 0) if running else 0,
        start_time=execution.start_time,
    )


# -- helpers --------------------------------------------------------------------------------


def _summary(agent: str, prompt: str, source: ResumeFrom | None = None) -> str:
    """The Web UI's one-line summary of a run: its agent and the start of its prompt (for
    a fork, where it came from). The UI renders it as Markdown: what users wrote is
    escaped (`literal`), so a prompt cannot put a link or an element on the page."""
    if source is not None:
        return f"agent {literal(agent)}: fork of {literal(source.describe())}"
    line = " ".join(prompt.split())
    if not line:
        return f"agent {literal(agent)}: session"
    if len(line) > SUMMARY_PROMPT_CHARS:
        line = line[: SUMMARY_PROMPT_CHARS - 1].rstrip() + "…"
    return f"agent {literal(agent)}: {literal(line)}"


def _failure_text(error: WorkflowFailureError) -> str:
    cause = error.cause
    if isinstance(cause, ApplicationError) and cause.type:
        return f"{cause.type}: {cause.message}"
    kind = type(cause).__name__.removesuffix("Error").lower()
    return f"{kind}: {cause}" if str(cause) else kind


def _input_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """Refuses a misspelt keyword: pydantic would drop it silently and the run would start
    without, say, its `suspend_at`."""
    allowed = sorted(set(AgentWorkflowInput.model_fields) - INTERNAL_INPUT_FIELDS)
    unknown = sorted(set(fields) - set(allowed))
    if unknown:
        raise TypeError(
            f"start() got unknown AgentWorkflowInput field(s) {', '.join(map(repr, unknown))}; "
            f"the fields are: {', '.join(allowed)}"
        )
    return fields


# -- the client -----------------------------------------------------------------------------


_CLOSED: dict[WorkflowExecutionStatus, tuple[str, str]] = {
    WorkflowExecutionStatus.COMPLETED: ("completed", "completed"),
    WorkflowExecutionStatus.FAILED: ("failed", "the workflow failed"),
    WorkflowExecutionStatus.CANCELED: ("cancelled", "the workflow was cancelled"),
    WorkflowExecutionStatus.TERMINATED: ("failed", "terminated: the workflow was terminated"),
    WorkflowExecutionStatus.TIMED_OUT: ("failed", "timed_out: the workflow timed out"),
}
"""How a closed execution ended, as an agent status and a reason."""


class AgentClient:
    """Agent runs on one Temporal namespace; `client` must use `DurableAgentPlugin`.

    `task_queue` is where `start()` sends runs (the workers' queue); `timeout` bounds each
    query, update and signal, so a run without a worker raises `NoWorker` instead of hanging.
    `approval_keys` sign every approval and denial (see `.signing`); by default they are
    those of the client's `DurableAgentPlugin`, if any.
    """

    def __init__(
        self,
        client: Client,
        *,
        task_queue: str = DEFAULT_TASK_QUEUE,
        timeout: float = DEFAULT_TIMEOUT,
        approval_keys: ApprovalKeys | None = None,
    ) -> None:
        self.client = client
        self.task_queue = task_queue
        self.timeout = timeout
        if approval_keys is None:
            plugins = client.config().get("plugins") or []
            found = [p.approval_keys for p in plugins if isinstance(p, DurableAgentPlugin)]
            approval_keys = next((keys for keys in found if keys is not None), None)
        self.approval_keys = approval_keys

    @classmethod
    async def connect(
        cls,
        address: str | None = None,
        namespace: str | None = None,
        *,
        task_queue: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        environ: Mapping[str, str] | None = None,
    ) -> AgentClient:
        """Connects with `DurableAgentPlugin.from_env()` (payload encryption when
        DURABLE_AGENT_ENCRYPTION_KEYS is set, external payloads where DURABLE_AGENT_STORAGE
        says); unset arguments come from TEMPORAL_ADDRESS
        (localhost:7233), TEMPORAL_NAMESPACE (default) and TEMPORAL_TASK_QUEUE. `environ`
        replaces `os.environ` for all of these."""
        env = os.environ if environ is None else environ
        address = address or env.get("TEMPORAL_ADDRESS", "localhost:7233")
        namespace = namespace or env.get("TEMPORAL_NAMESPACE", "default")
        task_queue = task_queue or env.get("TEMPORAL_TASK_QUEUE", DEFAULT_TASK_QUEUE)
        try:
            plugin = DurableAgentPlugin.from_env(environ=env)
        except (EncryptionError, StorageConfigError) as error:
            raise AgentRunError(str(error)) from None
        try:
            client = await asyncio.wait_for(
                Client.connect(address, namespace=namespace, plugins=[plugin]), timeout
            )
        except (RuntimeError, ValueError, TimeoutError, RPCError) as error:
            detail = f": {error}" if str(error) else f" (no answer within {timeout:g}s)"
            raise CannotConnect(
                f"cannot connect to the Temporal server at {address}{detail}\n"
                "Is it running? Start a local one with a worker: `python worker.py --dev` "
                "(or `durable-agent worker --dev`), or point TEMPORAL_ADDRESS (--address) at "
                "your server."
            ) from None
        return cls(client, task_queue=task_queue, timeout=timeout)

    @property
    def namespace(self) -> str:
        return self.client.namespace

    async def start(
        self,
        agent: str,
        prompt: str,
        *,
        workflow_id: str | None = None,
        task_queue: str | None = None,
        **input_fields: Any,
    ) -> AgentRunHandle:
        """Starts an `AgentWorkflow` run of `agent` (a name registered on the workers).

        `input_fields` are the other fields of `AgentWorkflowInput` (`suspend_at`,
        `approval_timeout_seconds`, `conversation_id`, `message_history`, `metadata`, ...);
        an unknown one raises TypeError, one out of range `InvalidInput` (before anything is
        started). The workflow id defaults to `agent-NAME-XXXXXXXX`.
        """
        workflow_input = AgentWorkflowInput(
            agent=agent, prompt=prompt, **_input_fields(input_fields)
        )
        if problem := workflow_input.problem():
            raise InvalidInput(problem)
        workflow_id = workflow_id or f"agent-{agent}-{uuid.uuid4().hex[:8]}"
        try:
            handle = await asyncio.wait_for(
                self.client.start_workflow(
                    AgentWorkflow.run,
                    workflow_input,
                    id=workflow_id,
                    task_queue=task_queue or self.task_queue,
                    static_summary=_summary(agent, prompt, workflow_input.resume_from),
                ),
                self.timeout,
            )
        except WorkflowAlreadyStartedError:
            raise AlreadyStarted(
                f"a workflow with id {workflow_id!r} is already running", workflow_id=workflow_id
            ) from None
        except TimeoutError:
            raise CannotConnect(
                f"the Temporal server did not accept the start of {workflow_id!r} within "
                f"{self.timeout:g}s"
            ) from None
        except RPCError as error:
            if error.status == RPCStatusCode.UNAVAILABLE:
                raise CannotConnect(
                    f"lost the connection to the Temporal server: {error}"
                ) from None
            raise AgentRunError(
                f"cannot start the run: {error.message}", workflow_id=workflow_id
            ) from None
        return AgentRunHandle(self, handle, task_queue=task_queue or self.task_queue)

    def get(self, workflow_id: str, run_id: str | None = None) -> AgentRunHandle:
        """A handle on an existing run; nothing is sent until its first call, which checks
        that the workflow exists and is an agent run. Without `run_id` it follows the
        workflow id's latest run (across continue-as-new)."""
        handle = self.client.get_workflow_handle_for(AgentWorkflow.run, workflow_id, run_id=run_id)
        return AgentRunHandle(self, handle)

    async def list(
        self,
        status: RunStatus | str | None = None,
        agent: str | None = None,
        limit: int | None = None,
        *,
        forked_from: str | None = None,
    ) -> AsyncIterator[ListedRun]:
        """Agent runs, newest first, from the `AgentStatus`/`AgentName` search attributes.

        `status="waiting"` lists the runs waiting for a human (approval, deferred result or
        resume); `forked_from="w1"` the forks and retries of w1 (`ForkedFrom`). Visibility
        lags the runs by up to a second or so."""
        query = list_query(status, agent, forked_from)
        try:
            async for execution in self.client.list_workflows(query, limit=limit):
                yield _listed(execution)
        except RPCError as error:
            raise self._list_error(error) from None

    def _list_error(self, error: RPCError) -> AgentRunError:
        if error.status == RPCStatusCode.UNAVAILABLE:
            return CannotConnect(f"lost the connection to the Temporal server: {error.message}")
        hint = ""
        if "AgentStatus" in error.message or "AgentName" in error.message:
            hint = (
                "; register the search attributes AgentName, AgentStatus (Keyword) and "
                "PendingApprovals (Int) on the server (`python worker.py --dev` and "
                "`durable-agent worker` do)"
            )
        return AgentRunError(f"listing failed: {error.message}{hint}")


# -- one run --------------------------------------------------------------------------------


class AgentRunHandle:
    """One agent run: its status, result and the decisions a person sends it."""

    def __init__(
        self, agents: AgentClient, handle: Handle, *, task_queue: str | None = None
    ) -> None:
        """`task_queue` is known (and the workflow known to be an agent run) for a run this
        client started; a handle from `get()` learns both from its first `describe()`."""
        self.agents = agents
        self.handle = handle
        self._verified = task_queue is not None
        self._task_queue = task_queue

    @property
    def id(self) -> str:
        return self.handle.id

    @property
    def run_id(self) -> str | None:
        """The run this handle was started or fetched with (None: the latest run)."""
        return self.handle.run_id

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
        self._task_queue = description.task_queue
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
        self, after: int | None = None, *, poll_interval: float | None = None
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
        add nothing to history, however many readers there are."""
        if after is not None and after < 0:
            raise ValueError(f"after must be a seq (0 or more) or None, got {after}")
        from .streams import DEFAULT_POLL_INTERVAL

        await self._ensure_agent()
        interval = DEFAULT_POLL_INTERVAL if poll_interval is None else poll_interval
        async for record in self._reader().records(after, poll_interval=interval):
            yield record

    async def stream_position(self) -> int:
        """The seq the run's next record will get (its latest run's stream offset)."""
        await self._ensure_agent()
        return await self._reader().position()

    def _reader(self) -> StreamReader:
        from .streams import StreamReader

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
            raise RunFailed(self.id, _failure_text(error)) from error
        except RPCError as error:
            raise await self._explain("result", error) from None
        except RuntimeError as error:
            raise self._without_storage("result", error) from None

    def _without_storage(self, action: str, error: RuntimeError) -> Exception:
        """What to tell a person whose client cannot read the run's external payloads
        (the SDK's TMPRL1105); any other RuntimeError as it is."""
        if "TMPRL1105" not in str(error):
            return error
        return AgentRunError(
            f"{action} failed: run {self.id!r} keeps large payloads in external storage, and "
            f"this client has none: set {STORAGE_ENV} as the worker has it (the embedded dev "
            "stack uses file://<its folder>/.temporal/payloads)",
            workflow_id=self.id,
        )

    # -- deciding ---------------------------------------------------------------------------

    async def approve(
        self,
        call_id: str,
        by: str | None = None,
        override_arguments: dict[str, Any] | None = None,
        *,
        groups: Sequence[str] | None = None,
    ) -> UpdateAccepted:
        """Approves pending tool call `call_id`; `override_arguments` replace the model's.

        `by` and `groups` are who decided, checked against the agent's approvers; signed
        when this client has approval keys."""
        request = ApprovalSignal(
            tool_call_id=call_id,
            approved=True,
            decided_by=by,
            override_arguments=override_arguments,
            groups=list(groups) if groups is not None else None,
        )
        return await self._decide(request)

    async def deny(
        self,
        call_id: str,
        reason: str,
        by: str | None = None,
        *,
        groups: Sequence[str] | None = None,
    ) -> UpdateAccepted:
        """Denies pending tool call `call_id`: the tool never runs, the model sees `reason`
        (which must say something: refused as `invalid_approval` before anything is sent)."""
        if problem := denial_problem(reason):
            raise Rejected(self.id, problem, "invalid_approval")
        request = ApprovalSignal(
            tool_call_id=call_id,
            approved=False,
            reason=reason,
            decided_by=by,
            groups=list(groups) if groups is not None else None,
        )
        return await self._decide(request)

    async def _decide(self, request: ApprovalSignal) -> UpdateAccepted:
        keys = self.agents.approval_keys
        if keys is not None:
            request = sign_signal(keys, self.id, request)
        return await self._update("approval", AgentWorkflow.submit_approval, request)

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
                raise await self._explain("prompt", error) from None
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
        if isinstance(at, bool) or not isinstance(at, int | str | None):
            raise TypeError(f"at must be a checkpoint index or id, got {at!r}")
        description = await self.describe()
        agent = description.typed_search_attributes.get(AGENT_NAME) or (await self.status()).agent
        source = ResumeFrom(
            workflow_id=self.id,
            run_id=self.run_id,
            index=at if isinstance(at, int) else None,
            checkpoint_id=at if isinstance(at, str) else None,
        )
        overrides = AgentOverrides(
            model=model, model_settings=model_settings, instructions=instructions
        )
        return await self.agents.start(
            agent,
            "",
            workflow_id=workflow_id or f"{self.id}-fork-{uuid.uuid4().hex[:6]}",
            task_queue=description.task_queue,
            resume_from=source,
            overrides=None if overrides.empty else overrides,
            **input_fields,
        )

    async def retry(self) -> AgentRunHandle:
        """Starts this failed run again from the last boundary before its failure, so
        only the work that failed is done again (after a tool is fixed or a limit raised).

        It is a new run of the same workflow id when the server allows that (`get(ID)`
        then follows it), else of `ID-retry-XXXXXX`: the returned handle's `id` says which.
        It keeps the failed run's settings (`suspend_at`, overrides, ...). Refused for a run
        that is still running or completed: fork those."""
        description = await self.describe()
        status = description.status
        if status in (None, WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.COMPLETED):
            state = "still running" if status != WorkflowExecutionStatus.COMPLETED else "completed"
            raise AgentRunError(
                f"run {self.id!r} is {state}; retry is for a run that failed, was cancelled, "
                f"terminated or timed out (to try again from a boundary: durable-agent fork "
                f"{self.id} --at N)",
                workflow_id=self.id,
            )
        await self._refuse_retry_without_a_boundary()
        original = await self._call("history", lambda: self._start_input(description.run_id))
        fields = original.model_dump(exclude=set(RETRY_DROPPED_FIELDS))
        fields["resume_from"] = ResumeFrom(workflow_id=self.id, run_id=description.run_id)
        start = self.agents.start
        queue = description.task_queue
        try:
            return await start(original.agent, "", workflow_id=self.id, task_queue=queue, **fields)
        except AlreadyStarted:
            fresh = f"{self.id}-retry-{uuid.uuid4().hex[:6]}"
            return await start(original.agent, "", workflow_id=fresh, task_queue=queue, **fields)

    async def _refuse_retry_without_a_boundary(self) -> None:
        """A run that failed before its first resumable boundary (an unknown agent, a bad
        input) has nothing to go on from: a retry would only fail again, hiding why."""
        resumable = [
            c for c in await self.checkpoints() if c.node is not AgentExecutionNode.RUN_FAILED
        ]
        if resumable:
            return
        view = await self.status()
        why = f" ({view.error})" if view.error else ""
        raise AgentRunError(
            f"run {self.id!r} failed before its first checkpoint{why}; there is nothing to "
            "retry from: fix the cause and start a new run",
            workflow_id=self.id,
        )

    async def _start_input(self, run_id: str) -> AgentWorkflowInput:
        """The input run `run_id` was started with (its first history event)."""
        client = self.agents.client
        handle = client.get_workflow_handle(self.id, run_id=run_id)
        async for event in handle.fetch_history_events(page_size=1):
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            decoded = await client.data_converter.decode(list(payloads), [AgentWorkflowInput])
            workflow_input: AgentWorkflowInput = decoded[0]
            return workflow_input
        raise AgentRunError(f"run {run_id} of {self.id!r} has no history", workflow_id=self.id)

    async def cancel(self) -> None:
        """Requests cancellation; `result()` then raises `RunFailed` ("cancelled")."""
        await self._act("cancel", self.handle.cancel)

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
        """Runs one call (made afresh for each attempt), mapping failures to AgentRunErrors."""
        for attempt, delay in enumerate((*BUSY_RETRY_DELAYS, None)):
            try:
                return await asyncio.wait_for(operation(), self.agents.timeout)
            except WorkflowUpdateFailedError as error:
                cause = error.cause
                if isinstance(cause, ApplicationError):
                    raise Rejected(self.id, cause.message, cause.type) from None
                raise Rejected(self.id, str(cause), None) from None
            except WorkflowQueryFailedError as error:
                raise AgentRunError(
                    f"{action} failed: {error.message}", workflow_id=self.id
                ) from None
            except RuntimeError as error:
                raise self._without_storage(action, error) from None
            except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
                raise self._no_worker(action) from None
            except RPCError as error:
                if error.status != RPCStatusCode.RESOURCE_EXHAUSTED:
                    raise await self._explain(action, error) from None
                if delay is None:
                    raise self._no_worker(action, refusal=error.message) from None
                log.warning(
                    "the server refused the %s for %r (%s); retry %d of %d in %gs",
                    action,
                    self.id,
                    error.message,
                    attempt + 1,
                    len(BUSY_RETRY_DELAYS),
                    delay,
                )
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def _explain(self, action: str, error: RPCError) -> AgentRunError:
        """The error a person needs for a call the server refused."""
        if error.status == RPCStatusCode.NOT_FOUND and "namespace" in error.message.lower():
            return AgentRunError(
                f"{error.message} Set TEMPORAL_NAMESPACE (--namespace) to an existing one.",
                workflow_id=self.id,
            )
        if error.status == RPCStatusCode.NOT_FOUND:
            return await self._not_found(action)
        if error.status == RPCStatusCode.UNAVAILABLE:
            return CannotConnect(
                f"lost the connection to the Temporal server: {error}", workflow_id=self.id
            )
        if error.status in (RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED):
            return self._no_worker(action)
        return AgentRunError(f"{action} failed: {error.message}", workflow_id=self.id)

    async def _not_found(self, action: str) -> AgentRunError:
        """Updates and signals to a closed workflow fail with NOT_FOUND too: tell them apart."""
        missing = RunNotFound(
            f"no workflow with id {self.id!r} in namespace {self.agents.namespace!r}",
            workflow_id=self.id,
        )
        if action == "describe":
            return missing
        try:
            description = await asyncio.wait_for(self.handle.describe(), self.agents.timeout)
        except (RPCError, TimeoutError):
            return missing
        return RunClosed(self.id, _execution_status(description.status), action)

    def _no_worker(self, action: str, refusal: str | None = None) -> NoWorker:
        queue = f"task queue {self._task_queue!r}" if self._task_queue else "its task queue"
        if refusal is not None:
            why = (
                f"the server kept refusing the {action} for {self.id!r} ({refusal}): earlier "
                "updates are still waiting for a worker"
            )
        else:
            why = f"no worker answered the {action} for {self.id!r} within {self.agents.timeout:g}s"
            if action in UPDATE_ACTIONS:
                why += " (the update may still be applied once a worker picks it up)"
        return NoWorker(
            f"{why}; is a worker running on {queue}? Start one with `durable-agent worker` "
            "or `python worker.py`.",
            workflow_id=self.id,
        )
