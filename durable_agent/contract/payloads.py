"""The payloads of stream records: one class per record kind (`records.PAYLOADS`).

Each payload keeps the fields, in the order and with the JSON, that the record's `data` had
when it was a plain dict, so a reader of an older release (or of any JSON) sees the same
records. A payload also reads as that JSON object (`data["text"]`), for code written then.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field

from ._fields import omit_empty, omit_none, trusted
from .decisions import PendingCall, ToolApprovalDecision
from .messages import ModelResponse, TextPart, ThinkingPart, ToolCall, ToolReturn
from .usage import Usage

__all__ = [
    "PREVIEW_CHARS",
    "ApprovalDecidedData",
    "ApprovalRequestedData",
    "AwaitingPromptData",
    "CallDeferredData",
    "CheckpointData",
    "DeferredResultData",
    "ForkedData",
    "ModelDeltaData",
    "ModelRequestData",
    "ModelResponseData",
    "ModelRetryData",
    "NodeCompleteData",
    "NodeStartData",
    "RecordData",
    "ResponseCall",
    "ResumedData",
    "RunCancelledData",
    "RunCompleteData",
    "RunFailedData",
    "RunStartData",
    "SessionEndedData",
    "SteeredData",
    "SubagentEndData",
    "SubagentStartData",
    "SuspendedData",
    "ToolCallData",
    "ToolReturnData",
    "UsageData",
    "WaitingCallData",
    "WaitingData",
    "WorkspaceChangedData",
    "preview",
]

PREVIEW_CHARS = 2_000
"""How much of a tool result a `tool_return` record shows: enough for a UI, and records of
a run are held in its workflow's memory (the model still gets the whole result)."""


class RecordData(BaseModel):
    """A record's payload. Each kind has its subclass (`PAYLOADS[kind]`); fields a newer
    writer added are kept (`extra="allow"`), so a record survives a reader that does not
    know them yet.

    It also reads as the JSON object it is (`data["total"]["requests"]`, `data.get("text")`,
    `data == {...}`), for code written when payloads were plain dicts; typed attributes
    (`data.total.requests`) are what the library itself reads."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    KIND: ClassVar[str] = ""

    def __getitem__(self, key: str) -> Any:
        return self.as_json()[key]

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self.as_json()

    def keys(self) -> list[str]:
        return list(self.as_json())

    def items(self) -> list[tuple[str, Any]]:
        return list(self.as_json().items())

    def values(self) -> list[Any]:
        return list(self.as_json().values())

    def __iter__(self) -> Iterator[str]:  # type: ignore[override]
        return iter(self.keys())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self.as_json() == dict(other)
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def as_json(self) -> dict[str, Any]:
        """The payload as the JSON object it is serialized as."""
        return self.model_dump(mode="json")


class _Empty(RecordData):
    pass


class NodeStartData(_Empty):
    KIND = "node_start"


class NodeCompleteData(_Empty):
    KIND = "node_complete"


class RunCancelledData(RecordData):
    KIND = "run_cancelled"
    reason: str | None = omit_none()


class RunStartData(RecordData):
    KIND = "run_start"
    conversation_id: str | None = None
    agent: str | None = None


class ForkedData(RecordData):
    """Where a fork (or retry) came from: the source workflow, run and boundary."""

    KIND = "forked"
    workflow_id: str = ""
    workflow_run_id: str | None = None
    index: int | None = None
    checkpoint_id: str | None = None
    node: str | None = None
    run_step: int = 0
    source_run_id: str | None = None


class SteeredData(RecordData):
    KIND = "steered"
    message: str = ""


class AwaitingPromptData(RecordData):
    KIND = "awaiting_prompt"
    turns: int = 0


class SessionEndedData(RecordData):
    KIND = "session_ended"
    reason: str | None = None
    turns: int = 0


class CheckpointData(RecordData):
    KIND = "checkpoint"
    checkpoint_id: str = ""


class ModelRequestData(RecordData):
    KIND = "model_request"
    run_step: int = 0


class ResponseCall(BaseModel):
    """A call a model response makes, as the `model_response` record lists it."""

    model_config = ConfigDict(extra="allow")
    tool_call_id: str = ""
    tool_name: str = ""
    arguments: Any = None


class ModelResponseData(RecordData):
    """The whole response of step `run_step`: a client replaces whatever deltas it showed."""

    KIND = "model_response"
    run_step: int = 0
    parts: int = 0
    tool_calls: int = 0
    text: str = ""
    thinking: str = ""
    calls: list[ResponseCall] = Field(default_factory=list)

    @classmethod
    def of(cls, step: int, response: ModelResponse) -> ModelResponseData:
        calls = response.tool_calls
        return trusted(
            cls,
            run_step=step,
            parts=len(response.parts),
            tool_calls=len(calls),
            text="".join(p.text for p in response.parts if isinstance(p, TextPart)),
            thinking="".join(p.text for p in response.parts if isinstance(p, ThinkingPart)),
            calls=[
                trusted(ResponseCall, tool_call_id=c.id, tool_name=c.name, arguments=c.arguments)
                for c in calls
            ],
        )


class ModelDeltaData(RecordData):
    """Text (`part="text"`) or thinking that attempt `attempt` of step `run_step`'s model
    request wrote."""

    KIND = "model_delta"
    run_step: int = 0
    attempt: int = 1
    part: str = "text"
    text: str = ""


class ModelRetryData(RecordData):
    """Attempt `attempt` of step `run_step` replaced attempt `superseded`: drop its text."""

    KIND = "model_retry"
    run_step: int = 0
    attempt: int = 1
    superseded: int = 0


class UsageData(RecordData):
    """What step `run_step`'s request cost (`request`) and the run's total so far."""

    KIND = "usage"
    run_step: int = 0
    request: Usage = Field(default_factory=Usage)
    total: Usage = Field(default_factory=Usage)


class ToolCallData(RecordData):
    KIND = "tool_call"
    tool_call_id: str = ""
    tool_name: str = ""
    arguments: Any = None


class ToolReturnData(RecordData):
    """A call's result, cut to `PREVIEW_CHARS` (`content_truncated` when it was)."""

    KIND = "tool_return"
    tool_call_id: str = ""
    is_error: bool = False
    tool_name: str = ""
    content: str = ""
    content_truncated: bool = omit_empty(False)

    @classmethod
    def of(cls, call: ToolCall, tool_return: ToolReturn) -> ToolReturnData:
        content, cut = preview(tool_return.content)
        return trusted(
            cls,
            tool_call_id=call.id,
            is_error=tool_return.is_error,
            tool_name=call.name,
            content=content,
            content_truncated=cut,
        )


class SuspendedData(RecordData):
    KIND = "suspended"
    reason: str | None = None


class ResumedData(RecordData):
    KIND = "resumed"
    reason: str | None = None


class WaitingData(RecordData):
    """The run waits for people: the calls awaiting approval and the deferred calls."""

    KIND = "waiting"
    pending_approvals: list[str] = Field(default_factory=list)
    deferred: list[str] = Field(default_factory=list)


class RunCompleteData(RecordData):
    KIND = "run_complete"
    output: Any = None


class RunFailedData(RecordData):
    KIND = "run_failed"
    kind: str = ""
    message: str = ""


class WaitingCallData(RecordData):
    """A call that waits for people: an approval, or a deferred call's result."""

    tool_call_id: str = ""
    tool_name: str = ""
    arguments: Any = None
    reason: str | None = None

    @classmethod
    def of(cls, call: PendingCall) -> Self:
        return trusted(
            cls,
            tool_call_id=call.tool_call_id,
            tool_name=call.tool_name,
            arguments=call.arguments,
            reason=call.reason,
        )


class ApprovalRequestedData(WaitingCallData):
    """A call now waits for a person's approval, with what a UI shows to get it decided."""

    KIND = "approval_requested"


class CallDeferredData(WaitingCallData):
    """A call now waits for its result from outside the run."""

    KIND = "call_deferred"


class ApprovalDecidedData(RecordData):
    """Who decided what for one call (`overridden`: the tool runs with their arguments)."""

    KIND = "approval_decided"
    tool_call_id: str = ""
    tool_name: str = ""
    approved: bool = False
    decided_by: str | None = None
    reason: str | None = None
    overridden: bool = False
    note: str | None = omit_none()

    @classmethod
    def of(
        cls, tool_call_id: str, tool_name: str, decision: ToolApprovalDecision
    ) -> ApprovalDecidedData:
        return trusted(
            cls,
            tool_call_id=tool_call_id,
            tool_name=tool_name,
            approved=decision.approved,
            decided_by=decision.decided_by,
            reason=None if decision.approved else decision.reason,
            overridden=decision.override_arguments is not None,
            note=decision.note,
        )

    def describe(self) -> str:
        """`approved by alice` / `denied by bob: too risky`, as people read it."""
        who = self.decided_by or "?"
        verdict = f"approved by {who}" if self.approved else f"denied by {who}: {self.reason}"
        return verdict if self.note is None else f"{verdict}; note: {self.note}"


class DeferredResultData(RecordData):
    KIND = "deferred_result"
    tool_call_id: str = ""
    tool_name: str = ""
    status: str = "success"


class SubagentStartData(RecordData):
    """A sub-agent's run began for the parent's call `tool_call_id` (on Temporal, as child
    workflow `workflow_id`)."""

    KIND = "subagent_start"
    tool_call_id: str = ""
    agent: str = ""
    workflow_id: str | None = None


class SubagentEndData(RecordData):
    KIND = "subagent_end"
    tool_call_id: str = ""
    agent: str = ""
    is_error: bool = False
    usage: Usage = Field(default_factory=Usage)


class WorkspaceChangedData(RecordData):
    """A call (or a merge of a response's calls) changed the workspace; its tree now."""

    KIND = "workspace_changed"
    added: list[str] = Field(default_factory=list)
    modified: list[str] = Field(default_factory=list)
    deleted: list[str] = Field(default_factory=list)
    environment_ref: str = ""


def preview(value: Any, limit: int = PREVIEW_CHARS) -> tuple[str, bool]:
    """`value` as text of at most `limit` characters, and whether it was cut."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) <= limit:
        return text, False
    return text[:limit], True
