"""Human in the loop: calls waiting for a person, and the decisions that release them."""

from __future__ import annotations

import json
from typing import Any, Literal, Self

from pydantic import BaseModel, Field

from ._fields import WIRE_CONFIG, omit_empty, omit_none, settled
from .messages import ToolCall

__all__ = [
    "DecisionFields",
    "DeferredToolCall",
    "PendingCall",
    "DeferredToolResult",
    "PendingToolApproval",
    "ToolApprovalDecision",
    "denial_problem",
    "read_deferred_response",
]


def denial_problem(reason: str) -> str | None:
    """Why `reason` cannot deny a call, or None. Every front end asks this one rule (the
    CLI, the inbox, `AgentRunHandle.deny`): the model reads the reason, so there is one."""
    if not reason.strip():
        return "give a reason to deny the call: the agent's model reads it"
    return None


def read_deferred_response(text: str) -> Any:
    """A deferred call's result as a person typed it: JSON, a text in quotes included
    (`"done"`). One rule for the CLI and the inbox, so `{oops` is refused by both instead
    of reaching the model as text by one and not the other. Raises ValueError naming what
    is wrong."""
    if not text.strip():
        raise ValueError('give the call\'s result as JSON (a text in quotes: "done")')
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f'not valid JSON ({error}): {text!r}; give JSON, a text in quotes: "done"'
        ) from None


class DecisionFields(BaseModel):
    """The fields of a decision: the one shape it has, whichever way it travels
    (in-process to `resume_after_hitl`, on Temporal inside the `approval` signal, whose
    `ApprovalSignal` is these fields plus routing and signature, in run state and in the
    `approval_decided` record). A signature covers the decision's own JSON
    (`durable_agent.temporal.signing`), so a field added here is signed without more code;
    such a field must be left out of the JSON while unset (`omit_none`), so decisions that
    do not use it sign as they did."""

    approved: bool
    reason: str | None = None
    decided_by: str | None = None
    override_arguments: dict[str, Any] | None = None
    note: str | None = omit_none()
    """The approver's remark: the model reads it beside the tool's result (or its denial)."""

    def annotate(self, result: Any) -> Any:
        """What the model reads for the call after this decision: a denial's reason in
        place of a result that never came, or the approved tool's `result`; the approver's
        note after either."""
        if self.approved and self.note is None:
            return result
        if not self.approved:
            text = f"The call was not approved: {self.reason or 'denied'}"
        else:
            text = result if isinstance(result, str) else json.dumps(result, default=str)
        if self.note is not None:
            text += f"\n\nNote from the approver ({self.decided_by or 'unnamed'}): {self.note}"
        return text

    def describe(self) -> str:
        """The decision as people read it: `approved by alice`, `denied by bob: why`."""
        who = self.decided_by or "?"
        verdict = f"approved by {who}" if self.approved else f"denied by {who}: {self.reason}"
        if self.override_arguments is not None:
            verdict += " (with other arguments)"
        if self.note is not None:
            verdict += f"; note: {self.note}"
        return verdict


class ToolApprovalDecision(DecisionFields):
    """A person's answer to a pending approval; build it with `approved()` or `denied()`."""

    @classmethod
    def approve(
        cls,
        override_arguments: dict[str, Any] | None = None,
        decided_by: str | None = None,
        note: str | None = None,
    ) -> ToolApprovalDecision:
        return cls(
            approved=True, override_arguments=override_arguments, decided_by=decided_by, note=note
        )

    @classmethod
    def deny(
        cls, reason: str, decided_by: str | None = None, note: str | None = None
    ) -> ToolApprovalDecision:
        return cls(approved=False, reason=reason, decided_by=decided_by, note=note)


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
        # Kept in the run's state until answered, days perhaps: with its class's shared
        # fields set, not one of its own (`settled`).
        return settled(
            cls(
                tool_call_id=call.id,
                tool_name=call.name,
                arguments=call.arguments,
                reason=reason,
                metadata=metadata or {},
            )
        )


class PendingToolApproval(PendingCall):
    """A call that may not run until a person approves it."""

    decision: ToolApprovalDecision | None = omit_none()


class DeferredToolCall(PendingCall):
    """A call whose result arrives later through `resume_after_hitl(deferred_results=...)`."""

    result: DeferredToolResult | None = omit_none()
