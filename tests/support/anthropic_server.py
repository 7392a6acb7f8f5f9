"""A local HTTP server speaking Anthropic's Messages API (`POST /v1/messages`).

Replies are scripted by the test; bodies are shaped as the API reference documents them:
a `message` object, or with `"stream": true` the server-sent events `message_start`,
`content_block_start`, `ping`, `content_block_delta` (`text_delta`, `thinking_delta`,
`signature_delta`, `input_json_delta`), `content_block_stop`, `message_delta`,
`message_stop`; errors as `{"type": "error", "error": {"type", "message"}, "request_id"}`.

Requests are validated the way the API refuses them: the key (`x-api-key`, or a bearer
token as this SDK sends it), the version header, `max_tokens`, tool ids
(`^[a-zA-Z0-9_-]+$`), every `tool_use` answered by a `tool_result` at the front of the next
message, thinking blocks only with a signature this server issued for exactly that text (so
a changed or foreign block is refused), forced tool use refused with thinking, at most four
`cache_control` breakpoints.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .fake_http import Disconnect, RequestError, Response, ScriptedServer, Stream

__all__ = [
    "AnthropicErrorReply",
    "AnthropicUsage",
    "DisconnectReply",
    "FakeAnthropicServer",
    "MessageReply",
    "Redacted",
    "Text",
    "Thinking",
    "ToolUse",
]

_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
_counter = itertools.count(1)


def _id(prefix: str) -> str:
    return f"{prefix}_01{secrets.token_hex(11)}{next(_counter)}"


@dataclass
class Text:
    text: str


@dataclass
class Thinking:
    thinking: str


@dataclass
class Redacted:
    pass


@dataclass
class ToolUse:
    name: str
    input: dict[str, Any]
    id: str | None = None


Block = Text | Thinking | Redacted | ToolUse


@dataclass
class AnthropicUsage:
    input_tokens: int = 10
    output_tokens: int = 5
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    def to_json(self, output_tokens: int | None = None) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation": {
                "ephemeral_5m_input_tokens": self.cache_creation_input_tokens,
                "ephemeral_1h_input_tokens": 0,
            },
            "output_tokens": self.output_tokens if output_tokens is None else output_tokens,
            "service_tier": "standard",
        }


@dataclass
class MessageReply:
    content: list[Block]
    usage: AnthropicUsage = field(default_factory=AnthropicUsage)
    stop_reason: str | None = None
    """Default: `tool_use` when the content has a tool use, else `end_turn`."""
    chunk_chars: int = 8
    delay: float = 0.0
    """Seconds between streamed events."""
    cut_after: int | None = None
    """Streamed: drop the connection after this many events."""
    error_after: int | None = None
    """Streamed: send an `overloaded_error` event after this many events, then stop."""


@dataclass
class AnthropicErrorReply:
    status: int
    type: str
    message: str
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def rate_limit(cls, retry_after: float = 1) -> AnthropicErrorReply:
        return cls(
            429,
            "rate_limit_error",
            "This request would exceed the rate limit for your organization of 50 input "
            "tokens per minute. For details, refer to: https://docs.claude.com/en/api/"
            "rate-limits.",
            {"retry-after": f"{retry_after:g}", "anthropic-ratelimit-requests-limit": "50"},
        )

    @classmethod
    def overloaded(cls) -> AnthropicErrorReply:
        return cls(529, "overloaded_error", "Overloaded")

    @classmethod
    def unavailable(cls) -> AnthropicErrorReply:
        return cls(503, "api_error", "Service unavailable")

    @classmethod
    def invalid(cls, message: str) -> AnthropicErrorReply:
        return cls(400, "invalid_request_error", message)

    @classmethod
    def not_found(cls, model: str) -> AnthropicErrorReply:
        return cls(404, "not_found_error", f"model: {model}")


@dataclass
class DisconnectReply:
    pass


def _error(status: int, kind: str, message: str, headers: Mapping[str, str] | None = None) -> Any:
    body = {
        "type": "error",
        "error": {"type": kind, "message": message},
        "request_id": _id("req"),
    }
    return RequestError(status, body, {"request-id": body["request_id"], **(headers or {})})


def _invalid(message: str) -> RequestError:
    error: RequestError = _error(400, "invalid_request_error", message)
    return error


class FakeAnthropicServer(ScriptedServer):
    name = "FakeAnthropicServer"

    def __init__(self, api_key: str = "sk-ant-test") -> None:
        super().__init__()
        self.api_key = api_key
        self._secret = secrets.token_bytes(16)
        self._redacted: set[str] = set()

    @property
    def base_url(self) -> str:
        return self.url

    def sign(self, thinking: str) -> str:
        return base64.b64encode(
            hmac.new(self._secret, thinking.encode(), hashlib.sha256).digest()
        ).decode()

    def crash_body(self, message: str) -> Any:
        return {"type": "error", "error": {"type": "api_error", "message": message}}

    # -- validation ---------------------------------------------------------------------------

    def route(self, path: str, headers: Mapping[str, str], body: Any) -> None:
        if path != "/v1/messages":
            raise _error(404, "not_found_error", "Not Found")
        bearer = headers.get("authorization", "").removeprefix("Bearer ")
        if self.api_key not in (headers.get("x-api-key"), bearer):
            raise _error(401, "authentication_error", "invalid x-api-key")
        if not headers.get("anthropic-version"):
            raise _invalid("anthropic-version: header is required")
        if not isinstance(body, dict):
            raise _invalid("The request body is not valid JSON.")
        for key in ("model", "max_tokens", "messages"):
            if key not in body:
                raise _invalid(f"{key}: Field required")
        if not isinstance(body["max_tokens"], int) or body["max_tokens"] < 1:
            raise _invalid("max_tokens: Input should be greater than or equal to 1")
        thinking = body.get("thinking") or {}
        if thinking.get("type") == "enabled":
            budget = thinking.get("budget_tokens", 0)
            if budget < 1024:
                raise _invalid(
                    "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
                )
            if budget >= body["max_tokens"]:
                raise _invalid("`max_tokens` must be greater than `thinking.budget_tokens`.")
        thinks = thinking.get("type") in ("enabled", "adaptive")
        tool_choice = body.get("tool_choice") or {}
        if thinks and tool_choice.get("type") in ("any", "tool"):
            raise _invalid("Thinking may not be enabled when tool_choice forces tool use.")
        tools = body.get("tools") or []
        for index, tool in enumerate(tools):
            if not _TOOL_NAME.match(str(tool.get("name", ""))):
                raise _invalid(
                    f"tools.{index}.custom.name: String should match pattern "
                    "'^[a-zA-Z0-9_-]{1,128}$'"
                )
            if (tool.get("input_schema") or {}).get("type") != "object":
                raise _invalid(f"tools.{index}.custom.input_schema.type: Input should be 'object'")
        if tool_choice.get("type") in ("any", "tool") and not tools:
            raise _invalid("tool_choice may only be specified while providing tools.")
        self._check_messages(body["messages"], thinks)
        system = body.get("system")
        blocks = [
            *(system if isinstance(system, list) else []),
            *tools,
            *(b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]),
        ]
        breakpoints = sum(1 for b in blocks if isinstance(b, dict) and b.get("cache_control"))
        if breakpoints > 4:
            raise _invalid(
                f"A maximum of 4 blocks with cache_control may be provided. Found {breakpoints}."
            )

    def _check_messages(self, messages: Any, thinks: bool) -> None:
        if not isinstance(messages, list) or not messages:
            raise _invalid("messages: at least one message is required")
        if messages[0].get("role") != "user":
            raise _invalid('messages: first message must use the "user" role')
        previous_calls: list[str] = []
        for i, message in enumerate(messages):
            role, content = message.get("role"), message.get("content")
            if role not in ("user", "assistant"):
                raise _invalid(f"messages.{i}.role: Input should be 'user' or 'assistant'")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            if not isinstance(blocks, list) or not blocks:
                raise _invalid(f"messages.{i}: all messages must have non-empty content")
            answered: list[str] = []
            calls: list[str] = []
            for j, block in enumerate(blocks):
                where = f"messages.{i}.content.{j}"
                kind = block.get("type")
                if kind == "text":
                    if not block.get("text"):
                        raise _invalid("messages: text content blocks must be non-empty")
                elif kind == "tool_use" and role == "assistant":
                    if not _ID.match(str(block.get("id", ""))):
                        raise _invalid(
                            f"{where}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
                        )
                    if not isinstance(block.get("input"), dict):
                        raise _invalid(
                            f"{where}.tool_use.input: Input should be a valid dictionary"
                        )
                    calls.append(block["id"])
                elif kind == "tool_result" and role == "user":
                    if block.get("tool_use_id") not in previous_calls:
                        raise _invalid(
                            f"{where}: unexpected `tool_use_id` found in `tool_result` blocks: "
                            f"{block.get('tool_use_id')}. Each `tool_result` block must have a "
                            "corresponding `tool_use` block in the previous message."
                        )
                    if j != len(answered):
                        raise _invalid(
                            f"{where}: `tool_result` blocks must come first in the message"
                        )
                    answered.append(block["tool_use_id"])
                elif kind == "thinking" and role == "assistant":
                    signature = block.get("signature")
                    if not signature or signature != self.sign(str(block.get("thinking"))):
                        raise _invalid(f"{where}: Invalid `signature` in `thinking` block")
                elif kind == "redacted_thinking" and role == "assistant":
                    if block.get("data") not in self._redacted:
                        raise _invalid(f"{where}: Invalid `data` in `redacted_thinking` block")
                else:
                    raise _invalid(
                        f"{where}.type: unexpected block type {kind!r} in a {role} message"
                    )
            missing = [c for c in previous_calls if c not in answered]
            if missing:
                raise _invalid(
                    f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(missing)}. Each `tool_use` block must have "
                    "a corresponding `tool_result` block in the next message."
                )
            is_last_assistant = role == "assistant" and i == len(messages) - 2
            if (
                thinks
                and calls
                and is_last_assistant
                and blocks[0]["type"] not in ("thinking", "redacted_thinking")
            ):
                raise _invalid(
                    f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, "
                    f"but found `{blocks[0]['type']}`. When `thinking` is enabled, a final "
                    "`assistant` message must start with a thinking block."
                )
            previous_calls = calls

    # -- replies ------------------------------------------------------------------------------

    def render(self, body: dict[str, Any], reply: Any) -> Response | Stream | Disconnect:
        if isinstance(reply, DisconnectReply):
            return Disconnect()
        if isinstance(reply, AnthropicErrorReply):
            error: RequestError = _error(reply.status, reply.type, reply.message, reply.headers)
            return Response.json(error.status, error.body, error.headers)
        if not isinstance(reply, MessageReply):
            raise TypeError(f"not a reply: {reply!r}")
        blocks = [self._block(block) for block in reply.content]
        stop = reply.stop_reason or (
            "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        )
        message = {
            "id": _id("msg"),
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": reply.usage.to_json(),
        }
        headers = {"request-id": _id("req"), "anthropic-organization-id": "org-test"}
        if not body.get("stream"):
            return Response.json(200, message, headers)
        return Stream(
            self._events(message, reply),
            delay=reply.delay,
            cut_after=reply.cut_after,
            headers=headers,
        )

    def _block(self, block: Block) -> dict[str, Any]:
        if isinstance(block, Text):
            return {"type": "text", "text": block.text}
        if isinstance(block, Thinking):
            return {
                "type": "thinking",
                "thinking": block.thinking,
                "signature": self.sign(block.thinking),
            }
        if isinstance(block, Redacted):
            data = "EmwKAhgBEgy" + secrets.token_urlsafe(24)
            self._redacted.add(data)
            return {"type": "redacted_thinking", "data": data}
        return {
            "type": "tool_use",
            "id": block.id or _id("toolu"),
            "name": block.name,
            "input": block.input,
        }

    def _events(self, message: dict[str, Any], reply: MessageReply) -> list[tuple[str | None, str]]:
        events: list[tuple[str, dict[str, Any]]] = []
        start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
        start["usage"] = reply.usage.to_json(output_tokens=1)
        events.append(("message_start", {"type": "message_start", "message": start}))
        size = max(reply.chunk_chars, 1)

        def pieces(text: str) -> list[str]:
            return [text[i : i + size] for i in range(0, len(text), size)] or [""]

        for index, block in enumerate(message["content"]):
            kind = block["type"]
            if kind == "text":
                first = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": p} for p in pieces(block["text"])]
            elif kind == "thinking":
                first = {"type": "thinking", "thinking": "", "signature": ""}
                deltas = [
                    {"type": "thinking_delta", "thinking": p} for p in pieces(block["thinking"])
                ]
                deltas.append({"type": "signature_delta", "signature": block["signature"]})
            elif kind == "redacted_thinking":
                first, deltas = block, []
            else:
                first = {**block, "input": {}}
                raw = json.dumps(block["input"])
                deltas = [{"type": "input_json_delta", "partial_json": ""}]
                deltas += [{"type": "input_json_delta", "partial_json": p} for p in pieces(raw)]
            events.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": first},
                )
            )
            if index == 0:
                events.append(("ping", {"type": "ping"}))
            for delta in deltas:
                events.append(
                    (
                        "content_block_delta",
                        {"type": "content_block_delta", "index": index, "delta": delta},
                    )
                )
            events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        events.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                    "usage": {"output_tokens": reply.usage.output_tokens},
                },
            )
        )
        events.append(("message_stop", {"type": "message_stop"}))
        if reply.error_after is not None:
            events = events[: reply.error_after]
            events.append(
                (
                    "error",
                    {
                        "type": "error",
                        "error": {"type": "overloaded_error", "message": "Overloaded"},
                    },
                )
            )
        return [(name, json.dumps(data)) for name, data in events]
