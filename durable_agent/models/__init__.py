"""Model providers. `OpenAIChatModel` needs the `openai` extra and is imported lazily."""

from __future__ import annotations

from typing import Any

from .base import Model, ModelRequestParameters, ModelSettings, OutputMode
from .function import AgentInfo, FunctionModel
from .test import TestModel

__all__ = [
    "AgentInfo",
    "FunctionModel",
    "Model",
    "ModelRequestParameters",
    "ModelSettings",
    "OpenAIChatModel",
    "OutputMode",
    "TestModel",
]


def __getattr__(name: str) -> Any:
    if name == "OpenAIChatModel":
        from .openai import OpenAIChatModel

        return OpenAIChatModel
    raise AttributeError(name)
