"""Model providers. `OpenAIChatModel` needs the `openai` extra and is imported lazily."""

from __future__ import annotations

from typing import Any

from .base import DeltaSink, Model, ModelDelta, ModelRequestParameters, ModelSettings, OutputMode
from .function import AgentInfo, FunctionModel, StreamFunction
from .test import TestModel

__all__ = [
    "AgentInfo",
    "DeltaSink",
    "FunctionModel",
    "Model",
    "ModelDelta",
    "ModelRequestParameters",
    "ModelSettings",
    "OpenAIChatModel",
    "OutputMode",
    "StreamFunction",
    "TestModel",
]


def __getattr__(name: str) -> Any:
    if name == "OpenAIChatModel":
        from .openai import OpenAIChatModel

        return OpenAIChatModel
    raise AttributeError(name)
