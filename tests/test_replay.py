"""Recorded histories replay against today's workflow code: determinism is checked in CI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from durable_agent.temporal import DurableAgentPlugin

from .replay_agents import register_replay_agents

HISTORIES = sorted((Path(__file__).resolve().parent / "histories").glob("*.json"))


def test_histories_are_recorded() -> None:
    names = {path.stem for path in HISTORIES}
    assert {"tool_run", "suspend_resume", "approved", "denied"} <= names


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_history_replays(path: Path) -> None:
    register_replay_agents()
    history = WorkflowHistory.from_json(path.stem, json.loads(path.read_text()))
    replayer = Replayer(workflows=[], plugins=[DurableAgentPlugin()])
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"


async def test_a_changed_agent_fails_replay() -> None:
    """The check is real: the same agent, now asking approval for its tool, diverges."""
    from durable_agent import AgentBuilder, TestModel
    from durable_agent.temporal.registry import registry

    from .helpers import call, text_response, tool_response
    from .replay_agents import get_weather

    model = TestModel.with_responses(
        [
            tool_response(
                call("get_weather", "w1", city="Paris"), call("get_weather", "w2", city="Oslo")
            ),
            text_response("Both sunny."),
        ]
    )
    registry.register(
        AgentBuilder(model)
        .name("replay-weather")
        .instructions("Be brief.")
        .tool(get_weather)
        .approval_required_tools(["get_weather"])
        .build(),
        replace=True,
    )
    try:
        path = next(p for p in HISTORIES if p.stem == "tool_run")
        history = WorkflowHistory.from_json("tool_run", json.loads(path.read_text()))
        replayer = Replayer(workflows=[], plugins=[DurableAgentPlugin()])
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    finally:
        register_replay_agents()
    assert result.replay_failure is not None
    assert "Nondeterminism" in str(result.replay_failure)
