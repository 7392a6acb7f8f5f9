"""MCP servers as toolsets, in-process: real servers (the SDK's own `MCPServer`) over stdio
and streamable HTTP, driven by scripted models.

What each test proves is in its name; `DemoServer` records every call that reached the
server, so "exactly once" and "never reached the server" are read from the server's side.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

import pytest

from durable_agent import (
    AgentBuilder,
    ApprovalRequired,
    CallDeferred,
    DeferredToolResult,
    FunctionModel,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TestModel,
    ToolApprovalDecision,
    ToolContext,
    ToolReturnPart,
    UserError,
)
from durable_agent.contract.toolsets import ToolsetMisconfigured, ToolsetResult
from durable_agent.mcp import (
    MCPServerMisconfigured,
    MCPServerStdio,
    MCPServerStreamableHTTP,
    MCPServerUnavailable,
    to_toolset_result,
)
from durable_agent.mcp.schemas import SchemaChecker
from durable_agent.models import AgentInfo

from .helpers import call, text_response, tool_response
from .mcp_support import DemoServer, free_port, http, http_server, wait_until_gone

pytestmark = pytest.mark.server


def returns(messages: list[ModelMessage]) -> dict[str, ToolReturnPart]:
    """Every tool return the model was sent, by call id."""
    return {
        part.tool_call_id: part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    }


def retry_prompts(messages: list[ModelMessage]) -> list[str]:
    return [
        part.content
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if part.kind == "retry_prompt"
    ]


# -- listing and calling -------------------------------------------------------------------


async def test_the_model_sees_the_servers_schemas_and_each_call_runs_once() -> None:
    demo = DemoServer()
    server = demo.stdio()
    shown: list[AgentInfo] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        shown.append(info)
        if len(shown) == 1:
            return tool_response(call("add", "c1", a=2, b=3))
        return text_response("5")

    agent = (
        AgentBuilder(FunctionModel(model))
        .tool(lambda_free_echo, name="echo")
        .toolset(server)
        .build()
    )
    result = await agent.run("add 2 and 3")

    assert result.output == "5"
    tools = {tool.name: tool for tool in shown[0].function_tools}
    assert {"echo", "add", "record", "fail", "picture", "slow_once", "grow"} <= set(tools)
    assert tools["add"].description == "Add two integers."
    schema = tools["add"].parameters_json_schema
    assert schema["required"] == ["a", "b"]
    assert schema["properties"]["a"]["type"] == "integer"
    assert returns(result.messages)["c1"].content == {"result": 5}
    assert [c["arguments"] for c in demo.calls("add")] == [{"a": 2, "b": 3}]
    # The run opened the server's session for the run, and closed it: the process is gone.
    assert server.sessions_opened == 1
    assert not server.is_open
    (pid,) = demo.starts()
    wait_until_gone(pid)
    # The listing is in the run's state (and so in every later checkpoint).
    (listing,) = result.state.toolset_listings
    assert listing.toolset == "demo"
    assert "add" in {t.name for t in listing.tools}


def lambda_free_echo(text: str) -> str:
    """Echo the text back."""
    return text


async def test_bad_arguments_go_back_to_the_model_and_never_reach_the_server() -> None:
    demo = DemoServer()
    agent = (
        AgentBuilder(
            TestModel.with_responses(
                [
                    tool_response(call("add", "c1", a=1, b="two")),
                    tool_response(call("add", "c2", a=1, b=2)),
                    text_response("3"),
                ]
            )
        )
        .toolset(demo.stdio())
        .build()
    )
    result = await agent.run("add")
    (prompt,) = retry_prompts(result.messages)
    problems = json.loads(prompt.removeprefix("Validation failed: ").split("\n")[0])
    assert problems == [{"loc": ["b"], "msg": "'two' is not of type 'integer'", "type": "type"}]
    assert [c["arguments"] for c in demo.calls("add")] == [{"a": 1, "b": 2}]
    assert result.output == "3"


async def test_a_model_that_keeps_sending_bad_arguments_exhausts_the_servers_retries() -> None:
    demo = DemoServer()
    bad = tool_response(call("add", "c1", a="x", b=1))
    agent = (
        AgentBuilder(TestModel.with_responses([bad, bad, bad]))
        .toolset(demo.stdio(max_retries=1))
        .build()
    )
    with pytest.raises(Exception, match="exceeded its retry limit of 1") as caught:
        await agent.run("add")
    assert type(caught.value).__name__ == "ToolRetryLimitExceeded"
    assert demo.calls() == []


async def test_tool_errors_and_contents_reach_the_model_as_tool_returns() -> None:
    demo = DemoServer()
    agent = (
        AgentBuilder(
            TestModel.with_responses(
                [
                    tool_response(
                        call("fail", "c1", reason="disk full"),
                        call("picture", "c2"),
                        call("readme", "c3"),
                        call("record", "c4", text="hi"),
                    ),
                    text_response("done"),
                ]
            )
        )
        .toolset(demo.stdio())
        .build()
    )
    result = await agent.run("go")
    got = returns(result.messages)
    assert got["c1"].is_error
    assert got["c1"].error_kind == "mcp_tool_error"
    assert "cannot do that: disk full" in got["c1"].content
    caption, image = got["c2"].content
    assert caption == "a red pixel"
    assert image["type"] == "image"
    assert image["mime_type"] == "image/png"
    assert image["bytes"] == 67
    assert "data" not in image
    assert got["c3"].content == {
        "type": "resource",
        "uri": "file:///README.md",
        "mime_type": "text/markdown",
        "text": "# Hi",
    }
    assert got["c4"].content == {"result": "recorded hi"}
    assert not got["c4"].is_error


async def test_an_unknown_tool_name_lists_the_function_and_server_tools() -> None:
    demo = DemoServer()
    agent = (
        AgentBuilder(
            TestModel.with_responses([tool_response(call("nope", "c1")), text_response("ok")])
        )
        .tool(lambda_free_echo, name="echo")
        .toolset(demo.stdio())
        .build()
    )
    result = await agent.run("go")
    (prompt,) = retry_prompts(result.messages)
    assert prompt.startswith("Unknown tool name: 'nope'. Available tools: add, echo, fail")
    assert demo.calls() == []


# -- humans in the loop --------------------------------------------------------------------


async def test_an_approval_required_mcp_tool_waits_and_a_denied_call_never_runs() -> None:
    demo = DemoServer()
    agent = (
        AgentBuilder(
            TestModel.with_responses(
                [
                    tool_response(
                        call("record", "yes", text="one"), call("record", "no", text="two")
                    ),
                    text_response("done"),
                ]
            )
        )
        .toolset(demo.stdio())
        .approval_required_tools(["record"])
        .build()
    )
    waiting = await agent.run("record two lines")
    assert waiting.status == "waiting"
    assert [a.tool_call_id for a in waiting.pending_approvals] == ["yes", "no"]
    assert demo.calls() == []

    done = await agent.resume_after_hitl(
        waiting.state,
        approvals={
            "yes": ToolApprovalDecision.approved(decided_by="alice"),
            "no": ToolApprovalDecision.denied("not that one", decided_by="bob"),
        },
    )
    assert done.output == "done"
    (recorded,) = demo.calls("record")
    assert recorded["arguments"] == {"text": "one"}
    # The server gets the call's idempotency key, the same on every attempt of the call.
    assert recorded["key"] == f"{waiting.state.run_id}:yes"
    denied = returns(done.messages)["no"]
    assert denied.error_kind == "approval_denied"
    assert "not that one" in denied.content


async def test_override_arguments_are_checked_against_the_servers_schema() -> None:
    demo = DemoServer()
    agent = (
        AgentBuilder(
            TestModel.with_responses(
                [tool_response(call("add", "c1", a=1, b=1)), text_response("done")]
            )
        )
        .toolset(demo.stdio())
        .approval_required_tools(["add"])
        .build()
    )
    waiting = await agent.run("add")
    bad = ToolApprovalDecision.approved(override_arguments={"a": "one", "b": 1})
    with pytest.raises(UserError, match=r"override_arguments for tool 'add'.*'one' is not of type"):
        await agent.resume_after_hitl(waiting.state, approvals={"c1": bad})
    good = ToolApprovalDecision.approved(override_arguments={"a": 40, "b": 2})
    done = await agent.resume_after_hitl(waiting.state, approvals={"c1": good})
    assert returns(done.messages)["c1"].content == {"result": 42}
    assert [c["arguments"] for c in demo.calls("add")] == [{"a": 40, "b": 2}]


async def test_process_tool_call_asks_for_approval_by_tool_name() -> None:
    demo = DemoServer()
    seen: list[str] = []

    async def guard(ctx: ToolContext, call_tool: Any, arguments: dict[str, Any]) -> ToolsetResult:
        seen.append(ctx.idempotency_key)
        if ctx.tool_name == "record" and not ctx.approved:
            raise ApprovalRequired("recording needs a human")
        result: ToolsetResult = await call_tool(arguments)
        return result

    agent = (
        AgentBuilder(
            TestModel.with_responses(
                [
                    tool_response(call("add", "a1", a=1, b=2), call("record", "r1", text="x")),
                    text_response("done"),
                ]
            )
        )
        .toolset(demo.stdio(process_tool_call=guard))
        .build()
    )
    waiting = await agent.run("go")
    assert [(a.tool_call_id, a.reason) for a in waiting.pending_approvals] == [
        ("r1", "recording needs a human")
    ]
    assert [c["tool"] for c in demo.calls()] == ["add"]
    done = await agent.resume_after_hitl(waiting.state, approvals={"r1": True})
    assert done.output == "done"
    assert [c["tool"] for c in demo.calls()] == ["add", "record"]
    assert seen[-1] == f"{waiting.state.run_id}:r1"


async def test_process_tool_call_defers_a_call_whose_result_comes_from_outside() -> None:
    demo = DemoServer()

    async def defer(ctx: ToolContext, call_tool: Any, arguments: dict[str, Any]) -> ToolsetResult:
        if ctx.tool_name == "record":
            raise CallDeferred("a person records it", metadata={"queue": "ops"})
        result: ToolsetResult = await call_tool(arguments)
        return result

    agent = (
        AgentBuilder(
            TestModel.with_responses(
                [tool_response(call("record", "r1", text="x")), text_response("done")]
            )
        )
        .toolset(demo.stdio(process_tool_call=defer))
        .build()
    )
    waiting = await agent.run("go")
    (deferred,) = waiting.deferred_calls
    assert (deferred.tool_call_id, deferred.reason, deferred.metadata) == (
        "r1",
        "a person records it",
        {"queue": "ops"},
    )
    done = await agent.resume_after_hitl(
        waiting.state, deferred_results=[DeferredToolResult("r1", "success", "recorded by bob")]
    )
    assert done.output == "done"
    assert returns(done.messages)["r1"].content == "recorded by bob"
    assert demo.calls() == []


# -- several servers -----------------------------------------------------------------------


async def test_two_servers_with_the_same_tool_names_need_a_prefix() -> None:
    first, second = DemoServer(), DemoServer()
    script = [tool_response(call("b_add", "c1", a=1, b=1)), text_response("ok")]
    clashing = (
        AgentBuilder(TestModel.with_responses(script))
        .toolset(first.stdio(name="first"))
        .toolset(second.stdio(name="second"))
        .build()
    )
    with pytest.raises(ToolsetMisconfigured) as caught:
        await clashing.run("go")
    message = str(caught.value)
    assert "toolsets 'first' and 'second' both offer a tool named 'add'" in message
    assert "tool_prefix" in message

    prefixed = (
        AgentBuilder(TestModel.with_responses(script))
        .toolset(first.stdio(name="first", tool_prefix="a"))
        .toolset(second.stdio(name="second", tool_prefix="b"))
        .build()
    )
    result = await prefixed.run("go")
    assert returns(result.messages)["c1"].content == {"result": 2}
    assert first.calls() == []
    assert len(second.calls("add")) == 1


def test_two_servers_under_one_name_are_refused_at_build() -> None:
    demo = DemoServer()
    builder = AgentBuilder(TestModel.with_text("x")).toolset(demo.stdio()).toolset(demo.stdio())
    with pytest.raises(UserError, match="two toolsets are named 'demo'"):
        builder.build()


async def test_a_misspelt_approval_name_fails_the_run_at_the_first_listing() -> None:
    demo = DemoServer()
    agent = (
        AgentBuilder(TestModel.with_text("x"))
        .toolset(demo.stdio())
        .approval_required_tools(["recrod"])
        .build()
    )
    with pytest.raises(
        UserError, match=r"approval_required_tools names unknown tool\(s\) \['recrod'\]"
    ):
        await agent.run("go")


# -- the server's life ---------------------------------------------------------------------


async def test_a_server_open_across_runs_is_started_once_and_restarted_after_a_crash() -> None:
    demo = DemoServer()
    server = demo.stdio()
    script = [tool_response(call("add", "c1", a=1, b=1)), text_response("ok")]
    agent = AgentBuilder(TestModel.with_responses(script)).toolset(server).build()
    async with server:
        await agent.run("one")
        await agent.run("two")
        assert len(demo.starts()) == 1
        os.kill(demo.starts()[0], signal.SIGKILL)
        wait_until_gone(demo.starts()[0])
        # The next use notices the dead session and starts the server again.
        result = await agent.run("three")
    assert result.output == "ok"
    assert len(demo.starts()) == 2
    assert server.sessions_opened == 2
    assert len(demo.calls("add")) == 3
    wait_until_gone(demo.starts()[1])


async def test_a_server_killed_mid_call_fails_the_call_as_unavailable() -> None:
    demo = DemoServer()
    agent = (
        AgentBuilder(
            TestModel.with_responses(
                [tool_response(call("slow_once", "c1", key="k")), text_response("ok")]
            )
        )
        .toolset(demo.stdio())
        .build()
    )
    import asyncio

    run = asyncio.ensure_future(agent.run("go"))
    pid = await asyncio.to_thread(demo.wait_for_marker, "k")
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(
        MCPServerUnavailable, match="the connection closed while calling 'slow_once'"
    ):
        await run


async def test_a_tool_list_change_is_seen_by_the_next_model_request() -> None:
    demo = DemoServer()
    shown: list[list[str]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        shown.append([t.name for t in info.function_tools])
        step = len(shown)
        if step == 1:
            return tool_response(call("grow", "g1"))
        if step == 2:
            return tool_response(call("late", "l1", word="hi"))
        return text_response("done")

    agent = AgentBuilder(FunctionModel(model)).toolset(demo.stdio()).build()
    result = await agent.run("grow")
    assert "late" not in shown[0]
    assert "late" in shown[1]
    assert returns(result.messages)["l1"].content == {"result": "late hi"}


# -- streamable HTTP -----------------------------------------------------------------------


async def test_a_streamable_http_server_with_a_bearer_token() -> None:
    demo = DemoServer()
    token = "tok-" + os.urandom(8).hex()
    script = [tool_response(call("add", "c1", a=20, b=22)), text_response("42")]
    with http_server(demo, token=token) as url:
        server = http(url, headers={"Authorization": f"Bearer {token}"})
        agent = AgentBuilder(TestModel.with_responses(script)).toolset(server).build()
        result = await agent.run("add")
        assert returns(result.messages)["c1"].content == {"result": 42}
        assert len(demo.calls("add")) == 1
        assert token not in repr(server)
        assert token not in result.state.model_dump_json()

        anonymous = AgentBuilder(TestModel.with_responses(script)).toolset(http(url)).build()
        with pytest.raises(MCPServerMisconfigured) as caught:
            await anonymous.run("add")
    assert "HTTP 401" in str(caught.value)
    assert "check the credentials in headers" in str(caught.value)
    assert len(demo.calls("add")) == 1


# -- bad input -----------------------------------------------------------------------------


async def run_with(server: Any) -> None:
    await AgentBuilder(TestModel.with_text("x")).toolset(server).build().run("go")


async def test_a_command_that_does_not_exist() -> None:
    server = MCPServerStdio("no-such-mcp-server-3f9a", ["--stdio"], name="ghost")
    with pytest.raises(MCPServerMisconfigured) as caught:
        await run_with(server)
    assert str(caught.value) == (
        "MCP server 'ghost' (command 'no-such-mcp-server-3f9a --stdio'): cannot start "
        "'no-such-mcp-server-3f9a': no such command; install it on the worker (is it on the "
        "worker's PATH?) or give its full path"
    )


async def test_a_command_that_speaks_no_mcp() -> None:
    chatty = "import sys, time\nprint('hello, I am not an MCP server', flush=True)\ntime.sleep(1)"
    server = MCPServerStdio(sys.executable, ["-c", chatty], name="chatty")
    with pytest.raises(MCPServerMisconfigured, match=r"'chatty'.*it does not speak MCP"):
        await run_with(server)


async def test_a_silent_command_times_out_as_unavailable() -> None:
    silent = MCPServerStdio(
        sys.executable,
        ["-c", "import time; time.sleep(60)"],
        name="silent",
        connect_timeout_seconds=1,
    )
    with pytest.raises(MCPServerUnavailable, match="no MCP handshake within 1 s"):
        await run_with(silent)


async def test_a_url_that_does_not_answer() -> None:
    server = MCPServerStreamableHTTP(
        f"http://127.0.0.1:{free_port()}/mcp?key=s3cr3t-value", name="docs"
    )
    with pytest.raises(MCPServerUnavailable) as caught:
        await run_with(server)
    message = str(caught.value)
    assert message.startswith("MCP server 'docs' (http://127.0.0.1:")
    assert "no answer (ConnectError" in message
    assert "s3cr3t" not in message


async def test_a_url_that_is_not_an_mcp_endpoint() -> None:
    demo = DemoServer()
    with http_server(demo) as url:
        server = MCPServerStreamableHTTP(url.replace("/mcp", "/elsewhere"), name="docs")
        with pytest.raises(
            MCPServerMisconfigured, match="HTTP 404: is this the server's MCP endpoint"
        ):
            await run_with(server)


async def test_a_tool_with_an_invalid_schema() -> None:
    demo = DemoServer()
    server = demo.stdio(env={"DEMO_BAD_SCHEMA": "1"})
    with pytest.raises(
        MCPServerMisconfigured, match="lists tool 'add' with an invalid input schema"
    ):
        await run_with(server)


def test_configuration_mistakes_are_refused_when_the_server_is_made() -> None:
    with pytest.raises(UserError, match="needs a command"):
        MCPServerStdio("")
    with pytest.raises(UserError, match="args must be a list of strings"):
        MCPServerStdio("npx", "-y server")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="needs an http\\(s\\) URL"):
        MCPServerStreamableHTTP("localhost:8000/mcp")
    with pytest.raises(UserError, match="name 'my server' is not allowed"):
        MCPServerStdio("npx", name="my server")
    with pytest.raises(UserError, match="toolset needs a Toolset"):
        AgentBuilder(TestModel.with_text("x")).toolset(object())  # type: ignore[arg-type]


async def test_using_a_server_that_is_not_open_says_how_to_open_it() -> None:
    with pytest.raises(UserError, match=r"is not open: run the agent with agent\.run"):
        await DemoServer().stdio().list_tools()


# -- units ---------------------------------------------------------------------------------


def test_default_names_come_from_the_command_or_the_host() -> None:
    assert MCPServerStdio("npx", ["-y", "@modelcontextprotocol/server-github"]).name == (
        "server-github"
    )
    assert MCPServerStdio("uvx", ["mcp-server-git@1.2", "--repo", "."]).name == "mcp-server-git"
    assert MCPServerStdio("python", ["-m", "mcp_server_time"]).name == "mcp_server_time"
    assert MCPServerStdio("/usr/local/bin/weather.py").name == "weather"
    assert MCPServerStreamableHTTP("https://api.example.com/mcp").name == "api.example.com"


def test_secrets_stay_out_of_reprs_and_messages() -> None:
    server = MCPServerStdio("npx", ["srv"], {"TOKEN": "ghp_secret"}, name="gh")
    assert "ghp_secret" not in repr(server)
    assert server.env_names == ["TOKEN"]
    assert "ghp_secret" not in str(server.unavailable("echoed ghp_secret back"))
    web = MCPServerStreamableHTTP(
        "https://user:pw@example.com/mcp?api_key=k123", {"X-Key": "hdr-secret"}, name="web"
    )
    assert web.describe() == "https://example.com/mcp"
    assert "hdr-secret" not in str(web.misconfigured("got hdr-secret and k123 and pw"))
    assert "k123" not in str(web.misconfigured("api_key=k123"))


def test_schema_problems_read_like_pydantic_retry_prompts() -> None:
    checker = SchemaChecker("s")
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    assert checker.problem("t", schema, {"n": 1}) is None
    assert checker.problem("t", schema, {}) == (
        'Validation failed: [{"loc": [], "msg": "\'n\' is a required property", "type": '
        '"required"}]\nFix the errors and try again.'
    )
    with pytest.raises(MCPServerMisconfigured, match="of type 'string'"):
        checker.compile("t", {"type": "string"})


def test_results_without_content_or_with_structured_content_only() -> None:
    from mcp_types import CallToolResult, TextContent

    assert to_toolset_result(CallToolResult(content=[])).content == ""
    mixed = CallToolResult(
        content=[TextContent(text="a"), TextContent(text="b")], structured_content={"x": 1}
    )
    assert to_toolset_result(mixed).content == {"x": 1}
    error = to_toolset_result(CallToolResult(content=[], is_error=True))
    assert error.is_error
    assert error.content == "the tool reported an error"
