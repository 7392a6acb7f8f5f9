"""A local HTTP server speaking OpenAI's Responses API (`POST /v1/responses`).

Bodies are shaped as the API reference documents them: a `response` object whose `output`
holds `reasoning`, `message` and `function_call` items, or with `"stream": true` the events
`response.created`, `response.in_progress`, `response.output_item.added`,
`response.content_part.added`, `response.output_text.delta` / `.done`,
`response.reasoning_summary_part.added`, `response.reasoning_summary_text.delta` / `.done`,
`response.function_call_arguments.delta` / `.done`, `response.output_item.done`,
`response.completed` (each with its `sequence_number`); errors in OpenAI's envelope.

Requests are validated as the API refuses them without server-side state (`store: false`):
a reasoning item comes back only with the encrypted content this server issued for it, and
with the item that followed it; every function call has its output and every output its
call; a strict function schema must be strict.
"""

from __future__ import annotations

import base64
import itertools
import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .fake_http import Disconnect, RequestError, Response, ScriptedServer, Stream

__all__ = [
    "FakeResponsesServer",
    "FunctionCall",
    "OutputText",
    "Reasoning",
    "ResponseReply",
    "ResponsesErrorReply",
    "ResponsesUsage",
]

_counter = itertools.count(1)


def _id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}{next(_counter)}"


@dataclass
class OutputText:
    text: str


@dataclass
class Reasoning:
    summary: list[str] = field(default_factory=list)


@dataclass
class FunctionCall:
    name: str
    arguments: dict[str, Any]
    call_id: str | None = None


Item = OutputText | Reasoning | FunctionCall


@dataclass
class ResponsesUsage:
    input_tokens: int = 20
    output_tokens: int = 10
    cached_tokens: int = 0
    reasoning_tokens: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "input_tokens_details": {"cached_tokens": self.cached_tokens},
            "output_tokens": self.output_tokens,
            "output_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
            "total_tokens": self.input_tokens + self.output_tokens,
        }


@dataclass
class ResponseReply:
    output: list[Item]
    usage: ResponsesUsage = field(default_factory=ResponsesUsage)
    incomplete_reason: str | None = None
    chunk_chars: int = 8
    delay: float = 0.0
    cut_after: int | None = None
    fail_with: str | None = None
    """Streamed: a `response.failed` with this error code after `response.created`."""


@dataclass
class ResponsesErrorReply:
    status: int
    message: str
    type: str = "invalid_request_error"
    code: str | None = None
    param: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def rate_limit(cls, retry_after: float = 1) -> ResponsesErrorReply:
        return cls(
            429,
            "Rate limit reached for gpt-5 in organization org-test on tokens per min (TPM): "
            "Limit 30000, Used 30000, Requested 100. Please try again in 1s.",
            "tokens",
            "rate_limit_exceeded",
            headers={"retry-after": f"{retry_after:g}"},
        )

    @classmethod
    def unavailable(cls) -> ResponsesErrorReply:
        return cls(503, "The server is overloaded or not ready yet.", "server_error")


def _error(
    status: int,
    message: str,
    *,
    kind: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> RequestError:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return RequestError(status, body, {"x-request-id": _id("req"), **(headers or {})})


def _strict_problem(schema: Any) -> str | None:
    if not isinstance(schema, dict):
        return None
    if schema.get("type") == "object":
        if schema.get("additionalProperties") is not False:
            return "'additionalProperties' is required to be supplied and to be false"
        properties = schema.get("properties") or {}
        if sorted(schema.get("required") or []) != sorted(properties):
            return (
                "'required' is required to be supplied and to be an array including every "
                "key in properties"
            )
        for value in properties.values():
            if problem := _strict_problem(value):
                return problem
    return None


class FakeResponsesServer(ScriptedServer):
    name = "FakeResponsesServer"

    def __init__(self, api_key: str = "sk-test-responses") -> None:
        super().__init__()
        self.api_key = api_key
        self._encrypted: dict[str, str] = {}
        self._following: dict[str, str] = {}
        """Reasoning item id -> the id of the item the model produced right after it."""
        self._preceding: dict[str, str] = {}
        """Item id -> the reasoning item it followed."""
        self._issued: set[str] = set()

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def crash_body(self, message: str) -> Any:
        return {"error": {"message": message, "type": "server_error", "param": None, "code": None}}

    # -- validation ---------------------------------------------------------------------------

    def route(self, path: str, headers: Mapping[str, str], body: Any) -> None:
        if path != "/v1/responses":
            raise _error(404, f"Invalid URL (POST {path})")
        if headers.get("authorization") != f"Bearer {self.api_key}":
            raise _error(401, "Incorrect API key provided.", code="invalid_api_key")
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            raise _error(
                400,
                "Missing required parameter: 'model'.",
                param="model",
                code="missing_required_parameter",
            )
        for include in body.get("include") or []:
            if include not in (
                "reasoning.encrypted_content",
                "message.output_text.logprobs",
                "file_search_call.results",
            ):
                raise _error(400, f"Invalid value: '{include}'.", param="include")
        tools = body.get("tools") or []
        for index, tool in enumerate(tools):
            if tool.get("type") != "function" or not tool.get("name"):
                raise _error(
                    400,
                    "Missing required parameter: 'tools[0].name'.",
                    param=f"tools[{index}].name",
                )
            if tool.get("strict", True) and (problem := _strict_problem(tool.get("parameters"))):
                raise _error(
                    400,
                    f"Invalid schema for function '{tool['name']}': In context=(), {problem}.",
                    param=f"tools[{index}].parameters",
                    code="invalid_function_parameters",
                )
        if body.get("tool_choice") == "required" and not tools:
            raise _error(
                400,
                "Tool choice 'required' must be specified with 'tools' parameter.",
                param="tool_choice",
            )
        text_format = (body.get("text") or {}).get("format") or {}
        if text_format.get("type") == "json_schema" and not (
            text_format.get("name") and isinstance(text_format.get("schema"), dict)
        ):
            raise _error(
                400, "Missing required parameter: 'text.format.name'.", param="text.format.name"
            )
        items = body.get("input")
        if isinstance(items, list):
            self._check_input(items, stored=body.get("store", True) is not False)

    def _check_input(self, items: list[Any], *, stored: bool) -> None:
        calls: dict[str, int] = {}
        outputs: set[str] = set()
        for index, item in enumerate(items):
            kind = item.get("type", "message")
            item_id = item.get("id")
            if kind == "message":
                if item.get("role") not in ("user", "assistant", "system", "developer"):
                    raise _error(
                        400, f"Invalid value: '{item.get('role')}'.", param=f"input[{index}].role"
                    )
                if item_id is not None and item_id not in self._issued:
                    raise _error(
                        400,
                        f"Invalid 'input[{index}].id': '{item_id}'.",
                        param=f"input[{index}].id",
                    )
            elif kind == "reasoning":
                if not item.get("encrypted_content"):
                    if not stored:
                        raise _error(
                            404,
                            f"Item with id '{item_id}' not found. Items are not persisted when "
                            "`store` is set to false. Try again with `store` set to true, or "
                            "remove this item from your input.",
                            param="input",
                        )
                elif self._encrypted.get(str(item_id)) != item["encrypted_content"]:
                    raise _error(
                        400,
                        f"The encrypted content for item {item_id} could not be verified.",
                        code="invalid_encrypted_content",
                    )
                following = self._following.get(str(item_id))
                next_id = items[index + 1].get("id") if index + 1 < len(items) else None
                if following is not None and next_id != following:
                    raise _error(
                        400,
                        f"Item '{item_id}' of type 'reasoning' was provided without its "
                        "required following item.",
                        param="input",
                    )
            elif kind == "function_call":
                if item_id is not None:
                    if item_id not in self._issued:
                        raise _error(
                            400,
                            f"Invalid 'input[{index}].id': '{item_id}'.",
                            param=f"input[{index}].id",
                        )
                    reasoning = self._preceding.get(item_id)
                    if reasoning is not None and (
                        index == 0 or items[index - 1].get("id") != reasoning
                    ):
                        raise _error(
                            400,
                            f"Item '{item_id}' of type 'function_call' was provided without "
                            f"its required 'reasoning' item: '{reasoning}'.",
                            param="input",
                        )
                calls[str(item.get("call_id"))] = index
            elif kind == "function_call_output":
                if item.get("call_id") not in calls:
                    raise _error(
                        400,
                        "No tool call found for function call output with call_id "
                        f"{item.get('call_id')}.",
                        param="input",
                    )
                outputs.add(str(item["call_id"]))
            else:
                raise _error(400, f"Invalid value: '{kind}'.", param=f"input[{index}].type")
        for call_id in calls:
            if call_id not in outputs:
                raise _error(
                    400, f"No tool output found for function call {call_id}.", param="input"
                )

    # -- replies ------------------------------------------------------------------------------

    def render(self, body: dict[str, Any], reply: Any) -> Response | Stream | Disconnect:
        if isinstance(reply, ResponsesErrorReply):
            error = _error(
                reply.status,
                reply.message,
                kind=reply.type,
                param=reply.param,
                code=reply.code,
                headers=reply.headers,
            )
            return Response.json(error.status, error.body, error.headers)
        if not isinstance(reply, ResponseReply):
            raise TypeError(f"not a reply: {reply!r}")
        encrypted = "reasoning.encrypted_content" in (body.get("include") or [])
        items = [self._item(item, encrypted) for item in reply.output]
        for before, after in itertools.pairwise(items):
            if before["type"] == "reasoning":
                self._following[before["id"]] = after["id"]
                self._preceding[after["id"]] = before["id"]
        response = self._response(body, items, reply)
        if not body.get("stream"):
            return Response.json(200, response, {"x-request-id": _id("req")})
        return Stream(
            self._events(body, response, reply), delay=reply.delay, cut_after=reply.cut_after
        )

    def _item(self, item: Item, encrypted: bool) -> dict[str, Any]:
        if isinstance(item, OutputText):
            data: dict[str, Any] = {
                "id": _id("msg"),
                "type": "message",
                "status": "completed",
                "content": [
                    {"type": "output_text", "annotations": [], "logprobs": [], "text": item.text}
                ],
                "role": "assistant",
            }
        elif isinstance(item, Reasoning):
            data = {
                "id": _id("rs"),
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": text} for text in item.summary],
            }
            if encrypted:
                content = "gAAAAAB" + base64.urlsafe_b64encode(secrets.token_bytes(48)).decode()
                data["encrypted_content"] = content
                self._encrypted[data["id"]] = content
        else:
            data = {
                "id": _id("fc"),
                "type": "function_call",
                "status": "completed",
                "arguments": json.dumps(item.arguments),
                "call_id": item.call_id or _id("call"),
                "name": item.name,
            }
        self._issued.add(data["id"])
        return data

    @staticmethod
    def _response(
        body: dict[str, Any], items: list[dict[str, Any]], reply: ResponseReply
    ) -> dict[str, Any]:
        return {
            "id": _id("resp"),
            "object": "response",
            "created_at": int(time.time()),
            "status": "incomplete" if reply.incomplete_reason else "completed",
            "background": False,
            "error": None,
            "incomplete_details": {"reason": reply.incomplete_reason}
            if reply.incomplete_reason
            else None,
            "instructions": None,
            "max_output_tokens": body.get("max_output_tokens"),
            "model": body["model"],
            "output": items,
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "reasoning": {"effort": (body.get("reasoning") or {}).get("effort"), "summary": None},
            "service_tier": "default",
            "store": body.get("store", True),
            "temperature": body.get("temperature", 1.0),
            "text": body.get("text") or {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "top_p": body.get("top_p", 1.0),
            "truncation": "disabled",
            "usage": reply.usage.to_json(),
            "user": None,
            "metadata": {},
        }

    @staticmethod
    def _events(
        body: dict[str, Any], response: dict[str, Any], reply: ResponseReply
    ) -> list[tuple[str | None, str]]:
        events: list[dict[str, Any]] = []
        size = max(reply.chunk_chars, 1)

        def pieces(text: str) -> list[str]:
            return [text[i : i + size] for i in range(0, len(text), size)]

        opening = {**response, "status": "in_progress", "output": [], "usage": None}
        events.append({"type": "response.created", "response": opening})
        events.append({"type": "response.in_progress", "response": opening})
        if reply.fail_with:
            failed = {
                **opening,
                "status": "failed",
                "error": {
                    "code": reply.fail_with,
                    "message": "The model failed to generate a response.",
                },
            }
            events.append({"type": "response.failed", "response": failed})
        else:
            for index, item in enumerate(response["output"]):
                where = {"item_id": item["id"], "output_index": index}
                if item["type"] == "message":
                    events.append(
                        {
                            "type": "response.output_item.added",
                            "output_index": index,
                            "item": {**item, "status": "in_progress", "content": []},
                        }
                    )
                    text = item["content"][0]["text"]
                    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
                    events.append(
                        {
                            "type": "response.content_part.added",
                            **where,
                            "content_index": 0,
                            "part": part,
                        }
                    )
                    for piece in pieces(text):
                        events.append(
                            {
                                "type": "response.output_text.delta",
                                **where,
                                "content_index": 0,
                                "delta": piece,
                                "logprobs": [],
                            }
                        )
                    events.append(
                        {
                            "type": "response.output_text.done",
                            **where,
                            "content_index": 0,
                            "text": text,
                            "logprobs": [],
                        }
                    )
                    events.append(
                        {
                            "type": "response.content_part.done",
                            **where,
                            "content_index": 0,
                            "part": item["content"][0],
                        }
                    )
                elif item["type"] == "reasoning":
                    events.append(
                        {
                            "type": "response.output_item.added",
                            "output_index": index,
                            "item": {"id": item["id"], "type": "reasoning", "summary": []},
                        }
                    )
                    for s, summary in enumerate(item["summary"]):
                        events.append(
                            {
                                "type": "response.reasoning_summary_part.added",
                                **where,
                                "summary_index": s,
                                "part": {"type": "summary_text", "text": ""},
                            }
                        )
                        for piece in pieces(summary["text"]):
                            events.append(
                                {
                                    "type": "response.reasoning_summary_text.delta",
                                    **where,
                                    "summary_index": s,
                                    "delta": piece,
                                }
                            )
                        events.append(
                            {
                                "type": "response.reasoning_summary_text.done",
                                **where,
                                "summary_index": s,
                                "text": summary["text"],
                            }
                        )
                        events.append(
                            {
                                "type": "response.reasoning_summary_part.done",
                                **where,
                                "summary_index": s,
                                "part": summary,
                            }
                        )
                else:
                    events.append(
                        {
                            "type": "response.output_item.added",
                            "output_index": index,
                            "item": {**item, "status": "in_progress", "arguments": ""},
                        }
                    )
                    for piece in pieces(item["arguments"]):
                        events.append(
                            {
                                "type": "response.function_call_arguments.delta",
                                **where,
                                "delta": piece,
                            }
                        )
                    events.append(
                        {
                            "type": "response.function_call_arguments.done",
                            **where,
                            "arguments": item["arguments"],
                        }
                    )
                events.append(
                    {"type": "response.output_item.done", "output_index": index, "item": item}
                )
            kind = "response.incomplete" if reply.incomplete_reason else "response.completed"
            events.append({"type": kind, "response": response})
        out: list[tuple[str | None, str]] = []
        for number, event in enumerate(events):
            event["sequence_number"] = number
            out.append((event["type"], json.dumps(event)))
        return out
