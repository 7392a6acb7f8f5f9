"""A research lead with two sub-agents, for the sub-agent tests (in-process, in a test's
worker and in worker processes started with `--agents tests.subagent_agents`).

`researcher` answers at once; `writer` publishes through `publish`, which needs approval;
`flaky` always fails; the lead calls researcher and writer in one response, then answers.
Tools append to `$DA_TEST_DIR/tool_runs` when it is set, so a test in another process can
count how often each ran.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel

from durable_agent import AgentBuilder, TestModel
from durable_agent.contract.messages import ModelResponse, TextPart, ToolCallPart
from durable_agent.contract.usage import Usage, UsageLimits


def _record(name: str) -> None:
    folder = os.environ.get("DA_TEST_DIR")
    if folder:
        with (Path(folder) / "tool_runs").open("a") as out:
            out.write(name + "\n")


def _text(text: str, tokens: int = 10) -> ModelResponse:
    return ModelResponse(
        parts=[TextPart(text=text)],
        usage=Usage(requests=1, input_tokens=tokens, output_tokens=2, total_tokens=tokens + 2),
    )


def _calls(*calls: ToolCallPart, tokens: int = 10) -> ModelResponse:
    return ModelResponse(
        parts=list(calls),
        usage=Usage(requests=1, input_tokens=tokens, output_tokens=3, total_tokens=tokens + 3),
    )


def search(topic: str) -> str:
    """Searches the notes for a topic."""
    _record("search")
    return f"notes on {topic}: it is well studied"


def publish(title: str) -> str:
    """Publishes an article."""
    _record("publish")
    return f"published {title!r}"


class Finding(BaseModel):
    topic: str
    confidence: float


researcher = (
    AgentBuilder(
        TestModel.with_responses(
            [
                _calls(ToolCallPart(id="s1", name="search", arguments={"topic": "tides"})),
                _text("Tides follow the moon.", tokens=20),
            ]
        )
    )
    .name("researcher")
    .instructions("Research the topic you are given and report briefly.")
    .tool(search)
    .build()
)

writer = (
    AgentBuilder(
        TestModel.with_responses(
            [
                _calls(ToolCallPart(id="p1", name="publish", arguments={"title": "Tides"})),
                _text("Published the article.", tokens=30),
            ]
        )
    )
    .name("writer")
    .instructions("Write and publish the article.")
    .tool(publish)
    .approval_required_tools(["publish"])
    .build()
)

analyst = (
    AgentBuilder(TestModel.with_responses([_text('{"topic": "tides", "confidence": 0.9}')]))
    .name("analyst")
    .output_type(Finding)
    .build()
)


flaky = (
    AgentBuilder(TestModel.with_text("never sent"))
    .name("flaky")
    .instructions("Fails before its first request: its budget allows none.")
    .usage_limits(UsageLimits(request_limit=0))
    .build()
)


def lead_script() -> list[ModelResponse]:
    return [
        _calls(
            ToolCallPart(id="c1", name="researcher", arguments={"prompt": "tides"}),
            ToolCallPart(id="c2", name="writer", arguments={"prompt": "write on tides"}),
        ),
        _text("Researched and published.", tokens=40),
    ]


def bad_arguments_script() -> list[ModelResponse]:
    return [
        _calls(ToolCallPart(id="b1", name="researcher", arguments={"topic": "tides"})),
        _text("Could not delegate."),
    ]


lead = (
    AgentBuilder(TestModel.with_responses(lead_script()))
    .name("lead")
    .instructions("Lead the research.")
    .subagent(researcher)
    .subagent(writer)
    .build()
)

checker = (
    AgentBuilder(
        TestModel.with_responses(
            [
                _calls(
                    ToolCallPart(id="k1", name="flaky", arguments={"prompt": "go"}),
                    ToolCallPart(id="k2", name="analyst", arguments={"prompt": "tides"}),
                ),
                _text("One failed, one answered."),
            ]
        )
    )
    .name("checker")
    .subagent(flaky)
    .subagent(analyst)
    .build()
)

AGENTS = [lead, checker]


async def nap(seconds: float) -> str:
    """Waits, then answers."""
    import asyncio

    await asyncio.sleep(seconds)
    return "rested"


sleeper = (
    AgentBuilder(
        TestModel.with_responses(
            [
                _calls(ToolCallPart(id="n1", name="nap", arguments={"seconds": 5})),
                _text("Rested."),
            ]
        )
    )
    .name("sleeper")
    .tool(nap)
    .build()
)

impatient = (
    AgentBuilder(
        TestModel.with_responses(
            [
                _calls(ToolCallPart(id="i1", name="sleeper", arguments={"prompt": "rest"})),
                _text("It took too long."),
            ]
        )
    )
    .name("impatient")
    .subagent(sleeper, timeout_seconds=1)
    .build()
)

AGENTS.append(impatient)


editor = (
    AgentBuilder(
        TestModel.with_responses(
            [
                # The same call id as the writer's: models that number their calls do this.
                _calls(ToolCallPart(id="p1", name="publish", arguments={"title": "Edited"})),
                _text("Published the edit.", tokens=30),
            ]
        )
    )
    .name("editor")
    .tool(publish)
    .approval_required_tools(["publish"])
    .build()
)

delegator = (
    AgentBuilder(
        TestModel.with_responses(
            [
                _calls(ToolCallPart(id="c1", name="writer", arguments={"prompt": "tides"})),
                _text("Delegated."),
            ]
        )
    )
    .name("delegator")
    .subagent(writer)
    .build()
)

patient = (
    AgentBuilder(
        TestModel.with_responses(
            [
                _calls(ToolCallPart(id="w1", name="sleeper", arguments={"prompt": "rest"})),
                _text("Waited."),
            ]
        )
    )
    .name("patient")
    .subagent(sleeper)
    .build()
)

twins = (
    AgentBuilder(
        TestModel.with_responses(
            [
                _calls(
                    ToolCallPart(id="c1", name="writer", arguments={"prompt": "write"}),
                    ToolCallPart(id="c2", name="editor", arguments={"prompt": "edit"}),
                ),
                _text("Both published."),
            ]
        )
    )
    .name("twins")
    .subagent(writer)
    .subagent(editor)
    .build()
)

AGENTS.extend([delegator, patient, twins])
