"""Starting and looking at runs: `run`, `status`, `list` and `checkpoints`."""

from __future__ import annotations

import asyncio
import io
import sys
from collections.abc import Awaitable
from typing import TextIO

import click
from temporalio.client import WorkflowExecutionStatus

from durable_agent import AgentExecutionNode, InvalidInput, RunStatus
from durable_agent.temporal.client import (
    AgentRunError,
    AgentRunHandle,
    RunFailed,
    list_query,
)
from durable_agent.temporal.client.listing import execution_status
from durable_agent.temporal.wire import (
    AWAITING_PROMPT,
    AgentStatusView,
    AgentWorkflowResult,
    PendingApprovalView,
)

from .context import (
    APPROVAL_SECONDS,
    EPILOG,
    EXIT_OK,
    EXIT_REJECTED,
    POSITIVE_INT,
    Settings,
    connection_options,
)
from .output import (
    RunReport,
    StatusReport,
    checkpoint_table,
    compact,
    dump,
    dump_line,
    err,
    out,
    output_text,
    print_status,
    q,
    runs_table,
)
from .starting import failed_at_start, started_report

__all__ = ["checkpoints", "list_runs", "report_started", "run", "status"]

POLL_SECONDS = 1.0
"""How often `run --wait` asks the run for its status while it waits for the result."""


# -- run ------------------------------------------------------------------------------------


@click.command(epilog=EPILOG)
@click.argument("agent")
@click.argument("prompt", required=False)
@click.option(
    "--prompt-file",
    type=click.File("r", encoding="utf-8"),
    help="read the prompt from this file (- for standard input; so does PROMPT -)",
)
@click.option("--wait", is_flag=True, help="wait for the run and print its output")
@click.option("--id", "workflow_id", metavar="WORKFLOW_ID", help="default agent-NAME-XXXXXXXX")
@click.option(
    "--suspend-at",
    multiple=True,
    type=click.Choice([node.value for node in AgentExecutionNode]),
    metavar="NODE",
    help="suspend at this node until resumed (repeat for several)",
)
@click.option(
    "--approval-timeout",
    type=APPROVAL_SECONDS,
    help="deny approvals nobody decided within this many seconds",
)
@click.option("--conversation-id", metavar="ID", help="continue this conversation id")
@click.option("--model", metavar="NAME", help="run it on another of the agent's allowed models")
@click.option(
    "--priority",
    type=click.IntRange(1, 5),
    help="1 (first) to 5: its Temporal task priority and its turn for model quotas (default 3)",
)
@connection_options(group=False)
@click.pass_obj
def run(
    settings: Settings,
    agent: str,
    prompt: str | None,
    prompt_file: TextIO | None,
    wait: bool,
    workflow_id: str | None,
    suspend_at: tuple[str, ...],
    approval_timeout: float | None,
    conversation_id: str | None,
    model: str | None,
    priority: int | None,
) -> Awaitable[int]:
    """Start a run of AGENT (a name registered on the worker) with PROMPT; prints its
    workflow id. `--model NAME` runs it on one of the agent's allowed models. A run that
    fails at its very start (an agent no worker registers, a model the agent does not
    allow) exits 1 with the reason: the command waits up to two seconds for the run to get
    under way (a run no worker has taken by then is reported as started).

    With --json every line is one JSON document: `{"workflow_id": ..., "run_id": ...}` as
    soon as the run has started, then, with --wait or when it failed at its start, the
    report of how it ended. A long
    prompt (the shell limits arguments to ~128 KiB) comes from a file or standard input:
    `--prompt-file task.md`, or `run AGENT - < task.md`.
    """
    prompt = _prompt_text(prompt, prompt_file)

    async def start() -> int:
        agents = await settings.connect()
        try:
            handle = await agents.start(
                agent,
                prompt,
                workflow_id=workflow_id,
                suspend_at=[AgentExecutionNode(node) for node in suspend_at],
                approval_timeout_seconds=approval_timeout,
                conversation_id=conversation_id,
                model=model,
                priority=priority,
            )
        except InvalidInput as error:
            err(f"durable-agent: rejected: {error.message}")
            return EXIT_REJECTED
        return await report_started(handle, settings, wait)

    return start()


async def report_started(
    handle: AgentRunHandle,
    settings: Settings,
    wait: bool,
    note: str | None = None,
    **extra: str,
) -> int:
    """Prints the run's ids (stdout) and `note` (stderr, e.g. "forked ID at #2"); then,
    with `wait`, how it ended, and without, whether it failed at its very start (an unknown
    agent, a model the agent does not allow, a fork's missing boundary): exit 1 with the
    reason instead of "started"."""
    report = started_report(handle)
    if settings.json:
        dump_line({"workflow_id": report.workflow_id, "run_id": report.run_id, **extra})
    else:
        out(handle.id)
    if wait:
        if note is not None and not settings.json:
            err(note)
        return await _finish(handle, settings, report)
    report.failure = await failed_at_start(handle)
    if report.failure is not None:
        return _failed(handle, settings, report)
    if not settings.json:
        follow = f"follow it with: durable-agent status {q(handle.id)}"
        err(f"started; {follow}" if note is None else f"{note}\n{follow}")
    return EXIT_OK


def _prompt_text(prompt: str | None, prompt_file: TextIO | None) -> str:
    """The prompt from the argument, `-` (standard input) or --prompt-file."""
    if prompt is not None and prompt_file is not None:
        raise click.UsageError("give the prompt as PROMPT or --prompt-file, not both")
    if prompt == "-":
        prompt_file = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8")
    elif prompt is not None:
        return prompt
    if prompt_file is None:
        raise click.UsageError(
            "give the prompt: PROMPT, PROMPT - (standard input) or --prompt-file"
        )
    try:
        text = prompt_file.read()
    except UnicodeDecodeError as error:
        raise click.UsageError(f"the prompt is not UTF-8 text ({error})") from None
    return text.removesuffix("\n")


async def _finish(handle: AgentRunHandle, settings: Settings, report: RunReport) -> int:
    try:
        report.result = await _await_result(handle, settings)
    except RunFailed as error:
        report.failure = error.failure
    if report.failure is not None:
        return _failed(handle, settings, report)
    if settings.json:
        dump_line(report)
    elif report.result is not None:
        out(output_text(report.result))
    return EXIT_OK


def _failed(handle: AgentRunHandle, settings: Settings, report: RunReport) -> int:
    if settings.json:
        dump_line(report)
    err(f"durable-agent: run {handle.id} failed: {report.failure}")
    return EXIT_REJECTED


async def _await_result(handle: AgentRunHandle, settings: Settings) -> AgentWorkflowResult:
    """Waits for the result; meanwhile tells the user what the run waits for, once each."""
    result = asyncio.ensure_future(handle.result())
    shown: set[str] = set()
    try:
        while True:
            done, _ = await asyncio.wait({result}, timeout=POLL_SECONDS)
            if done:
                return result.result()
            await _hint_waiting(handle, settings, shown)
    except asyncio.CancelledError:
        result.cancel()
        err(f"\nstopped waiting; the run goes on: durable-agent status {q(handle.id)}")
        raise


async def _hint_waiting(handle: AgentRunHandle, settings: Settings, shown: set[str]) -> None:
    try:
        view = await handle.status()
    except AgentRunError:
        hint = (
            f"no worker has answered yet; is one running on task queue {settings.task_queue!r}? "
            "(durable-agent worker, or python worker.py)"
        )
        _hint_once(shown, "no-worker", hint)
        return
    for key, text in _waiting_hints(handle.id, view):
        _hint_once(shown, key, text)


def _hint_once(shown: set[str], key: str, text: str) -> None:
    if key not in shown:
        shown.add(key)
        err(text)


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
        f"waiting for approval of tool `{pending.tool_name}` {compact(pending.arguments)} "
        f"(call {pending.tool_call_id}); still waiting. Approve with:\n"
        f"  durable-agent approve {q(workflow_id)} {q(pending.tool_call_id)}\n"
        f"or deny with:\n"
        f"  durable-agent deny {q(workflow_id)} {q(pending.tool_call_id)} --reason TEXT"
    )


def _deferred_hint(workflow_id: str, deferred: PendingApprovalView) -> str:
    return (
        f"waiting for the result of deferred tool `{deferred.tool_name}` "
        f"(call {deferred.tool_call_id}); still waiting. Deliver it with:\n"
        f"  durable-agent deferred {q(workflow_id)} {q(deferred.tool_call_id)} --response JSON"
    )


def _suspend_hint(workflow_id: str, view: AgentStatusView) -> str:
    return (
        f"suspended at {view.node} ({view.suspend_reason}); still waiting. Resume with:\n"
        f"  durable-agent resume {q(workflow_id)}"
    )


# -- status ---------------------------------------------------------------------------------


@click.command(epilog=EPILOG)
@click.argument("workflow_id", metavar="ID")
@connection_options(group=False)
@click.pass_obj
def status(settings: Settings, workflow_id: str) -> Awaitable[int]:
    """Show where run ID is: status, node, step, usage, pending approvals and deferred calls.

    Exits 0 whatever state it reports; a closed run also shows its result or failure.
    """

    async def show() -> int:
        handle = (await settings.connect()).get(workflow_id)
        description = await handle.describe()
        closed = description.status not in (None, WorkflowExecutionStatus.RUNNING)
        report = StatusReport(
            workflow_id=handle.id,
            execution_status=execution_status(description.status),
            task_queue=description.task_queue,
            start_time=description.start_time,
            close_time=description.close_time,
            view=await _status_view(handle, closed=closed),
        )
        if report.view is not None:
            report.subagents = await _subagent_views(settings, report.view)
        if closed:
            try:
                report.result = await handle.result()
            except RunFailed as error:
                report.failure = error.failure
        if settings.json:
            dump(report)
        else:
            print_status(report)
        return EXIT_OK

    return show()


async def _subagent_views(settings: Settings, view: AgentStatusView) -> dict[str, AgentStatusView]:
    """Every descendant's `status`, for the tree: asked of each child workflow in turn."""
    agents = await settings.connect()
    found: dict[str, AgentStatusView] = {}
    pending = [child.workflow_id for child in view.subagents]
    while pending:
        workflow_id = pending.pop(0)
        try:
            child = await agents.get(workflow_id).status()
        except AgentRunError:
            continue  # a closed child nobody can replay: the parent's line says enough
        found[workflow_id] = child
        pending.extend(c.workflow_id for c in child.subagents if c.workflow_id not in found)
    return found


async def _status_view(handle: AgentRunHandle, *, closed: bool) -> AgentStatusView | None:
    """The `status` query. A closed run needs a worker to replay it, so there it is optional."""
    if not closed:
        return await handle.status()
    try:
        return await handle.status()
    except AgentRunError as error:
        err(f"note: {error.message}\nshowing the recorded outcome only")
        return None


# -- checkpoints ----------------------------------------------------------------------------


@click.command(epilog=EPILOG)
@click.argument("workflow_id", metavar="ID")
@connection_options(group=False)
@click.pass_obj
def checkpoints(settings: Settings, workflow_id: str) -> Awaitable[int]:
    """List every checkpoint boundary run ID has passed, in order, across continue-as-new
    (# counts over the whole run). Boundaries held by an earlier run that retention has
    deleted are named on stderr instead of shown."""

    async def show() -> int:
        chain = await (await settings.connect()).get(workflow_id).checkpoint_chain()
        if settings.json:
            dump(chain.checkpoints)
        elif not chain.checkpoints:
            out("no checkpoints yet")
        else:
            checkpoint_table(chain.checkpoints, chain.indexes)
        for gone in chain.missing:
            err(
                f"note: checkpoints {gone.first}-{gone.last} cannot be shown: run "
                f"{gone.run_id} that held them no longer exists (namespace retention)"
            )
        return EXIT_OK

    return show()


# -- list -----------------------------------------------------------------------------------


@click.command("list", epilog=EPILOG)
@click.option(
    "--status",
    "run_status",
    type=click.Choice([*(s.value for s in RunStatus), AWAITING_PROMPT]),
    help="only runs in this status (awaiting_prompt: sessions waiting for their next prompt)",
)
@click.option("--agent", metavar="NAME", help="only runs of this agent")
@click.option("--forked-from", metavar="ID", help="only the forks and retries of run ID")
@click.option("--limit", type=POSITIVE_INT, default=20, show_default=True)
@click.option(
    "--all",
    "include_subagents",
    is_flag=True,
    help="sub-agents' runs too (by default only top-level runs are listed)",
)
@connection_options(group=False)
@click.pass_obj
def list_runs(
    settings: Settings,
    run_status: str | None,
    agent: str | None,
    forked_from: str | None,
    limit: int,
    include_subagents: bool,
) -> Awaitable[int]:
    """List agent runs, newest first (`--status waiting`: the runs waiting for a human;
    `--forked-from ID`: the runs forked or retried from ID). A sub-agent's run is shown
    under its parent by `durable-agent status`; `--all` lists it here too."""
    try:
        query = list_query(run_status, agent, forked_from, top_level=not include_subagents)
    except ValueError as error:
        hint = "'--forked-from'" if forked_from and not agent else "'--agent'"
        raise click.BadParameter(str(error), param_hint=hint) from None

    async def show() -> int:
        agents = await settings.connect()
        listed_runs = agents.list(
            run_status,
            agent,
            limit=limit,
            forked_from=forked_from,
            include_subagents=include_subagents,
        )
        runs = [listed async for listed in listed_runs]
        if settings.json:
            dump(runs)
        elif not runs:
            err(f"no agent runs match {query}")
        else:
            runs_table(runs)
        return EXIT_OK

    return show()
