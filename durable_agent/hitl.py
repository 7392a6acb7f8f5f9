"""Human in the loop: calls waiting for a person, and the decisions that release them."""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import BaseModel, Field

from ._fields import WIRE_CONFIG, omit_empty, omit_none
from .messages import ToolCall

__all__ = [
    "DeferredToolCall",
    "PendingCall",
    "DeferredToolResult",
    "PendingToolApproval",
    "ToolApprovalDecision",
]


class ToolApprovalDecision(BaseModel):
    """A person's answer to a pending approval; build it with `approved()` or `denied()`."""

    approved: bool
    reason: str | None = None
    decided_by: str | None = None
    override_arguments: dict[str, Any] | None = None

    @classmethod
    def approve(
        cls, override_arguments: dict[str, Any] | None = None, decided_by: str | None = None
    ) -> ToolApprovalDecision:
        return cls(approved=True, override_arguments=override_arguments, decided_by=decided_by)

    @classmethod
    def deny(cls, reason: str, decided_by: str | None = None) -> ToolApprovalDecision:
        return cls(approved=False, reason=reason, decided_by=decided_by)


# The contract spells the constructors `approved(...)` / `denied(...)`; `approved` is also
# the field name, so the constructors are attached after the class is built.
ToolApprovalDecision.approved = ToolApprovalDecision.approve  # type: ignore[assignment]
ToolApprovalDecision.denied = ToolApprovalDecision.deny  # type: ignore[attr-defined]


class DeferredToolResult(BaseModel):
    """The outcome of a deferred call, delivered from outside the run."""

    tool_call_id: str
    status: Literal["success", "error"] = "success"
    response: Any = None

    def __init__(
        self,
        tool_call_id: str | None = None,
        status: str = "success",
        response: Any = None,
        **data: Any,
    ) -> None:
        if tool_call_id is not None:
            data["tool_call_id"] = tool_call_id
        super().__init__(status=status, response=response, **data)


class PendingCall(BaseModel):
    """A tool call held until something outside the run answers it."""

    model_config = WIRE_CONFIG
    tool_call_id: str
    tool_name: str
    arguments: Any = Field(default_factory=dict)
    reason: str | None = omit_none()
    metadata: dict[str, Any] = omit_empty(factory=dict)

    @classmethod
    def for_call(
        cls, call: ToolCall, reason: str | None = None, metadata: dict[str, Any] | None = None
    ) -> Self:
        return cls(
            tool_call_id=call.id,
            tool_name=call.name,
            arguments=call.arguments,
            reason=reason,
            metadata=metadata or {},
        )


class PendingToolApproval(PendingCall):
    """A call that may not run until a person approves it."""

    decision: ToolApprovalDecision | None = omit_none()


class DeferredToolCall(PendingCall):
    """A call whose result arrives later through `resume_after_hitl(deferred_results=...)`."""

    result: DeferredToolResult | None = omit_none()
