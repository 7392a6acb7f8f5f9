"""Sessions: a run that waits for its next prompt after each turn and keeps the whole
conversation, across continue-as-new, until `end_session` or its idle timeout (one out of
range fails the run at its start, and the `status` query still answers)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from durable_agent import (
    AgentBuilder,
    AgentStreamRecord,
    FunctionModel,
    InvalidInput,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TestModel,
    ToolReturnPart,
    UserPromptPart,
)
from durable_agent.temporal import AgentActivityConfig, AgentClient, AgentRegistration
from durable_agent.temporal.client import Rejected, RunFailed
from durable_agent.temporal.search_attributes import AGENT_STATUS

from .helpers import call, text_response, tool_response
from .temporal_support import fast_activity, new_worker, unique


class Echo:
    """Answers `<turn>: <prompt>` and remembers how much conversation each request had."""

    def __init__(self) -> None:
        self.lengths: list[int] = []
        self.fail = False

    def __call__(self, messages: list[ModelMessage], info: Any) -> ModelResponse:
        self.lengths.append(len(messages))
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        if any(isinstance(p, ToolReturnPart) for p in last.parts):
            return text_response("deployed")
        prompts = [p.text for p in last.parts if isinstance(p, UserPromptPart)]
        if prompts == ["deploy"]:
            return tool_response(call("deploy", f"d{len(messages)}", env="prod"))
        turn = sum(1 for m in messages if isinstance(m, ModelRequest))
        return text_response(f"{turn}: {' '.join(prompts)}")


def echo_agent(name: str, model: Echo) -> Any:
    def deploy(env: str) -> str:
        if model.fail:
            raise RuntimeError("deploys are broken")
        return f"deployed to {env}"

    return (
        AgentBuilder(FunctionModel(model))
        .name(name)
        .tool(deploy)
        .approval_required_tools(["deploy"])
        .build()
    )


async def until_status(handle: Any, status: str, timeout: float = 20) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while (view := await handle.status()).status != status:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"status stayed {view.status!r}, wanted {status!r}")
        await asyncio.sleep(0.1)
    return view


async def test_three_turns_a_rejected_prompt_and_end_session(client: Client) -> None:
    name, model = unique("session"), Echo()
    agent = echo_agent(name, model)
    async with new_worker(client, agents=[agent]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        session = await agents.start(name, "", session=True)
        idle = await until_status(session, "awaiting_prompt")
        first = await session.send_prompt("hello")
        with pytest.raises(Rejected) as empty:
            await session.send_prompt("   ")
        second = await session.send_prompt("and again")
        third = await session.send_prompt("once more")
        view = await until_status(session, "awaiting_prompt")
        attributes = (await session.describe()).typed_search_attributes
        listed: list[str] = []
        for _ in range(100):  # visibility lags a little
            listed = [r.workflow_id async for r in agents.list(status="awaiting_prompt")]
            if session.id in listed:
                break
            await asyncio.sleep(0.2)
        with pytest.raises(Rejected, match="waits for its next prompt"):
            await session.steer("also this")
        await session.end_session()
        result = await session.result()

    assert idle.session is not None
    assert idle.session.turns == 0
    assert [first.output, second.output, third.output] == [
        "1: hello",
        "2: and again",
        "3: once more",
    ]
    assert empty.value.type == "invalid_prompt"
    assert "the prompt is empty" in empty.value.message
    assert model.lengths == [1, 3, 5]  # every turn sees the whole conversation
    assert len({first.run_id, second.run_id, third.run_id}) == 3
    assert first.conversation_id == second.conversation_id == third.conversation_id
    assert view.session is not None
    assert (view.session.turns, view.session.awaiting_prompt) == (3, True)
    assert attributes.get(AGENT_STATUS) == "awaiting_prompt"
    assert session.id in listed
    assert result.output == "3: once more"
    assert result.status == "completed"


async def test_a_session_continues_as_new_between_turns(client: Client) -> None:
    name, model = unique("session-can"), Echo()
    agent = AgentRegistration(
        echo_agent(name, model), AgentActivityConfig(continue_as_new_after_steps=1)
    )
    async with new_worker(client, agents=[agent]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        session = await agents.start(name, "first", session=True)
        await until_status(session, "awaiting_prompt")
        second = await session.send_prompt("second")
        third = await session.send_prompt("third")
        view = await until_status(session, "awaiting_prompt")
        await session.end_session()
        result = await session.result()
    assert (second.output, third.output) == ("2: second", "3: third")
    assert model.lengths == [1, 3, 5]
    assert view.continued_as_new >= 2
    assert view.session is not None
    assert view.session.turns == 3
    assert result.output == "3: third"


async def test_a_turn_waits_for_an_approval_inline(client: Client) -> None:
    name, model = unique("session-hitl"), Echo()
    agent = echo_agent(name, model)
    async with new_worker(client, agents=[agent]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        session = await agents.start(name, "", session=True)
        await until_status(session, "awaiting_prompt")
        turn = asyncio.ensure_future(session.send_prompt("deploy"))
        waiting = await until_status(session, "waiting")
        with pytest.raises(Rejected, match="busy with turn 1"):
            await session.send_prompt("meanwhile")
        await session.approve(waiting.pending_approvals[0].tool_call_id, by="alice")
        answer = await turn
        after = await session.send_prompt("thanks")
        await session.end_session()
        await session.result()
    assert answer.output == "deployed"
    assert after.output == "3: thanks"


async def test_idle_timeout_ends_the_session(client: Client) -> None:
    name, model = unique("session-idle"), Echo()
    agent = echo_agent(name, model)
    async with new_worker(client, agents=[agent]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        session = await agents.start(name, "hi", session=True, idle_timeout_seconds=1)
        view = await until_status(session, "awaiting_prompt")
        result = await asyncio.wait_for(session.result(), 20)
    assert view.session is not None
    assert view.session.idle_expires_at is not None
    assert result.output == "1: hi"
    assert result.status == "completed"


async def test_a_failed_turn_fails_the_session_and_its_prompt(client: Client) -> None:
    name, model = unique("session-fail"), Echo()
    model.fail = True
    agent = AgentRegistration(
        echo_agent(name, model), AgentActivityConfig(tool_call=fast_activity(maximum_attempts=1))
    )
    async with new_worker(client, agents=[agent]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        session = await agents.start(name, "", session=True)
        await until_status(session, "awaiting_prompt")
        turn = asyncio.ensure_future(session.send_prompt("deploy"))
        waiting = await until_status(session, "waiting")
        await session.approve(waiting.pending_approvals[0].tool_call_id)
        with pytest.raises(RunFailed, match=r"turn_failed: turn 1 failed: .*deploys are broken"):
            await turn
        with pytest.raises(RunFailed, match="deploys are broken"):
            await session.result()


async def test_prompts_to_a_run_that_is_not_a_session_are_refused(client: Client) -> None:
    name, model = unique("session-no"), Echo()
    agent = echo_agent(name, model)
    async with new_worker(client, agents=[agent]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        run = await agents.start(name, "deploy")
        await until_status(run, "waiting")
        with pytest.raises(Rejected, match="this run is not a session"):
            await run.send_prompt("hello")
        with pytest.raises(InvalidInput, match="idle_timeout_seconds is for sessions"):
            await agents.start(name, "hi", idle_timeout_seconds=5)
        await run.cancel()


async def test_in_process_turns_go_on_through_one_controller() -> None:
    model = Echo()
    records: list[AgentStreamRecord] = []
    controller = echo_agent("local-session", model).controller(sink=records.append)
    first = await controller.start(controller.new_state("hello"))
    assert controller.loop is not None
    following = controller.new_state(
        "again", message_history=first.message_history, conversation_id=first.conversation_id
    )
    second = await controller.start(following, stream_start=controller.loop.seq)
    assert (first.output, second.output) == ("1: hello", "2: again")
    assert model.lengths == [1, 3]
    assert [r.seq for r in records] == list(range(len(records)))
    assert [r.kind for r in records].count("run_start") == 2


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with structlog.testing.capture_logs():
        yield


@pytest.mark.parametrize("idle", [-5, 0, 1e18])
async def test_an_idle_timeout_out_of_range_fails_the_run_and_the_status_query_answers(
    client: Client, idle: float
) -> None:
    name = unique("idle-range")
    agent = AgentBuilder(TestModel.with_text("hi")).name(name).build()
    async with new_worker(client, agents=[agent]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        with pytest.raises(InvalidInput, match="idle_timeout_seconds"):
            await agents.start(name, "", session=True, idle_timeout_seconds=idle)
        handle = await client.start_workflow(
            "AgentWorkflow",
            {"agent": name, "prompt": "", "session": True, "idle_timeout_seconds": idle},
            id=unique("idle-range"),
            task_queue=worker.task_queue,
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), 30)
        view = await agents.get(handle.id).status()
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "invalid_input"
    assert "idle_timeout_seconds" in cause.message
    assert view.status == "failed"
    assert view.session is not None
    assert view.session.idle_expires_at is None
    assert not view.session.awaiting_prompt
