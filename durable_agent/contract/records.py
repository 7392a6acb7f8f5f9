"""Stream records: the ordered account of a run that UIs and logs follow.

Sequence numbers are contiguous from the start of a run; a checkpoint's
`resume.cursor.stream_cursor` is the sequence number of its boundary's `node_start` record.
A record is `{seq, kind, run_id, node, data}`; `data` is a typed payload, one class per
`kind` (`PAYLOADS`), serialized as the plain JSON object it always was. Besides the loop's own
progress (`node_start`, `checkpoint`, `model_request`, ...), a run reports what a UI needs
to show it working: `model_delta` (text or thinking as a streaming model produces it),
`model_retry` (a newer attempt of a step's request replaced an earlier one: drop the text
the earlier attempts streamed), `usage` (after each model response), `approval_requested`,
`call_deferred`, `approval_decided`, `deferred_result`, `suspended` / `resumed`,
`run_cancelled` and `workspace_changed`. `model_response` carries the whole response (`text`,
`thinking`, `calls`), so a client that missed or dropped deltas still shows the right text.
A fork's stream opens with `forked`; `steered` is a user's steering message arriving; a
session reports `awaiting_prompt` between turns and `session_ended` at its end. Payload
fields keep the order and JSON the records had when `data` was a dict, so a reader of an
older release (or of any JSON) sees the same records. The payload classes live in
`payloads`; every name is importable from here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Literal

from pydantic import BaseModel, Field, SerializeAsAny, ValidationInfo, field_validator

from ._fields import omit_empty, omit_none
from .payloads import (
    PREVIEW_CHARS,
    ApprovalDecidedData,
    ApprovalRequestedData,
    AwaitingPromptData,
    CallDeferredData,
    CheckpointData,
    DeferredResultData,
    ForkedData,
    ModelDeltaData,
    ModelRequestData,
    ModelResponseData,
    ModelRetryData,
    NodeCompleteData,
    NodeStartData,
    RecordData,
    ResponseCall,
    ResumedData,
    RunCancelledData,
    RunCompleteData,
    RunFailedData,
    RunStartData,
    SessionEndedData,
    SteeredData,
    SubagentEndData,
    SubagentStartData,
    SuspendedData,
    ToolCallData,
    ToolReturnData,
    UsageData,
    WaitingCallData,
    WaitingData,
    WorkspaceChangedData,
    preview,
)

__all__ = [
    "PAYLOADS",
    "PREVIEW_CHARS",
    "TERMINAL_KINDS",
    "AgentStreamRecord",
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
    "StreamKind",
    "StreamSink",
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

StreamKind = Literal[
    "run_start",
    "forked",
    "steered",
    "awaiting_prompt",
    "session_ended",
    "node_start",
    "node_complete",
    "checkpoint",
    "model_request",
    "model_response",
    "tool_call",
    "tool_return",
    "suspended",
    "waiting",
    "run_complete",
    "run_failed",
    "model_delta",
    "model_retry",
    "usage",
    "approval_requested",
    "call_deferred",
    "approval_decided",
    "deferred_result",
    "resumed",
    "run_cancelled",
    "subagent_start",
    "subagent_end",
    "workspace_changed",
]
TERMINAL_KINDS: frozenset[str] = frozenset(
    {"run_complete", "run_failed", "run_cancelled", "session_ended"}
)
"""Kinds after which a run emits nothing more (until a session's next turn)."""


def _kinds(base: type[RecordData]) -> Iterator[type[RecordData]]:
    for cls in base.__subclasses__():
        if cls.KIND:
            yield cls
        yield from _kinds(cls)


PAYLOADS: dict[str, type[RecordData]] = {cls.KIND: cls for cls in _kinds(RecordData)}
"""The payload class of each record kind: a discriminated union by the record's `kind`."""


class AgentStreamRecord(BaseModel):
    """One record of a run's stream. `data` is the payload class of its `kind`."""

    seq: int
    kind: StreamKind | str
    """One of `StreamKind`; a kind a newer release added is kept as it is, its `data` a
    plain `RecordData`, so a reader never breaks on a worker newer than itself."""
    run_id: str
    node: str | None = None
    data: SerializeAsAny[RecordData] = Field(default_factory=dict, validate_default=True)
    workflow_id: str | None = omit_none()
    """Set on a sub-agent's record read through its parent (`stream(children=True)`): the
    child workflow it comes from; `seq` is then that run's own."""
    depth: int = omit_empty(0)
    """How far below the run being read the record's run is (1: a child)."""

    @field_validator("data", mode="before")
    @classmethod
    def _payload(cls, value: Any, info: ValidationInfo) -> Any:
        payload = PAYLOADS.get(info.data.get("kind", ""), RecordData)
        if isinstance(value, payload):
            return value
        if isinstance(value, RecordData):
            value = value.as_json()
        return payload.model_validate(value if value is not None else {})


StreamSink = Callable[[AgentStreamRecord], None]
