"""Functions as tools: what a tool may be (callable objects, partials, positional-only
parameters, parameters named like pydantic's attributes; not a generator or a nameless
lambda), what it may return (JSON, or the run fails naming the tool and the type, having run
it once), calls that come without ids of their own, and many sync tools at once on a worker,
each within its own timeout."""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from durable_agent import (
    AgentBuilder,
    FunctionModel,
    ModelMessage,
    ModelResponse,
    TestModel,
    Tool,
    ToolCallPart,
    ToolResultNotSerializable,
    UserError,
)
from durable_agent.models import AgentInfo
from durable_agent.temporal import AgentActivityConfig, AgentRegistration

from .helpers import CallLog, call, text_response, tool_response
from .temporal_support import fast_activity, new_worker, start_agent, unique

# -- what a tool may be --------------------------------------------------------------------


def test_parameters_named_like_pydantic_attributes_reach_the_schema_and_the_tool() -> None:
    def odd(model_config: str, json: int, schema: str, copy: bool, validate: str, _x: int) -> str:
        return f"{model_config}/{json}/{schema}/{copy}/{validate}/{_x}"

    tool = Tool(odd)
    schema = tool.definition().parameters_json_schema
    names = ["model_config", "json", "schema", "copy", "validate", "_x"]
    assert list(schema["properties"]) == names
    assert schema["required"] == names
    arguments = tool.validate_arguments(
        {"model_config": "a", "json": 1, "schema": "s", "copy": True, "validate": "v", "_x": 7}
    )
    assert odd(**arguments) == "a/1/s/True/v/7"


async def test_callable_objects_partials_and_positional_only_parameters() -> None:
    class Greeter:
        async def __call__(self, name: str) -> str:
            return f"hello {name}"

    def shout(prefix: str, text: str) -> str:
        return f"{prefix}{text.upper()}"

    def add(a: int, b: int, /, scale: int = 1) -> int:
        return (a + b) * scale

    greeter = Tool(Greeter())
    assert greeter.name == "Greeter"
    assert greeter.is_async
    partial = Tool(functools.partial(shout, "> "))
    assert partial.name == "shout"
    assert list(partial.definition().parameters_json_schema["properties"]) == ["text"]
    positional = Tool(add)
    model = TestModel.with_responses(
        [
            tool_response(
                call("Greeter", "g1", name="ada"),
                call("shout", "s1", text="hi"),
                call("add", "a1", a=1, b=2, scale=3),
            ),
            text_response("done"),
        ]
    )
    agent = AgentBuilder(model).tools([greeter, partial, positional]).build()
    result = await agent.run("go")
    returns = [
        p for m in result.messages for p in getattr(m, "parts", []) if p.kind == "tool_return"
    ]
    assert [(r.name, r.content, r.is_error) for r in returns] == [
        ("Greeter", "hello ada", False),
        ("shout", "> HI", False),
        ("add", 9, False),
    ]


def test_generator_tools_are_refused_at_build_time() -> None:
    def numbers() -> Any:
        yield 1

    async def stream() -> Any:
        yield 1

    for tool in (numbers, stream):
        with pytest.raises(UserError, match="is a generator function"):
            AgentBuilder(TestModel.with_text("x")).tool(tool).build()


def test_a_tool_without_a_name_is_refused_naming_what_to_do() -> None:
    with pytest.raises(UserError, match="pass a name"):
        Tool(lambda city: city)
    assert Tool(lambda city: city, name="echo").name == "echo"


# -- what a tool may return ---------------------------------------------------------------


class Opaque:
    pass


async def test_unserialisable_result_fails_in_process_naming_tool_and_type() -> None:
    def opaque() -> Opaque:
        return Opaque()

    model = TestModel.with_responses([tool_response(call("opaque", "o1")), text_response("x")])
    agent = AgentBuilder(model).tool(opaque).build()
    with pytest.raises(ToolResultNotSerializable, match=r"tool 'opaque' \(call o1\) returned a"):
        await agent.run("go")


@pytest.mark.parametrize("kind", ["object", "bytes"])
async def test_unserialisable_result_runs_the_tool_once_and_fails_the_run(
    client: Client, kind: str
) -> None:
    log = CallLog()
    value: object = Opaque() if kind == "object" else b"\xff\xfe"

    def opaque() -> Any:
        log.record("opaque")
        return value

    name = unique("opaque")
    model = TestModel.with_responses([tool_response(call("opaque", "o1")), text_response("x")])
    agent = AgentRegistration(
        AgentBuilder(model).name(name).tool(opaque).build(),
        AgentActivityConfig(tool_call=fast_activity(initial_interval=0.05)),
    )
    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, name, "go")
        with pytest.raises(WorkflowFailureError) as info:
            await asyncio.wait_for(handle.result(), 20)
    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "tool_result_not_serializable"
    assert f"returned a {type(value).__name__}" in cause.message
    assert log.counts["opaque"] == 1, "a retry would have run the tool again"


# -- tool calls without ids of their own ----------------------------------------------------


async def test_empty_tool_call_ids_get_ids_of_their_own() -> None:
    """An OpenAI-compatible server may send empty ids; the run used to loop forever."""
    log = CallLog()

    def lookup(city: str) -> str:
        log.record("lookup", city=city)
        return f"sunny in {city}"

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(
                parts=[
                    ToolCallPart(id="", name="lookup", arguments={"city": "Paris"}),
                    ToolCallPart(id="", name="lookup", arguments={"city": "Oslo"}),
                ]
            )
        return text_response("both sunny")

    agent = AgentBuilder(FunctionModel(script)).tool(lookup).build()
    result = await asyncio.wait_for(agent.run("weather?"), 10)
    assert result.output == "both sunny"
    assert log.counts["lookup"] == 2
    ids = [p.id for p in result.messages[1].parts if isinstance(p, ToolCallPart)]
    assert ids == ["call_1_0", "call_1_1"]


# -- sync tools wait for no thread -----------------------------------------------------------


async def test_many_parallel_sync_tools_each_run_once_within_their_timeout(client: Client) -> None:
    """The default executor has min(32, cores + 4) threads (6 here): the seventh call used to
    queue while its start-to-close clock ran, time out, and run a second time."""
    log = CallLog()

    def slow(n: int) -> int:
        log.record("slow", n=n)
        time.sleep(1.5)
        return n

    count = 12
    name = unique("threads")
    model = TestModel.with_responses(
        [tool_response(*(call("slow", f"s{i}", n=i) for i in range(count))), text_response("ok")]
    )
    agent = AgentRegistration(
        AgentBuilder(model).name(name).tool(slow).build(),
        AgentActivityConfig(
            tool_call=fast_activity(start_to_close=2.5, heartbeat=None, maximum_attempts=1)
        ),
    )
    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, name, "go")
        result = await asyncio.wait_for(handle.result(), 30)
    assert result.output == "ok"
    assert sorted(log.counts.items()) == [("slow", count)]
