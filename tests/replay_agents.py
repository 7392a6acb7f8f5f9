"""Agents behind the recorded histories in tests/histories/ (names and scripts are fixed).

Changing these scripts, or the workflow, in a way that changes the commands a workflow
issues makes `test_replay.py` fail: that is the point.
"""

from __future__ import annotations

from durable_agent import AgentBuilder, TestModel
from durable_agent.temporal import AgentActivityConfig, AgentRegistration

from .helpers import call, text_response, tool_response


def get_weather(city: str) -> str:
    return f"sunny in {city}"


def deploy(env: str) -> str:
    return f"deployed to {env}"


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
    return [*(AgentRegistration(agent) for agent in agents), AgentRegistration(deployer, local)]
