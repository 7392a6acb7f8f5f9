"""A real local HTTP server that speaks the OpenAI chat-completions wire protocol.

Tests of the runtime must exercise the same path production does: the official
SDK, real HTTP, real status codes and real error envelopes.  Mocking the SDK
would hide serialisation bugs (a tool message the API would refuse, a schema
the API would reject), so this server validates requests the way the real API
does and answers from a script the test controls.

Only the standard library is used, so the fake adds no dependency to the
project and behaves the same on every machine.

Typical use::

    with FakeOpenAIServer(api_key="sk-test") as server:
        server.enqueue(TextReply("hello"))
        client = openai.AsyncOpenAI(
            base_url=server.base_url, api_key="sk-test", max_retries=0
        )
        ...
        assert server.requests[-1].body["model"] == "gpt-4o-mini"

Scripted replies answer only requests that pass validation: a request the real
API would refuse gets the real 400 and leaves the script untouched, so a test
cannot accidentally "pass" with a payload production would never get through.

A request with ``"stream": true`` gets the reply as server-sent events, the way
the real API streams it: ``chat.completion.chunk`` objects of ``chunk_chars``
characters each, ``chunk_delay`` seconds apart, a last chunk with the finish
reason, one with the usage when ``stream_options.include_usage`` is set, then
``data: [DONE]``. ``cut_after=n`` drops the connection after n content chunks,
as a crashed proxy does mid-answer. Every chunk written is timed
(:attr:`FakeOpenAIServer.chunk_times`), so latency can be measured from the
moment the first token left the server.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import TCPServer
from types import TracebackType
from typing import Any, Final, Literal, Self, TypeAlias, cast

__all__ = [
    "DEFAULT_MODELS",
    "DisconnectReply",
    "ErrorReply",
    "FakeOpenAIServer",
    "FinishReason",
    "OpenAIRequestError",
    "RawReply",
    "RecordedRequest",
    "RefusalReply",
    "Reply",
    "ReplyFactory",
    "TextReply",
    "ToolCall",
    "ToolCallsReply",
    "Usage",
    "validate_chat_request",
]

FinishReason: TypeAlias = Literal["stop", "length", "tool_calls", "content_filter", "function_call"]

DEFAULT_MODELS: Final[tuple[str, ...]] = (
    "gpt-4o",
    "gpt-4o-mini",
    "gpt-4.1",
    "gpt-4.1-mini",
    "gpt-4.1-nano",
    "o3-mini",
)

_NAME_PATTERN: Final = re.compile(r"^[a-zA-Z0-9_-]+$")
_MAX_NAME_LENGTH: Final = 64
_ROLES: Final = ("system", "assistant", "user", "function", "tool", "developer")
_CONTENT_PART_TYPES: Final[Mapping[str, tuple[str, ...]]] = {
    "system": ("text",),
    "developer": ("text",),
    "user": ("text", "image_url", "input_audio", "file"),
    "assistant": ("text", "refusal"),
    "tool": ("text",),
}


# --------------------------------------------------------------------------- replies


@dataclass(frozen=True)
class Usage:
    """Token accounting to report, so cost/budget code can be tested with exact numbers."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    reasoning_tokens: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": self.reasoning_tokens,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }


@dataclass(frozen=True)
class TextReply:
    """An assistant text answer; structured output is just JSON text here.

    ``usage=None`` reports a deterministic estimate derived from the request, so
    tests that do not care about tokens still get a realistic, non-zero usage.
    ``delay`` holds the response back (seconds) to exercise client timeouts.
    """

    text: str
    usage: Usage | None = None
    finish_reason: FinishReason = "stop"
    delay: float = 0.0
    reasoning: str | None = None
    """Reasoning text (``reasoning_content``, as vLLM and DeepSeek send it), before the text."""
    chunk_chars: int = 4
    chunk_delay: float = 0.0
    cut_after: int | None = None


@dataclass(frozen=True)
class ToolCall:
    """One function call the fake model makes; ``arguments`` may be deliberately invalid JSON."""

    id: str
    name: str
    arguments: str | Mapping[str, Any]

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


ToolCallSpec: TypeAlias = ToolCall | tuple[str, str, str | Mapping[str, Any]]


@dataclass(frozen=True)
class ToolCallsReply:
    """An assistant turn that calls tools (possibly several in parallel, possibly with text)."""

    calls: Sequence[ToolCallSpec]
    text: str | None = None
    usage: Usage | None = None
    finish_reason: FinishReason = "tool_calls"
    delay: float = 0.0
    chunk_chars: int = 4
    chunk_delay: float = 0.0
    cut_after: int | None = None

    def tool_calls(self) -> list[ToolCall]:
        return [c if isinstance(c, ToolCall) else ToolCall(c[0], c[1], c[2]) for c in self.calls]


@dataclass(frozen=True)
class RefusalReply:
    """A safety refusal: ``content`` is null and ``message.refusal`` carries the text."""

    refusal: str
    usage: Usage | None = None
    delay: float = 0.0


@dataclass(frozen=True)
class ErrorReply:
    """An API error in the real envelope, for testing retry and failure handling.

    ``type`` defaults from the status the way the real API picks it.  Use the
    class-method constructors for the errors agents most often meet.
    """

    status: int
    message: str
    type: str | None = None
    code: str | None = None
    param: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0

    @classmethod
    def rate_limit(cls, retry_after: float | None = 1, *, model: str = "gpt-4o-mini") -> ErrorReply:
        """``retry_after=None`` omits the header, to test backoff without a server hint."""
        headers: dict[str, str] = {}
        if retry_after is not None:
            headers["retry-after"] = _format_seconds(retry_after)
        return cls(
            429,
            f"Rate limit reached for {model} on requests per min (RPM): Limit 3, Used 3, "
            f"Requested 1. Please try again in {_format_seconds(retry_after or 20)}s.",
            type="requests",
            code="rate_limit_exceeded",
            headers=headers,
        )

    @classmethod
    def insufficient_quota(cls) -> ErrorReply:
        return cls(
            429,
            "You exceeded your current quota, please check your plan and billing details.",
            type="insufficient_quota",
            code="insufficient_quota",
        )

    @classmethod
    def server_error(cls) -> ErrorReply:
        return cls(
            500,
            "The server had an error while processing your request. Sorry about that!",
            type="server_error",
        )

    @classmethod
    def overloaded(cls) -> ErrorReply:
        return cls(
            503, "The engine is currently overloaded, please try again later.", type="server_error"
        )

    @classmethod
    def context_length_exceeded(cls, limit: int = 128000, requested: int = 130000) -> ErrorReply:
        return cls(
            400,
            f"This model's maximum context length is {limit} tokens. However, your messages "
            f"resulted in {requested} tokens. Please reduce the length of the messages.",
            type="invalid_request_error",
            code="context_length_exceeded",
            param="messages",
        )


@dataclass(frozen=True)
class RawReply:
    """Exact bytes on the wire, for malformed or unexpected responses."""

    status: int = 200
    body: bytes | str = b""
    headers: Mapping[str, str] = field(default_factory=lambda: {"Content-Type": "application/json"})
    delay: float = 0.0


@dataclass(frozen=True)
class DisconnectReply:
    """Drop the connection without any response, as a crashed proxy or network does."""

    delay: float = 0.0


Reply: TypeAlias = (
    TextReply | ToolCallsReply | RefusalReply | ErrorReply | RawReply | DisconnectReply
)
ReplyFactory: TypeAlias = Callable[[dict[str, Any]], Reply]
"""Computes the reply from the validated request body, for replies that depend on input."""

_REPLY_TYPES: Final = (
    TextReply,
    ToolCallsReply,
    RefusalReply,
    ErrorReply,
    RawReply,
    DisconnectReply,
)


@dataclass(frozen=True)
class RecordedRequest:
    """What reached the server, so tests can assert on the exact payload the runtime sent.

    ``body`` is the parsed JSON (``None`` when absent or unparseable); ``status`` is
    what the server answered (``None`` for a dropped connection); ``reply`` is the
    scripted reply consumed, if any.  Header names are lower-case.
    """

    method: str
    path: str
    headers: Mapping[str, str]
    raw_body: bytes
    body: Any
    status: int | None
    reply: Reply | None = None

    @property
    def json(self) -> dict[str, Any]:
        """The body as an object, failing loudly when it is not one."""
        if not isinstance(self.body, dict):
            raise TypeError(f"request body is not a JSON object: {self.raw_body[:200]!r}")
        return cast(dict[str, Any], self.body)


# --------------------------------------------------------------------------- validation


class OpenAIRequestError(Exception):
    """A refusal in the real API's terms; turned into the ``{"error": ...}`` envelope."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.param = param
        self.code = code
        self.headers: Mapping[str, str] = headers or {}

    def envelope(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


def _format_seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _type_phrase(value: object) -> str:
    """Names a JSON type with its article, as the API's messages do."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _supported(values: Sequence[str]) -> str:
    quoted = [f"'{v}'" for v in values]
    if len(quoted) == 1:
        return quoted[0]
    if len(quoted) == 2:
        return f"{quoted[0]} and {quoted[1]}"
    return ", ".join(quoted[:-1]) + f", and {quoted[-1]}"


def _missing(param: str) -> OpenAIRequestError:
    return OpenAIRequestError(
        f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
    )


def _bad_type(param: str, expected: str, value: object) -> OpenAIRequestError:
    return OpenAIRequestError(
        f"Invalid type for '{param}': expected {expected}, but got {_type_phrase(value)} instead.",
        param=param,
        code="invalid_type",
    )


def _bad_value(param: str, value: object, supported: Sequence[str]) -> OpenAIRequestError:
    return OpenAIRequestError(
        f"Invalid value: '{value}'. Supported values are: {_supported(supported)}.",
        param=param,
        code="invalid_value",
    )


def _empty_array(param: str) -> OpenAIRequestError:
    return OpenAIRequestError(
        f"Invalid '{param}': empty array. Expected an array with minimum length 1, "
        "but got an empty array instead.",
        param=param,
        code="empty_array",
    )


def _require_object(obj: Mapping[str, Any], key: str, param: str) -> dict[str, Any]:
    if key not in obj or obj[key] is None:
        raise _missing(param)
    value = obj[key]
    if not isinstance(value, dict):
        raise _bad_type(param, "an object", value)
    return cast(dict[str, Any], value)


def _require_string(obj: Mapping[str, Any], key: str, param: str) -> str:
    if key not in obj or obj[key] is None:
        raise _missing(param)
    value = obj[key]
    if not isinstance(value, str):
        raise _bad_type(param, "a string", value)
    return value


def _check_name(name: str, param: str) -> None:
    if not name:
        raise OpenAIRequestError(
            f"Invalid '{param}': string too short. Expected a string with minimum length 1, "
            "but got an empty string instead.",
            param=param,
            code="string_below_min_length",
        )
    if len(name) > _MAX_NAME_LENGTH:
        raise OpenAIRequestError(
            f"Invalid '{param}': string too long. Expected a string with maximum length "
            f"{_MAX_NAME_LENGTH}, but got a string with length {len(name)} instead.",
            param=param,
            code="string_above_max_length",
        )
    if not _NAME_PATTERN.match(name):
        raise OpenAIRequestError(
            f"Invalid '{param}': string does not match pattern. Expected a string that matches "
            f"the pattern '{_NAME_PATTERN.pattern}'.",
            param=param,
            code="invalid_value",
        )


def _check_number(
    body: Mapping[str, Any], key: str, low: float, high: float | None, *, integer: bool
) -> None:
    if body.get(key) is None:
        return
    value = body[key]
    kind = "integer" if integer else "decimal"
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (integer and not isinstance(value, int))
    ):
        raise _bad_type(key, f"an {kind}" if integer else f"a {kind}", value)
    if isinstance(value, float) and not math.isfinite(value):
        raise _bad_type(key, f"a {kind}", value)
    if value < low:
        raise OpenAIRequestError(
            f"Invalid '{key}': {kind} below minimum value. "
            f"Expected a value >= {low:g}, but got {value:g} instead.",
            param=key,
            code=f"{kind}_below_min_value",
        )
    if high is not None and value > high:
        raise OpenAIRequestError(
            f"Invalid '{key}': {kind} above maximum value. "
            f"Expected a value <= {high:g}, but got {value:g} instead.",
            param=key,
            code=f"{kind}_above_max_value",
        )


def _check_content(msg: Mapping[str, Any], role: str, i: int, *, required: bool) -> None:
    param = f"messages[{i}].content"
    if "content" not in msg or msg["content"] is None:
        if not required:
            return
        if "content" not in msg:
            raise _missing(param)
        raise _bad_type(param, "one of a string or array of objects", None)
    content = msg["content"]
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise _bad_type(param, "one of a string or array of objects", content)
    if not content:
        raise _empty_array(param)
    allowed = _CONTENT_PART_TYPES[role]
    for j, part in enumerate(content):
        part_param = f"{param}[{j}]"
        if not isinstance(part, dict):
            raise _bad_type(part_param, "an object", part)
        part_type = _require_string(part, "type", f"{part_param}.type")
        if part_type not in allowed:
            raise _bad_value(f"{part_param}.type", part_type, allowed)
        if part_type in ("text", "refusal"):
            _require_string(part, part_type, f"{part_param}.{part_type}")
        elif part_type == "image_url":
            image = _require_object(part, "image_url", f"{part_param}.image_url")
            _require_string(image, "url", f"{part_param}.image_url.url")
        else:
            _require_object(part, part_type, f"{part_param}.{part_type}")


def _check_assistant_tool_calls(msg: Mapping[str, Any], i: int) -> list[str]:
    param = f"messages[{i}].tool_calls"
    calls = msg["tool_calls"]
    if not isinstance(calls, list):
        raise _bad_type(param, "an array", calls)
    if not calls:
        raise _empty_array(param)
    ids: list[str] = []
    for j, call in enumerate(calls):
        call_param = f"{param}[{j}]"
        if not isinstance(call, dict):
            raise _bad_type(call_param, "an object", call)
        ids.append(_require_string(call, "id", f"{call_param}.id"))
        call_type = _require_string(call, "type", f"{call_param}.type")
        if call_type != "function":
            raise _bad_value(f"{call_param}.type", call_type, ("function",))
        function = _require_object(call, "function", f"{call_param}.function")
        _require_string(function, "name", f"{call_param}.function.name")
        _require_string(function, "arguments", f"{call_param}.function.arguments")
    return ids


def _unanswered(index: int, ids: Sequence[str]) -> OpenAIRequestError:
    return OpenAIRequestError(
        "An assistant message with 'tool_calls' must be followed by tool messages responding to "
        "each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        + ", ".join(ids),
        param=f"messages.[{index}].role",
    )


def _check_messages(body: Mapping[str, Any]) -> None:
    if body.get("messages") is None:
        raise _missing("messages")
    messages = body["messages"]
    if not isinstance(messages, list):
        raise _bad_type("messages", "an array", messages)
    if not messages:
        raise _empty_array("messages")

    # The tool calls of the latest assistant message, while only tool messages have followed it.
    open_index = -1
    open_ids: list[str] | None = None
    unanswered: list[str] = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise _bad_type(f"messages[{i}]", "an object", msg)
        role = _require_string(msg, "role", f"messages[{i}].role")
        if role not in _ROLES:
            raise _bad_value(f"messages[{i}].role", role, _ROLES)
        if role != "tool" and open_ids is not None:
            if unanswered:
                raise _unanswered(open_index, unanswered)
            open_ids = None
        if "name" in msg and msg["name"] is not None and not isinstance(msg["name"], str):
            raise _bad_type(f"messages[{i}].name", "a string", msg["name"])

        if role == "assistant":
            has_calls = msg.get("tool_calls") is not None
            has_other = any(msg.get(k) is not None for k in ("function_call", "refusal", "audio"))
            if not has_calls and not has_other and msg.get("content") is None:
                raise OpenAIRequestError(
                    "Invalid value for 'content': expected a string, got null.",
                    param=f"messages.[{i}].content",
                )
            _check_content(msg, role, i, required=False)
            if has_calls:
                open_ids = _check_assistant_tool_calls(msg, i)
                open_index = i
                unanswered = list(dict.fromkeys(open_ids))
        elif role == "tool":
            _check_content(msg, role, i, required=True)
            call_id = _require_string(msg, "tool_call_id", f"messages[{i}].tool_call_id")
            if open_ids is None:
                raise OpenAIRequestError(
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'.",
                    param=f"messages.[{i}].role",
                )
            if call_id not in open_ids:
                raise OpenAIRequestError(
                    f"Invalid parameter: 'tool_call_id' of '{call_id}' not found in "
                    "'tool_calls' of previous message.",
                    param=f"messages.[{i}].tool_call_id",
                )
            if call_id in unanswered:
                unanswered.remove(call_id)
        elif role == "function":
            _require_string(msg, "name", f"messages[{i}].name")
            if "content" not in msg:
                raise _missing(f"messages[{i}].content")
        else:
            _check_content(msg, role, i, required=True)
    if open_ids is not None and unanswered:
        raise _unanswered(open_index, unanswered)


def _strict_schema_problem(schema: Any, context: tuple[str, ...]) -> str | None:
    """Finds the first violation of the rules strict mode imposes on every object schema."""
    if not isinstance(schema, dict):
        return None
    node = cast(dict[str, Any], schema)
    declared = node.get("type")
    is_object = (
        declared == "object"
        or (isinstance(declared, list) and "object" in declared)
        or "properties" in node
    )
    if is_object:
        if node.get("additionalProperties") is not False:
            return (
                f"In context={context!r}, 'additionalProperties' is required to be supplied "
                "and to be false."
            )
        properties = node.get("properties") or {}
        if isinstance(properties, dict):
            required = node.get("required")
            listed = required if isinstance(required, list) else []
            missing = [key for key in properties if key not in listed]
            if missing or (properties and not isinstance(required, list)):
                return (
                    f"In context={context!r}, 'required' is required to be supplied and to be "
                    f"an array including every key in properties. Missing '{missing[0]}'."
                )
            for key, sub in properties.items():
                problem = _strict_schema_problem(sub, (*context, "properties", str(key)))
                if problem:
                    return problem
    children: list[tuple[Any, tuple[str, ...]]] = []
    if isinstance(node.get("items"), dict):
        children.append((node["items"], (*context, "items")))
    for keyword in ("anyOf", "allOf", "oneOf", "prefixItems"):
        if isinstance(node.get(keyword), list):
            children.extend(
                (sub, (*context, keyword, str(n))) for n, sub in enumerate(node[keyword])
            )
    for keyword in ("$defs", "definitions"):
        if isinstance(node.get(keyword), dict):
            children.extend((sub, (*context, keyword, str(k))) for k, sub in node[keyword].items())
    for sub, sub_context in children:
        problem = _strict_schema_problem(sub, sub_context)
        if problem:
            return problem
    return None


def _check_strict_schema(schema: dict[str, Any], what: str, param: str) -> None:
    if schema.get("type") != "object":
        raise OpenAIRequestError(
            f"Invalid schema for {what}: schema must be a JSON Schema of 'type: \"object\"', "
            f"got 'type: \"{schema.get('type')}\"'.",
            param=param,
        )
    problem = _strict_schema_problem(schema, ())
    if problem:
        raise OpenAIRequestError(f"Invalid schema for {what}: {problem}", param=param)


def _check_tools(body: Mapping[str, Any]) -> list[str]:
    if body.get("tools") is None:
        return []
    tools = body["tools"]
    if not isinstance(tools, list):
        raise _bad_type("tools", "an array", tools)
    if not tools:
        raise _empty_array("tools")
    names: list[str] = []
    for i, tool in enumerate(tools):
        param = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise _bad_type(param, "an object", tool)
        tool_type = _require_string(tool, "type", f"{param}.type")
        if tool_type != "function":
            raise _bad_value(f"{param}.type", tool_type, ("function",))
        function = _require_object(tool, "function", f"{param}.function")
        name = _require_string(function, "name", f"{param}.function.name")
        _check_name(name, f"{param}.function.name")
        if function.get("description") is not None and not isinstance(function["description"], str):
            raise _bad_type(f"{param}.function.description", "a string", function["description"])
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise _bad_type(f"{param}.function.parameters", "an object", parameters)
        strict = function.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise _bad_type(f"{param}.function.strict", "a boolean", strict)
        if strict:
            _check_strict_schema(
                cast(dict[str, Any], parameters or {"type": "object", "properties": {}}),
                f"function '{name}'",
                f"{param}.function.parameters",
            )
        names.append(name)
    return names


def _check_tool_choice(body: Mapping[str, Any], tool_names: Sequence[str]) -> None:
    for key in ("tool_choice", "parallel_tool_calls"):
        if body.get(key) is not None and not tool_names:
            raise OpenAIRequestError(
                f"Invalid value for '{key}': '{key}' is only allowed when 'tools' are specified.",
                param=key,
            )
    if body.get("parallel_tool_calls") is not None and not isinstance(
        body["parallel_tool_calls"], bool
    ):
        raise _bad_type("parallel_tool_calls", "a boolean", body["parallel_tool_calls"])
    choice = body.get("tool_choice")
    if choice is None:
        return
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise _bad_value("tool_choice", choice, ("none", "auto", "required"))
        return
    if not isinstance(choice, dict):
        raise _bad_type("tool_choice", "one of a string or object", choice)
    choice_type = _require_string(choice, "type", "tool_choice.type")
    if choice_type != "function":
        raise _bad_value("tool_choice.type", choice_type, ("function",))
    function = _require_object(choice, "function", "tool_choice.function")
    name = _require_string(function, "name", "tool_choice.function.name")
    if name not in tool_names:
        raise OpenAIRequestError(
            f"Invalid value for 'tool_choice': function '{name}' is not among the "
            "provided 'tools'.",
            param="tool_choice",
        )


def _check_response_format(body: Mapping[str, Any]) -> None:
    if body.get("response_format") is None:
        return
    fmt = body["response_format"]
    if not isinstance(fmt, dict):
        raise _bad_type("response_format", "an object", fmt)
    kind = _require_string(fmt, "type", "response_format.type")
    if kind not in ("text", "json_object", "json_schema"):
        raise _bad_value("response_format.type", kind, ("text", "json_object", "json_schema"))
    if kind == "json_object":
        if "json" not in json.dumps(body.get("messages")).lower():
            raise OpenAIRequestError(
                "'messages' must contain the word 'json' in some form, to use "
                "'response_format' of type 'json_object'.",
                param="messages",
            )
    elif kind == "json_schema":
        spec = _require_object(fmt, "json_schema", "response_format.json_schema")
        name = _require_string(spec, "name", "response_format.json_schema.name")
        _check_name(name, "response_format.json_schema.name")
        # The reference marks `schema` optional, but a structured-output request without
        # one is always a bug in the caller, so the fake refuses it.
        schema = _require_object(spec, "schema", "response_format.json_schema.schema")
        strict = spec.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise _bad_type("response_format.json_schema.strict", "a boolean", strict)
        if strict:
            _check_strict_schema(schema, f"response_format '{name}'", "response_format")


def validate_chat_request(body: Any, *, models: Sequence[str] | None = None) -> None:
    """Raises the error the real API would answer ``body`` with, if any.

    Exposed so a test can check a payload its code built without a round trip.
    ``models`` restricts which model names exist (404 otherwise); ``None`` accepts any.
    Unknown top-level parameters are accepted, as the API ignores many of them.
    """
    if not isinstance(body, dict):
        raise OpenAIRequestError(
            f"Invalid type for body: expected an object, but got {_type_phrase(body)} instead.",
            code="invalid_type",
        )
    req = cast(dict[str, Any], body)
    model = req.get("model")
    if model is None or model == "":
        raise OpenAIRequestError("you must provide a model parameter")
    if not isinstance(model, str):
        raise _bad_type("model", "a string", model)
    if models is not None and model not in models:
        raise OpenAIRequestError(
            f"The model `{model}` does not exist or you do not have access to it.",
            status=404,
            code="model_not_found",
        )
    _check_messages(req)
    tool_names = _check_tools(req)
    _check_tool_choice(req, tool_names)
    _check_response_format(req)
    _check_number(req, "temperature", 0, 2, integer=False)
    _check_number(req, "top_p", 0, 1, integer=False)
    _check_number(req, "presence_penalty", -2, 2, integer=False)
    _check_number(req, "frequency_penalty", -2, 2, integer=False)
    _check_number(req, "max_tokens", 1, None, integer=True)
    _check_number(req, "max_completion_tokens", 1, None, integer=True)
    _check_number(req, "n", 1, 128, integer=True)
    if req.get("n") not in (None, 1):
        raise OpenAIRequestError(
            "FakeOpenAIServer answers with exactly one choice; "
            "n > 1 is not supported by this fake.",
            param="n",
            code="unsupported_by_fake_server",
        )
    stream = req.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _bad_type("stream", "a boolean", stream)
    options = req.get("stream_options")
    if options is not None and not stream:
        raise OpenAIRequestError(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            param="stream_options",
        )
    if options is not None:
        if not isinstance(options, dict):
            raise _bad_type("stream_options", "an object", options)
        include = cast(dict[str, Any], options).get("include_usage")
        if include is not None and not isinstance(include, bool):
            raise _bad_type("stream_options.include_usage", "a boolean", include)


# --------------------------------------------------------------------------- responses


@dataclass(frozen=True)
class _Response:
    status: int
    headers: Mapping[str, str]
    body: bytes
    delay: float = 0.0


@dataclass(frozen=True)
class _Disconnect:
    delay: float = 0.0


@dataclass(frozen=True)
class _Stream:
    """Server-sent events: each item of ``events`` is one ``data:`` line, and whether it
    carries content (text or reasoning; what ``cut_after`` counts)."""

    events: Sequence[tuple[str, bool]]
    chunk_delay: float = 0.0
    cut_after: int | None = None
    delay: float = 0.0
    status: int = 200
    headers: Mapping[str, str] = field(
        default_factory=lambda: {"Content-Type": "text/event-stream; charset=utf-8"}
    )


def _estimate_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))


def _json_response(
    status: int, payload: Any, headers: Mapping[str, str] | None = None, delay: float = 0.0
) -> _Response:
    merged = {"Content-Type": "application/json", "x-request-id": f"req_{secrets.token_hex(16)}"}
    merged.update(headers or {})
    return _Response(status, merged, json.dumps(payload).encode(), delay)


def _error_response(error: OpenAIRequestError) -> _Response:
    return _json_response(error.status, error.envelope(), error.headers)


def _completion(
    body: Mapping[str, Any], reply: TextReply | ToolCallsReply | RefusalReply
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "annotations": [],
    }
    if isinstance(reply, TextReply):
        message["content"] = reply.text
        finish_reason: str = reply.finish_reason
        completion_text = reply.text
    elif isinstance(reply, ToolCallsReply):
        calls = reply.tool_calls()
        message["content"] = reply.text
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments_json()},
            }
            for c in calls
        ]
        finish_reason = reply.finish_reason
        completion_text = (reply.text or "") + "".join(c.name + c.arguments_json() for c in calls)
    else:
        message["refusal"] = reply.refusal
        finish_reason = "stop"
        completion_text = reply.refusal
    usage = reply.usage or Usage(
        prompt_tokens=_estimate_tokens(json.dumps(body.get("messages"))),
        completion_tokens=_estimate_tokens(completion_text),
    )
    return {
        "id": f"chatcmpl-{secrets.token_urlsafe(21)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body["model"],
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        ],
        "usage": usage.to_json(),
        "service_tier": "default",
        "system_fingerprint": "fp_fake",
    }


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _stream(body: Mapping[str, Any], reply: TextReply | ToolCallsReply | RefusalReply) -> _Stream:
    """The reply as the chunks the real API streams (see the module docstring)."""
    full = _completion(body, reply)
    message = full["choices"][0]["message"]
    base = {
        "id": full["id"],
        "object": "chat.completion.chunk",
        "created": full["created"],
        "model": full["model"],
        "service_tier": "default",
        "system_fingerprint": "fp_fake",
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return json.dumps({**base, "choices": [choice]})

    size = 4 if isinstance(reply, RefusalReply) else reply.chunk_chars
    events = [(chunk({"role": "assistant", "content": "", "refusal": None}), False)]
    reasoning = reply.reasoning if isinstance(reply, TextReply) else None
    events += [
        (chunk({"reasoning_content": piece}), True) for piece in _pieces(reasoning or "", size)
    ]
    events += [
        (chunk({"content": piece}), True) for piece in _pieces(message["content"] or "", size)
    ]
    if message["refusal"]:
        events += [(chunk({"refusal": piece}), True) for piece in _pieces(message["refusal"], size)]
    for index, call in enumerate(message.get("tool_calls") or []):
        first = {
            "index": index,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""},
        }
        events.append((chunk({"tool_calls": [first]}), False))
        events += [
            (chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}), False)
            for piece in _pieces(call["function"]["arguments"], size * 4)
        ]
    events.append((chunk({}, full["choices"][0]["finish_reason"]), False))
    options = body.get("stream_options") or {}
    if options.get("include_usage"):
        events.append((json.dumps({**base, "choices": [], "usage": full["usage"]}), False))
    events.append(("[DONE]", False))
    if isinstance(reply, RefusalReply):
        return _Stream(events, delay=reply.delay)
    return _Stream(events, reply.chunk_delay, reply.cut_after, reply.delay)


def _mask_key(key: str) -> str:
    if len(key) <= 8:
        return "*" * len(key)
    return f"{key[:3]}{'*' * (len(key) - 7)}{key[-4:]}"


# --------------------------------------------------------------------------- server


class _HTTPServer(ThreadingHTTPServer):
    fake: FakeOpenAIServer

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN, which can stall for
        # seconds on a machine without DNS; tests only need the bound port.
        TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The default prints to stderr; keep tests quiet but keep the evidence.
        self.fake._record_error(traceback.format_exc())


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.0 closes each connection after one response, so no handler thread
    # lingers on an idle keep-alive socket when the server shuts down.
    protocol_version = "HTTP/1.0"
    server_version = "FakeOpenAI/1.0"
    sys_version = ""
    timeout = 10

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def _serve(self, method: str) -> None:
        fake = cast(_HTTPServer, self.server).fake
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        outcome = fake._handle(method, self.path, headers, raw)
        if outcome.delay > 0 and fake._closing.wait(outcome.delay):
            self.close_connection = True
            return
        if isinstance(outcome, _Disconnect):
            self.close_connection = True
            return
        if isinstance(outcome, _Stream):
            self._serve_stream(fake, outcome)
            return
        try:
            self.send_response(outcome.status)
            for name, value in outcome.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(outcome.body)))
            self.end_headers()
            self.wfile.write(outcome.body)
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (for instance on its own timeout); nothing to answer.
            self.close_connection = True

    def _serve_stream(self, fake: FakeOpenAIServer, stream: _Stream) -> None:
        """Writes each event as it is due; the connection's close ends the body (HTTP/1.0)."""
        self.close_connection = True
        try:
            self.send_response(stream.status)
            for name, value in stream.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.flush()
            content = 0
            for index, (event, is_content) in enumerate(stream.events):
                if index and stream.chunk_delay > 0 and fake._closing.wait(stream.chunk_delay):
                    return
                self.wfile.write(f"data: {event}\n\n".encode())
                self.wfile.flush()
                fake._chunk_written(event)
                if is_content:
                    content += 1
                    if stream.cut_after is not None and content >= stream.cut_after:
                        return
        except (BrokenPipeError, ConnectionResetError):
            return


class FakeOpenAIServer:
    """The OpenAI chat-completions API on 127.0.0.1, answering from a test's script.

    ``api_key=None`` disables the key check.  ``models`` restricts accepted model
    names (404 ``model_not_found`` otherwise) and is what ``GET /v1/models`` lists;
    ``None`` accepts any model and lists :data:`DEFAULT_MODELS`. ``port`` 0 (the
    default) takes a free port; another serves where an example expects a local server.
    """

    def __init__(
        self,
        *,
        api_key: str | None = "sk-test",
        models: Sequence[str] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.api_key = api_key
        self._port = port
        self.models: tuple[str, ...] | None = tuple(models) if models is not None else None
        self._host = host
        self._lock = threading.Lock()
        self._script: deque[Reply | ReplyFactory] = deque()
        self._requests: list[RecordedRequest] = []
        self._errors: list[str] = []
        self._closing = threading.Event()
        self._chunk_times: list[tuple[float, str]] = []
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle

    def start(self) -> Self:
        if self._httpd is not None:
            raise RuntimeError("FakeOpenAIServer is already running")
        self._closing.clear()
        httpd = _HTTPServer((self._host, self._port), _Handler)
        httpd.fake = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="FakeOpenAIServer",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        self._closing.set()  # wakes handlers sleeping on a reply delay
        httpd.shutdown()
        httpd.server_close()  # joins the handler threads
        if thread is not None:
            thread.join()
        self._httpd = None
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- addresses

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError(
                "FakeOpenAIServer is not running; use it as a context manager or call start()"
            )
        return self._httpd.server_port

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    @property
    def base_url(self) -> str:
        """What to pass as ``base_url`` to the SDK."""
        return f"{self.url}/v1"

    # -- script

    def enqueue(self, *replies: Reply | ReplyFactory) -> None:
        """Appends replies, answered in order, one per valid chat-completions request."""
        for reply in replies:
            if not isinstance(reply, _REPLY_TYPES) and not callable(reply):
                raise TypeError(f"not a reply: {reply!r}")
        with self._lock:
            self._script.extend(replies)

    @property
    def pending(self) -> int:
        """How many scripted replies are still unused."""
        with self._lock:
            return len(self._script)

    def assert_script_consumed(self) -> None:
        """Fails when the code under test made fewer calls than the test scripted."""
        with self._lock:
            left = list(self._script)
        if left:
            raise AssertionError(
                f"{len(left)} scripted repl{'y' if len(left) == 1 else 'ies'} never used: {left!r}"
            )

    # -- observations

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received, rejected ones included, oldest first (a snapshot)."""
        with self._lock:
            return list(self._requests)

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """Bodies of the requests that consumed a scripted reply: the model calls a test planned."""
        return [r.json for r in self.requests if r.reply is not None]

    @property
    def chunk_times(self) -> list[tuple[float, str]]:
        """(``time.time()``, event) for every streamed event written, oldest first."""
        with self._lock:
            return list(self._chunk_times)

    def _chunk_written(self, event: str) -> None:
        with self._lock:
            self._chunk_times.append((time.time(), event))

    @property
    def errors(self) -> list[str]:
        """Tracebacks of failures inside the fake itself (each also answered with a 500)."""
        with self._lock:
            return list(self._errors)

    # -- internals

    def _record_error(self, text: str) -> None:
        with self._lock:
            self._errors.append(text)

    def _handle(
        self, method: str, target: str, headers: Mapping[str, str], raw: bytes
    ) -> _Response | _Disconnect | _Stream:
        path = target.split("?", 1)[0]
        parsed: Any = None
        if raw:
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
        reply: Reply | None = None
        try:
            outcome, reply = self._route(method, path, headers, raw, parsed)
        except OpenAIRequestError as error:
            outcome = _error_response(error)
        except Exception:
            text = traceback.format_exc()
            self._record_error(text)
            outcome = _json_response(
                500,
                {
                    "error": {
                        "message": (
                            f"FakeOpenAIServer crashed while handling {method} {path}:\n{text}"
                        ),
                        "type": "server_error",
                        "param": None,
                        "code": "fake_server_crash",
                    }
                },
                {"x-should-retry": "false"},
            )
        status = outcome.status if isinstance(outcome, _Response | _Stream) else None
        record = RecordedRequest(method, path, dict(headers), raw, parsed, status, reply)
        with self._lock:
            self._requests.append(record)
        return outcome

    def _check_auth(self, headers: Mapping[str, str]) -> None:
        if self.api_key is None:
            return
        auth = headers.get("authorization", "")
        scheme, _, key = auth.partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key:
            raise OpenAIRequestError(
                "You didn't provide an API key. You need to provide your API key in an "
                "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                status=401,
            )
        if not secrets.compare_digest(key.encode(), self.api_key.encode()):
            raise OpenAIRequestError(
                f"Incorrect API key provided: {_mask_key(key)}. "
                "You can find your API key in your account settings.",
                status=401,
                code="invalid_api_key",
            )

    def _route(
        self, method: str, path: str, headers: Mapping[str, str], raw: bytes, parsed: Any
    ) -> tuple[_Response | _Disconnect | _Stream, Reply | None]:
        self._check_auth(headers)
        listed = self.models if self.models is not None else DEFAULT_MODELS
        if method == "GET" and path == "/v1/models":
            data = [
                {"id": m, "object": "model", "created": 1700000000, "owned_by": "openai"}
                for m in listed
            ]
            return _json_response(200, {"object": "list", "data": data}), None
        if method == "GET" and path.startswith("/v1/models/"):
            model = path.removeprefix("/v1/models/")
            if self.models is not None and model not in self.models:
                raise OpenAIRequestError(
                    f"The model '{model}' does not exist",
                    status=404,
                    param="model",
                    code="model_not_found",
                )
            return _json_response(
                200, {"id": model, "object": "model", "created": 1700000000, "owned_by": "openai"}
            ), None
        if method == "POST" and path == "/v1/chat/completions":
            return self._chat_completion(raw, parsed)
        raise OpenAIRequestError(f"Invalid URL ({method} {path})", status=404)

    def _chat_completion(
        self, raw: bytes, parsed: Any
    ) -> tuple[_Response | _Disconnect | _Stream, Reply | None]:
        if parsed is None:
            raise OpenAIRequestError(
                "We could not parse the JSON body of your request. (HINT: This likely means "
                "you aren't using your HTTP library correctly. The OpenAI API expects a JSON "
                "payload, but what was sent was not valid JSON.) "
                f"Received {len(raw)} bytes: {raw[:100]!r}"
            )
        validate_chat_request(parsed, models=self.models)
        body = cast(dict[str, Any], parsed)
        with self._lock:
            entry = self._script.popleft() if self._script else None
            number = len(self._requests) + 1
        if entry is None:
            return _json_response(
                500,
                {
                    "error": {
                        "message": (
                            f"FakeOpenAIServer script exhausted: request #{number} "
                            "(POST /v1/chat/completions) arrived but no reply is left to "
                            "answer it. The code under test made more model calls than the "
                            "test enqueued; add replies with server.enqueue(...)."
                        ),
                        "type": "server_error",
                        "param": None,
                        "code": "fake_script_exhausted",
                    }
                },
                {"x-should-retry": "false"},
            ), None
        reply = entry if isinstance(entry, _REPLY_TYPES) else entry(body)
        if not isinstance(reply, _REPLY_TYPES):
            raise TypeError(f"reply factory returned {reply!r}, not a reply")
        return self._render(body, reply), reply

    @staticmethod
    def _render(body: Mapping[str, Any], reply: Reply) -> _Response | _Disconnect | _Stream:
        if isinstance(reply, DisconnectReply):
            return _Disconnect(reply.delay)
        if isinstance(reply, RawReply):
            data = reply.body.encode() if isinstance(reply.body, str) else reply.body
            return _Response(reply.status, dict(reply.headers), data, reply.delay)
        if isinstance(reply, ErrorReply):
            default_type = (
                "server_error"
                if reply.status >= 500
                else "requests"
                if reply.status == 429
                else "invalid_request_error"
            )
            error = OpenAIRequestError(
                reply.message,
                status=reply.status,
                type=reply.type or default_type,
                param=reply.param,
                code=reply.code,
                headers=reply.headers,
            )
            response = _error_response(error)
            return _Response(response.status, response.headers, response.body, reply.delay)
        if body.get("stream"):
            return _stream(body, reply)
        return _json_response(200, _completion(body, reply), delay=reply.delay)
