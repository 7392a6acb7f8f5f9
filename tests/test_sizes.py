"""Every size limit counts bytes as encoded, not characters (issue 38, item 1).

Temporal limits payloads in bytes (2 MB by default), and one character of an emoji, a CJK
ideograph or a combining mark is two to four bytes of UTF-8. A limit that counted
characters let a 1.9 MB prompt of 470,000 rockets start and then failed every workflow
task of its continue-as-new for ever. The fast tests fuzz each limit with multi-byte text;
the server tests run the rocket prompt and a prompt just over the byte limit.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_core import to_json
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from durable_agent import (
    Agent,
    AgentBuilder,
    FunctionModel,
    InvalidInput,
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from durable_agent.contract.messages import ToolReturn
from durable_agent.engine.controller import (
    MAX_PROMPT_BYTES,
    MAX_PROMPT_CHARS,
    prompt_problem,
    steering_problem,
)
from durable_agent.engine.nodes import limit_tool_result
from durable_agent.models import AgentInfo
from durable_agent.temporal import AgentActivityConfig, AgentClient, AgentRegistration
from durable_agent.temporal.client import Rejected

from .cli_support import cli_runner
from .temporal_support import fast_activity, new_worker, start_agent, unique

MULTI_BYTE = st.sampled_from(
    [
        "🚀",  # 4 bytes
        "👩‍👩‍👧",  # a ZWJ sequence: 5 code points, 18 bytes
        "漢",  # 3 bytes
        "字",
        "é",  # 2 bytes
        "e\u0301",  # e and a combining acute accent: 3 bytes
        "ą\u0328\u0301",  # stacked combining marks
        "a",
    ]
)
UNITS = st.lists(MULTI_BYTE, min_size=1, max_size=12).map("".join)


def _utf8(text: str) -> int:
    return len(text.encode("utf-8"))


# -- prompts and steering messages: refused by bytes as well as characters -----------------


@settings(max_examples=60, deadline=None)
@given(unit=UNITS, slack=st.integers(min_value=-40, max_value=40))
def test_a_prompt_is_refused_exactly_when_its_utf8_bytes_or_characters_pass_the_limit(
    unit: str, slack: int
) -> None:
    """Repeats a multi-byte unit to just under or over the byte limit: refused iff the text
    has more bytes than one payload carries (or more characters than allowed)."""
    count = max(1, MAX_PROMPT_BYTES // _utf8(unit) + slack)
    prompt = unit * count
    size, chars = _utf8(prompt), len(prompt)
    problem = prompt_problem(prompt)
    steering = steering_problem(prompt)
    if chars > MAX_PROMPT_CHARS:
        assert f"{chars} characters" in (problem or "")
        assert f"{chars} characters" in (steering or "")
    elif size > MAX_PROMPT_BYTES:
        assert problem == (
            f"the prompt is {size} bytes as UTF-8, more than the {MAX_PROMPT_BYTES} one "
            "Temporal payload carries with room for the rest of the run's input; send large "
            "documents through a tool instead"
        )
        assert f"is {size} bytes as UTF-8" in (steering or "")
    else:
        assert problem is None
        assert steering is None


def test_the_rocket_prompt_of_the_issue_is_under_the_byte_limit() -> None:
    """470,000 rockets (1,880,000 bytes) start: the continuation, which carries them twice,
    is what fails (with `conversation_too_large`, see the server test below)."""
    assert prompt_problem("🚀" * 470_000) is None
    assert prompt_problem("🚀" * 475_001) is not None


# -- tool results: the limit counts the bytes the payload carries ----------------------------


def _agent(limit: int) -> Agent[str]:
    model = FunctionModel(lambda m, i: ModelResponse(parts=[]))
    return AgentBuilder(model).max_tool_result_bytes(limit).build()


@settings(max_examples=80, deadline=None)
@given(
    text=st.lists(MULTI_BYTE, min_size=100, max_size=600).map("".join),
    slack=st.integers(min_value=-300, max_value=300),
    structured=st.booleans(),
)
def test_a_tool_result_is_cut_by_its_encoded_bytes(text: str, slack: int, structured: bool) -> None:
    """A result is kept whole iff its JSON (as the payload converter writes it: UTF-8, not
    `\\ud83d` escapes) fits, and a cut one fits with its note and never splits a character."""
    content: object = {"text": text} if structured else text
    encoded = to_json(content) if structured else text.encode()
    limit = max(300, len(encoded) + slack)
    result = ToolReturn(tool_call_id="c1", name="t", content=content)
    limited = limit_tool_result(_agent(limit), result)
    if len(encoded) <= limit:
        assert limited.content == content
        return
    assert isinstance(limited.content, str)
    assert limited.metadata["truncated_from_bytes"] == len(encoded)
    assert _utf8(limited.content) <= limit
    kept = limited.content.split("\n[truncated by durable-agent")[0].encode()
    assert encoded.startswith(kept), "the model reads the start of the result as sent"


# -- on a real server -----------------------------------------------------------------------

FAST = fast_activity(start_to_close=60, heartbeat=None)


def _one_step_then_text() -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=[ToolCallPart(id="n1", name="noop", arguments={})])
        return ModelResponse(parts=[TextPart(text="done")])

    return FunctionModel(respond)


async def noop() -> str:
    return "ok"


@pytest.mark.server
async def test_a_large_non_ascii_conversation_fails_with_conversation_too_large(
    client: Client,
) -> None:
    """The issue's scenario: 470,000 rockets (1.9 MB) start; the first continue-as-new
    would carry them twice (3.8 MB), which the server refuses: the run fails with
    `conversation_too_large`, no workflow task fails (it used to fail for ever)."""
    name = unique("rockets")
    agent = AgentRegistration(
        AgentBuilder(_one_step_then_text()).name(name).tool(noop).build(),
        AgentActivityConfig(model_request=FAST, tool_call=FAST, continue_as_new_after_steps=1),
    )
    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, name, "🚀" * 470_000)
        with pytest.raises(WorkflowFailureError) as info:
            await asyncio.wait_for(handle.result(), 90)
        history = await handle.fetch_history()
    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "conversation_too_large"
    assert cause.non_retryable
    assert "configure external storage" in cause.message
    types = [EventType.Name(e.event_type) for e in history.events]
    assert "EVENT_TYPE_WORKFLOW_TASK_FAILED" not in types


@pytest.mark.server
async def test_a_prompt_over_the_byte_limit_is_refused_by_bytes(
    client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    """475,001 rockets: under a million characters and under the server's blob limit, but
    over what a run's input carries. `AgentClient.start` and the CLI refuse it before
    starting; a raw start reaches the workflow, which fails it with `invalid_input`."""
    name = unique("bytes")
    agent = AgentBuilder(_one_step_then_text()).name(name).tool(noop).build()
    prompt = "🚀" * 475_001
    size = _utf8(prompt)
    expected = (
        f"the prompt is {size} bytes as UTF-8, more than the {MAX_PROMPT_BYTES} one Temporal "
        "payload carries with room for the rest of the run's input; send large documents "
        "through a tool instead"
    )
    async with new_worker(client, agents=[agent]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        with pytest.raises(InvalidInput) as refused:
            await agents.start(name, prompt)
        assert refused.value.message == expected
        handle = await start_agent(client, worker, name, prompt)
        with pytest.raises(WorkflowFailureError) as info:
            await asyncio.wait_for(handle.result(), 30)
        with pytest.raises(Rejected) as steering:
            await agents.get(handle.id).steer(prompt)
        assert steering.value.type == "invalid_steering"
        assert f"the steering message is {size} bytes as UTF-8" in steering.value.message
        cli = cli_runner(client.service_client.config.target_host, capsys)
        outcome = await cli("run", name, prompt, "--task-queue", worker.task_queue)
    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "invalid_input"
    assert cause.message == expected
    assert outcome.code == 1
    assert outcome.err.strip() == f"durable-agent: rejected: {expected}"
