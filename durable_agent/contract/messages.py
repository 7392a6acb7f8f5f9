"""Requests, responses and their parts, in starweaver's JSON shape.

Messages are a discriminated union on `kind` (`request` / `response`), and so are parts.
Every model keeps unknown fields, so history written by starweaver round-trips unchanged.
Messages are never mutated once appended to a history: checkpoints share them.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter

from ._fields import WIRE_CONFIG, omit_empty, omit_none, trusted
from .usage import Usage

__all__ = [
    "InstructionPart",
    "ModelMessage",
    "ModelMessagesTypeAdapter",
    "ModelRequest",
    "ModelRequestPart",
    "ModelResponse",
    "ModelResponsePart",
    "RetryPromptPart",
    "SystemPromptPart",
    "TextContent",
    "TextPart",
    "ThinkingPart",
    "ToolCall",
    "ToolCallPart",
    "ToolReturn",
    "ToolReturnPart",
    "UserPromptPart",
]


class TextContent(BaseModel):
    model_config = WIRE_CONFIG
    kind: Literal["text"] = "text"
    text: str


class SystemPromptPart(BaseModel):
    model_config = WIRE_CONFIG
    kind: Literal["system_prompt"] = "system_prompt"
    content: str


class InstructionPart(BaseModel):
    model_config = WIRE_CONFIG
    kind: Literal["instruction"] = "instruction"
    content: str


class UserPromptPart(BaseModel):
    model_config = WIRE_CONFIG
    kind: Literal["user_prompt"] = "user_prompt"
    content: str | list[TextContent]

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(item.text for item in self.content)


class ToolReturnPart(BaseModel):
    """A tool's result as the model sees it; `error_kind` names why an error return failed."""

    model_config = WIRE_CONFIG
    kind: Literal["tool_return"] = "tool_return"
    tool_call_id: str
    name: str
    content: Any
    is_error: bool = False
    error_kind: str | None = omit_none()
    metadata: dict[str, Any] = omit_empty(factory=dict)


class RetryPromptPart(BaseModel):
    """Asks the model to try again: bad tool arguments, `ModelRetry`, failed output validation."""

    model_config = WIRE_CONFIG
    kind: Literal["retry_prompt"] = "retry_prompt"
    content: str
    tool_name: str | None = omit_none()
    tool_call_id: str | None = omit_none()


ModelRequestPart = Annotated[
    SystemPromptPart | InstructionPart | UserPromptPart | ToolReturnPart | RetryPromptPart,
    Field(discriminator="kind"),
]


class TextPart(BaseModel):
    model_config = WIRE_CONFIG
    kind: Literal["text"] = "text"
    text: str


class ThinkingPart(BaseModel):
    """The model's thinking (reasoning). `signature` is what its provider needs back to
    accept it in a later request (Anthropic's signature or redacted data, the Responses
    API's encrypted content); `provider_name` names the API it came from, so it is sent
    back only to that API, and `id` is that API's own id for it."""

    model_config = WIRE_CONFIG
    kind: Literal["thinking"] = "thinking"
    text: str
    signature: str | None = omit_none()
    id: str | None = omit_none()
    provider_name: str | None = omit_none()


class ToolCall(BaseModel):
    """A call as starweaver lists it in `pending_tool_calls` (no `kind`)."""

    model_config = WIRE_CONFIG
    id: str
    name: str
    arguments: Any = Field(default_factory=dict)

    def arguments_dict(self) -> dict[str, Any]:
        """Arguments as a mapping; a JSON string from a provider is decoded here."""
        args = self.arguments
        if isinstance(args, str):
            decoded = json.loads(args) if args.strip() else {}
            args = decoded
        if not isinstance(args, dict):
            raise ValueError(f"tool arguments must be a JSON object, got {type(args).__name__}")
        return args


class ToolCallPart(ToolCall):
    kind: Literal["tool_call"] = "tool_call"

    def as_call(self) -> ToolCall:
        return trusted(ToolCall, id=self.id, name=self.name, arguments=self.arguments)


ModelResponsePart = Annotated[TextPart | ThinkingPart | ToolCallPart, Field(discriminator="kind")]


class ModelRequest(BaseModel):
    model_config = WIRE_CONFIG
    kind: Literal["request"] = "request"
    parts: list[ModelRequestPart]
    run_id: str | None = omit_none()
    conversation_id: str | None = omit_none()
    timestamp: str | None = omit_none()
    metadata: dict[str, Any] = omit_empty(factory=dict)


class ModelResponse(BaseModel):
    model_config = WIRE_CONFIG
    kind: Literal["response"] = "response"
    parts: list[ModelResponsePart]
    run_id: str | None = omit_none()
    conversation_id: str | None = omit_none()
    timestamp: str | None = omit_none()
    usage: Usage = Field(default_factory=Usage)
    model_name: str | None = omit_none()
    provider_name: str | None = omit_none()
    """Who served the response (`openai`, `anthropic`, ...: the model's `provider`)."""
    finish_reason: str | None = omit_none()
    metadata: dict[str, Any] = omit_empty(factory=dict)

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def tool_calls(self) -> list[ToolCallPart]:
        # By kind, not `isinstance`: asked several times a step, also inside a workflow's
        # sandbox, which wraps `isinstance`.
        return [p for p in self.parts if p.kind == "tool_call"]


ModelMessage = Annotated[ModelRequest | ModelResponse, Field(discriminator="kind")]

ModelMessagesTypeAdapter: TypeAdapter[list[ModelMessage]] = TypeAdapter(list[ModelMessage])
"""Reads and writes a whole message history, e.g. to pass `message_history` between runs."""


class ToolReturn(BaseModel):
    """A tool result waiting in state to be sent to the model (starweaver's record, no `kind`).

    `retry` marks a result the model should see as a retry prompt (bad arguments,
    `ModelRetry`, unknown tool) rather than as a tool return.
    """

    model_config = WIRE_CONFIG
    tool_call_id: str
    name: str
    content: Any
    is_error: bool = False
    error_kind: str | None = omit_none()
    retry: bool = omit_empty(False)
    metadata: dict[str, Any] = omit_empty(factory=dict)

    def to_part(self) -> ToolReturnPart | RetryPromptPart:
        if self.retry:
            return RetryPromptPart(
                content=str(self.content), tool_name=self.name, tool_call_id=self.tool_call_id
            )
        return trusted(
            ToolReturnPart,
            kind="tool_return",
            tool_call_id=self.tool_call_id,
            name=self.name,
            content=self.content,
            is_error=self.is_error,
            error_kind=self.error_kind,
            metadata=dict(self.metadata),
        )
