"""Example agents: `weather` (one tool, and a `strong` model to fork onto), `deployer` (a
tool that needs approval), `reporter` (a tool whose result arrives later, deferred) and
`assistant` (for chat sessions).

They use the model `DURABLE_AGENT_MODEL` names when it is set (`anthropic:claude-sonnet-4-5`,
`openai-responses:gpt-5`, `openai:gpt-4o-mini`, or a comma-separated fallback chain of
them; see `durable_agent.models.model_from_name`), else `OpenAIChatModel` when
`OPENAI_API_KEY` or `OPENAI_BASE_URL` is set (model from `OPENAI_MODEL`, default
`gpt-4o-mini`), and otherwise a small scripted model that reacts to the latest prompt, so
the examples, and every command the docs show, run with no network and no key.
"""

from __future__ import annotations

import os
import re

from activities.tools import deploy, get_weather, run_report, service_status
from durable_agent import (
    Agent,
    AgentBuilder,
    FunctionModel,
    Model,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from durable_agent.models import AgentInfo, model_from_name

__all__ = ["AGENTS", "assistant", "deployer", "reporter", "weather"]


def _real_model() -> Model | None:
    named = os.environ.get("DURABLE_AGENT_MODEL")
    if named:
        return model_from_name(named, stream=True)
    if not (os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")):
        return None
    from durable_agent.models.openai import OpenAIChatModel

    return OpenAIChatModel(os.environ.get("OPENAI_MODEL", "gpt-4o-mini"))


def _prompt(messages: list[ModelMessage]) -> str:
    """The latest thing the user asked: in a session, this turn's prompt, not the first."""
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in reversed(message.parts):
                if isinstance(part, UserPromptPart):
                    return part.text
    return ""


def _returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    last = messages[-1]
    if isinstance(last, ModelRequest):
        return [p for p in last.parts if isinstance(p, ToolReturnPart)]
    return []


def _weather_script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = _returns(messages)
    if returns:
        return ModelResponse(parts=[TextPart(text=f"Here is the forecast: {returns[0].content}.")])
    match = re.search(r"in ([A-Z][\w\s-]*?)(?:[?.!]|$)", _prompt(messages))
    city = match.group(1).strip() if match else "Paris"
    step = sum(1 for m in messages if isinstance(m, ModelResponse))
    return ModelResponse(
        parts=[
            ToolCallPart(id=f"call_weather_{step}", name="get_weather", arguments={"city": city})
        ]
    )


def _deployer_script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = _returns(messages)
    if returns:
        deploy = next((r for r in returns if r.name == "deploy"), None)
        if deploy is not None and deploy.is_error:
            return ModelResponse(parts=[TextPart(text=f"I did not deploy: {deploy.content}")])
        return ModelResponse(parts=[TextPart(text=f"Done. {deploy.content if deploy else ''}")])
    prompt = _prompt(messages)
    env = "prod" if "prod" in prompt else "staging"
    found = re.search(r"v\d+(?:\.\d+)*", prompt)
    version = found.group(0) if found else "v1"
    step = sum(1 for m in messages if isinstance(m, ModelResponse))
    return ModelResponse(
        parts=[
            ToolCallPart(id=f"call_status_{step}", name="service_status", arguments={"env": env}),
            ToolCallPart(
                id=f"call_deploy_{step}",
                name="deploy",
                arguments={"env": env, "version": version},
            ),
        ]
    )


def _strong_weather_script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    answer = _weather_script(messages, info)
    if answer.parts and isinstance(answer.parts[0], TextPart):
        return ModelResponse(parts=[TextPart(text=f"(strong) {answer.parts[0].text}")])
    return answer


def _reporter_script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = _returns(messages)
    if returns:
        return ModelResponse(parts=[TextPart(text=f"The report says: {returns[0].content}")])
    step = sum(1 for m in messages if isinstance(m, ModelResponse))
    query = _prompt(messages)
    return ModelResponse(
        parts=[ToolCallPart(id=f"call_job_{step}", name="run_report", arguments={"query": query})]
    )


def _assistant_script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Weather questions go to the weather tool; anything else is answered in one line."""
    prompt = _prompt(messages)
    if _returns(messages) or re.search(r"\bin [A-Z]", prompt):
        return _weather_script(messages, info)
    return ModelResponse(parts=[TextPart(text=f"You said: {prompt}. Ask me about the weather.")])


def build_weather() -> Agent:
    model = _real_model() or FunctionModel(_weather_script, name="scripted-weather")
    strong = _real_model() or FunctionModel(_strong_weather_script, name="scripted-strong")
    return (
        AgentBuilder(model)
        .name("weather")
        .instructions("You answer weather questions. Use get_weather; be brief.")
        .tool(get_weather)
        .allowed_models({"strong": strong})
        .build()
    )


def build_reporter() -> Agent:
    model = _real_model() or FunctionModel(_reporter_script, name="scripted-reporter")
    return (
        AgentBuilder(model)
        .name("reporter")
        .instructions("You answer with reports from the warehouse. Use run_report.")
        .tool(run_report)
        .build()
    )


def build_assistant() -> Agent:
    model = _real_model() or FunctionModel(_assistant_script, name="scripted-assistant")
    return (
        AgentBuilder(model)
        .name("assistant")
        .instructions("You are a helpful assistant. Use get_weather for weather questions.")
        .tool(get_weather)
        .build()
    )


def build_deployer() -> Agent:
    model = _real_model() or FunctionModel(_deployer_script, name="scripted-deployer")
    return (
        AgentBuilder(model)
        .name("deployer")
        .instructions("You deploy services. Check status first, then deploy.")
        .tools([service_status, deploy])
        .approval_required_tools(["deploy"])
        .build()
    )


weather = build_weather()
deployer = build_deployer()
reporter = build_reporter()
assistant = build_assistant()
AGENTS = [weather, deployer, reporter, assistant]
"""The worker registers every `Agent` in a module's `AGENTS` list (or any module-level Agent)."""
