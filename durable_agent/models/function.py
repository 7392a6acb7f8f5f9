"""A model backed by a Python function, for tests that need to react to the conversation."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

from ..messages import ModelMessage, ModelResponse
from ..usage import Usage
from .base import Model, ModelRequestParameters

__all__ = ["AgentInfo", "FunctionModel"]

AgentInfo = ModelRequestParameters
"""What the function is told about the request: tools, output mode and schema, settings."""

ModelFunction = Callable[[list[ModelMessage], AgentInfo], ModelResponse | Awaitable[ModelResponse]]


class FunctionModel(Model):
    def __init__(self, function: ModelFunction, *, name: str | None = None) -> None:
        self.function = function
        self._name = name or f"function:{getattr(function, '__name__', 'model')}"

    @property
    def model_name(self) -> str:
        return self._name

    async def request(
        self, messages: list[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse:
        result = self.function(list(messages), params)
        if inspect.isawaitable(result):
            result = await result
        if not isinstance(result, ModelResponse):
            raise TypeError(
                f"FunctionModel function {self._name!r} returned {type(result).__name__}; "
                "it must return a ModelResponse"
            )
        if result.usage.requests == 0:
            result = result.model_copy(update={"usage": result.usage.add(Usage(requests=1))})
        if result.model_name is None:
            result = result.model_copy(update={"model_name": self._name})
        return result
