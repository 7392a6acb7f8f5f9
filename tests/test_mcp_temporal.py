"""MCP servers through `AgentWorkflow`, on a real dev server: listing is an activity whose
result the run keeps, each call is a `tool_call` activity (`mcp demo:add · c1`), the server
runs once per worker, a killed server is restarted by the retried attempt, and no secret
from `env` or `headers` enters history.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import pytest
from temporalio.api.history.v1 import History
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from durable_agent import AgentBuilder, TestModel
from durable_agent.mcp import MCPServerStdio
from durable_agent.temporal import (
    AgentActivityConfig,
    AgentRegistration,
    AgentWorkflow,
    ApprovalSignal,
    DurableAgentPlugin,
    runtime_of,
)
from durable_agent.temporal.toolsets import ToolsetStartupError

from .helpers import call, text_response, tool_response
from .mcp_support import ROOT, DemoServer, http, http_server, wait_until_gone
from .temporal_support import (
    activity_summaries,
    fast_activity,
    new_worker,
    start_agent,
    unique,
    wait_for_status,
)

FAST = AgentActivityConfig(
    tool_call=fast_activity(heartbeat=2),
    list_tools=fast_activity(heartbeat=None),
    model_request=fast_activity(),
)


def mcp_agent(builder: AgentBuilder[str], name: str) -> AgentRegistration:
    """The agent `builder` builds, under a unique `name`, with quick retries."""
    return AgentRegistration(builder.name(unique(name)).build(), FAST)


async def history_bytes(client: Client, workflow_id: str) -> bytes:
    """Every event of the run as protobuf bytes: payloads appear as the JSON they hold."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return History(events=history.events).SerializeToString()


async def test_mcp_tools_run_as_activities_once_each_and_the_listing_is_kept(
    client: Client,
) -> None:
    demo = DemoServer()
    secret = "env-secret-" + os.urandom(6).hex()
    server = demo.stdio(env={"DEMO_SECRET": secret})
    hosted = mcp_agent(
        AgentBuilder(
            TestModel.with_responses(
                [
                    tool_response(call("add", "c1", a=1, b="x")),  # bad: the model retries
                    tool_response(call("add", "c2", a=2, b=3), call("secret_status", "c3")),
                    tool_response(call("grow", "c4")),
                    tool_response(call("late", "c5", word="hi")),
                    text_response("done"),
                ]
            )
        ).toolset(server),
        "mcp-flow",
    )
    name = hosted.agent.name
    async with new_worker(client, agents=[hosted]) as worker:
        runtime = runtime_of(worker)
        handle = await start_agent(client, worker, name, "do it")
        first = await handle.result()
        second = await (await start_agent(client, worker, name, "again")).result()
        summaries = await activity_summaries(handle)
        # One server process for the worker, used by both runs.
        assert len(demo.starts()) == 1
    assert first.output == "done"
    assert second.output == "done"

    # The listing is an activity; the run lists again only after the server said so.
    lists = [s for kind, s in summaries if kind == "list_tools"]
    assert lists == ["list_tools · mcp demo", "list_tools · mcp demo"]
    calls = [s for kind, s in summaries if kind == "tool_call"]
    assert calls == [
        "mcp demo:add · c1",
        "mcp demo:add · c2",
        "mcp demo:secret_status · c3",
        "mcp demo:grow · c4",
        "mcp demo:late · c5",
    ]
    order = [summary for _, summary in summaries]
    first_request = next(i for i, (kind, _) in enumerate(summaries) if kind == "model_request")
    assert order.index("list_tools · mcp demo") < first_request
    grown, late = order.index("mcp demo:grow · c4"), order.index("mcp demo:late · c5")
    assert "list_tools · mcp demo" in order[grown:late]
    # Model requests name the tool definitions by digest: the worker read them from the
    # workflow (toolset_tools query) once per distinct listing, not once per request.
    assert 1 <= runtime.caches.tool_definitions.misses <= 2

    # Bad arguments never reached the server; every good call ran exactly once per run.
    assert [c["arguments"] for c in demo.calls("add")] == [{"a": 2, "b": 3}] * 2
    assert len(demo.calls("late")) == 2
    # The server got the secret (it reports its length), and history never saw it.
    recorded = await history_bytes(client, handle.id)
    assert f"DEMO_SECRET has {len(secret)} characters".encode() in recorded
    assert secret.encode() not in recorded
    # The model requests referred to the toolset tools by digest; none carried schemas.
    assert b'"toolset_tools"' not in recorded
    assert b'"toolset_digest"' in recorded
    # The worker stopped: so did the server.
    wait_until_gone(demo.starts()[0])


async def test_an_approval_required_mcp_tool_waits_and_a_denied_call_never_reaches_it(
    client: Client,
) -> None:
    demo = DemoServer()
    hosted = mcp_agent(
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
        .approval_required_tools(["record"]),
        "mcp-approval",
    )
    name = hosted.agent.name
    async with new_worker(client, agents=[hosted]) as worker:
        handle = await start_agent(client, worker, name, "record")
        view = await wait_for_status(handle, "waiting")
        assert [(p.tool_call_id, p.tool_name) for p in view.pending_approvals] == [
            ("yes", "record"),
            ("no", "record"),
        ]
        assert demo.calls() == []
        # Override arguments are checked against the server's schema, in the update's
        # validator (workflow code), before the approval is spent.
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(
                AgentWorkflow.submit_approval,
                ApprovalSignal(tool_call_id="yes", approved=True, override_arguments={"text": 5}),
            )
        assert isinstance(refused.value.cause, ApplicationError)
        assert refused.value.cause.type == "invalid_approval"
        assert "override_arguments for tool 'record' (call 'yes') are invalid" in str(
            refused.value.cause.message
        )
        assert "5 is not of type 'string'" in refused.value.cause.message
        await handle.execute_update(
            AgentWorkflow.submit_approval, ApprovalSignal(tool_call_id="yes", approved=True)
        )
        await handle.execute_update(
            AgentWorkflow.submit_approval,
            ApprovalSignal(tool_call_id="no", approved=False, reason="not that"),
        )
        result = await handle.result()
    assert result.output == "done"
    (recorded,) = demo.calls("record")
    assert recorded["arguments"] == {"text": "one"}
    assert recorded["key"] == f"{handle.id}:yes"


async def test_a_server_killed_mid_call_is_restarted_and_the_run_completes(
    client: Client,
) -> None:
    demo = DemoServer()
    hosted = mcp_agent(
        AgentBuilder(
            TestModel.with_responses(
                [tool_response(call("slow_once", "s1", key="kill")), text_response("survived")]
            )
        ).toolset(demo.stdio()),
        "mcp-kill",
    )
    name = hosted.agent.name
    async with new_worker(client, agents=[hosted]) as worker:
        handle = await start_agent(client, worker, name, "go")
        pid = await asyncio.to_thread(demo.wait_for_marker, "kill")
        os.kill(pid, signal.SIGKILL)
        result = await handle.result()
    assert result.output == "survived"
    # The call reached the server twice (the killed attempt and the retry), on two processes.
    assert [c["pid"] for c in demo.calls("slow_once")] == demo.starts()
    assert len(demo.starts()) == 2
    history = await client.get_workflow_handle(handle.id).fetch_history()
    attempts = [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
    ]
    assert max(attempts) == 2


async def test_http_headers_stay_on_the_worker(client: Client) -> None:
    demo = DemoServer()
    token = "hdr-secret-" + os.urandom(6).hex()
    with http_server(demo, token=token) as url:
        hosted = mcp_agent(
            AgentBuilder(
                TestModel.with_responses(
                    [tool_response(call("add", "c1", a=20, b=22)), text_response("42")]
                )
            ).toolset(http(url, headers={"Authorization": f"Bearer {token}"})),
            "mcp-http",
        )
        name = hosted.agent.name
        async with new_worker(client, agents=[hosted]) as worker:
            handle = await start_agent(client, worker, name, "add")
            result = await handle.result()
    assert result.output == "42"
    assert len(demo.calls("add")) == 1
    recorded = await history_bytes(client, handle.id)
    assert b'{"result":42}' in recorded  # payloads are searchable as the JSON they hold
    assert token.encode() not in recorded


async def test_a_misconfigured_server_fails_the_run_at_once_with_the_reason(
    client: Client,
) -> None:
    ghost = MCPServerStdio("no-such-mcp-server-3f9a", name="ghost")
    hosted = mcp_agent(AgentBuilder(TestModel.with_text("x")).toolset(ghost), "mcp-ghost")
    name = hosted.agent.name
    worker = Worker(client, task_queue=unique("tq"), plugins=[DurableAgentPlugin()])
    # Hosted, not listed by a plugin: the run is the first to start its server (a plugin's
    # agents are checked when the worker starts, and it refuses to: the next test).
    runtime_of(worker).agents.register(hosted.agent, hosted.activities)
    async with worker:
        handle = await start_agent(client, worker, name, "go")
        with pytest.raises(WorkflowFailureError) as caught:
            await handle.result()
        view = await handle.query(AgentWorkflow.status)
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "mcp_server_misconfigured"
    assert "MCP server 'ghost'" in cause.message
    assert "no such command" in cause.message
    assert view.status == "failed"
    history = await client.get_workflow_handle(handle.id).fetch_history()
    attempts = [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
    ]
    assert attempts == [1]  # never retried


async def test_a_worker_hosting_a_misconfigured_server_refuses_to_start(client: Client) -> None:
    demo = DemoServer()
    broken = (
        AgentBuilder(TestModel.with_text("x"))
        .name(unique("mcp-bad-schema"))
        .toolset(demo.stdio(env={"DEMO_BAD_SCHEMA": "1"}))
        .build()
    )
    hosting = await Client.connect(
        client.service_client.config.target_host, plugins=[DurableAgentPlugin(agents=[broken])]
    )
    worker = Worker(hosting, task_queue=unique("tq"))
    with pytest.raises(ToolsetStartupError) as caught:
        await asyncio.wait_for(worker.run(), 60)
    assert str(caught.value).startswith(f"agent {broken.name!r}: MCP server 'demo'")
    assert "lists tool 'add' with an invalid input schema" in str(caught.value)
    wait_until_gone(demo.starts()[0])


async def test_durable_agent_worker_refuses_to_start_with_a_missing_server_command(
    client: Client,
) -> None:
    env = {**os.environ, "TEMPORAL_ADDRESS": client.service_client.config.target_host}
    env["TEMPORAL_TASK_QUEUE"] = unique("tq")
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "durable_agent.cli", "worker", "--agents", "tests.mcp_bad_agents"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip().endswith(
        "durable-agent worker: agent 'mcp-ghost-cli': MCP server 'ghost' (command "
        "'no-such-mcp-server-3f9a'): cannot start 'no-such-mcp-server-3f9a': no such command; "
        "install it on the worker (is it on the worker's PATH?) or give its full path"
    )
