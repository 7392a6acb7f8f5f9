"""What `durable-agent watch` shows: a run's state, rebuilt from its stream records.

`RunView.apply` folds records into what a person follows: the node and step, the text of
each model request as it streams, tool calls with their results, the calls waiting for a
human (with the command that decides them) and how the run ended. Streamed text follows the
stream's rule for retries: deltas carry their attempt, a newer attempt (or a `model_retry`
record) replaces what older ones wrote, and the `model_response` record's whole text
replaces the deltas, so a retried request never shows garbled text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from durable_agent.contract.records import (
    AgentStreamRecord,
    ApprovalDecidedData,
    ApprovalRequestedData,
    DeferredResultData,
    ModelDeltaData,
    ModelRequestData,
    ModelResponseData,
    ModelRetryData,
    NodeStartData,
    RecordData,
    ResumedData,
    RunCancelledData,
    RunCompleteData,
    RunFailedData,
    RunStartData,
    SteeredData,
    SuspendedData,
    ToolCallData,
    ToolReturnData,
    UsageData,
    WaitingCallData,
    WaitingData,
    WorkspaceChangedData,
)
from durable_agent.temporal.executor import CONTINUE_AS_NEW
from durable_agent.temporal.wire import AgentStatusView

from .output import q

__all__ = ["CallView", "RunView", "StepText", "workspace_change"]

ModelData = ModelRequestData | ModelDeltaData | ModelRetryData | ModelResponseData
_MODEL = (ModelRequestData, ModelDeltaData, ModelRetryData, ModelResponseData)

SHOWN_STEPS = 3
"""Model requests whose text the live view shows (the latest ones)."""
SHOWN_CALLS = 8
VALUE_CHARS = 80
SHOWN_CHANGES = 4
"""Workspace changes the live view shows (the latest ones)."""
SHOWN_PATHS = 12
"""Paths one workspace change line names before it says how many more."""


def workspace_change(data: WorkspaceChangedData, limit: int = SHOWN_PATHS) -> str:
    """One line for a workspace change: `+new.txt ~changed.py -gone.md`, the first
    `limit` paths and how many more."""
    marked = [
        *(f"+{p}" for p in data.added),
        *(f"~{p}" for p in data.modified),
        *(f"-{p}" for p in data.deleted),
    ]
    more = len(marked) - limit
    shown = " ".join(marked[:limit]) + (f" … and {more} more" if more > 0 else "")
    return shown or "(no paths)"


def _short(value: Any, limit: int = VALUE_CHARS) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class StepText:
    """One model request's text and thinking, as the latest attempt wrote them."""

    attempt: int = 1
    text: str = ""
    thinking: str = ""
    done: bool = False


@dataclass
class CallView:
    tool_call_id: str
    tool_name: str
    arguments: Any = None
    state: str = "running"
    """running, returned, failed, waiting for approval, deferred, approved/denied by ..."""
    result: str | None = None
    decision: str | None = None
    """Who decided it ("approved by alice"), kept once the call runs."""

    def shown_state(self) -> str:
        if self.decision and self.decision != self.state:
            return f"{self.state} ({self.decision})"
        return self.state


@dataclass
class RunView:
    workflow_id: str
    agent: str | None = None
    status: str = "starting"
    node: str | None = None
    step: int = 0
    last_seq: int = -1
    steps: dict[int, StepText] = field(default_factory=dict)
    calls: dict[str, CallView] = field(default_factory=dict)
    waiting: dict[str, CallView] = field(default_factory=dict)
    """Calls waiting for a human: approvals and deferred calls, by call id."""
    steering: list[str] = field(default_factory=list)
    """Steering messages users sent, in the order they arrived."""
    workspace: list[WorkspaceChangedData] = field(default_factory=list)
    """The run's workspace changes, oldest first (`workspace_changed` records)."""
    usage: dict[str, Any] = field(default_factory=dict)
    suspend_reason: str | None = None
    output: Any = None
    error: str | None = None
    runs: int = 1

    # -- folding records ----------------------------------------------------------------

    def seed(self, view: AgentStatusView) -> None:
        """What a watch that starts past seq 0 cannot learn from the records it reads."""
        self.agent = view.agent
        self.status = view.status
        self.node = view.node
        self.step = view.run_step
        self.suspend_reason = view.suspend_reason
        for pending in view.pending_approvals:
            if not pending.decided:
                call = CallView(pending.tool_call_id, pending.tool_name, pending.arguments)
                call.state = "waiting for approval"
                self.waiting[pending.tool_call_id] = call
        for deferred in view.deferred_calls:
            if not deferred.decided:
                self.waiting[deferred.tool_call_id] = CallView(
                    deferred.tool_call_id, deferred.tool_name, deferred.arguments, "deferred"
                )

    def text(self, step: int) -> str:
        """The text shown for model request `step` (its thinking is `steps[step].thinking`)."""
        shown = self.steps.get(step)
        return shown.text if shown else ""

    def apply(self, record: AgentStreamRecord) -> None:
        self.last_seq = record.seq
        data = record.data
        if isinstance(data, RunStartData):
            self.agent = data.agent or self.agent
            self.status = "running"
        elif isinstance(data, NodeStartData):
            self.node = record.node
        elif isinstance(
            data, ModelRequestData | ModelDeltaData | ModelRetryData | ModelResponseData
        ):
            self._model(data)
        elif isinstance(data, UsageData):
            self.usage = data.total.model_dump(mode="json")
        elif isinstance(data, ToolCallData | ToolReturnData | WaitingCallData):
            self._call(data)
        elif isinstance(data, ApprovalDecidedData | DeferredResultData):
            self._decided(data)
        else:
            self._status(data)

    def _model(self, data: ModelData) -> None:
        step = data.run_step
        self.step = max(self.step, step)
        shown = self.steps.setdefault(step, StepText())
        if isinstance(data, ModelRequestData):
            self.status = "running"
            return
        if isinstance(data, ModelResponseData):
            shown.text = data.text
            shown.thinking = data.thinking
            shown.done = True
            return
        if isinstance(data, ModelRetryData) or data.attempt > shown.attempt:
            self.steps[step] = shown = StepText(attempt=data.attempt)
        if isinstance(data, ModelDeltaData) and data.attempt == shown.attempt and not shown.done:
            if data.part == "thinking":
                shown.thinking += data.text
            else:
                shown.text += data.text

    def _call(self, data: ToolCallData | ToolReturnData | WaitingCallData) -> None:
        call_id = data.tool_call_id
        call = self.calls.get(call_id) or CallView(call_id, data.tool_name or "?")
        self.calls[call_id] = call
        if isinstance(data, ToolCallData):
            call.arguments = data.arguments
            call.state = "running"
        elif isinstance(data, ToolReturnData):
            call.state = "failed" if data.is_error else "returned"
            call.result = data.content
        else:
            call.arguments = data.arguments
            call.state = (
                "waiting for approval" if isinstance(data, ApprovalRequestedData) else "deferred"
            )
            self.waiting[call_id] = call

    def _decided(self, data: ApprovalDecidedData | DeferredResultData) -> None:
        call_id = data.tool_call_id
        call = self.waiting.pop(call_id, None) or self.calls.get(call_id)
        if call is None:
            return
        if isinstance(data, DeferredResultData):
            call.decision = f"result delivered ({data.status})"
        else:
            call.decision = data.describe()
        call.state = call.decision

    def _status(self, data: RecordData) -> None:
        if isinstance(data, WaitingData):
            self.status = "waiting"
        elif isinstance(data, SuspendedData):
            if data.reason == CONTINUE_AS_NEW:
                self.runs += 1
            else:
                self.status = "suspended"
                self.suspend_reason = data.reason
        elif isinstance(data, ResumedData):
            self.status = "running"
            self.suspend_reason = None
        elif isinstance(data, RunCompleteData):
            self.status = "completed"
            self.output = data.output
            self.waiting.clear()
        elif isinstance(data, RunFailedData):
            self.status = "failed"
            self.error = f"{data.kind}: {data.message}"
            self.waiting.clear()
        elif isinstance(data, RunCancelledData):
            self.status = "cancelled"
            self.waiting.clear()
        elif isinstance(data, SteeredData):
            self.steering.append(data.message)
        elif isinstance(data, WorkspaceChangedData):
            self.workspace.append(data)

    # -- showing it -----------------------------------------------------------------------

    def render(self) -> RenderableType:
        parts: list[RenderableType] = [self._header()]
        for step in sorted(self.steps)[-SHOWN_STEPS:]:
            parts.append(self._step(step))
        if self.calls:
            parts.append(self._calls())
        if self.steering:
            shown = "\n".join(f"  {_short(m, 200)}" for m in self.steering[-SHOWN_STEPS:])
            parts.append(Text(f"steering messages:\n{shown}", style="cyan"))
        if self.workspace:
            parts.append(self._workspace())
        if self.waiting:
            parts.append(self._waiting())
        if self.suspend_reason and self.status == "suspended":
            parts.append(
                Text(
                    f"suspended: {self.suspend_reason}\n  resume: durable-agent resume "
                    f"{q(self.workflow_id)}",
                    style="yellow",
                )
            )
        if self.status == "completed":
            parts.append(Text(f"output: {_short(self.output, 2000)}", style="green"))
        if self.error:
            parts.append(Text(f"failed: {self.error}", style="red"))
        return Group(*parts)

    def _header(self) -> Text:
        text = Text()
        text.append(f"{self.workflow_id}", style="bold")
        text.append(f"  agent {self.agent or '?'}  ")
        style = {"completed": "green", "failed": "red", "waiting": "yellow"}.get(self.status, "")
        text.append(self.status, style=f"bold {style}".strip())
        text.append(f"  node {self.node or '-'}  step {self.step}  seq {self.last_seq}")
        if self.runs > 1:
            text.append(f"  runs {self.runs}")
        tokens = self.usage.get("total_tokens")
        if tokens:
            text.append(f"  tokens {tokens}")
        return text

    def _step(self, step: int) -> Text:
        shown = self.steps[step]
        text = Text()
        retry = f", attempt {shown.attempt}" if shown.attempt > 1 else ""
        text.append(f"step {step}{retry}: ", style="bold cyan")
        if shown.thinking:
            text.append(shown.thinking, style="dim italic")
            text.append("\n")
        text.append(shown.text or ("" if shown.done else "…"))
        return text

    def _calls(self) -> Table:
        table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
        for header in ("CALL", "TOOL", "ARGUMENTS", "STATE", "RESULT"):
            table.add_column(header, overflow="fold")
        for call in list(self.calls.values())[-SHOWN_CALLS:]:
            table.add_row(
                call.tool_call_id,
                call.tool_name,
                _short(call.arguments),
                call.shown_state(),
                _short(call.result) if call.result is not None else "",
            )
        return table

    def _workspace(self) -> Text:
        latest = self.workspace[-1].environment_ref
        text = Text(f"workspace {latest}", style="bold magenta")
        earlier = len(self.workspace) - SHOWN_CHANGES
        if earlier > 0:
            text.append(f"  ({earlier} earlier changes)", style="dim")
        for change in self.workspace[-SHOWN_CHANGES:]:
            text.append(f"\n  {workspace_change(change)}")
        return text

    def _waiting(self) -> Text:
        text = Text("waiting for a human:\n", style="bold yellow")
        for call in self.waiting.values():
            text.append(f"  {call.tool_call_id}  {call.tool_name}  {_short(call.arguments)}\n")
            if call.state == "deferred":
                text.append(
                    f"    deliver: durable-agent deferred {q(self.workflow_id)} "
                    f"{q(call.tool_call_id)} --response 'JSON'\n"
                )
            else:
                approve = f"durable-agent approve {q(self.workflow_id)} {q(call.tool_call_id)}"
                text.append(f"    approve: {approve}\n")
                text.append(
                    f"    deny:    durable-agent deny {q(self.workflow_id)} {q(call.tool_call_id)} "
                    '--reason "..."\n'
                )
        return text
