"""`durable-agent watch ID [--from SEQ] [--json]`: follow a run live, until it ends.

On a terminal it keeps one view up to date (`RunView`: node, step, the model's text as it
streams, tool calls and results, the workspace's latest changes, calls waiting for a human
with the commands that decide them); elsewhere it prints one line per step of the run (a
workspace change as `workspace: +added ~modified -deleted (workspace:<ref>)`). `--json`
prints every record as one JSON line, for scripts (resume one after a disconnect with
`--from LAST+1`). It reads the run's stream with queries, so watching adds nothing to the
run's history.

Exit codes: 0 when the run completed, 1 when it failed, was cancelled or terminated, or
when `--from` is past the end of a run that has ended; 2 for a negative `--from`; 3 for an
unknown workflow id; 1 for a workflow that is not an agent run.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable

import click
from rich.console import Console
from rich.live import Live

from durable_agent.contract.records import (
    AgentStreamRecord,
    ApprovalDecidedData,
    ApprovalRequestedData,
    DeferredResultData,
    ModelResponseData,
    ModelRetryData,
    ResumedData,
    RunCancelledData,
    RunCompleteData,
    RunFailedData,
    SteeredData,
    SubagentEndData,
    SubagentStartData,
    SuspendedData,
    ToolCallData,
    ToolReturnData,
    WorkspaceChangedData,
)
from durable_agent.temporal.client import AgentRunError, AgentRunHandle

from .context import EPILOG, EXIT_OK, EXIT_REJECTED, Settings, connection_options
from .live import RunView, workspace_change
from .output import compact, dump_line, err, out, q

__all__ = ["watch"]

REFRESH_PER_SECOND = 10
ENDED_OK = frozenset({"completed"})


@click.command(epilog=EPILOG)
@click.argument("workflow_id", metavar="ID")
@click.option(
    "--from",
    "from_seq",
    type=click.IntRange(min=0),
    metavar="SEQ",
    help="start at record SEQ (default 0: the whole run so far)",
)
@click.option(
    "--children/--no-children",
    default=True,
    show_default=True,
    help="follow the run's sub-agents too, indented under it",
)
@connection_options(group=False)
@click.pass_obj
def watch(
    settings: Settings, workflow_id: str, from_seq: int | None, children: bool
) -> Awaitable[int]:
    """Follow run ID live, until it ends: its steps, tool calls, the model's text as it is
    written, and the calls waiting for a human (with the command to approve them), and
    those of its sub-agents, indented. A run that has ended is replayed. --json prints one
    stream record per line (a sub-agent's with its `workflow_id` and `depth`)."""

    async def follow() -> int:
        handle = (await settings.connect()).get(workflow_id)
        view = RunView(workflow_id)
        if from_seq:
            await _seed(handle, view, from_seq)
        after = from_seq - 1 if from_seq else None
        if settings.json:
            async for record in handle.stream(after, children=children):
                if record.workflow_id is None:
                    view.apply(record)
                dump_line(record)
        else:
            await _show(handle, view, after, children)
        return await _ended(handle, view, from_seq)

    return follow()


async def _seed(handle: AgentRunHandle, view: RunView, from_seq: int) -> None:
    """A watch from a later seq starts from the run's current state, and says so when it
    will have to wait for that seq."""
    try:
        view.seed(await handle.status())
    except AgentRunError as error:
        err(f"note: {error.message}")
    position = await handle.stream_position()
    description = await handle.describe()
    if from_seq > position and description.close_time is None:
        err(f"waiting for seq {from_seq}: the run's last record so far is seq {position - 1}")


async def _show(handle: AgentRunHandle, view: RunView, after: int | None, children: bool) -> None:
    """The run in its view (or, off a terminal, as lines); its sub-agents' steps as lines,
    indented by how deep each one is."""
    console = Console(file=sys.stdout, highlight=False)
    below: dict[str, RunView] = {}

    def child_line(record: AgentStreamRecord) -> str | None:
        assert record.workflow_id is not None
        child = below.setdefault(record.workflow_id, RunView(record.workflow_id))
        child.apply(record)
        line = _line(child, record)
        return "    " * record.depth + line if line else None

    if not console.is_terminal:
        async for record in handle.stream(after, children=children):
            if record.workflow_id is not None:
                line = child_line(record)
            else:
                view.apply(record)
                line = _line(view, record)
            if line:
                out(line)
        return
    with Live(view.render(), console=console, refresh_per_second=REFRESH_PER_SECOND) as live:
        async for record in handle.stream(after, children=children):
            if record.workflow_id is not None:
                if line := child_line(record):
                    live.console.print(line, markup=False, highlight=False)
                continue
            view.apply(record)
            live.update(view.render())


def _line(view: RunView, record: AgentStreamRecord) -> str | None:
    """One line per thing a log reader wants (deltas are shown whole, at the response)."""
    data = record.data
    prefix = f"[{record.seq}]"
    if isinstance(data, ModelResponseData):
        text = view.text(data.run_step)
        return f"{prefix} step {data.run_step}: {text}" if text else None
    if isinstance(data, ToolCallData):
        return f"{prefix} tool {data.tool_name} {data.tool_call_id} {compact(data.arguments)}"
    if isinstance(data, ToolReturnData):
        return f"{prefix} -> {data.tool_call_id}: {data.content}"
    if isinstance(data, ApprovalRequestedData):
        call = data.tool_call_id
        return (
            f"{prefix} waiting for approval of {data.tool_name} {call} "
            f"{compact(data.arguments)}: durable-agent approve {q(view.workflow_id)} {q(call)}"
        )
    if isinstance(data, SubagentStartData):
        return (
            f"{prefix} sub-agent {data.agent} started for {data.tool_call_id} ({data.workflow_id})"
        )
    if isinstance(data, SubagentEndData):
        outcome = "failed" if data.is_error else "finished"
        return (
            f"{prefix} sub-agent {data.agent} {outcome} for {data.tool_call_id} "
            f"({data.usage.requests} requests)"
        )
    if isinstance(data, SteeredData):
        return f"{prefix} steered: {data.message}"
    if isinstance(data, ApprovalDecidedData):
        return f"{prefix} {data.tool_call_id} {data.describe()}"
    if isinstance(data, WorkspaceChangedData):
        return f"{prefix} workspace: {workspace_change(data)} ({data.environment_ref})"
    if isinstance(data, _PLAIN):
        shown = data.as_json()
        return f"{prefix} {record.kind} {compact(shown) if shown else ''}".rstrip()
    if isinstance(data, RunCompleteData):
        return f"{prefix} completed: {compact(data.output)}"
    if isinstance(data, RunFailedData):
        return f"{prefix} failed: {data.kind}: {data.message}"
    return None


_PLAIN = (SuspendedData, ResumedData, RunCancelledData, ModelRetryData, DeferredResultData)
"""Records shown as their kind and payload."""


async def _ended(handle: AgentRunHandle, view: RunView, from_seq: int | None) -> int:
    """0 if the run completed; the server's word on how it ended wins over the records
    (a terminated run publishes nothing about it)."""
    if from_seq and view.last_seq < from_seq:
        err(f"run {handle.id} has ended; there is nothing from seq {from_seq} on")
    description = await handle.describe()
    ended = description.status.name.lower() if description.status else "unknown"
    return EXIT_OK if ended in ENDED_OK else EXIT_REJECTED
