"""`AnthropicModel`: Anthropic's Messages API through the official `anthropic` SDK.

Messages and tool use, structured output through the output tool, streaming of text and
thinking, extended thinking whose blocks (and their signatures, or redacted data) are kept
in the history and sent back unchanged, and prompt caching. A configured client of the
same SDK may be passed in (`AsyncAnthropicBedrock`, `AsyncAnthropicVertex`, ...); otherwise
the key comes from `ANTHROPIC_API_KEY` in the process that makes the request (the worker)
and never reaches workflow history, activity inputs, logs, `repr()` or a pickle. How our
messages map to the API's shapes and its content blocks back is in `anthropic_messages`.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, cast

try:
    import anthropic
    from anthropic import AsyncAnthropic, NotGiven, not_given, omit
except ImportError as _missing:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "AnthropicModel needs the `anthropic` package: pip install 'durable-agent[anthropic]'"
    ) from _missing
from pydantic import ValidationError

from ..contract.errors import AgentError, UnexpectedModelBehavior, UserError
from ..contract.messages import ModelMessage, ModelResponse
from ..contract.tools import OUTPUT_TOOL_NAME, ToolDefinition
from ._common import NO_KEY_PLACEHOLDER, SDKModel, merge_settings, parse_arguments
from .anthropic_messages import REDACTED, map_messages, response_parts, tool_param, usage_of
from .base import DeltaSink, ModelDelta, ModelRequestParameters, ModelSettings, OutputMode

if TYPE_CHECKING:
    from anthropic.types import ThinkingConfigParam

__all__ = ["DEFAULT_MAX_TOKENS", "AnthropicModel", "map_messages"]

DEFAULT_MAX_TOKENS = 4096
"""The Messages API needs `max_tokens`; this unless the model or its settings say."""
CACHE = {"type": "ephemeral"}
_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}
"""Status of an `error` event in a stream, which arrives after a 200."""


class AnthropicModel(SDKModel[Any]):
    """A Claude model on the Messages API.

    `max_tokens` bounds each answer (the API needs one: `ModelSettings.max_tokens`, else
    this, else 4096, raised above a thinking budget). `thinking` turns extended thinking
    on: a budget in tokens, or the API's own `thinking` object (`{"type": "adaptive"}`);
    its blocks come back as `ThinkingPart`s with their signatures and go back unchanged.
    `prompt_caching=True` marks the system prompt, the tools and the conversation so far
    for Anthropic's prompt cache (`Usage.cache_read_tokens` / `cache_write_tokens` say
    what it saved). `client` is a configured client of the `anthropic` SDK (a Bedrock or
    Vertex one included); its own retries are turned off, as ours are, since the activity
    retry policy owns retrying. `temperature` and `top_p` settings go in the request body.
    """

    key_variable = "ANTHROPIC_API_KEY"
    base_url_variable = "ANTHROPIC_BASE_URL"

    def __init__(
        self,
        model_name: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: Any = None,
        stream: bool = False,
        max_tokens: int | None = None,
        settings: ModelSettings | None = None,
        thinking: int | ThinkingConfigParam | None = None,
        prompt_caching: bool = False,
        provider: str = "anthropic",
    ) -> None:
        if max_tokens is not None and max_tokens < 1:
            raise UserError(f"AnthropicModel(max_tokens=...) must be at least 1, got {max_tokens}")
        if isinstance(thinking, bool):
            raise UserError("thinking takes a budget in tokens or a thinking object, not a bool")
        if isinstance(thinking, int):
            if thinking < 1024:
                raise UserError(f"a thinking budget must be at least 1024 tokens, got {thinking}")
            thinking = {"type": "enabled", "budget_tokens": thinking}
        super().__init__(
            model_name,
            api_key=api_key,
            base_url=base_url,
            client=client,
            stream=stream,
            provider=provider,
            settings=settings,
        )
        self.max_tokens = max_tokens
        self.thinking: ThinkingConfigParam | None = thinking
        self.prompt_caching = prompt_caching

    @property
    def structured_output_mode(self) -> OutputMode:
        return "tool"

    def _repr_fields(self) -> str:
        extra = "".join(
            f", {name}={value!r}"
            for name, value in (
                ("max_tokens", self.max_tokens),
                ("thinking", self.thinking),
                ("prompt_caching", self.prompt_caching or None),
            )
            if value is not None
        )
        return super()._repr_fields() + extra

    def client(self) -> Any:
        """The SDK client: the caller's, or an `AsyncAnthropic` built on first use from this
        process's environment (per event loop)."""

        def build(api_key: str | None, base_url: str | None) -> AsyncAnthropic:
            if api_key is None and not os.environ.get("ANTHROPIC_AUTH_TOKEN"):
                if base_url is None:
                    raise self._no_key()
                api_key = NO_KEY_PLACEHOLDER
            # The key as the API documents it (`x-api-key`) as well as the SDK's bearer token,
            # so gateways and proxies that know only the first accept it too.
            headers = {"x-api-key": api_key} if api_key is not None else None
            return AsyncAnthropic(
                api_key=api_key, base_url=base_url, max_retries=0, default_headers=headers
            )

        return self._client_for_loop(build)

    # -- requests ----------------------------------------------------------------------------

    @property
    def _thinks(self) -> bool:
        return self.thinking is not None and self.thinking.get("type") != "disabled"

    def _arguments(
        self, messages: list[ModelMessage], params: ModelRequestParameters
    ) -> dict[str, Any]:
        settings = merge_settings(self.settings, params.settings)
        system, mapped = map_messages(messages)
        tools = [tool_param(tool) for tool in params.function_tools]
        tool_choice: dict[str, Any] | None = None
        if params.output_mode != "text":
            tools.append(tool_param(self._output_tool(params)))
            # Text is not a final answer in this mode: the run ends only through the output
            # tool, so some tool must be called every turn. Thinking allows only "auto".
            tool_choice = None if self._thinks else {"type": "any"}
        budget = int(cast(Any, self.thinking or {}).get("budget_tokens") or 0)
        max_tokens = settings.max_tokens or self.max_tokens or DEFAULT_MAX_TOKENS
        if budget and max_tokens <= budget:
            max_tokens = budget + DEFAULT_MAX_TOKENS
        extra = {
            key: value
            for key, value in (("temperature", settings.temperature), ("top_p", settings.top_p))
            if value is not None
        }
        extra.update(settings.extra)
        system_blocks: list[dict[str, Any]] = [{"type": "text", "text": text} for text in system]
        if self.prompt_caching:
            last: list[dict[str, Any]] = mapped[-1]["content"] if mapped else []
            for blocks in (system_blocks, tools, last):
                if blocks and blocks[-1].get("type") not in ("thinking", REDACTED):
                    blocks[-1]["cache_control"] = dict(CACHE)
        timeout: float | NotGiven = (
            settings.timeout_seconds if settings.timeout_seconds is not None else not_given
        )
        return {
            "model": self._model_name,
            "max_tokens": max_tokens,
            "messages": mapped,
            "system": system_blocks or omit,
            "tools": tools or omit,
            "tool_choice": tool_choice or omit,
            "thinking": self.thinking if self.thinking is not None else omit,
            "stop_sequences": settings.stop or omit,
            "timeout": timeout,
            "extra_body": extra or None,
        }

    @staticmethod
    def _output_tool(params: ModelRequestParameters) -> ToolDefinition:
        """The output tool; for a JSON schema output (a fallback chain whose first model
        asked for one) a tool of that schema, whose call is read back as the JSON text."""
        if params.output_mode == "tool":
            if params.output_tool is None:
                raise UserError("output_mode 'tool' needs an output_tool")
            return params.output_tool
        if params.output_schema is None:
            raise UserError("output_mode 'json_schema' needs an output_schema")
        return ToolDefinition(
            name=OUTPUT_TOOL_NAME,
            description=f"Return the final result as {params.output_schema_name}.",
            parameters_json_schema=params.output_schema,
        )

    async def _create(
        self, messages: list[ModelMessage], params: ModelRequestParameters, *, stream: bool
    ) -> Any:
        arguments = self._arguments(messages, params)
        return await self._guarded(self.client().messages.create(**arguments, stream=stream))

    def _error(self, error: Exception) -> AgentError | None:
        if isinstance(error, anthropic.APIStatusError):
            body = error.body
            inner = body.get("error") if isinstance(body, dict) else None
            message = error.message
            status: int | None = error.status_code
            if isinstance(inner, dict):
                message = str(inner.get("message") or message)
                if status is None or status < 400:  # an `error` event inside a 200 stream
                    status = _ERROR_STATUS.get(str(inner.get("type")))
            headers = error.response.headers
            return self._status_error(status, message, body=body, headers=headers)
        if isinstance(error, anthropic.APIConnectionError):
            return self._connection_error(error)
        if isinstance(error, anthropic.APIResponseValidationError | json.JSONDecodeError):
            return UnexpectedModelBehavior(
                f"{self._model_name}: the server answered 200 with a body that is not a "
                f"message: {error}"
            )
        return None

    async def request(
        self, messages: list[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse:
        message = await self._create(messages, params, stream=False)
        try:
            blocks = [block.model_dump(mode="json") for block in message.content]
            return self._response(
                blocks,
                params,
                served_by=message.model,
                message_id=message.id,
                stop_reason=message.stop_reason,
                usage=message.usage.model_dump(mode="json"),
            )
        except (AttributeError, TypeError, KeyError, ValidationError) as error:
            raise UnexpectedModelBehavior(
                f"{self._model_name}: the message is malformed: {error}"
            ) from error

    async def request_stream(
        self, messages: list[ModelMessage], params: ModelRequestParameters, on_delta: DeltaSink
    ) -> ModelResponse:
        """The request with `stream=True`: text and thinking deltas go to `on_delta` as the
        events arrive, and the blocks are put back together into the response a plain
        request gives. A stream that ends before `message_stop` raises a retryable
        `ModelHTTPError`, so the activity's retry asks again."""
        if not self._stream:
            return await self.request(messages, params)
        events = await self._create(messages, params, stream=True)
        assembly = _StreamAssembly()
        await self._drain(events, lambda event: assembly.add(event, on_delta))
        if not assembly.stopped:
            raise self._cut_off("message_stop")
        return self._response(
            assembly.blocks(),
            params,
            served_by=assembly.model,
            message_id=assembly.message_id,
            stop_reason=assembly.stop_reason,
            usage=assembly.usage,
        )

    # -- reading a message ---------------------------------------------------------------------

    def _response(
        self,
        blocks: list[dict[str, Any]],
        params: ModelRequestParameters,
        *,
        served_by: str | None,
        message_id: str | None,
        stop_reason: str | None,
        usage: dict[str, Any],
    ) -> ModelResponse:
        parts = response_parts(blocks, params.output_mode, self._model_name)
        metadata: dict[str, Any] = {"message_id": message_id} if message_id else {}
        if stop_reason and stop_reason not in _FINISH:
            metadata["stop_reason"] = stop_reason
        return ModelResponse(
            parts=parts,
            usage=usage_of(usage),
            model_name=served_by or self._model_name,
            provider_name=self._provider,
            finish_reason=_FINISH.get(stop_reason or "", stop_reason),
            metadata=metadata,
        )


class _StreamAssembly:
    """The Messages API's stream events put back together: `message_start` (the id, the
    model, the input usage), each block from `content_block_start` through its deltas to
    `content_block_stop`, `message_delta` (the stop reason and the output usage) and
    `message_stop`, after which the message is whole."""

    def __init__(self) -> None:
        self.model: str | None = None
        self.message_id: str | None = None
        self.stop_reason: str | None = None
        self.usage: dict[str, Any] = {}
        self.stopped = False
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}

    def add(self, event: Any, on_delta: DeltaSink) -> None:
        kind = event.type
        if kind == "message_start":
            self.model = event.message.model
            self.message_id = event.message.id
            self.usage = event.message.usage.model_dump(mode="json")
        elif kind == "content_block_start":
            self._blocks[event.index] = event.content_block.model_dump(mode="json")
            if event.content_block.type == "tool_use":
                self._json[event.index] = []
        elif kind == "content_block_delta":
            block = self._blocks[event.index]
            delta = event.delta
            if delta.type == "text_delta":
                block["text"] = block.get("text", "") + delta.text
                on_delta(ModelDelta(kind="text", text=delta.text))
            elif delta.type == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta.thinking
                on_delta(ModelDelta(kind="thinking", text=delta.thinking))
            elif delta.type == "signature_delta":
                block["signature"] = delta.signature
            elif delta.type == "input_json_delta":
                self._json[event.index].append(delta.partial_json)
        elif kind == "content_block_stop":
            pieces = self._json.pop(event.index, None)
            if pieces is not None:
                self._blocks[event.index]["input"] = parse_arguments("".join(pieces))
        elif kind == "message_delta":
            self.stop_reason = event.delta.stop_reason or self.stop_reason
            self.usage.update(
                {k: v for k, v in event.usage.model_dump(mode="json").items() if v is not None}
            )
        elif kind == "message_stop":
            self.stopped = True

    def blocks(self) -> list[dict[str, Any]]:
        return [block for _, block in sorted(self._blocks.items())]
