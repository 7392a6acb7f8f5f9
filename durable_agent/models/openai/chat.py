"""`OpenAIChatModel`: the chat-completions API through the official `openai` SDK.

Any server that speaks chat completions works (OpenAI, Azure-style proxies, vLLM, Ollama,
LiteLLM, Cerebras, ...). Only the model name and settings are configuration that travels;
the API key is read where the request is made, so a Temporal worker uses its own
environment and the key never reaches workflow history, activity inputs, logs or `repr()`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

try:
    from openai import AsyncOpenAI, NotGiven, Omit, not_given, omit
    from openai.types.chat import (
        ChatCompletion,
        ChatCompletionAssistantMessageParam,
        ChatCompletionChunk,
        ChatCompletionFunctionToolParam,
        ChatCompletionMessageFunctionToolCallParam,
        ChatCompletionMessageParam,
        ChatCompletionToolChoiceOptionParam,
        completion_create_params,
    )
    from openai.types.completion_usage import CompletionUsage
    from openai.types.shared_params import FunctionDefinition
except ImportError as _missing:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "OpenAIChatModel needs the `openai` package: pip install 'durable-agent[openai]'"
    ) from _missing
from pydantic import ValidationError

from ...contract.errors import UnexpectedModelBehavior, UserError
from ...contract.messages import (
    ModelMessage,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
)
from ...contract.tools import ToolDefinition
from ...contract.usage import Usage
from .._common import (
    AssistantTurn,
    conversation,
    json_text,
    merge_settings,
    parse_arguments,
    redact_url,
)
from ..base import DeltaSink, ModelDelta, ModelRequestParameters, ModelSettings
from ._base import OpenAIBase, given

__all__ = ["OpenAIChatModel", "map_messages"]

StructuredOutput = Literal["json_schema", "tool"]
_SCHEMA_NAME_INVALID = re.compile(r"[^a-zA-Z0-9_-]")


def _assistant_message(message: ModelResponse) -> ChatCompletionAssistantMessageParam | None:
    """`None` for a response with nothing the API can take back (empty, or thinking only)."""
    texts = [p.text for p in message.parts if isinstance(p, TextPart)]
    calls: list[ChatCompletionMessageFunctionToolCallParam] = [
        {
            "id": p.id,
            "type": "function",
            # Invalid JSON is sent back as the model wrote it, next to the retry prompt about it.
            "function": {"name": p.name, "arguments": json_text(p.arguments)},
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
    """Our history as chat-completions messages (`conversation` puts each call's answer
    right after it). A user prompt is plain text, sent as a string, as the official SDKs
    send it (some compatible servers refuse an array of text parts); thinking is not sent
    back, as the API has no place for it."""
    out: list[ChatCompletionMessageParam] = []
    for turn in conversation(messages):
        if isinstance(turn, AssistantTurn):
            assistant = _assistant_message(turn.response)
            if assistant is not None:
                out.append(assistant)
            continue
        for answer in turn.answers:
            out.append({"role": "tool", "tool_call_id": answer.call_id, "content": answer.text})
        for role, text in turn.items:
            if role == "system":
                out.append({"role": "system", "content": text})
            else:
                out.append({"role": "user", "content": text})
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


class OpenAIChatModel(OpenAIBase):
    """A chat-completions model.

    The client is built on the first request, not here, so an agent can be defined where
    no key exists and the key comes from `OPENAI_API_KEY` in the process that makes the
    request (the worker). An explicit `api_key` stays inside this object: `repr()` omits
    it and pickling drops it. The SDK's own retries are off (`max_retries=0`): under
    Temporal the activity retry policy owns retrying, and a second, hidden retry loop would
    multiply attempts and swallow the server's Retry-After.
    """

    what = "a chat completion"

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
        if not provider:
            raise UserError("OpenAIChatModel(provider=...) must name a provider, e.g. 'openai'")
        super().__init__(
            model_name,
            api_key=api_key,
            base_url=base_url,
            client=client,
            stream=stream,
            provider=provider,
            settings=settings,
            structured_output=structured_output,
        )

    def __repr__(self) -> str:
        return (
            f"OpenAIChatModel(model_name={self._model_name!r}, "
            f"base_url={redact_url(self._base_url)!r}, "
            f"structured_output={self._structured_output!r}, settings={self.settings!r}"
            + (", stream=True)" if self._stream else ")")
        )

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
        settings = merge_settings(self.settings, params.settings)
        tools, tool_choice, response_format = self._tools_and_format(params)
        client = self.client()
        timeout: float | NotGiven = (
            settings.timeout_seconds if settings.timeout_seconds is not None else not_given
        )
        return await self._guarded(
            client.chat.completions.create(
                model=self._model_name,
                messages=map_messages(messages),
                tools=tools or omit,
                tool_choice=tool_choice,
                response_format=response_format,
                temperature=given(settings.temperature),
                max_tokens=given(settings.max_tokens),
                top_p=given(settings.top_p),
                seed=given(settings.seed),
                stop=given(settings.stop),
                timeout=timeout,
                extra_body=settings.extra or None,
                **stream,
            )
        )

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
        assembly = _StreamAssembly(self._model_name, self._provider)
        await self._drain(chunks, lambda chunk: assembly.add(chunk, on_delta))
        if assembly.finish_reason is None:
            # Every complete stream ends its choice with a finish reason; a connection
            # closed before it (a proxy restarting) ends the iteration quietly.
            raise self._cut_off("the model finished its answer")
        return assembly.response()

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
        reasoning = _reasoning(message.model_extra)
        if reasoning:
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
                    arguments=parse_arguments(call.function.arguments),
                )
            )
        return ModelResponse(
            parts=parts,
            usage=self._usage(completion),
            model_name=getattr(completion, "model", None) or self._model_name,
            provider_name=self._provider,
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


def _reasoning(extra: dict[str, Any] | None) -> str | None:
    """The reasoning compatible servers add to a message or a delta: `reasoning_content`
    (DeepSeek, vLLM) or `reasoning` (Cerebras and Groq's gpt-oss, OpenRouter)."""
    for key in ("reasoning_content", "reasoning"):
        value = (extra or {}).get(key)
        if isinstance(value, str) and value:
            return value
    return None


class _StreamAssembly:
    """Chat-completion chunks put back together into one response: content and reasoning in
    order (each piece also handed to the delta sink), tool calls by their index, the finish
    reason, and the usage of the last chunk (`stream_options.include_usage`)."""

    def __init__(self, model_name: str, provider: str) -> None:
        self.model_name = model_name
        self.provider = provider
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
            reasoning = _reasoning(delta.model_extra)
            if reasoning:
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
                    id=call["id"], name=call["name"], arguments=parse_arguments(call["arguments"])
                )
            )
        return ModelResponse(
            parts=parts,
            usage=self.usage or Usage(requests=1),
            model_name=self.served_by or self.model_name,
            provider_name=self.provider,
            finish_reason=self.finish_reason,
            metadata=metadata,
        )
