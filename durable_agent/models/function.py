"""A model backed by a Python function, for tests that need to react to the conversation."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable

from ..contract.messages import (
    ModelMessage,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ThinkingPart,
)
from ..contract.usage import Usage
from .base import DeltaSink, Model, ModelDelta, ModelRequestParameters

__all__ = ["AgentInfo", "FunctionModel", "ModelFunction", "StreamFunction"]

AgentInfo = ModelRequestParameters
"""What the function is told about the request: tools, output mode and schema, settings."""

ModelFunction = Callable[[list[ModelMessage], AgentInfo], ModelResponse | Awaitable[ModelResponse]]
StreamFunction = Callable[
    [list[ModelMessage], AgentInfo], AsyncIterator[str | ModelDelta | ModelResponse]
]
"""An async generator: it yields text (`str`) and `ModelDelta`s as it "writes", and may end
with the whole `ModelResponse` (else the response is the text and thinking it yielded)."""


class FunctionModel(Model):
    """`FunctionModel(fn)` answers with `fn(messages, info)`; `FunctionModel(stream_function=
    gen)` is a streaming model (`streams` is True) whose deltas are what `gen` yields, so a
    test can script when each piece of text arrives. With both, `request` uses `fn`."""

    def __init__(
        self,
        function: ModelFunction | None = None,
        *,
        stream_function: StreamFunction | None = None,
        name: str | None = None,
    ) -> None:
        if function is None and stream_function is None:
            raise ValueError("FunctionModel needs a function, a stream_function, or both")
        self.function = function
        self.stream_function = stream_function
        named = function if function is not None else stream_function
        self._name = name or f"function:{getattr(named, '__name__', 'model')}"

    @property
    def model_name(self) -> str:
        return self._name

    @property
    def streams(self) -> bool:
        return self.stream_function is not None

    async def request(
        self, messages: list[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse:
        if self.function is None:
            return await self.request_stream(messages, params, lambda _: None)
        result = self.function(list(messages), params)
        if inspect.isawaitable(result):
            result = await result
        if not isinstance(result, ModelResponse):
            raise TypeError(
                f"FunctionModel function {self._name!r} returned {type(result).__name__}; "
                "it must return a ModelResponse"
            )
        return self._completed(result)

    async def request_stream(
        self, messages: list[ModelMessage], params: ModelRequestParameters, on_delta: DeltaSink
    ) -> ModelResponse:
        if self.stream_function is None:
            return await self.request(messages, params)
        deltas: list[ModelDelta] = []
        final: ModelResponse | None = None
        async for item in self.stream_function(list(messages), params):
            if isinstance(item, ModelResponse):
                final = item
                continue
            if isinstance(item, str):
                item = ModelDelta(text=item)
            if not isinstance(item, ModelDelta):
                raise TypeError(
                    f"FunctionModel stream_function {self._name!r} yielded "
                    f"{type(item).__name__}; yield str, ModelDelta or a final ModelResponse"
                )
            deltas.append(item)
            on_delta(item)
        return self._completed(final if final is not None else _assembled(deltas))

    def _completed(self, result: ModelResponse) -> ModelResponse:
        if result.usage.requests == 0:
            result = result.model_copy(update={"usage": result.usage.add(Usage(requests=1))})
        if result.model_name is None:
            result = result.model_copy(update={"model_name": self._name})
        return result


def _assembled(deltas: list[ModelDelta]) -> ModelResponse:
    """The response a stream without a final `ModelResponse` wrote: its thinking, then its
    text."""
    parts: list[ModelResponsePart] = []
    thinking = "".join(d.text for d in deltas if d.kind == "thinking")
    text = "".join(d.text for d in deltas if d.kind == "text")
    if thinking:
        parts.append(ThinkingPart(text=thinking))
    if text:
        parts.append(TextPart(text=text))
    return ModelResponse(parts=parts)
