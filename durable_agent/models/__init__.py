"""Model providers. `OpenAIChatModel` and `OpenAIResponsesModel` need the `openai` extra,
`AnthropicModel` the `anthropic` one; they are imported lazily."""

from __future__ import annotations

from typing import Any

from .base import DeltaSink, Model, ModelDelta, ModelRequestParameters, ModelSettings, OutputMode
from .fallback import FallbackModel
from .function import AgentInfo, FunctionModel, StreamFunction
from .names import model_from_name
from .test import TestModel

__all__ = [
    "AgentInfo",
    "AnthropicModel",
    "DeltaSink",
    "FallbackModel",
    "FunctionModel",
    "Model",
    "ModelDelta",
    "ModelRequestParameters",
    "ModelSettings",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "OutputMode",
    "StreamFunction",
    "TestModel",
    "model_from_name",
]


def __getattr__(name: str) -> Any:
    if name == "OpenAIChatModel":
        from .openai import OpenAIChatModel

        return OpenAIChatModel
    if name == "OpenAIResponsesModel":
        from .openai import OpenAIResponsesModel

        return OpenAIResponsesModel
    if name == "AnthropicModel":
        from .anthropic import AnthropicModel

        return AnthropicModel
    raise AttributeError(name)
