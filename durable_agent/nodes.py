"""The working nodes, as plain async functions of serializable inputs.

The in-process runner calls these directly; each Temporal activity is a thin wrapper that
looks the agent up by name and calls the same function. No agent logic lives elsewhere.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, ValidationError
from pydantic_core import to_jsonable_python

from ._fields import omit_empty, omit_none
from .errors import ApprovalRequired, CallDeferred, ModelRetry, UserError
from .messages import (
    InstructionPart,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    RetryPromptPart,
    TextContent,
    ToolCall,
    ToolReturn,
    UserPromptPart,
)
from .output import format_validation_error, parse_output, run_output_validator
from .tools import ToolContext

if TYPE_CHECKING:
    from .agent import Agent

__all__ = [
    "ModelRequestInput",
    "OutputOutcome",
    "PrepareModelRequestInput",
    "ToolCallInput",
    "ToolCallOutcome",
    "ValidateOutputInput",
    "model_request",
    "prepare_model_request",
    "tool_call",
    "validate_output",
]


class RunRef(BaseModel):
    """Which run and step a node works for; shared by every node input."""

    run_id: str
    conversation_id: str
    run_step: int
    timestamp: str | None = omit_none()
    metadata: dict[str, Any] = omit_empty(factory=dict)


class PrepareModelRequestInput(RunRef):
    """Only what needs rendering; tool returns and retry prompts are added by the loop."""

    prompt: str | None = None
    include_instructions: bool = False


class ModelRequestInput(RunRef):
    messages: list[ModelMessage]


class ToolCallInput(RunRef):
    call: ToolCall
    retry: int = 0
    approved: bool = False
    override_arguments: dict[str, Any] | None = None
    idempotency_key: str = ""


class ToolCallOutcome(BaseModel):
    kind: Literal["return", "retry", "approval_required", "deferred"]
    tool_return: ToolReturn | None = None
    reason: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class ValidateOutputInput(RunRef):
    response: ModelResponse
    attempt: int = 0


class OutputOutcome(BaseModel):
    kind: Literal["ok", "retry"]
    output: Any = None
    structured_output: Any = None
    retry_prompt: RetryPromptPart | None = None


def _context(ref: RunRef, **fields: Any) -> ToolContext:
    return ToolContext(
        run_id=ref.run_id,
        conversation_id=ref.conversation_id,
        run_step=ref.run_step,
        metadata=ref.metadata,
        **fields,
    )


async def prepare_model_request(agent: Agent, input: PrepareModelRequestInput) -> ModelRequest:
    """Renders the parts that come from outside the conversation: instructions and prompt."""
    parts: list[ModelRequestPart] = []
    if input.include_instructions:
        instructions = await agent.render_instructions(
            _context(input, tool_name="instructions", tool_call_id="")
        )
        if instructions:
            parts.append(InstructionPart(content=instructions))
    if input.prompt is not None:
        parts.append(UserPromptPart(content=[TextContent(text=input.prompt)]))
    return ModelRequest(
        parts=parts,
        run_id=input.run_id,
        conversation_id=input.conversation_id,
        timestamp=input.timestamp,
    )


async def model_request(agent: Agent, input: ModelRequestInput) -> ModelResponse:
    response = await agent.model.request(input.messages, agent.request_parameters())
    return response.model_copy(
        update={
            "run_id": input.run_id,
            "conversation_id": input.conversation_id,
            "timestamp": input.timestamp,
        }
    )


def _retry(call: ToolCall, message: str) -> ToolCallOutcome:
    return ToolCallOutcome(
        kind="retry",
        tool_return=ToolReturn(
            tool_call_id=call.id, name=call.name, content=message, is_error=True, retry=True
        ),
    )


async def tool_call(
    agent: Agent, input: ToolCallInput, *, sync_in_thread: bool = False
) -> ToolCallOutcome:
    """Runs one call. Workers pass `sync_in_thread` so a blocking tool cannot stall them."""
    call = input.call
    tool = agent.tools.get(call.name)
    if tool is None:
        available = ", ".join(sorted(agent.tools)) or "none"
        return _retry(call, f"Unknown tool name: {call.name!r}. Available tools: {available}")
    try:
        arguments = (
            input.override_arguments
            if input.override_arguments is not None
            else call.arguments_dict()
        )
    except (json.JSONDecodeError, ValueError) as exc:
        return _retry(call, f"The arguments are not a valid JSON object: {exc}. Try again.")
    try:
        validated = tool.validate_arguments(arguments)
    except ValidationError as exc:
        return _retry(call, format_validation_error(exc))
    ctx = _context(
        input,
        tool_name=call.name,
        tool_call_id=call.id,
        retry=input.retry,
        approved=input.approved,
        idempotency_key=input.idempotency_key or f"{input.run_id}:{call.id}",
    )
    started = time.perf_counter()
    try:
        result = await tool.call(ctx, validated, in_thread=sync_in_thread)
    except ModelRetry as exc:
        return _retry(call, exc.message)
    except ApprovalRequired as exc:
        if input.approved:
            raise UserError(
                f"tool {call.name!r} raised ApprovalRequired for call {call.id!r} after it was "
                "approved; check ctx.approved before asking again"
            ) from exc
        return ToolCallOutcome(kind="approval_required", reason=exc.reason, metadata=exc.metadata)
    except CallDeferred as exc:
        return ToolCallOutcome(kind="deferred", reason=exc.reason, metadata=exc.metadata)
    elapsed = time.perf_counter() - started
    return ToolCallOutcome(
        kind="return",
        tool_return=ToolReturn(
            tool_call_id=call.id,
            name=call.name,
            content=to_jsonable_python(result),
            metadata={"duration_ms": int(elapsed * 1000), "duration_seconds": elapsed},
        ),
    )


async def validate_output(agent: Agent, input: ValidateOutputInput) -> OutputOutcome:
    try:
        value = parse_output(agent.output_type, input.response)
        ctx = _context(input, tool_name="output", tool_call_id="", retry=input.attempt)
        for validator in agent.output_validators:
            value = await run_output_validator(validator, ctx, value)
    except ModelRetry as exc:
        return OutputOutcome(kind="retry", retry_prompt=RetryPromptPart(content=exc.message))
    if isinstance(value, BaseModel):
        structured = value.model_dump(mode="json")
        return OutputOutcome(kind="ok", output=json.dumps(structured), structured_output=structured)
    return OutputOutcome(kind="ok", output=to_jsonable_python(value))
