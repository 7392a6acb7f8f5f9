"""The research team: a lead agent that delegates to two sub-agents, each a tool of the
lead's model and, on Temporal, a child workflow of the lead's run.

- `researcher` looks a topic up (`search_notes`) and reports.
- `writer` writes the article and publishes it (`publish_article`, which needs a human's
  approval: while it waits, the lead's run is `waiting` too and lists the call).
- `research_lead` asks the researcher, then the writer, and sums up.

Like the other examples they use the model `DURABLE_AGENT_MODEL` names, else OpenAI when a
key is set, else small scripts that follow the prompt, so `durable-agent run research_lead
"..."` runs with no network and no key.
"""

from __future__ import annotations

from activities.tools import publish_article, search_notes
from durable_agent import (
    Agent,
    AgentBuilder,
    FunctionModel,
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from durable_agent.models import AgentInfo

from .agents import _prompt, _real_model, _returns

__all__ = ["AGENTS", "research_lead", "researcher", "writer"]


def _step(messages: list[ModelMessage]) -> int:
    return sum(1 for m in messages if isinstance(m, ModelResponse))


def _researcher_script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = _returns(messages)
    if returns:
        return ModelResponse(parts=[TextPart(text=f"Findings: {returns[0].content}")])
    call = ToolCallPart(
        id=f"call_search_{_step(messages)}",
        name="search_notes",
        arguments={"topic": _prompt(messages)},
    )
    return ModelResponse(parts=[call])


def _writer_script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = _returns(messages)
    if returns:
        published = returns[0]
        if published.is_error:
            return ModelResponse(parts=[TextPart(text=f"Not published: {published.content}")])
        return ModelResponse(parts=[TextPart(text=f"Done: {published.content}")])
    title = _prompt(messages).rsplit("notes on", 1)[-1].split(" say", 1)[0].strip(" '") or "Notes"
    call = ToolCallPart(
        id=f"call_publish_{_step(messages)}",
        name="publish_article",
        arguments={"title": title, "body": _prompt(messages)},
    )
    return ModelResponse(parts=[call])


def _lead_script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = {r.name: r for r in _returns(messages)}
    step = _step(messages)
    if "writer" in returns:
        text = (
            f"The researcher found what we needed; the writer reports: {returns['writer'].content}"
        )
        return ModelResponse(parts=[TextPart(text=text)])
    if "researcher" in returns:
        brief = f"Write a short article on: {returns['researcher'].content}"
        call = ToolCallPart(id=f"call_writer_{step}", name="writer", arguments={"prompt": brief})
        return ModelResponse(parts=[call])
    topic = _prompt(messages)
    call = ToolCallPart(
        id=f"call_researcher_{step}", name="researcher", arguments={"prompt": topic}
    )
    return ModelResponse(parts=[call])


def build_researcher() -> Agent:
    model = _real_model() or FunctionModel(_researcher_script, name="scripted-researcher")
    return (
        AgentBuilder(model)
        .name("researcher")
        .instructions("You research a topic with search_notes and report the findings briefly.")
        .tool(search_notes)
        .build()
    )


def build_writer() -> Agent:
    model = _real_model() or FunctionModel(_writer_script, name="scripted-writer")
    return (
        AgentBuilder(model)
        .name("writer")
        .instructions("You write a short article from a brief and publish it.")
        .tool(publish_article)
        .approval_required_tools(["publish_article"])
        .build()
    )


def build_research_lead(researcher: Agent, writer: Agent) -> Agent:
    model = _real_model() or FunctionModel(_lead_script, name="scripted-research-lead")
    return (
        AgentBuilder(model)
        .name("research_lead")
        .instructions(
            "You lead a research project: ask the researcher first, then give the writer a "
            "brief from the findings, then sum up in two sentences."
        )
        .subagent(researcher, description="Researches a topic; send the topic as the prompt.")
        .subagent(writer, description="Writes and publishes an article from a brief.")
        .build()
    )


researcher = build_researcher()
writer = build_writer()
research_lead = build_research_lead(researcher, writer)
AGENTS = [research_lead]
"""Registering the lead registers its two sub-agents too."""
