"""Model providers. The provider classes (`AnthropicModel`, `OpenAIChatModel`,
`OpenAIResponsesModel`, ...: the rows of `providers.PROVIDERS`) are imported lazily, each
needing its SDK's extra (`anthropic`, `openai`)."""

from __future__ import annotations

from typing import Any

from .base import DeltaSink, Model, ModelDelta, ModelRequestParameters, ModelSettings, OutputMode
from .fallback import FallbackModel
from .function import AgentInfo, FunctionModel, StreamFunction
from .names import model_from_name
from .providers import class_names, lazy_class
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
__all__ += [name for name in class_names() if name not in __all__]


def __getattr__(name: str) -> Any:
    """A provider class, imported on first use (`providers.PROVIDERS` says where)."""
    found = lazy_class(name)
    if found is None:
        raise AttributeError(name)
    return found
