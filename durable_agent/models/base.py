"""The interface every model provider implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..contract.messages import ModelMessage, ModelResponse
from ..contract.tools import ToolDefinition

__all__ = [
    "DeltaSink",
    "Model",
    "ModelDelta",
    "ModelRequestParameters",
    "ModelSettings",
    "OutputMode",
]

OutputMode = Literal["text", "json_schema", "tool"]


class ModelDelta(BaseModel):
    """A piece of a response as a streaming model produces it: text the model is writing,
    or its thinking (reasoning) text. The response a streamed request returns is the whole
    truth; deltas are for showing it while it is written."""

    kind: Literal["text", "thinking"] = "text"
    text: str


DeltaSink = Callable[[ModelDelta], None]
"""Where a streaming request hands its deltas, in order. It must not block: the activity's
sink buffers them for a batched send, the in-process sink emits stream records."""


class ModelSettings(BaseModel):
    """Provider-neutral sampling settings; `extra` passes provider-specific ones through."""

    temperature: float | None = None
    max_tokens: int | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: list[str] | None = None
    timeout_seconds: float | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class ModelRequestParameters(BaseModel):
    """Everything about a request that is not the conversation itself."""

    function_tools: list[ToolDefinition] = Field(default_factory=list)
    output_mode: OutputMode = "text"
    output_schema: dict[str, Any] | None = None
    output_schema_name: str = "final_result"
    output_tool: ToolDefinition | None = None
    settings: ModelSettings | None = None


class Model(ABC):
    """A chat model. Implementations hold no per-run state: the history is the whole input."""

    @property
    @abstractmethod
    def model_name(self) -> str: ...

    @property
    def provider(self) -> str | None:
        """Who serves this model (`openai`, `anthropic`, ...): with `model_name` it keys
        prices and quotas. `None` for models that are not a provider's (test and function
        models); a provider class answers its own name unless the user named another."""
        return None

    @property
    def structured_output_mode(self) -> OutputMode:
        """How this model should be asked for structured output (`json_schema` or `tool`)."""
        return "json_schema"

    @property
    def streams(self) -> bool:
        """Whether `request_stream` hands over deltas as they arrive (off by default: a
        model that does not stream answers `request_stream` with `request`)."""
        return False

    @abstractmethod
    async def request(
        self, messages: list[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse: ...

    async def request_stream(
        self, messages: list[ModelMessage], params: ModelRequestParameters, on_delta: DeltaSink
    ) -> ModelResponse:
        """The same request, with its text and thinking handed to `on_delta` as they are
        produced; returns the whole response, as `request` does."""
        return await self.request(messages, params)

    async def answer(self, ask: Callable[[Model], Awaitable[ModelResponse]]) -> ModelResponse:
        """`ask(model)` for each model that answers a request of this one: this model
        itself; a `FallbackModel` its members, in order, until one answers. The engine asks
        through it so that what it records of a request (the `chat {model}` span, the
        price) is the member's that was asked, not a chain's."""
        return await ask(self)
