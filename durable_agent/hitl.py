"""Human in the loop: calls waiting for a person, and the decisions that release them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ._fields import WIRE_CONFIG, omit_empty, omit_none

__all__ = [
    "DeferredToolCall",
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


class PendingToolApproval(BaseModel):
    """A call that may not run until a person approves it."""

    model_config = WIRE_CONFIG
    tool_call_id: str
    tool_name: str
    arguments: Any = Field(default_factory=dict)
    reason: str | None = omit_none()
    metadata: dict[str, Any] = omit_empty(factory=dict)
    decision: ToolApprovalDecision | None = omit_none()


class DeferredToolCall(BaseModel):
    """A call whose result arrives later through `resume_after_hitl(deferred_results=...)`."""

    model_config = WIRE_CONFIG
    tool_call_id: str
    tool_name: str
    arguments: Any = Field(default_factory=dict)
    reason: str | None = omit_none()
    metadata: dict[str, Any] = omit_empty(factory=dict)
    result: DeferredToolResult | None = omit_none()
