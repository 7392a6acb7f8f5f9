"""The interface every model provider implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..messages import ModelMessage, ModelResponse
from ..tools import ToolDefinition

__all__ = ["Model", "ModelRequestParameters", "ModelSettings", "OutputMode"]

OutputMode = Literal["text", "json_schema", "tool"]


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
    def structured_output_mode(self) -> OutputMode:
        """How this model should be asked for structured output (`json_schema` or `tool`)."""
        return "json_schema"

    @abstractmethod
    async def request(
        self, messages: list[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse: ...
