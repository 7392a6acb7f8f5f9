"""What exploratory testing found: stuck runs, repeated side effects, silent losses.

Each test here failed before its fix; the README's bad-input table lists the inputs.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from durable_agent import (
    AgentBuilder,
    FunctionModel,
    InvalidInput,
    ModelMessage,
    ModelResponse,
    TestModel,
    Tool,
    ToolApprovalDecision,
    ToolCallPart,
    ToolResultNotSerializable,
    UsageLimits,
    UserError,
)
from durable_agent.cli.app import amain
from durable_agent.models import AgentInfo
from durable_agent.temporal import (
    AgentActivityConfig,
    AgentClient,
    AgentRegistration,
    AgentWorkflow,
    ApprovalSignal,
)
from durable_agent.temporal.wire import MAX_APPROVAL_TIMEOUT_SECONDS

from .helpers import CallLog, call, text_response, tool_response
from .temporal_support import (
    event_types,
    fast_activity,
    new_worker,
    start_agent,
    unique,
    wait_for_status,
)

ROOT = Path(__file__).resolve().parents[1]

# -- 1. tool calls without ids of their own ------------------------------------------------


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


# -- 2. approval timeouts that overflow Temporal's timers ----------------------------------


@pytest.mark.parametrize("timeout", [1e15, 0, -5])
async def test_out_of_range_approval_timeout_fails_the_run_with_invalid_input(
    client: Client, timeout: float
) -> None:
    name = unique("timeout")
    agent = AgentBuilder(TestModel.with_text("ok")).name(name).build()
    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, name, "go", approval_timeout_seconds=timeout)
        with pytest.raises(WorkflowFailureError) as info:
            await asyncio.wait_for(handle.result(), 20)
        history = await handle.fetch_history()
    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "invalid_input"
    assert f"approval_timeout_seconds={timeout:g} is out of range" in cause.message
    assert str(MAX_APPROVAL_TIMEOUT_SECONDS) in cause.message
    types = event_types(history)
    assert "WORKFLOW_TASK_FAILED" not in types
    assert "ACTIVITY_TASK_SCHEDULED" not in types


async def test_clients_refuse_an_out_of_range_approval_timeout_before_starting(
    client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    agents = AgentClient(client, task_queue=unique("tq"))
    with pytest.raises(InvalidInput, match="approval_timeout_seconds=1e\\+15 is out of range"):
        await agents.start("anything", "go", approval_timeout_seconds=1e15)
    address = client.service_client.config.target_host
    code = await amain(
        ["run", "anything", "go", "--approval-timeout", "1e15", "--address", address]
    )
    assert code == 2
    assert "must be at most 3.16224e+07 seconds, got 1e15" in capsys.readouterr().err


# -- 3. tool results that are not JSON -----------------------------------------------------


class Opaque:
    pass


def test_generator_tools_are_refused_at_build_time() -> None:
    def numbers() -> Any:
        yield 1

    async def stream() -> Any:
        yield 1

    for tool in (numbers, stream):
        with pytest.raises(UserError, match="is a generator function"):
            AgentBuilder(TestModel.with_text("x")).tool(tool).build()


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


# -- 6. override arguments that fail the tool's validation ---------------------------------


async def test_invalid_override_arguments_are_rejected_before_the_approval_is_spent(
    client: Client,
) -> None:
    log = CallLog()

    def scale(service: str, replicas: int) -> str:
        log.record("scale", service=service, replicas=replicas)
        return f"{service} at {replicas}"

    name = unique("override")
    model = TestModel.with_responses(
        [tool_response(call("scale", "s1", service="api", replicas=2)), text_response("done")]
    )
    agent = AgentBuilder(model).name(name).tool(scale).approval_required_tools(["scale"]).build()
    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, name, "scale it")
        await wait_for_status(handle, "waiting")
        bad = ApprovalSignal(
            tool_call_id="s1", approved=True, override_arguments={"replicas": "many"}
        )
        with pytest.raises(WorkflowUpdateFailedError) as info:
            await handle.execute_update(AgentWorkflow.submit_approval, bad)
        cause = info.value.cause
        assert isinstance(cause, ApplicationError)
        assert cause.type == "invalid_approval"
        assert "override_arguments for tool 'scale' (call 's1') are invalid" in cause.message
        assert "replicas" in cause.message
        await handle.signal(AgentWorkflow.approval, bad)
        view = await wait_for_status(handle, "waiting")
        assert [p.decided for p in view.pending_approvals] == [False]
        good = ApprovalSignal(
            tool_call_id="s1",
            approved=True,
            override_arguments={"service": "api", "replicas": 3},
        )
        await handle.execute_update(AgentWorkflow.submit_approval, good)
        result = await asyncio.wait_for(handle.result(), 20)
    assert result.output == "done"
    assert log.calls == [("scale", {"service": "api", "replicas": 3})]


async def test_invalid_override_arguments_in_process_raise() -> None:
    def scale(replicas: int) -> str:
        return str(replicas)

    model = TestModel.with_responses([tool_response(call("scale", "s1", replicas=1))])
    agent = AgentBuilder(model).tool(scale).approval_required_tools(["scale"]).build()
    waiting = await agent.run("go")
    with pytest.raises(UserError, match="override_arguments for tool 'scale'"):
        await agent.resume_after_hitl(
            waiting.state,
            approvals={"s1": ToolApprovalDecision.approve(override_arguments={"replicas": "x"})},
        )


# -- 7. tool signatures --------------------------------------------------------------------


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


def test_a_tool_without_a_name_is_refused_naming_what_to_do() -> None:
    with pytest.raises(UserError, match="pass a name"):
        Tool(lambda city: city)
    assert Tool(lambda city: city, name="echo").name == "echo"


# -- 8. cancelled runs stop counting as waiting --------------------------------------------


async def test_cancel_clears_the_waiting_search_attributes(client: Client) -> None:
    name = unique("cancel")
    model = TestModel.with_responses([tool_response(call("scale", "c1", replicas=1))])

    def scale(replicas: int) -> str:
        return str(replicas)

    agent = AgentBuilder(model).name(name).tool(scale).approval_required_tools(["scale"]).build()
    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, name, "go")
        await wait_for_status(handle, "waiting")
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 20)
        description = await handle.describe()
    attributes = description.typed_search_attributes
    values = {pair.key.name: pair.value for pair in attributes}
    assert values["AgentStatus"] == "cancelled"
    assert values["PendingApprovals"] == 0


# -- 4. sync tools wait for no thread --------------------------------------------------------


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


async def test_status_of_a_terminated_run_reports_its_real_end(client: Client) -> None:
    """Terminate cannot run workflow code, so the run's own state still says waiting."""
    name = unique("terminate")
    model = TestModel.with_responses([tool_response(call("scale", "c1", replicas=1))])

    def scale(replicas: int) -> str:
        return str(replicas)

    agent = AgentBuilder(model).name(name).tool(scale).approval_required_tools(["scale"]).build()
    async with new_worker(client, agents=[agent]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        run = await agents.start(name, "go")
        await wait_for_status(run.handle, "waiting")
        await run.handle.terminate("ops cleanup")
        raw = await run.handle.query(AgentWorkflow.status)
        view = await run.status()
        listed = [r.workflow_id async for r in agents.list(status="waiting", agent=name)]
    assert raw.status == "waiting", "the workflow's own view cannot know"
    assert view.status == "failed"
    assert view.error == "terminated: the workflow was terminated"
    assert view.pending_approvals == []
    assert listed == []


# -- 10. what the README's commands need is installed -------------------------------------


@pytest.mark.server
def test_generate_key_needs_no_cryptography_package() -> None:
    """`./scripts/dev`'s venv used to lack `cryptography`, and generate-key failed there."""
    probe = (
        "import sys; sys.modules['cryptography'] = None\n"
        "from durable_agent.temporal.encryption import main, parse_keys\n"
        "main(['generate-key', '--id', 'k1'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    key_id, _, secret = out.stdout.strip().partition(":")
    assert key_id == "k1"
    assert len(base64.b64decode(secret)) == 32


def test_scripts_dev_installs_the_extras_the_readme_uses() -> None:
    """The dev stack's worker serves the example agents on any provider the docs name
    (DURABLE_AGENT_MODEL), the inbox, MCP tools, encryption and OTLP traces."""
    script = (ROOT / "scripts" / "dev").read_text()
    installed = re.search(r"pip install -q -e '\.\[([a-z0-9,]+)\]'", script)
    assert installed is not None, script
    extras = set(installed.group(1).split(","))
    assert {"openai", "anthropic", "crypto", "inbox", "mcp", "otel"} <= extras


# -- 13. install and docs -------------------------------------------------------------------


@pytest.mark.server
def test_building_the_package_prints_no_license_deprecation(tmp_path: Path) -> None:
    """setuptools warned that `license = { text = ... }` is deprecated on every install."""
    source = tmp_path / "source"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(".git", ".venv", ".temporal", "build", "*.egg-info"),
    )
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", tmp_path / "dist", source],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "project.license" not in out.stdout + out.stderr
    assert "License classifiers are deprecated" not in out.stdout + out.stderr


def test_the_docs_name_the_default_request_limit() -> None:
    limit = UsageLimits().request_limit
    assert limit == 50
    assert f"UsageLimits(request_limit={limit})" in (ROOT / "docs" / "runtime.md").read_text()
