"""How working nodes are executed: the seam between the loop and where work happens."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from . import nodes
from .messages import ModelRequest, ModelResponse

if TYPE_CHECKING:
    from .agent import Agent

__all__ = ["DirectNodeRunner", "NodeRunner"]


class NodeRunner(Protocol):
    async def prepare_model_request(
        self, input: nodes.PrepareModelRequestInput
    ) -> ModelRequest: ...

    async def model_request(self, input: nodes.ModelRequestInput) -> ModelResponse: ...

    async def tool_call(self, input: nodes.ToolCallInput) -> nodes.ToolCallOutcome: ...

    async def validate_output(self, input: nodes.ValidateOutputInput) -> nodes.OutputOutcome: ...


class DirectNodeRunner:
    """Calls the node functions in this process."""

    def __init__(self, agent: Agent[Any]) -> None:
        self.agent = agent

    async def prepare_model_request(self, input: nodes.PrepareModelRequestInput) -> ModelRequest:
        return await nodes.prepare_model_request(self.agent, input)

    async def model_request(self, input: nodes.ModelRequestInput) -> ModelResponse:
        return await nodes.model_request(self.agent, input)

    async def tool_call(self, input: nodes.ToolCallInput) -> nodes.ToolCallOutcome:
        return await nodes.tool_call(self.agent, input)

    async def validate_output(self, input: nodes.ValidateOutputInput) -> nodes.OutputOutcome:
        return await nodes.validate_output(self.agent, input)
