"""`durable-agent`: start, inspect and steer agent runs on Temporal from the shell.

    durable-agent run weather "Weather in Paris?" --wait
    durable-agent status agent-deployer-1a2b3c4d
    durable-agent approve agent-deployer-1a2b3c4d call_deploy_0 --by alice
    durable-agent deny agent-deployer-1a2b3c4d call_deploy_0 --reason "change freeze"
    durable-agent list --status waiting

The server, namespace and task queue come from --address/--namespace/--task-queue, else
TEMPORAL_ADDRESS (localhost:7233), TEMPORAL_NAMESPACE (default) and TEMPORAL_TASK_QUEUE
(durable-agent). Results go to stdout (`--json` makes them machine-readable), errors and
hints to stderr.

Exit codes:
  0    success
  1    the operation was rejected or the run failed (an update validator refused it, the
       workflow is already closed, `run --wait` ended in a failed run, ...); `status`
       itself exits 0 whatever state it reports
  2    usage error (bad arguments)
  3    workflow not found
  4    cannot connect to the Temporal server
  5    no worker answered in time (a query or update timed out; an update may still apply)
  130  interrupted (Ctrl-C); a started run goes on
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import sys
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, NoReturn, TypeVar

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
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from durable_agent import AgentExecutionNode, AgentResumeEvidence, RunStatus, Usage
from durable_agent.temporal import DEFAULT_TASK_QUEUE
from durable_agent.temporal.encryption import EncryptionError
from durable_agent.temporal.plugin import DurableAgentPlugin
from durable_agent.temporal.search_attributes import AGENT_NAME, AGENT_STATUS, PENDING_APPROVALS
from durable_agent.temporal.wire import (
    AgentStatusView,
    AgentWorkflowInput,
    AgentWorkflowResult,
    ApprovalSignal,
    DeferredResultSignal,
    PendingApprovalView,
    ResumeSignal,
    SuspendSignal,
    UpdateAccepted,
)
from durable_agent.temporal.workflow import AgentWorkflow

__all__ = [
    "EXIT_CONNECT",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_REJECTED",
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "CliError",
    "ListedRun",
    "RunReport",
    "StatusReport",
    "amain",
    "build_parser",
    "list_query",
    "main",
]

EXIT_OK = 0
EXIT_REJECTED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_CONNECT = 4
EXIT_TIMEOUT = 5
EXIT_INTERRUPTED = 130

WORKFLOW_TYPE = "AgentWorkflow"
POLL_SECONDS = 1.0
"""How often `run --wait` asks the run for its status while it waits for the result."""
SUMMARY_PROMPT_CHARS = 60

T = TypeVar("T")
AgentHandle = WorkflowHandle[AgentWorkflow, AgentWorkflowResult]
Handler = Callable[[Client, argparse.Namespace], Awaitable[int]]


class CliError(Exception):
    """Ends the command: `message` goes to stderr and `code` is the exit code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# -- JSON reports ---------------------------------------------------------------------------


class RunReport(BaseModel):
    """`run --json`: the started workflow and, with --wait, how it ended."""

    workflow_id: str
    run_id: str | None
    result: AgentWorkflowResult | None = None
    failure: str | None = None


class StatusReport(BaseModel):
    """`status --json`: the execution as the server sees it plus the run's `status` query."""

    workflow_id: str
    execution_status: str
    task_queue: str
    start_time: datetime | None
    close_time: datetime | None
    view: AgentStatusView | None
    result: AgentWorkflowResult | None = None
    failure: str | None = None


class ListedRun(BaseModel):
    """One row of `list --json`."""

    workflow_id: str
    run_id: str
    agent: str | None
    status: str
    execution_status: str
    pending_approvals: int
    start_time: datetime


# -- output ---------------------------------------------------------------------------------


def _out(text: str = "") -> None:
    print(text, file=sys.stdout, flush=True)


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _json(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False, default=str)


def _dump(value: BaseModel | Sequence[BaseModel]) -> None:
    if isinstance(value, BaseModel):
        _out(_json(value.model_dump(mode="json")))
    else:
        _out(_json([item.model_dump(mode="json") for item in value]))


def _compact(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _time(value: datetime | None) -> str:
    return value.astimezone().strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
        for row in [headers, *rows]
    ]
    return "\n".join(line.rstrip() for line in lines)


USAGE_FIELDS = (
    "requests",
    "tool_calls",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
)


def _usage_line(usage: Usage) -> str:
    """Requests and tool calls always; token counts when the model reported any."""
    values = usage.model_dump()
    shown = [k for k in USAGE_FIELDS if k in ("requests", "tool_calls") or values.get(k)]
    return " ".join(f"{k}={values.get(k, 0)}" for k in shown)


def _output_text(result: AgentWorkflowResult) -> str:
    value = result.output if result.output is not None else result.structured_output
    if value is None:
        return ""
    return value if isinstance(value, str) else _json(value)


def _failure_text(error: WorkflowFailureError) -> str:
    cause = error.cause
    if isinstance(cause, ApplicationError) and cause.type:
        return f"{cause.type}: {cause.message}"
    kind = type(cause).__name__.removesuffix("Error").lower()
    return f"{kind}: {cause}" if str(cause) else kind


def _execution_status(status: WorkflowExecutionStatus | None) -> str:
    return status.name.lower() if status else "unknown"


# -- argument types -------------------------------------------------------------------------


def _json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not valid JSON ({error}): {text!r}") from None


def _json_object(text: str) -> dict[str, Any]:
    value = _json_value(text)
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f'expected a JSON object like \'{{"env": "prod"}}\', got {text!r}'
        )
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


# -- talking to the server ------------------------------------------------------------------


async def _connect(args: argparse.Namespace) -> Client:
    try:
        plugin = DurableAgentPlugin.from_env()
    except EncryptionError as error:
        raise CliError(EXIT_REJECTED, str(error)) from None
    try:
        return await asyncio.wait_for(
            Client.connect(args.address, namespace=args.namespace, plugins=[plugin]),
            args.timeout,
        )
    except (RuntimeError, ValueError, TimeoutError, RPCError) as error:
        detail = f": {error}" if str(error) else " (timed out)"
        raise CliError(
            EXIT_CONNECT,
            f"cannot connect to the Temporal server at {args.address}{detail}\n"
            "Is it running? Start a local one with a worker: `python worker.py --dev`, or "
            "point --address / TEMPORAL_ADDRESS at your server.",
        ) from None


class Target:
    """One workflow the command works on; `call` maps every failure to an exit code."""

    def __init__(self, client: Client, workflow_id: str, timeout: float) -> None:
        self.handle: AgentHandle = client.get_workflow_handle_for(AgentWorkflow.run, workflow_id)
        self.namespace = client.namespace
        self.timeout = timeout

    @property
    def id(self) -> str:
        return self.handle.id

    async def call(self, action: str, operation: Awaitable[T]) -> T:
        """Runs one query, update or signal (`action` names it in messages)."""
        try:
            return await asyncio.wait_for(operation, self.timeout)
        except WorkflowUpdateFailedError as error:
            raise CliError(EXIT_REJECTED, f"rejected: {_cause_message(error.cause)}") from None
        except WorkflowQueryFailedError as error:
            raise CliError(EXIT_REJECTED, f"{action} failed: {error.message}") from None
        except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
            raise self.no_worker(action) from None
        except RPCError as error:
            raise await self.explain(action, error) from None

    async def describe(self) -> WorkflowExecutionDescription:
        description = await self.call("describe", self.handle.describe())
        if description.workflow_type != WORKFLOW_TYPE:
            raise CliError(
                EXIT_REJECTED,
                f"workflow {self.id!r} is a {description.workflow_type}, not an {WORKFLOW_TYPE}",
            )
        return description

    async def explain(self, action: str, error: RPCError) -> CliError:
        """The message and exit code a user needs for a failed call."""
        if error.status == RPCStatusCode.NOT_FOUND and "namespace" in error.message.lower():
            return CliError(
                EXIT_REJECTED,
                f"{error.message} Set --namespace or TEMPORAL_NAMESPACE to an existing one.",
            )
        if error.status == RPCStatusCode.NOT_FOUND:
            return await self._not_found(action)
        if error.status == RPCStatusCode.UNAVAILABLE:
            return CliError(EXIT_CONNECT, f"lost the connection to the Temporal server: {error}")
        if error.status in (RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED):
            return self.no_worker(action)
        return CliError(EXIT_REJECTED, f"{action} failed: {error.message}")

    async def _not_found(self, action: str) -> CliError:
        """Updates and signals to a closed workflow fail with NOT_FOUND too: tell them apart."""
        try:
            description = await asyncio.wait_for(self.handle.describe(), self.timeout)
        except (RPCError, TimeoutError):
            return CliError(
                EXIT_NOT_FOUND, f"no workflow with id {self.id!r} in namespace {self.namespace!r}"
            )
        status = _execution_status(description.status)
        return CliError(
            EXIT_REJECTED, f"workflow {self.id!r} is {status}; it no longer accepts {action}"
        )

    def no_worker(self, action: str) -> CliError:
        return CliError(
            EXIT_TIMEOUT,
            f"no worker answered the {action} for {self.id!r} within {self.timeout:g}s (an "
            "update may still be applied once a worker picks it up); is a worker running on "
            "the workflow's task queue? Start one with `python worker.py`.",
        )


def _cause_message(cause: BaseException) -> str:
    return cause.message if isinstance(cause, ApplicationError) else str(cause)


# -- run ------------------------------------------------------------------------------------


def _summary(agent: str, prompt: str) -> str:
    line = " ".join(prompt.split())
    if len(line) > SUMMARY_PROMPT_CHARS:
        line = line[: SUMMARY_PROMPT_CHARS - 1].rstrip() + "…"
    return f"agent `{agent}`: {line}"


def _run_input(args: argparse.Namespace) -> AgentWorkflowInput:
    return AgentWorkflowInput(
        agent=args.agent,
        prompt=args.prompt,
        conversation_id=args.conversation_id,
        suspend_at=[AgentExecutionNode(node) for node in args.suspend_at],
        approval_timeout_seconds=args.approval_timeout,
    )


async def _start(client: Client, args: argparse.Namespace) -> AgentHandle:
    workflow_id = args.id or f"agent-{args.agent}-{uuid.uuid4().hex[:8]}"
    try:
        return await client.start_workflow(
            AgentWorkflow.run,
            _run_input(args),
            id=workflow_id,
            task_queue=args.task_queue,
            static_summary=_summary(args.agent, args.prompt),
        )
    except WorkflowAlreadyStartedError:
        raise CliError(
            EXIT_REJECTED, f"a workflow with id {workflow_id!r} is already running"
        ) from None
    except RPCError as error:
        raise CliError(EXIT_REJECTED, f"cannot start the run: {error.message}") from None


async def cmd_run(client: Client, args: argparse.Namespace) -> int:
    handle = await _start(client, args)
    report = RunReport(workflow_id=handle.id, run_id=handle.first_execution_run_id)
    if not args.json:
        _out(handle.id)
    if args.wait:
        return await _finish(Target(client, handle.id, args.timeout), args, report)
    if args.json:
        _dump(report)
    else:
        _err(f"started; follow it with: durable-agent status {handle.id}")
    return EXIT_OK


async def _finish(target: Target, args: argparse.Namespace, report: RunReport) -> int:
    try:
        report.result = await _await_result(target, args)
    except WorkflowFailureError as error:
        report.failure = _failure_text(error)
    if args.json:
        _dump(report)
    elif report.result is not None:
        _out(_output_text(report.result))
    if report.failure is not None:
        _err(f"durable-agent: run {target.id} failed: {report.failure}")
        return EXIT_REJECTED
    return EXIT_OK


async def _await_result(target: Target, args: argparse.Namespace) -> AgentWorkflowResult:
    """Waits for the result; meanwhile tells the user what the run waits for, once each."""
    result = asyncio.ensure_future(target.handle.result())
    shown: set[str] = set()
    try:
        while True:
            done, _ = await asyncio.wait({result}, timeout=POLL_SECONDS)
            if done:
                return result.result()
            await _hint_waiting(target, args, shown)
    except asyncio.CancelledError:
        result.cancel()
        _err(f"\nstopped waiting; the run goes on: durable-agent status {target.id}")
        raise
    except RPCError as error:
        raise await target.explain("result", error) from None


async def _hint_waiting(target: Target, args: argparse.Namespace, shown: set[str]) -> None:
    try:
        view = await target.call("status query", target.handle.query(AgentWorkflow.status))
    except CliError:
        _hint_once(shown, "no-worker", _no_worker_hint(args))
        return
    for key, text in _waiting_hints(target.id, view):
        _hint_once(shown, key, text)


def _no_worker_hint(args: argparse.Namespace) -> str:
    return (
        f"no worker has answered yet; is one running on task queue {args.task_queue!r}? "
        "(python worker.py)"
    )


def _hint_once(shown: set[str], key: str, text: str) -> None:
    if key not in shown:
        shown.add(key)
        _err(text)


def _waiting_hints(workflow_id: str, view: AgentStatusView) -> list[tuple[str, str]]:
    if view.status != RunStatus.WAITING.value:
        return []
    hints = [
        (f"approval:{p.tool_call_id}", _approval_hint(workflow_id, p))
        for p in view.pending_approvals
        if not p.decided
    ]
    hints += [
        (f"deferred:{d.tool_call_id}", _deferred_hint(workflow_id, d))
        for d in view.deferred_calls
        if not d.decided
    ]
    if view.suspend_reason:
        key = f"suspend:{view.node}:{view.run_step}:{view.suspend_reason}"
        hints.append((key, _suspend_hint(workflow_id, view)))
    return hints


def _approval_hint(workflow_id: str, pending: PendingApprovalView) -> str:
    return (
        f"waiting for approval of tool `{pending.tool_name}` {_compact(pending.arguments)} "
        f"(call {pending.tool_call_id}); still waiting. Approve with:\n"
        f"  durable-agent approve {workflow_id} {pending.tool_call_id}\n"
        f"or deny with:\n"
        f"  durable-agent deny {workflow_id} {pending.tool_call_id} --reason TEXT"
    )


def _deferred_hint(workflow_id: str, deferred: PendingApprovalView) -> str:
    return (
        f"waiting for the result of deferred tool `{deferred.tool_name}` "
        f"(call {deferred.tool_call_id}); still waiting. Deliver it with:\n"
        f"  durable-agent deferred {workflow_id} {deferred.tool_call_id} --response JSON"
    )


def _suspend_hint(workflow_id: str, view: AgentStatusView) -> str:
    return (
        f"suspended at {view.node} ({view.suspend_reason}); still waiting. Resume with:\n"
        f"  durable-agent resume {workflow_id}"
    )


# -- status ---------------------------------------------------------------------------------


async def cmd_status(client: Client, args: argparse.Namespace) -> int:
    target = Target(client, args.workflow_id, args.timeout)
    description = await target.describe()
    closed = description.status not in (None, WorkflowExecutionStatus.RUNNING)
    report = StatusReport(
        workflow_id=target.id,
        execution_status=_execution_status(description.status),
        task_queue=description.task_queue,
        start_time=description.start_time,
        close_time=description.close_time,
        view=await _status_view(target, closed=closed),
    )
    if closed:
        await _closed_outcome(target, report)
    if args.json:
        _dump(report)
    else:
        _out(_status_text(report))
    return EXIT_OK


async def _status_view(target: Target, *, closed: bool) -> AgentStatusView | None:
    """The `status` query. A closed run needs a worker to replay it, so there it is optional."""
    operation = target.handle.query(AgentWorkflow.status)
    if not closed:
        return await target.call("status query", operation)
    try:
        return await target.call("status query", operation)
    except CliError as error:
        _err(f"note: {error.message}\nshowing the recorded outcome only")
        return None


async def _closed_outcome(target: Target, report: StatusReport) -> None:
    try:
        report.result = await target.call("result", target.handle.result())
    except WorkflowFailureError as error:
        report.failure = _failure_text(error)


def _status_text(report: StatusReport) -> str:
    lines = [
        f"workflow    {report.workflow_id}  ({report.execution_status})",
        f"started     {_time(report.start_time)}",
    ]
    if report.close_time:
        lines.append(f"closed      {_time(report.close_time)}")
    if report.view is not None:
        lines += _view_lines(report.workflow_id, report.view)
    if report.result is not None:
        lines.append(f"result      {_output_text(report.result)}")
    if report.failure is not None:
        lines.append(f"failure     {report.failure}")
    return "\n".join(lines)


def _view_lines(workflow_id: str, view: AgentStatusView) -> list[str]:
    lines = [
        f"agent       {view.agent}",
        f"status      {view.status}",
        f"node        {view.node or '-'}",
        f"step        {view.run_step}",
        f"usage       {_usage_line(view.usage)}",
    ]
    if view.suspend_reason:
        lines.append(
            f"suspended   {view.suspend_reason}  (resume: durable-agent resume {workflow_id})"
        )
    if view.error:
        lines.append(f"error       {view.error}")
    lines += _calls_lines("pending approvals", view.pending_approvals)
    lines += _calls_lines("deferred calls", view.deferred_calls)
    return lines


def _calls_lines(title: str, calls: list[PendingApprovalView]) -> list[str]:
    if not calls:
        return [f"{title}: none"]
    lines = [f"{title} ({len(calls)}):"]
    for call in calls:
        done = "  [decided]" if call.decided else ""
        reason = f"  ({call.reason})" if call.reason else ""
        lines.append(
            f"  {call.tool_call_id}  {call.tool_name}  {_compact(call.arguments)}{reason}{done}"
        )
    return lines


# -- approvals, deferred results, resume, suspend ------------------------------------------


async def _update(
    client: Client, args: argparse.Namespace, action: str, update: Any, request: BaseModel
) -> int:
    """Sends one validated update; a rejection by the validator exits with 1."""
    target = Target(client, args.workflow_id, args.timeout)
    accepted: UpdateAccepted = await target.call(
        action, target.handle.execute_update(update, request, result_type=UpdateAccepted)
    )
    if args.json:
        _dump(accepted)
    else:
        _out(accepted.message)
    return EXIT_OK


async def cmd_approve(client: Client, args: argparse.Namespace) -> int:
    request = ApprovalSignal(
        tool_call_id=args.call_id, approved=True, decided_by=args.by, override_arguments=args.args
    )
    return await _update(client, args, "approval", AgentWorkflow.submit_approval, request)


async def cmd_deny(client: Client, args: argparse.Namespace) -> int:
    request = ApprovalSignal(
        tool_call_id=args.call_id, approved=False, reason=args.reason, decided_by=args.by
    )
    return await _update(client, args, "approval", AgentWorkflow.submit_approval, request)


async def cmd_deferred(client: Client, args: argparse.Namespace) -> int:
    request = DeferredResultSignal(
        tool_call_id=args.call_id,
        status="error" if args.error else "success",
        response=args.response,
    )
    update = AgentWorkflow.submit_deferred_result
    return await _update(client, args, "deferred result", update, request)


async def cmd_resume(client: Client, args: argparse.Namespace) -> int:
    request = ResumeSignal(reason=args.reason)
    return await _update(client, args, "resume", AgentWorkflow.resume_run, request)


async def cmd_suspend(client: Client, args: argparse.Namespace) -> int:
    target = Target(client, args.workflow_id, args.timeout)
    signal = SuspendSignal(reason=args.reason)
    await target.call("suspend signal", target.handle.signal(AgentWorkflow.suspend, signal))
    message = "suspend requested; the run pauses at its next boundary"
    if args.json:
        _out(_json({"workflow_id": target.id, "message": message, "reason": args.reason}))
    else:
        _out(f"{message} (resume: durable-agent resume {target.id})")
    return EXIT_OK


# -- checkpoints ----------------------------------------------------------------------------


async def cmd_checkpoints(client: Client, args: argparse.Namespace) -> int:
    target = Target(client, args.workflow_id, args.timeout)
    await target.describe()
    query = target.handle.query(AgentWorkflow.checkpoints)
    evidence = await target.call("checkpoints query", query)
    if args.json:
        _dump(evidence)
    elif not evidence:
        _out("no checkpoints yet")
    else:
        _out(_checkpoint_table(evidence))
    return EXIT_OK


def _checkpoint_table(evidence: Sequence[AgentResumeEvidence]) -> str:
    headers = ["#", "NODE", "STEP", "STATUS", "MESSAGES", "BATCH", "PENDING"]
    rows = [
        [
            str(index),
            item.node.value,
            str(item.run_step),
            item.status.value,
            str(item.cursor.message_cursor),
            item.cursor.tool_call_batch_id or "-",
            str(item.pending_approval_count),
        ]
        for index, item in enumerate(evidence)
    ]
    return _table(headers, rows)


# -- list -----------------------------------------------------------------------------------


def _quote(value: str) -> str:
    if '"' not in value:
        return f'"{value}"'
    if "'" not in value:
        return f"'{value}'"
    raise CliError(EXIT_USAGE, f"cannot search for a value with both kinds of quotes: {value!r}")


def list_query(status: str | None = None, agent: str | None = None) -> str:
    """The visibility query `list` sends; open statuses also require a running execution."""
    parts = [f'WorkflowType="{WORKFLOW_TYPE}"']
    if status:
        parts.append(f"AgentStatus={_quote(status)}")
        if status in ("starting", "running", "waiting"):
            parts.append('ExecutionStatus="Running"')
    if agent:
        parts.append(f"AgentName={_quote(agent)}")
    return " AND ".join(parts)


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


async def cmd_list(client: Client, args: argparse.Namespace) -> int:
    query = list_query(args.status, args.agent)
    try:
        runs = [_listed(e) async for e in client.list_workflows(query, limit=args.limit)]
    except RPCError as error:
        raise _list_error(args, error) from None
    if args.json:
        _dump(runs)
    elif not runs:
        _err(f"no agent runs match {query}")
    else:
        _out(_runs_table(runs))
    return EXIT_OK


def _list_error(args: argparse.Namespace, error: RPCError) -> CliError:
    if error.status == RPCStatusCode.UNAVAILABLE:
        return CliError(EXIT_CONNECT, f"lost the connection to {args.address}: {error.message}")
    hint = ""
    if "AgentStatus" in error.message or "AgentName" in error.message:
        hint = (
            "; register the search attributes AgentName, AgentStatus (Keyword) and "
            "PendingApprovals (Int) on the server (`python worker.py --dev` does)"
        )
    return CliError(EXIT_REJECTED, f"listing failed: {error.message}{hint}")


def _runs_table(runs: Sequence[ListedRun]) -> str:
    headers = ["WORKFLOW ID", "AGENT", "STATUS", "PENDING", "STARTED"]
    rows = [
        [r.workflow_id, r.agent or "-", r.status, str(r.pending_approvals), _time(r.start_time)]
        for r in runs
    ]
    return _table(headers, rows)


# -- the parser -----------------------------------------------------------------------------

EPILOG = """\
exit codes:
  0    success
  1    the operation was rejected or the run failed (e.g. an update validator refused it,
       the workflow is already closed, `run --wait` on a run that failed)
  2    usage error
  3    workflow not found
  4    cannot connect to the Temporal server
  5    no worker answered in time (query/update timed out; an update may still apply)
  130  interrupted
"""


def _add_common(parser: argparse.ArgumentParser, *, with_defaults: bool) -> None:
    """Connection options, accepted before or after the command (`--json` too)."""

    def default(value: object) -> object:
        return value if with_defaults else argparse.SUPPRESS

    env = os.environ
    group = parser.add_argument_group("connection")
    group.add_argument(
        "--address",
        default=default(env.get("TEMPORAL_ADDRESS", "localhost:7233")),
        help="Temporal frontend host:port (env TEMPORAL_ADDRESS, default localhost:7233)",
    )
    group.add_argument(
        "--namespace",
        default=default(env.get("TEMPORAL_NAMESPACE", "default")),
        help="Temporal namespace (env TEMPORAL_NAMESPACE, default `default`)",
    )
    group.add_argument(
        "--task-queue",
        default=default(env.get("TEMPORAL_TASK_QUEUE", DEFAULT_TASK_QUEUE)),
        help=f"task queue of the workers (env TEMPORAL_TASK_QUEUE, default {DEFAULT_TASK_QUEUE})",
    )
    group.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=default(10.0),
        metavar="SECONDS",
        help="how long to wait for the server or a worker to answer (default 10)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=default(False),
        help="print machine-readable JSON on stdout",
    )


def _command(
    commands: Any, name: str, handler: Handler, help: str, common: argparse.ArgumentParser
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=help,
        description=help,
        parents=[common],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(handler=handler)
    return parser


def _add_run(commands: Any, common: argparse.ArgumentParser) -> None:
    run = _command(commands, "run", cmd_run, "start an agent run; prints its workflow id", common)
    run.add_argument("agent", metavar="AGENT", help="name of an agent registered on the worker")
    run.add_argument("prompt", metavar="PROMPT", help="the task for the agent")
    run.add_argument("--wait", action="store_true", help="wait for the run and print its output")
    run.add_argument("--id", metavar="WORKFLOW_ID", help="workflow id (default agent-NAME-XXXX)")
    run.add_argument(
        "--suspend-at",
        nargs="+",
        action="extend",
        default=[],
        metavar="NODE",
        choices=[node.value for node in AgentExecutionNode],
        help="suspend at each of these nodes until resumed",
    )
    run.add_argument(
        "--approval-timeout",
        type=_positive_seconds,
        metavar="SECONDS",
        help="deny approvals nobody decided within this time",
    )
    run.add_argument("--conversation-id", metavar="ID", help="continue this conversation id")


def _add_hitl(commands: Any, common: argparse.ArgumentParser) -> None:
    approve = _command(commands, "approve", cmd_approve, "approve a pending tool call", common)
    _add_call(approve)
    approve.add_argument("--by", metavar="NAME", help="who decided (kept for audit)")
    approve.add_argument(
        "--args", type=_json_object, metavar="JSON", help="run the tool with these arguments"
    )
    deny = _command(commands, "deny", cmd_deny, "deny a pending tool call", common)
    _add_call(deny)
    deny.add_argument("--reason", required=True, help="why; the model sees it")
    deny.add_argument("--by", metavar="NAME", help="who decided (kept for audit)")
    deferred = _command(
        commands, "deferred", cmd_deferred, "deliver the result of a deferred tool call", common
    )
    _add_call(deferred)
    deferred.add_argument("--response", type=_json_value, required=True, metavar="JSON")
    deferred.add_argument("--error", action="store_true", help="the call failed with RESPONSE")


def _add_call(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workflow_id", metavar="ID", help="workflow id of the run")
    parser.add_argument("call_id", metavar="CALL_ID", help="tool call id (see `status`)")


def _add_control(commands: Any, common: argparse.ArgumentParser) -> None:
    resume = _command(commands, "resume", cmd_resume, "resume a suspended run", common)
    resume.add_argument("workflow_id", metavar="ID")
    resume.add_argument("--reason", help="recorded with the resume")
    suspend = _command(commands, "suspend", cmd_suspend, "pause a run at its next boundary", common)
    suspend.add_argument("workflow_id", metavar="ID")
    suspend.add_argument("--reason", required=True, help="shown while the run is suspended")


def _add_inspect(commands: Any, common: argparse.ArgumentParser) -> None:
    status = _command(commands, "status", cmd_status, "show where a run is", common)
    status.add_argument("workflow_id", metavar="ID")
    checkpoints = _command(
        commands, "checkpoints", cmd_checkpoints, "list a run's checkpoint boundaries", common
    )
    checkpoints.add_argument("workflow_id", metavar="ID")
    listing = _command(commands, "list", cmd_list, "list agent runs", common)
    listing.add_argument("--status", choices=[s.value for s in RunStatus])
    listing.add_argument("--agent", metavar="NAME")
    listing.add_argument("--limit", type=_positive_int, default=20, metavar="N")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="durable-agent",
        description="Start, inspect and steer durable agent runs on Temporal.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_common(parser, with_defaults=True)
    common = argparse.ArgumentParser(add_help=False)
    _add_common(common, with_defaults=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_run(commands, common)
    _add_inspect(commands, common)
    _add_hitl(commands, common)
    _add_control(commands, common)
    return parser


# -- entry points ---------------------------------------------------------------------------


def _exit_code(code: object) -> int:
    if code is None:
        return EXIT_OK
    return code if isinstance(code, int) else EXIT_USAGE


async def amain(argv: Sequence[str] | None = None) -> int:
    """Runs one command in the current event loop and returns its exit code."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit:  # --help, or a usage error argparse already printed
        return _exit_code(exit.code)
    handler: Handler = args.handler
    try:
        client = await _connect(args)
        return await handler(client, args)
    except CliError as error:
        _err(f"durable-agent: {error.message}")
        return error.code


def main(argv: list[str] | None = None) -> int:
    """The `durable-agent` console script.

    With an explicit `argv` it returns the exit code. Without one (the console script,
    `python -m durable_agent.cli`) it ends the process itself: the Temporal client's Rust threads
    can abort CPython's shutdown (temporalio/sdk-python#300, exit status 134), which would
    break the exit codes scripts rely on.
    """
    try:
        code = asyncio.run(amain(argv))
    except KeyboardInterrupt:
        _err("interrupted")
        code = EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `durable-agent list | head -1`
        code = EXIT_OK
    if argv is None:
        _exit_process(code)
    return code


def _exit_process(code: int) -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
