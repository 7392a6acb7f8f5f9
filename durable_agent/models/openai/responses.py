"""`OpenAIResponsesModel`: OpenAI's Responses API through the official `openai` SDK.

The Responses API is where OpenAI's reasoning models keep their reasoning between turns.
No server-side state is used (`store=False`, no `previous_response_id`): every request
carries the whole conversation, the model's reasoning included as the encrypted items the
API hands out (`include=["reasoning.encrypted_content"]`), so a run resumed a week later on
another worker continues with the reasoning it had.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, cast

from openai import AsyncOpenAI, NotGiven, Omit, not_given, omit
from openai.types.responses import Response, ResponseInputParam
from openai.types.responses.response_create_params import ToolChoice
from openai.types.responses.response_text_config_param import ResponseTextConfigParam
from openai.types.shared_params.reasoning import Reasoning
from pydantic import ValidationError

from ...contract.errors import ModelHTTPError, UnexpectedModelBehavior, UserError
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
    own_thinking,
    parse_arguments,
)
from ..base import DeltaSink, ModelDelta, ModelRequestParameters, ModelSettings, OutputMode
from ._base import OpenAIBase, given

__all__ = ["OpenAIResponsesModel", "map_input"]

PROVIDER_API = "openai"
"""What `ThinkingPart.provider_name` says of reasoning items of this API."""
ITEM_IDS = "openai_item_ids"
"""`ModelResponse.metadata` key: the output items' ids (`msg_...`, and `fc_...` by call
id), sent back with the reasoning items that precede them, as the API pairs them."""
_SCHEMA_NAME_INVALID = re.compile(r"[^a-zA-Z0-9_-]")


def _tool_param(tool: ToolDefinition) -> dict[str, Any]:
    """A function tool; `strict` defaults to true in this API, so it is always sent."""
    param: dict[str, Any] = {
        "type": "function",
        "name": tool.name,
        "parameters": tool.parameters_json_schema,
        "strict": bool(tool.strict),
    }
    if tool.description:
        param["description"] = tool.description
    return param


def _reasoning_items(parts: Sequence[ModelResponsePart]) -> Iterable[tuple[int, dict[str, Any]]]:
    """Our signed reasoning parts back as reasoning items: consecutive parts with one id
    (one per summary paragraph) make one item; another provider's thinking is left out."""
    current: dict[str, Any] | None = None
    for position, part in enumerate(parts):
        if not isinstance(part, ThinkingPart):
            continue
        if current is not None and part.id == current["id"]:
            if part.text:
                current["summary"].append({"type": "summary_text", "text": part.text})
            continue
        if not own_thinking(part, PROVIDER_API) or not part.id:
            current = None
            continue
        current = {
            "type": "reasoning",
            "id": part.id,
            "summary": [{"type": "summary_text", "text": part.text}] if part.text else [],
            "encrypted_content": part.signature,
        }
        yield position, current


def _assistant_items(response: ModelResponse) -> list[dict[str, Any]]:
    """A response as output items, in the order the model produced them."""
    ids: dict[str, str] = {}
    if response.provider_name == PROVIDER_API or response.provider_name is None:
        ids = response.metadata.get(ITEM_IDS) or {}
    reasoning = dict(_reasoning_items(response.parts))
    items: list[dict[str, Any]] = []
    texts: list[str] = []

    def flush_text() -> None:
        if not texts:
            return
        text = "".join(texts)
        texts.clear()
        if ids.get("msg") and reasoning:
            items.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "id": ids["msg"],
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            )
        else:
            items.append({"role": "assistant", "content": text})

    for position, part in enumerate(response.parts):
        if isinstance(part, TextPart):
            texts.append(part.text)
            continue
        flush_text()
        if position in reasoning:
            items.append(reasoning[position])
        elif isinstance(part, ToolCallPart):
            call: dict[str, Any] = {
                "type": "function_call",
                "call_id": part.id,
                "name": part.name,
                # Invalid JSON goes back as the model wrote it, next to the retry prompt.
                "arguments": json_text(part.arguments),
            }
            if reasoning and ids.get(part.id):
                call["id"] = ids[part.id]
            items.append(call)
    flush_text()
    return items


def map_input(messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
    """Our history as Responses API input items (`conversation` puts each call's answer
    right after it); user text as plain strings."""
    items: list[dict[str, Any]] = []
    for turn in conversation(messages):
        if isinstance(turn, AssistantTurn):
            items.extend(_assistant_items(turn.response))
            continue
        for answer in turn.answers:
            items.append(
                {"type": "function_call_output", "call_id": answer.call_id, "output": answer.text}
            )
        items.extend({"role": role, "content": text} for role, text in turn.items)
    return items


class OpenAIResponsesModel(OpenAIBase):
    """A model on the Responses API (`client.responses.create`).

    Function tools, structured output (a JSON schema `text.format`, or the output tool),
    reasoning kept across turns as encrypted reasoning items (`ThinkingPart.signature`,
    its id in `ThinkingPart.id`, summaries as its text when `reasoning={"summary": "auto"}`
    asks for them), streaming of text and reasoning summaries, usage with cached and
    reasoning tokens (`ModelResponse.metadata["reasoning_tokens"]`; `output_tokens`
    includes them). The key comes from `OPENAI_API_KEY` where the request is made and never
    travels; see `OpenAIChatModel` for errors and retries, mapped the same way. `seed` and
    `stop` are not sent: the Responses API has neither.
    """

    what = "a response"

    def __init__(
        self,
        model_name: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        stream: bool = False,
        settings: ModelSettings | None = None,
        client: AsyncOpenAI | None = None,
        reasoning: Reasoning | None = None,
        structured_output: OutputMode = "json_schema",
        provider: str = "openai",
    ) -> None:
        """`reasoning` is the API's reasoning option, e.g. `{"effort": "low", "summary":
        "auto"}`; `provider` names who serves a compatible `base_url` for prices and quotas."""
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
        self.reasoning = reasoning

    def _repr_fields(self) -> str:
        extra = f", reasoning={self.reasoning!r}" if self.reasoning else ""
        return super()._repr_fields() + extra

    # -- requests ----------------------------------------------------------------------------

    def _tools_and_format(
        self, params: ModelRequestParameters
    ) -> tuple[list[dict[str, Any]], ToolChoice | Omit, ResponseTextConfigParam | Omit]:
        tools = [_tool_param(tool) for tool in params.function_tools]
        tool_choice: ToolChoice | Omit = omit
        text: ResponseTextConfigParam | Omit = omit
        if params.output_mode == "json_schema":
            if params.output_schema is None:
                raise UserError("output_mode 'json_schema' needs an output_schema")
            name = _SCHEMA_NAME_INVALID.sub("_", params.output_schema_name)[:64] or "final_result"
            text = {
                "format": {
                    "type": "json_schema",
                    "name": name,
                    "schema": params.output_schema,
                    "strict": False,
                }
            }
        elif params.output_mode == "tool":
            if params.output_tool is None:
                raise UserError("output_mode 'tool' needs an output_tool")
            tools.append(_tool_param(params.output_tool))
            # The run ends only through the output tool: some tool is called every turn.
            tool_choice = "required"
        return tools, tool_choice, text

    async def _create(
        self, messages: list[ModelMessage], params: ModelRequestParameters, *, stream: bool
    ) -> Any:
        settings = merge_settings(self.settings, params.settings)
        tools, tool_choice, text = self._tools_and_format(params)
        client = self.client()
        timeout: float | NotGiven = (
            settings.timeout_seconds if settings.timeout_seconds is not None else not_given
        )
        return await self._guarded(
            client.responses.create(
                model=self._model_name,
                input=cast(ResponseInputParam, map_input(messages)),
                tools=cast(Any, tools) if tools else omit,
                tool_choice=tool_choice,
                text=text,
                reasoning=self.reasoning if self.reasoning is not None else omit,
                include=["reasoning.encrypted_content"],
                store=False,
                temperature=given(settings.temperature),
                top_p=given(settings.top_p),
                max_output_tokens=given(settings.max_tokens),
                timeout=timeout,
                extra_body=settings.extra or None,
                stream=stream,
            )
        )

    async def request(
        self, messages: list[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse:
        response = await self._create(messages, params, stream=False)
        if not isinstance(response, Response):
            raise UnexpectedModelBehavior(
                f"{self._model_name}: the server answered 200 with a body that is not a "
                f"response: {str(response)[:500]!r}"
            )
        return self._checked(response)

    def _checked(self, response: Response) -> ModelResponse:
        try:
            return self._response(response)
        except (AttributeError, TypeError, KeyError, ValidationError) as error:
            # The SDK does not validate bodies, so a 200 missing fields surfaces only here.
            raise UnexpectedModelBehavior(
                f"{self._model_name}: the response is malformed: {error}"
            ) from error

    async def request_stream(
        self, messages: list[ModelMessage], params: ModelRequestParameters, on_delta: DeltaSink
    ) -> ModelResponse:
        """The request with `stream=True`: output text and reasoning (summary or text)
        deltas go to `on_delta` as events arrive; the response is the one
        `response.completed` carries, as a plain request returns it. A stream that ends
        before it raises a retryable `ModelHTTPError`, so the activity's retry asks again."""
        if not self._stream:
            return await self.request(messages, params)
        events = await self._create(messages, params, stream=True)
        final: list[Response] = []

        def take(event: Any) -> None:
            kind = getattr(event, "type", None)
            if kind == "response.output_text.delta":
                on_delta(ModelDelta(kind="text", text=event.delta))
            elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
                on_delta(ModelDelta(kind="thinking", text=event.delta))
            elif kind in ("response.completed", "response.incomplete"):
                final.append(event.response)
            elif kind == "response.failed":
                raise self._failed(event.response)
            elif kind == "error":
                raise self._stream_error(event)

        await self._drain(events, take)
        if not final:
            raise self._cut_off("the response was completed")
        return self._checked(final[-1])

    def _failed(self, response: Response) -> ModelHTTPError:
        """`response.failed`: the server gave up on the answer (retryable unless it says the
        request itself was at fault)."""
        error = response.error
        code = getattr(error, "code", None) or "server_error"
        message = getattr(error, "message", None) or "the response failed"
        status = 429 if "rate_limit" in code else None
        if code.startswith("invalid") or code in ("context_length_exceeded",):
            status = 400
        return self._status_error(status, f"{code}: {message}", body=None, headers=None)

    def _stream_error(self, event: Any) -> ModelHTTPError:
        code = getattr(event, "code", None) or "error"
        message = getattr(event, "message", None) or "the stream ended with an error"
        status = 429 if "rate_limit" in code else None
        return self._status_error(status, f"{code}: {message}", body=None, headers=None)

    # -- reading a response --------------------------------------------------------------------

    def _response(self, response: Response) -> ModelResponse:
        parts: list[ModelResponsePart] = []
        ids: dict[str, str] = {}
        metadata: dict[str, Any] = {"response_id": response.id}
        for item in response.output:
            if item.type == "reasoning":
                summary = (
                    [s.text for s in item.summary] or [c.text for c in item.content or []] or [""]
                )
                for index, text in enumerate(summary):
                    parts.append(
                        ThinkingPart(
                            text=text,
                            id=item.id,
                            signature=item.encrypted_content if index == 0 else None,
                            provider_name=PROVIDER_API,
                        )
                    )
            elif item.type == "message":
                ids["msg"] = item.id
                for content in item.content:
                    if content.type == "output_text":
                        parts.append(TextPart(text=content.text))
                    elif content.type == "refusal":
                        parts.append(TextPart(text=content.refusal))
                        metadata["refusal"] = True
            elif item.type == "function_call":
                if item.id:
                    ids[item.call_id] = item.id
                parts.append(
                    ToolCallPart(
                        id=item.call_id, name=item.name, arguments=parse_arguments(item.arguments)
                    )
                )
            else:
                raise UnexpectedModelBehavior(
                    f"{self._model_name}: unsupported output item {item.type!r}; only function "
                    "tools are sent"
                )
        if ids:
            metadata[ITEM_IDS] = ids
        usage = self._usage(response)
        if response.usage is not None and response.usage.output_tokens_details is not None:
            reasoning_tokens = response.usage.output_tokens_details.reasoning_tokens
            if reasoning_tokens:
                metadata["reasoning_tokens"] = reasoning_tokens
        return ModelResponse(
            parts=parts,
            usage=usage,
            model_name=response.model or self._model_name,
            provider_name=self._provider,
            finish_reason=self._finish_reason(response, parts),
            metadata=metadata,
        )

    @staticmethod
    def _finish_reason(response: Response, parts: list[ModelResponsePart]) -> str:
        """In chat completions' words: `length`, `content_filter`, `tool_calls` or `stop`."""
        if response.status == "incomplete":
            reason = getattr(response.incomplete_details, "reason", None)
            return "length" if reason == "max_output_tokens" else str(reason or "incomplete")
        if any(isinstance(part, ToolCallPart) for part in parts):
            return "tool_calls"
        return "stop"

    @staticmethod
    def _usage(response: Response) -> Usage:
        usage = response.usage
        if usage is None:
            return Usage(requests=1)
        details = usage.input_tokens_details
        return Usage(
            requests=1,
            input_tokens=usage.input_tokens or 0,
            output_tokens=usage.output_tokens or 0,
            total_tokens=usage.total_tokens or 0,
            cache_read_tokens=(getattr(details, "cached_tokens", 0) or 0),
            cache_write_tokens=(getattr(details, "cache_write_tokens", 0) or 0),
        )
