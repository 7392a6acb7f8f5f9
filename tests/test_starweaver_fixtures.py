"""Starweaver's own checkpoints parse, round-trip, and follow the same rules as ours."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from durable_agent import AgentBuilder, AgentCheckpoint, AgentExecutionNode, TestModel

from .helpers import RecordingExecutor, call, text_response, tool_response

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "starweaver"
"""A copy of the project's shared starweaver checkpoints, so that a clone anywhere tests
against them; `test_the_copy_is_the_shared_fixtures` keeps it equal to the original."""
SHARED = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "starweaver"
FILES = ["text_run.json", "one_tool_call.json", "two_tool_calls_one_response.json"]


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def test_fixtures_are_present() -> None:
    assert FIXTURES.is_dir(), f"starweaver fixtures not found at {FIXTURES}"
    assert all((FIXTURES / name).is_file() for name in FILES)


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"no shared fixtures beside this clone ({SHARED})")
def test_the_copy_is_the_shared_fixtures() -> None:
    """Where the shared fixtures sit beside the checkout (as on CI), the copy must not
    have drifted from them: a changed reference is copied in, not tested around."""
    shared = sorted(p.name for p in SHARED.iterdir())
    assert sorted(p.name for p in FIXTURES.iterdir()) == shared
    for name in shared:
        assert (FIXTURES / name).read_bytes() == (SHARED / name).read_bytes(), name


@pytest.mark.parametrize("name", FILES)
def test_checkpoints_round_trip_to_equal_json(name: str) -> None:
    for raw in load(name)["checkpoints"]:
        checkpoint = AgentCheckpoint.model_validate(raw)
        assert json.loads(checkpoint.model_dump_json()) == raw
        again = AgentCheckpoint.model_validate_json(checkpoint.model_dump_json())
        assert again == checkpoint


def test_unknown_fields_survive_round_trip() -> None:
    raw = load("one_tool_call.json")["checkpoints"][4]
    raw["state"]["some_future_field"] = {"x": [1, 2]}
    raw["resume"]["cursor"]["another"] = 7
    raw["state"]["message_history"][0]["parts"][0]["extra_part_field"] = True
    checkpoint = AgentCheckpoint.model_validate(raw)
    assert json.loads(checkpoint.model_dump_json()) == raw


def weather(city: str) -> str:
    return f"sunny in {city}"


async def our_checkpoints(name: str) -> list[AgentCheckpoint]:
    scripts = {
        "text_run.json": [text_response("ok")],
        "one_tool_call.json": [
            tool_response(call("get_weather", "c1", city="Paris")),
            text_response("It is sunny."),
        ],
        "two_tool_calls_one_response.json": [
            tool_response(
                call("get_weather", "c1", city="Paris"), call("get_weather", "c2", city="Oslo")
            ),
            text_response("Both sunny."),
        ],
    }
    executor = RecordingExecutor()
    agent = (
        AgentBuilder(TestModel.with_responses(scripts[name]))
        .tool(weather, name="get_weather")
        .build()
        .with_executor(executor)
    )
    result = await agent.run("hello")
    assert result.output == load(name)["output"]
    return executor.checkpoints


@pytest.mark.parametrize("name", FILES)
async def test_our_node_order_and_evidence_follow_starweaver(name: str) -> None:
    theirs = [AgentCheckpoint.model_validate(raw) for raw in load(name)["checkpoints"]]
    ours = await our_checkpoints(name)
    assert [(c.node, c.run_step) for c in ours] == [(c.node, c.run_step) for c in theirs]
    for mine, ref in zip(ours, theirs, strict=True):
        assert mine.resume.cursor.message_cursor == ref.resume.cursor.message_cursor, mine.node
        assert mine.resume.cursor.model_request_attempt == ref.resume.cursor.model_request_attempt
        assert (
            mine.resume.cursor.output_validation_attempt
            == ref.resume.cursor.output_validation_attempt
        )
        assert mine.resume.status == ref.resume.status
        assert mine.resume.pending_approval_count == ref.resume.pending_approval_count
        assert mine.resume.deferred_tool_count == ref.resume.deferred_tool_count
        assert mine.resume.usage.tool_calls == ref.resume.usage.tool_calls
        assert mine.resume.node == mine.node
        assert len(mine.state.message_history) == len(ref.state.message_history)
        assert bool(mine.state.pending_tool_returns) == bool(ref.state.pending_tool_returns)
        # The one deliberate difference: the batch id names only a batch still pending.
        if ref.resume.cursor.tool_call_batch_id and ref.state.pending_tool_calls:
            if mine.state.pending_tool_calls:
                assert mine.resume.cursor.tool_call_batch_id == ref.resume.cursor.tool_call_batch_id
            else:
                assert mine.resume.cursor.tool_call_batch_id is None
        else:
            assert mine.resume.cursor.tool_call_batch_id is None
    assert ours[-1].node is AgentExecutionNode.RUN_COMPLETE
    assert ours[-1].state.output == theirs[-1].state.output


async def test_batch_id_is_cleared_once_results_reach_the_model() -> None:
    ours = await our_checkpoints("one_tool_call.json")
    before = [c for c in ours if c.node is AgentExecutionNode.BEFORE_MODEL_REQUEST][1]
    assert before.resume.cursor.tool_call_batch_id is None
    assert "tool_call_batch_id" not in before.resume.cursor.model_dump(mode="json")
