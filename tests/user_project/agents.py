"""The user's agent: a scripted model (no network, no key) that looks the item up with a tool."""

from __future__ import annotations

import re

from activities import check_inventory
from durable_agent import (
    AgentBuilder,
    FunctionModel,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from durable_agent.models import AgentInfo


def _script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    last = messages[-1]
    if isinstance(last, ModelRequest):
        for part in last.parts:
            if isinstance(part, ToolReturnPart):
                return ModelResponse(parts=[TextPart(text=f"Checked: {part.content}.")])
    prompt = next(
        p.text
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart)
    )
    found = re.search(r"[A-Z]+-\d+", prompt)
    sku = found.group(0) if found else "UNKNOWN-0"
    return ModelResponse(
        parts=[ToolCallPart(id="call_inventory", name="check_inventory", arguments={"sku": sku})]
    )


inventory = (
    AgentBuilder(FunctionModel(_script, name="scripted-inventory"))
    .name("inventory")
    .instructions("Answer stock questions with check_inventory.")
    .tool(check_inventory)
    .build()
)
