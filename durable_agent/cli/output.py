"""What the commands print: results on stdout (rich tables for people, JSON for scripts),
errors and hints on stderr.

Tables are rich tables without borders, so `awk '{print $1}'` still works on them; when
stdout is not a terminal nothing is wrapped or cut to a screen width and no colour codes
are written.
"""

from __future__ import annotations

import io
import json
import shlex
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field
from rich.console import Console
from rich.table import Table
from rich.text import Text

from durable_agent import AgentResumeEvidence, Usage
from durable_agent.engine.pricing import dollars
from durable_agent.temporal.client import ListedRun
from durable_agent.temporal.quota import QuotaWaitView
from durable_agent.temporal.wire import AgentStatusView, AgentWorkflowResult, PendingApprovalView

__all__ = [
    "RunReport",
    "q",
    "StatusReport",
    "checkpoint_table",
    "compact",
    "dump",
    "dump_line",
    "err",
    "out",
    "output_text",
    "print_status",
    "runs_table",
]


def q(word: str) -> str:
    """`word` quoted for a shell, so a hint's command can be pasted as it is."""
    return shlex.quote(word)


UNBOUNDED_WIDTH = 10_000
LABEL_WIDTH = 12
USAGE_FIELDS = (
    "requests",
    "tool_calls",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
)


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
    subagents: dict[str, AgentStatusView] = Field(default_factory=dict)
    """The `status` of each descendant's child workflow, by workflow id (the tree's nodes
    below this run; one a closed child's worker cannot answer for is left out)."""


# -- plain streams --------------------------------------------------------------------------


def out(text: str = "") -> None:
    print(text, file=sys.stdout, flush=True)


def err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _json(data: Any, *, indent: int | None) -> str:
    return json.dumps(data, indent=indent, ensure_ascii=False, default=str)


def dump(value: BaseModel | Sequence[BaseModel] | dict[str, Any]) -> None:
    """One pretty JSON document."""
    if isinstance(value, BaseModel):
        out(_json(value.model_dump(mode="json"), indent=2))
    elif isinstance(value, dict):
        out(_json(value, indent=2))
    else:
        out(_json([item.model_dump(mode="json") for item in value], indent=2))


def dump_line(data: BaseModel | dict[str, Any]) -> None:
    """One JSON document on one line (JSON Lines), for output that comes in steps."""
    value = data.model_dump(mode="json") if isinstance(data, BaseModel) else data
    out(_json(value, indent=None))


def _render(renderable: Table | Text) -> None:
    """Through rich on a terminal; elsewhere as plain lines, never wrapped."""
    console = Console(file=sys.stdout, highlight=False, soft_wrap=True)
    if console.is_terminal:
        console.print(renderable)
        return
    buffer = io.StringIO()
    Console(file=buffer, width=UNBOUNDED_WIDTH, no_color=True, highlight=False).print(renderable)
    out("\n".join(line.rstrip() for line in buffer.getvalue().splitlines()))


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for header in headers:
        table.add_column(header, no_wrap=True)
    for row in rows:
        table.add_row(*row)
    _render(table)


# -- values ---------------------------------------------------------------------------------


def compact(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _time(value: datetime | None) -> str:
    return value.astimezone().strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _usage_line(usage: Usage) -> str:
    """Requests and tool calls always; token counts when the model reported any."""
    values = usage.model_dump()
    shown = [k for k in USAGE_FIELDS if k in ("requests", "tool_calls") or values.get(k)]
    line = " ".join(f"{k}={values.get(k, 0)}" for k in shown)
    return line if usage.cost is None else f"{line} cost={dollars(usage.cost)}"


def output_text(result: AgentWorkflowResult) -> str:
    value = result.output if result.output is not None else result.structured_output
    if value is None:
        return ""
    return value if isinstance(value, str) else _json(value, indent=2)


# -- status ---------------------------------------------------------------------------------


def print_status(report: StatusReport) -> None:
    """`status` for a person: one `label  value` line each, labels in bold on a terminal."""
    lines: list[tuple[str, str]] = [
        ("workflow", f"{report.workflow_id}  ({report.execution_status})"),
        ("started", _time(report.start_time)),
    ]
    if report.close_time:
        lines.append(("closed", _time(report.close_time)))
    if report.view is not None:
        view_lines = _view_lines(report.workflow_id, report.view)
        if report.failure is not None and report.view.error == report.failure:
            view_lines.remove(("error", report.failure))  # said once, as the failure
        lines += view_lines
        lines += _tree_lines(report.view, report.subagents, depth=1)
    if report.result is not None:
        lines.append(("result", output_text(report.result)))
    if report.failure is not None:
        lines.append(("failure", report.failure))
    text = Text()
    for index, (label, value) in enumerate(lines):
        if index:
            text.append("\n")
        if label:
            text.append(label.ljust(LABEL_WIDTH), style="bold")
        text.append(value)
    _render(text)


def _view_lines(workflow_id: str, view: AgentStatusView) -> list[tuple[str, str]]:
    lines = [
        ("agent", view.agent),
        ("status", view.status),
        ("node", view.node or "-"),
        ("step", str(view.run_step)),
        ("usage", _usage_line(view.usage)),
    ]
    if view.model:
        lines.append(("model", view.model))
    if view.environment_ref:
        lines.append(("workspace", view.environment_ref))
    if view.quota_wait:
        lines.append(("quota wait", _quota_wait(view.quota_wait)))
    for refused in view.refused_decisions:
        where = f" in {refused.workflow_id}" if refused.workflow_id else ""
        lines.append(("refused", f"{refused.tool_call_id}{where}: {refused.reason}"))
    if view.suspend_reason:
        resume = f"(resume: durable-agent resume {q(workflow_id)})"
        lines.append(("suspended", f"{view.suspend_reason}  {resume}"))
    if view.error:
        lines.append(("error", view.error))
    if view.steering:
        queued = " | ".join(view.steering)
        lines.append(("steering", f"{queued}  (queued for the next model request)"))
    if view.forked_from:
        origin = view.forked_from
        where = f"{origin.node.value}, step {origin.run_step}, {origin.checkpoint_id}"
        lines.append(("forked from", f"{origin.workflow_id} #{origin.index}  ({where})"))
    if view.session:
        session = view.session
        state = "awaiting the next prompt" if session.awaiting_prompt else "in a turn"
        if view.status in ("completed", "failed", "cancelled"):
            state = "ended"
        elif session.ending:
            state = "ending"
        until = f", ends at {_time(session.idle_expires_at)}" if session.idle_expires_at else ""
        lines.append(("session", f"{session.turns} turn(s) answered, {state}{until}"))
    lines += _calls_lines("pending approvals", view.pending_approvals)
    lines += _calls_lines("deferred calls", view.deferred_calls)
    return lines


def _quota_wait(wait: QuotaWaitView) -> str:
    """The model quota a run waits its turn for: its key, since when, a 429's pause."""
    line = f"{wait.key} since {_time(wait.since)}"
    if wait.paused_until:
        line += f" (the provider paused it until {_time(wait.paused_until)})"
    return line


def _tree_lines(
    view: AgentStatusView, known: dict[str, AgentStatusView], *, depth: int
) -> list[tuple[str, str]]:
    """The run's sub-agent calls as a tree: each child's agent, status and usage, and
    under it its own children."""
    if not view.subagents:
        return []
    indent = "  " * depth
    lines = [("", f"{indent[2:]}sub-agents ({len(view.subagents)}):")] if depth == 1 else []
    for child in view.subagents:
        usage = _usage_line(child.usage)
        lines.append(("", f"{indent}{child.tool_call_id}  {child.agent}  {child.status}  {usage}"))
        lines.append(("", f"{indent}  {child.workflow_id}"))
        if (below := known.get(child.workflow_id)) is not None:
            lines += _tree_lines(below, known, depth=depth + 1)
    return lines


def _calls_lines(title: str, calls: list[PendingApprovalView]) -> list[tuple[str, str]]:
    if not calls:
        return [("", f"{title}: none")]
    lines = [("", f"{title} ({len(calls)}):")]
    for call in calls:
        done = "  [decided]" if call.decided else ""
        reason = f"  ({call.reason})" if call.reason else ""
        if call.agent:
            reason += f"  [sub-agent {call.agent}, {call.workflow_id}]"
        arguments = compact(call.arguments)
        lines.append(("", f"  {call.tool_call_id}  {call.tool_name}  {arguments}{reason}{done}"))
    return lines


# -- tables ---------------------------------------------------------------------------------


def checkpoint_table(
    evidence: Sequence[AgentResumeEvidence], indexes: Sequence[int] | None = None
) -> None:
    """One row per boundary; `indexes` number them over a continue-as-new chain."""
    numbers = list(indexes) if indexes is not None else list(range(len(evidence)))
    rows = [
        [
            str(numbers[index]),
            item.node.value,
            str(item.run_step),
            item.status.value,
            str(item.cursor.message_cursor),
            item.cursor.tool_call_batch_id or "-",
            str(item.pending_approval_count),
        ]
        for index, item in enumerate(evidence)
    ]
    _table(["#", "NODE", "STEP", "STATUS", "MESSAGES", "BATCH", "PENDING"], rows)


def runs_table(runs: Sequence[ListedRun]) -> None:
    rows = [
        [
            r.workflow_id,
            r.agent or "-",
            f"{r.status} (waiting for quota {r.quota_wait.key})" if r.quota_wait else r.status,
            str(r.pending_approvals),
            dollars(r.cost),
            _time(r.start_time),
        ]
        for r in runs
    ]
    _table(["WORKFLOW ID", "AGENT", "STATUS", "PENDING", "COST", "STARTED"], rows)
