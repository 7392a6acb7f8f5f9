"""Agents behind the recorded histories in tests/histories/ (names and scripts are fixed).

Changing these scripts, or the workflow, in a way that changes the commands a workflow
issues makes `test_replay.py` fail: that is the point.
"""

from __future__ import annotations

from durable_agent import AgentBuilder, ModelQuota, TestModel
from durable_agent.agent.agent import Agent
from durable_agent.models.openai import OpenAIChatModel
from durable_agent.temporal import AgentActivityConfig, AgentRegistration

from .helpers import call, text_response, tool_response


def get_weather(city: str) -> str:
    return f"sunny in {city}"


def deploy(env: str) -> str:
    return f"deployed to {env}"


QUOTA_KEY = "openai:gpt-4o-mini"
REPLAY_QUOTAS = {QUOTA_KEY: ModelQuota(requests_per_minute=6)}
"""The recording worker's quota: one request in any 10 s, so the second run's request waits
for a slot granted ahead of its opening."""


def quoted(base_url: str = "http://127.0.0.1:9/v1") -> Agent[str]:
    """`replay-quoted`, one request under `REPLAY_QUOTAS` (the address matters only when
    recording: a replay sends nothing)."""
    model = OpenAIChatModel("gpt-4o-mini", base_url=base_url, api_key="sk-test")
    return AgentBuilder(model).name("replay-quoted").instructions("Answer in one word.").build()


def replay_agents() -> list[AgentRegistration]:
    """The agents, as the recording worker hosted them (a fresh set: their test models
    answer from the start)."""
    agents = [
        AgentBuilder(
            TestModel.with_responses(
                [
                    tool_response(
                        call("get_weather", "w1", city="Paris"),
                        call("get_weather", "w2", city="Oslo"),
                    ),
                    text_response("Both sunny."),
                ]
            )
        )
        .name("replay-weather")
        .instructions("Be brief.")
        .tool(get_weather)
        .build(),
        AgentBuilder(
            TestModel.with_responses(
                [tool_response(call("deploy", "d1", env="prod")), text_response("finished")]
            )
        )
        .name("replay-deployer")
        .tool(deploy)
        .approval_required_tools(["deploy"])
        .build(),
    ]
    # the deployer again, its quick nodes as local activities
    deployer = (
        AgentBuilder(
            TestModel.with_responses(
                [tool_response(call("deploy", "d1", env="prod")), text_response("finished")]
            )
        )
        .name("replay-deployer-local")
        .tool(deploy)
        .approval_required_tools(["deploy"])
        .build()
    )
    local = AgentActivityConfig(local_activities=("prepare_model_request", "validate_output"))
    return [
        *(AgentRegistration(agent) for agent in agents),
        AgentRegistration(deployer, local),
        AgentRegistration(quoted()),
    ]
