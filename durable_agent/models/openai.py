"""`OpenAIChatModel`: the chat-completions API through the official `openai` SDK.

Any server that speaks chat completions works (OpenAI, Azure-style proxies, vLLM, Ollama,
LiteLLM, ...). Only the model name and settings are configuration that travels; the API key
is read where the request is made, so a Temporal worker uses its own environment and the
key never reaches workflow history, activity inputs, logs or `repr()`.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import math
import os
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit, urlunsplit

try:
    import openai
    from openai import AsyncOpenAI, NotGiven, Omit, not_given, omit
    from openai.types.chat import (
        ChatCompletion,
        ChatCompletionAssistantMessageParam,
        ChatCompletionChunk,
        ChatCompletionFunctionToolParam,
        ChatCompletionMessageFunctionToolCallParam,
        ChatCompletionMessageParam,
        ChatCompletionToolChoiceOptionParam,
        ChatCompletionToolMessageParam,
        ChatCompletionUserMessageParam,
        completion_create_params,
    )
    from openai.types.chat.chat_completion_content_part_text_param import (
        ChatCompletionContentPartTextParam,
    )
    from openai.types.completion_usage import CompletionUsage
    from openai.types.shared_params import FunctionDefinition
except ImportError as _missing:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "OpenAIChatModel needs the `openai` package: pip install 'durable-agent[openai]'"
    ) from _missing
from pydantic import ValidationError
from pydantic_core import to_json

from ..errors import ModelHTTPError, UnexpectedModelBehavior, UserError
from ..messages import (
    InstructionPart,
    ModelMessage,
    ModelResponse,
    ModelResponsePart,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from ..output import OUTPUT_TOOL_NAME
from ..tools import ToolDefinition
from ..usage import Usage
from .base import DeltaSink, Model, ModelDelta, ModelRequestParameters, ModelSettings, OutputMode

__all__ = ["OpenAIChatModel"]

StructuredOutput = Literal["json_schema", "tool"]
_T = TypeVar("_T")

FIX_ERRORS = "Fix the errors and try again."
"""Ends every retry prompt, so the model reads it as a correction and not as a new task."""

NO_KEY_PLACEHOLDER = "api-key-not-set"
"""Sent to a custom `base_url` when no key is configured: most local servers ignore it, and
the SDK refuses to build a client without some credential."""

_UNANSWERED_OUTPUT_CALL = "Final result processed."
_UNANSWERED_CALL = "This tool call was not run."
_SCHEMA_NAME_INVALID = re.compile(r"[^a-zA-Z0-9_-]")


def _given(value: _T | None) -> _T | Omit:
    """`None` in our settings means "use the server's default": leave the field out."""
    return omit if value is None else value


def _merge_settings(base: ModelSettings | None, override: ModelSettings | None) -> ModelSettings:
    """The agent's settings win field by field over the model's; `extra` is merged."""
    if base is None:
        return override or ModelSettings()
    if override is None:
        return base
    fields = {
        name: value
        for name in ModelSettings.model_fields
        if name != "extra" and (value := getattr(override, name)) is not None
    }
    return base.model_copy(update={**fields, "extra": {**base.extra, **override.extra}})


def _redact_url(url: str | None) -> str | None:
    """Keeps a base URL readable in `repr()` without any user:password it may carry."""
    if not url:
        return url
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, parts.fragment))


def _json_text(value: Any) -> str:
    return value if isinstance(value, str) else to_json(value, fallback=str).decode()


def _retry_text(content: str) -> str:
    return content if content.rstrip().endswith(FIX_ERRORS) else f"{content}\n\n{FIX_ERRORS}"


def _tool_return_text(part: ToolReturnPart) -> str:
    text = _json_text(part.content)
    if part.is_error:
        return f"{part.error_kind or 'error'}: {text}"
    return text


def _user_content(part: UserPromptPart) -> str | list[ChatCompletionContentPartTextParam]:
    if isinstance(part.content, str):
        return part.content
    if not part.content:
        return ""  # the API refuses an empty content array
    return [{"type": "text", "text": item.text} for item in part.content]


def _tool_message(call_id: str, content: str) -> ChatCompletionToolMessageParam:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def _user_message(content: str) -> ChatCompletionUserMessageParam:
    return {"role": "user", "content": content}


def _assistant_message(message: ModelResponse) -> ChatCompletionAssistantMessageParam | None:
    """`None` for a response with nothing the API can take back (empty, or thinking only)."""
    texts = [p.text for p in message.parts if isinstance(p, TextPart)]
    calls: list[ChatCompletionMessageFunctionToolCallParam] = [
        {
            "id": p.id,
            "type": "function",
            # Invalid JSON is sent back as the model wrote it, next to the retry prompt about it.
            "function": {"name": p.name, "arguments": _json_text(p.arguments)},
        }
        for p in message.parts
        if isinstance(p, ToolCallPart)
    ]
    if not texts and not calls:
        return None
    assistant: ChatCompletionAssistantMessageParam = {"role": "assistant"}
    if texts:
        assistant["content"] = "".join(texts)
    if calls:
        assistant["tool_calls"] = calls
    return assistant


def map_messages(messages: Sequence[ModelMessage]) -> list[ChatCompletionMessageParam]:
    """Our history as chat-completions messages.

    The API insists that an assistant turn with tool calls is followed by one tool message
    per call before anything else. Our requests are ordered for people (instructions, then
    returns, then the prompt), so each request's tool answers are moved to its front, and a
    call nothing answered (the output tool of a finished run, or calls left behind by a
    final answer) gets an answer here: the pending retry prompt when there is one, since it
    is about that very turn, otherwise a short note.
    """
    out: list[ChatCompletionMessageParam] = []
    open_calls: dict[str, str] = {}  # id -> tool name, calls of the last assistant turn

    def answer_open(retry: RetryPromptPart | None) -> None:
        for call_id, name in open_calls.items():
            if retry is not None:
                text = _retry_text(retry.content)
            elif name == OUTPUT_TOOL_NAME:
                text = _UNANSWERED_OUTPUT_CALL
            else:
                text = _UNANSWERED_CALL
            out.append(_tool_message(call_id, text))
        open_calls.clear()

    for message in messages:
        if isinstance(message, ModelResponse):
            answer_open(None)
            assistant = _assistant_message(message)
            if assistant is not None:
                out.append(assistant)
                open_calls.update(
                    (p.id, p.name) for p in message.parts if isinstance(p, ToolCallPart)
                )
            continue
        rest: list[ChatCompletionMessageParam] = []
        loose_retries: list[tuple[int, RetryPromptPart]] = []
        for part in message.parts:
            if isinstance(part, InstructionPart | SystemPromptPart):
                rest.append({"role": "system", "content": part.content})
            elif isinstance(part, UserPromptPart):
                rest.append({"role": "user", "content": _user_content(part)})
            elif isinstance(part, ToolReturnPart):
                if open_calls.pop(part.tool_call_id, None) is not None:
                    out.append(_tool_message(part.tool_call_id, _tool_return_text(part)))
                else:  # answers no call the API knows of; keep the information anyway
                    rest.append(
                        _user_message(
                            f"Tool {part.name} (call {part.tool_call_id}) returned: "
                            f"{_tool_return_text(part)}"
                        )
                    )
            elif isinstance(part, RetryPromptPart):
                call_id = part.tool_call_id
                if call_id is not None and open_calls.pop(call_id, None) is not None:
                    out.append(_tool_message(call_id, _retry_text(part.content)))
                else:
                    loose_retries.append((len(rest), part))
                    rest.append(_user_message(_retry_text(part.content)))
        if open_calls:
            # The first loose retry prompt answers the calls it is about instead.
            first = loose_retries[0] if loose_retries else None
            answer_open(first[1] if first else None)
            if first is not None:
                del rest[first[0]]
        out.extend(rest)
    return out


def _tool_param(tool: ToolDefinition) -> ChatCompletionFunctionToolParam:
    function: FunctionDefinition = {
        "name": tool.name,
        "parameters": tool.parameters_json_schema,
    }
    if tool.description:
        function["description"] = tool.description
    if tool.strict is not None:
        function["strict"] = tool.strict
    return {"type": "function", "function": function}


def _parse_arguments(raw: str) -> Any:
    """A JSON object as a dict; anything else stays the raw string.

    Keeping bad JSON as the string lets the tool node's `arguments_dict()` fail on it, which
    sends the model a retry prompt with the parse error instead of failing the run.
    """
    if not raw.strip():
        return {}
    try:
        decoded = json.loads(raw)
    except json.JSONDecodeError:
        return raw
    return decoded if isinstance(decoded, dict) else raw


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    return value.strip() if value else None


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds the server asks us to wait: `retry-after-ms`, else `retry-after` (seconds or
    an HTTP date). `None` when absent or unreadable, so Temporal's own backoff applies."""
    millis = _header(headers, "retry-after-ms")
    if millis is not None:
        try:
            value = float(millis) / 1000
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value >= 0:
            return value
    seconds = _header(headers, "retry-after")
    if seconds is None:
        return None
    try:
        value = float(seconds)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(seconds)
        except (TypeError, ValueError):
            return None
        return max(when.timestamp() - (time.time() if now is None else now), 0.0)
    return value if math.isfinite(value) and value >= 0 else None


class OpenAIChatModel(Model):
    """A chat-completions model.

    The client is built on the first request, not here, so an agent can be defined where
    no key exists and the key comes from `OPENAI_API_KEY` in the process that makes the
    request (the worker). An explicit `api_key` stays inside this object: `repr()` omits
    it and pickling drops it. The SDK's own retries are off (`max_retries=0`): under
    Temporal the activity retry policy owns retrying, and a second, hidden retry loop would
    multiply attempts and swallow the server's Retry-After.
    """

    def __init__(
        self,
        model_name: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        settings: ModelSettings | None = None,
        client: AsyncOpenAI | None = None,
        structured_output: StructuredOutput = "json_schema",
        stream: bool = False,
        provider: str = "openai",
    ) -> None:
        """`stream=True` makes this a streaming model: a run that wants deltas (in-process
        with a sink, on Temporal unless the run turns them off) gets the text and reasoning
        as the server sends them; the response is the same either way. `provider` names who
        serves a compatible `base_url` (e.g. `groq`) for prices and quotas; it stays
        `openai` unless given, whatever the URL."""
        if not model_name:
            raise UserError("OpenAIChatModel needs a model name, e.g. 'gpt-4o-mini'")
        if structured_output not in ("json_schema", "tool"):
            raise UserError(
                f"structured_output must be 'json_schema' or 'tool', got {structured_output!r}"
            )
        self._model_name = model_name
        self._base_url = base_url
        self._api_key = api_key
        self.settings = settings
        self._structured_output: StructuredOutput = structured_output
        self._stream = stream
        if not provider:
            raise UserError("OpenAIChatModel(provider=...) must name a provider, e.g. 'openai'")
        self._provider = provider
        # A client of the caller's keeps its settings and connection pool, but never its own
        # retry loop, for the same reason ours has none.
        self._given_client = client.with_options(max_retries=0) if client is not None else None
        self._client: AsyncOpenAI | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def provider(self) -> str:
        return self._provider

    @property
    def structured_output_mode(self) -> OutputMode:
        return self._structured_output

    @property
    def streams(self) -> bool:
        return self._stream

    @property
    def base_url(self) -> str | None:
        return self._base_url or os.environ.get("OPENAI_BASE_URL") or None

    def __repr__(self) -> str:
        return (
            f"OpenAIChatModel(model_name={self._model_name!r}, "
            f"base_url={_redact_url(self._base_url)!r}, "
            f"structured_output={self._structured_output!r}, settings={self.settings!r}"
            + (", stream=True)" if self._stream else ")")
        )

    def __getstate__(self) -> dict[str, Any]:
        """Pickles configuration only: the receiving process supplies its own key and client."""
        state = dict(self.__dict__)
        state.update(_api_key=None, _given_client=None, _client=None, _client_loop=None)
        return state

    # -- client ------------------------------------------------------------------------------

    def client(self) -> AsyncOpenAI:
        """The SDK client, built on first use from this process's environment.

        Built per event loop: the HTTP connection pool belongs to the loop that opened it,
        and a model reused under a new loop (a second `asyncio.run`) must not touch it.
        """
        if self._given_client is not None:
            return self._given_client
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            api_key = self._api_key or os.environ.get("OPENAI_API_KEY") or None
            base_url = self.base_url
            if api_key is None and base_url is None:
                raise UserError(
                    f"OpenAIChatModel({self._model_name!r}) has no API key: set OPENAI_API_KEY "
                    "in the environment of the process that runs model requests (the worker), "
                    "or pass api_key=...; for a server without keys set OPENAI_BASE_URL or "
                    "pass base_url=..."
                )
            self._client = AsyncOpenAI(
                api_key=api_key or NO_KEY_PLACEHOLDER, base_url=base_url, max_retries=0
            )
            self._client_loop = loop
        return self._client

    # -- requests ----------------------------------------------------------------------------

    def _tools_and_format(
        self, params: ModelRequestParameters
    ) -> tuple[
        list[ChatCompletionFunctionToolParam],
        ChatCompletionToolChoiceOptionParam | Omit,
        completion_create_params.ResponseFormat | Omit,
    ]:
        tools = [_tool_param(tool) for tool in params.function_tools]
        tool_choice: ChatCompletionToolChoiceOptionParam | Omit = omit
        response_format: completion_create_params.ResponseFormat | Omit = omit
        if params.output_mode == "json_schema":
            if params.output_schema is None:
                raise UserError("output_mode 'json_schema' needs an output_schema")
            name = _SCHEMA_NAME_INVALID.sub("_", params.output_schema_name)[:64] or "final_result"
            response_format = {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": params.output_schema, "strict": False},
            }
        elif params.output_mode == "tool":
            if params.output_tool is None:
                raise UserError("output_mode 'tool' needs an output_tool")
            tools.append(_tool_param(params.output_tool))
            # Text is not a valid final answer in this mode: the run ends only through the
            # output tool, so the model must call some tool on every turn.
            tool_choice = "required"
        return tools, tool_choice, response_format

    async def _create(
        self, messages: list[ModelMessage], params: ModelRequestParameters, **stream: Any
    ) -> Any:
        """One chat-completions call (streamed when `stream` holds `stream=True`), with the
        SDK's errors turned into ours."""
        settings = _merge_settings(self.settings, params.settings)
        tools, tool_choice, response_format = self._tools_and_format(params)
        client = self.client()
        timeout: float | NotGiven = (
            settings.timeout_seconds if settings.timeout_seconds is not None else not_given
        )
        try:
            return await client.chat.completions.create(
                model=self._model_name,
                messages=map_messages(messages),
                tools=tools or omit,
                tool_choice=tool_choice,
                response_format=response_format,
                temperature=_given(settings.temperature),
                max_tokens=_given(settings.max_tokens),
                top_p=_given(settings.top_p),
                seed=_given(settings.seed),
                stop=_given(settings.stop),
                timeout=timeout,
                extra_body=settings.extra or None,
                **stream,
            )
        except openai.APIStatusError as error:
            raise self._status_error(error) from error
        except openai.APIConnectionError as error:
            raise self._connection_error(error) from error
        except (openai.APIResponseValidationError, json.JSONDecodeError) as error:
            raise UnexpectedModelBehavior(
                f"{self._model_name}: the server answered 200 with a body that is not a chat "
                f"completion: {error}"
            ) from error

    def _connection_error(self, error: BaseException) -> ModelHTTPError:
        """A lost or refused connection: retryable (`status_code` None)."""
        cause = error.__cause__
        detail = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
        message = getattr(error, "message", None) or str(error) or type(error).__name__
        return ModelHTTPError(f"{message}{detail}", status_code=None, model_name=self._model_name)

    async def request(
        self, messages: list[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse:
        completion = await self._create(messages, params)
        if not isinstance(completion, ChatCompletion):
            raise UnexpectedModelBehavior(
                f"{self._model_name}: the server answered 200 with a body that is not a chat "
                f"completion: {str(completion)[:500]!r}"
            )
        try:
            return self._response(completion)
        except (AttributeError, TypeError, ValidationError) as error:
            # The SDK does not validate bodies, so a 200 missing fields surfaces only here.
            raise UnexpectedModelBehavior(
                f"{self._model_name}: the chat completion is malformed: {error}"
            ) from error

    async def request_stream(
        self, messages: list[ModelMessage], params: ModelRequestParameters, on_delta: DeltaSink
    ) -> ModelResponse:
        """The request with `stream=True`: content and reasoning deltas go to `on_delta` as
        chunks arrive; tool calls and usage (`include_usage`) are assembled from the chunks
        into the same `ModelResponse` a plain request gives. A stream cut off midway raises
        a retryable `ModelHTTPError`, so the activity's retry asks again."""
        if not self._stream:
            return await self.request(messages, params)
        chunks = await self._create(
            messages, params, stream=True, stream_options={"include_usage": True}
        )
        assembly = _StreamAssembly(self._model_name)
        try:
            async for chunk in chunks:
                assembly.add(chunk, on_delta)
        except openai.APIStatusError as error:
            raise self._status_error(error) from error
        except openai.APIConnectionError as error:  # the SDK wraps transport errors so
            raise self._connection_error(error) from error
        except openai.APIError as error:
            # An `error` event in the stream: the server gave up mid-answer; ask again.
            raise ModelHTTPError(
                f"the stream ended with an error: {error.message}",
                status_code=None,
                model_name=self._model_name,
            ) from error
        except (AttributeError, TypeError, ValidationError) as error:
            raise UnexpectedModelBehavior(
                f"{self._model_name}: a streamed chunk is malformed: {error}"
            ) from error
        if assembly.finish_reason is None:
            # Every complete stream ends its choice with a finish reason; a connection
            # closed before it (a proxy restarting) ends the iteration quietly.
            raise ModelHTTPError(
                "the stream ended before the model finished its answer",
                status_code=None,
                model_name=self._model_name,
            )
        return assembly.response()

    def _status_error(self, error: openai.APIStatusError) -> ModelHTTPError:
        body = error.body
        message = error.message
        if isinstance(body, dict) and isinstance(body.get("message"), str):
            message = body["message"]
        headers = error.response.headers
        mapped = ModelHTTPError(
            message,
            status_code=error.status_code,
            model_name=self._model_name,
            body=body,
            retry_after=parse_retry_after(headers),
        )
        # OpenAI's explicit hint overrides the status-based guess, as the SDK itself does.
        should_retry = (headers.get("x-should-retry") or "").strip().lower()
        if should_retry in ("true", "false"):
            mapped.retryable = should_retry == "true"
        return mapped

    def _response(self, completion: ChatCompletion) -> ModelResponse:
        choices = getattr(completion, "choices", None)
        if not choices:
            raise UnexpectedModelBehavior(
                f"{self._model_name}: the chat completion has no choices: "
                f"{completion.model_dump_json()[:500]}"
            )
        choice = choices[0]
        message = choice.message
        parts: list[ModelResponsePart] = []
        metadata: dict[str, Any] = {}
        reasoning = (message.model_extra or {}).get("reasoning_content")
        if isinstance(reasoning, str) and reasoning:
            parts.append(ThinkingPart(text=reasoning))
        if message.content:
            parts.append(TextPart(text=message.content))
        elif message.refusal:
            parts.append(TextPart(text=message.refusal))
            metadata["refusal"] = True
        for call in message.tool_calls or []:
            if call.type != "function":
                raise UnexpectedModelBehavior(
                    f"{self._model_name}: unsupported tool call type {call.type!r}; only "
                    "function tools are sent"
                )
            parts.append(
                ToolCallPart(
                    id=call.id,
                    name=call.function.name,
                    arguments=_parse_arguments(call.function.arguments),
                )
            )
        return ModelResponse(
            parts=parts,
            usage=self._usage(completion),
            model_name=getattr(completion, "model", None) or self._model_name,
            finish_reason=choice.finish_reason,
            metadata=metadata,
        )

    @staticmethod
    def _usage(completion: ChatCompletion) -> Usage:
        if completion.usage is None:
            return Usage(requests=1)
        return OpenAIChatModel._usage_of(completion.usage)

    @staticmethod
    def _usage_of(usage: CompletionUsage) -> Usage:
        details = usage.prompt_tokens_details
        return Usage(
            requests=1,
            input_tokens=usage.prompt_tokens or 0,
            output_tokens=usage.completion_tokens or 0,
            total_tokens=usage.total_tokens or 0,
            cache_read_tokens=(details.cached_tokens or 0) if details is not None else 0,
        )


class _StreamAssembly:
    """Chat-completion chunks put back together into one response: content and reasoning in
    order (each piece also handed to the delta sink), tool calls by their index, the finish
    reason, and the usage of the last chunk (`stream_options.include_usage`)."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self.served_by: str | None = None
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.finish_reason: str | None = None
        self.usage: Usage | None = None

    def add(self, chunk: ChatCompletionChunk, on_delta: DeltaSink) -> None:
        self.served_by = chunk.model or self.served_by
        if chunk.usage is not None:
            self.usage = OpenAIChatModel._usage_of(chunk.usage)
        for choice in chunk.choices[:1]:
            delta = choice.delta
            extra = delta.model_extra or {}
            reasoning = extra.get("reasoning_content") or extra.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                self.reasoning.append(reasoning)
                on_delta(ModelDelta(kind="thinking", text=reasoning))
            if delta.content:
                self.text.append(delta.content)
                on_delta(ModelDelta(kind="text", text=delta.content))
            if delta.refusal:
                self.refusal.append(delta.refusal)
            for call in delta.tool_calls or []:
                entry = self.calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                if call.type not in (None, "function"):
                    raise UnexpectedModelBehavior(
                        f"{self.model_name}: unsupported tool call type {call.type!r}; only "
                        "function tools are sent"
                    )
                if call.id:
                    entry["id"] = call.id
                if call.function is not None:
                    entry["name"] += call.function.name or ""
                    entry["arguments"] += call.function.arguments or ""
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason

    def response(self) -> ModelResponse:
        parts: list[ModelResponsePart] = []
        metadata: dict[str, Any] = {}
        if self.reasoning:
            parts.append(ThinkingPart(text="".join(self.reasoning)))
        if self.text:
            parts.append(TextPart(text="".join(self.text)))
        elif self.refusal:
            parts.append(TextPart(text="".join(self.refusal)))
            metadata["refusal"] = True
        for _, call in sorted(self.calls.items()):
            parts.append(
                ToolCallPart(
                    id=call["id"], name=call["name"], arguments=_parse_arguments(call["arguments"])
                )
            )
        return ModelResponse(
            parts=parts,
            usage=self.usage or Usage(requests=1),
            model_name=self.served_by or self.model_name,
            finish_reason=self.finish_reason,
            metadata=metadata,
        )
