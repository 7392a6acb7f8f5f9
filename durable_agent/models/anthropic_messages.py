"""Our messages in the shapes of Anthropic's Messages API, and its content blocks back.

`map_messages` turns a history into the API's `system` texts and `messages` (thinking
blocks sent back only when they are this API's own and signed), `tool_param` a tool into
its `tools` entry; `response_parts` reads a message's content blocks (from a plain
response or put back together from a stream) as our response parts, and `usage_of` its
usage. Kept apart from `anthropic`, whose `AnthropicModel` makes the requests (the client,
the request's settings, errors and streaming): this is the part a change of either
message format touches, and it needs no SDK to run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..contract.errors import UnexpectedModelBehavior
from ..contract.messages import (
    ModelMessage,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
)
from ..contract.tools import OUTPUT_TOOL_NAME, ToolDefinition
from ..contract.usage import Usage
from ._common import AssistantTurn, conversation, own_thinking, safe_tool_id
from .base import OutputMode

__all__ = [
    "PROVIDER_API",
    "REDACTED",
    "map_messages",
    "response_parts",
    "tool_param",
    "usage_of",
]

PROVIDER_API = "anthropic"
"""What `ThinkingPart.provider_name` says of thinking blocks of this API."""
REDACTED = "redacted_thinking"
"""`ThinkingPart.id` of a redacted thinking block, whose data is its `signature`."""


def _tool_input(part: ToolCallPart) -> dict[str, Any]:
    """The API wants an object; arguments the model wrote as bad JSON go back as written,
    under one key, next to the retry prompt about them."""
    try:
        return part.arguments_dict()
    except (ValueError, json.JSONDecodeError):
        return {"raw_arguments": str(part.arguments)}


def _assistant_blocks(response: ModelResponse) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in response.parts:
        if isinstance(part, ThinkingPart):
            if not own_thinking(part, PROVIDER_API):
                continue  # another provider's thinking, or unsigned: not ours to send
            if part.id == REDACTED:
                blocks.append({"type": REDACTED, "data": part.signature})
            else:
                blocks.append(
                    {"type": "thinking", "thinking": part.text, "signature": part.signature}
                )
        elif isinstance(part, TextPart):
            if part.text:
                blocks.append({"type": "text", "text": part.text})
        else:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": safe_tool_id(part.id),
                    "name": part.name,
                    "input": _tool_input(part),
                }
            )
    return blocks


def map_messages(messages: Sequence[ModelMessage]) -> tuple[list[str], list[dict[str, Any]]]:
    """Our history as the Messages API's `system` texts and `messages`: each call answered
    by a `tool_result` at the front of the next user message (`conversation`), turns of one
    role merged, ids made acceptable to the API (`safe_tool_id`)."""
    system: list[str] = []
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for turn in conversation(messages):
        if isinstance(turn, AssistantTurn):
            add("assistant", _assistant_blocks(turn.response))
            continue
        blocks: list[dict[str, Any]] = []
        for answer in turn.answers:
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": safe_tool_id(answer.call_id),
                "content": answer.text,
            }
            if answer.is_error:
                result["is_error"] = True
            blocks.append(result)
        for role, text in turn.items:
            if role == "system":
                if text not in system:
                    system.append(text)
            elif text:
                blocks.append({"type": "text", "text": text})
        add("user", blocks)
    return system, out


def tool_param(tool: ToolDefinition) -> dict[str, Any]:
    """A tool as an entry of the request's `tools`."""
    param: dict[str, Any] = {"name": tool.name, "input_schema": tool.parameters_json_schema}
    if tool.description:
        param["description"] = tool.description
    if tool.strict:
        param["strict"] = True
    return param


def response_parts(
    blocks: list[dict[str, Any]], output_mode: OutputMode, model_name: str
) -> list[ModelResponsePart]:
    """A message's content blocks as response parts; for a JSON schema output the output
    tool's call is read back as the JSON text."""
    parts: list[ModelResponsePart] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            parts.append(TextPart(text=block["text"]))
        elif kind == "thinking":
            parts.append(
                ThinkingPart(
                    text=block["thinking"],
                    signature=block.get("signature") or None,
                    provider_name=PROVIDER_API,
                )
            )
        elif kind == REDACTED:
            parts.append(
                ThinkingPart(
                    text="", signature=block["data"], id=REDACTED, provider_name=PROVIDER_API
                )
            )
        elif kind == "tool_use":
            arguments = block.get("input")
            if output_mode == "json_schema" and block["name"] == OUTPUT_TOOL_NAME:
                parts.append(TextPart(text=json.dumps(arguments)))
                continue
            parts.append(
                ToolCallPart(id=block["id"], name=block["name"], arguments=arguments or {})
            )
        else:
            raise UnexpectedModelBehavior(
                f"{model_name}: unsupported content block {kind!r}; only function tools are sent"
            )
    return parts


def usage_of(usage: dict[str, Any]) -> Usage:
    """Anthropic counts cached input apart from `input_tokens`; ours counts every input
    token, and says how many were read from or written to the cache."""
    read = int(usage.get("cache_read_input_tokens") or 0)
    written = int(usage.get("cache_creation_input_tokens") or 0)
    fresh = int(usage.get("input_tokens") or 0)
    output = int(usage.get("output_tokens") or 0)
    return Usage(
        requests=1,
        input_tokens=fresh + read + written,
        output_tokens=output,
        total_tokens=fresh + read + written + output,
        cache_read_tokens=read,
        cache_write_tokens=written,
    )
