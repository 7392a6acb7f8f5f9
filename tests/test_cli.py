"""The `durable-agent` CLI against the real dev server.

Commands run in-process through `amain`, in the test's event loop, so the worker each test
starts keeps polling while the command waits.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import structlog
from temporalio.client import Client

from durable_agent import AgentBuilder, CallDeferred, TestModel, ToolReturnPart
from durable_agent.cli.app import amain
from durable_agent.engine.spec import AgentSpec
from durable_agent.temporal import (
    AgentClient,
    AgentWorkflow,
    AgentWorkflowInput,
    ApprovalSignal,
    DurableAgentPlugin,
)
from durable_agent.temporal.client import list_query
from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.markdown import literal
from durable_agent.temporal.storage import external_storage_from_env

from .cli_support import Cli, cli_runner
from .helpers import CallLog, call, text_response, tool_response
from .temporal_support import deploy_agent as shared_deploy_agent
from .temporal_support import new_worker, unique
from .temporal_support import text_agent as shared_text_agent

ROOT = Path(__file__).resolve().parent.parent
TEXT_RUN_NODES = [
    "run_start",
    "prepare_model_request",
    "before_model_request",
    "model_response",
    "validate_output",
    "run_complete",
]


@pytest.fixture(autouse=True)
def quiet_worker_logs() -> Iterator[None]:
    """The in-process worker logs through structlog's default printer, i.e. to the stdout the
    commands' output is read from; a real CLI runs in its own process and never sees them."""
    with structlog.testing.capture_logs():
        yield


@pytest.fixture
def cli(dev_server: DevServer, capsys: pytest.CaptureFixture[str]) -> Cli:
    return cli_runner(dev_server.address, capsys)


def text_agent(text: str) -> AgentSpec:
    return shared_text_agent(text, "cli-text")


def deploy_agent(log: CallLog) -> AgentSpec:
    return shared_deploy_agent(log, "cli-deploy")


async def status_json(cli: Cli, workflow_id: str) -> dict[str, Any]:
    outcome = await cli("status", workflow_id, "--json")
    assert outcome.code == 0, outcome.err
    report: dict[str, Any] = outcome.json()
    return report


async def wait_until_waiting(cli: Cli, workflow_id: str, timeout: float = 20) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        report = await status_json(cli, workflow_id)
        if report["view"] and report["view"]["status"] == "waiting":
            return report
        assert asyncio.get_running_loop().time() < deadline, report
        await asyncio.sleep(0.1)


async def start_run(cli: Cli, task_queue: str, agent: str, *extra: str) -> str:
    outcome = await cli("run", agent, "ship it", "--task-queue", task_queue, *extra)
    assert outcome.code == 0, outcome.err
    workflow_id = outcome.out.strip()
    assert workflow_id.startswith(f"agent-{agent}-")
    assert f"durable-agent status {workflow_id}" in outcome.err
    return workflow_id


# -- run --------------------------------------------------------------------------------------


async def test_run_wait_prints_the_output(client: Client, cli: Cli) -> None:
    spec = text_agent("hello from the CLI")
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        outcome = await cli("run", agent, "say hi", "--wait", "--task-queue", worker.task_queue)
    assert outcome.code == 0, outcome.err
    workflow_id, output = outcome.out.strip().splitlines()
    assert workflow_id.startswith(f"agent-{agent}-")
    assert len(workflow_id) == len(f"agent-{agent}-") + 8
    assert output == "hello from the CLI"
    description = await client.get_workflow_handle(workflow_id).describe()
    assert await description.static_summary() == f"agent {literal(agent)}: say hi"


async def test_run_wait_json(client: Client, cli: Cli) -> None:
    spec = text_agent("structured")
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        outcome = await cli(
            "run", agent, "x", "--wait", "--json", "--id", unique("wf"),
            "--task-queue", worker.task_queue,
        )  # fmt: skip
    assert outcome.code == 0, outcome.err
    started, report = outcome.json_lines()
    assert started == {"workflow_id": report["workflow_id"], "run_id": report["run_id"]}
    assert report["result"]["output"] == "structured"
    assert report["result"]["status"] == "completed"
    assert report["failure"] is None


async def test_run_wait_on_a_failed_run_exits_1(client: Client, cli: Cli) -> None:
    async with new_worker(client) as worker:
        outcome = await cli(
            "run", "no-such-agent", "hi", "--wait", "--json", "--task-queue", worker.task_queue
        )
    assert outcome.code == 1
    assert "unknown_agent: no agent named 'no-such-agent'" in outcome.json_lines()[-1]["failure"]
    assert "failed: unknown_agent" in outcome.err


async def test_run_wait_says_how_to_approve_and_keeps_waiting(
    client: Client, cli: Cli, capsys: pytest.CaptureFixture[str], dev_server: DevServer
) -> None:
    log = CallLog()
    spec = deploy_agent(log)
    agent = spec.name
    workflow_id = unique("wf")
    async with new_worker(client, agents=[spec]) as worker:
        argv = ["run", agent, "ship", "--wait", "--id", workflow_id, "--task-queue"]
        task = asyncio.create_task(
            amain([*argv, worker.task_queue, "--address", dev_server.address])
        )
        err = ""
        deadline = asyncio.get_running_loop().time() + 20
        while f"durable-agent approve {workflow_id} d1" not in err:
            assert not task.done(), capsys.readouterr()
            assert asyncio.get_running_loop().time() < deadline, err
            await asyncio.sleep(0.1)
            err += capsys.readouterr().err
        assert 'waiting for approval of tool `deploy` {"env": "prod"}' in err
        assert f"durable-agent deny {workflow_id} d1 --reason TEXT" in err
        handle = client.get_workflow_handle_for(AgentWorkflow.run, workflow_id)
        await handle.execute_update(
            AgentWorkflow.submit_approval, ApprovalSignal(tool_call_id="d1", approved=True)
        )
        code = await asyncio.wait_for(task, 20)
    out = capsys.readouterr().out
    assert code == 0
    assert out.strip().splitlines()[-1] == "finished"
    assert log.calls == [("deploy", {"env": "prod"})]


# -- status and human decisions -----------------------------------------------------------


async def test_run_then_status_shows_the_pending_approval(client: Client, cli: Cli) -> None:
    spec = deploy_agent(CallLog())
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        workflow_id = await start_run(cli, worker.task_queue, agent)
        report = await wait_until_waiting(cli, workflow_id)
        outcome = await cli("status", workflow_id)
    assert report["execution_status"] == "running"
    (pending,) = report["view"]["pending_approvals"]
    assert datetime.fromisoformat(pending.pop("waiting_since")).tzinfo is not None
    assert pending == {
        "tool_call_id": "d1",
        "tool_name": "deploy",
        "arguments": {"env": "prod"},
        "reason": None,
        "decided": False,
        "expires_at": None,
        "approvers": None,
        "overridable": True,
    }
    assert outcome.code == 0, outcome.err
    lines = outcome.out.splitlines()
    assert f"workflow    {workflow_id}  (running)" in lines
    assert f"agent       {agent}" in lines
    assert "status      waiting" in lines
    assert "step        1" in lines
    assert "pending approvals (1):" in lines
    assert '  d1  deploy  {"env": "prod"}' in lines
    assert "deferred calls: none" in lines
    assert any(line.startswith("usage       requests=1 tool_calls=0") for line in lines)


async def test_approve_rejects_a_wrong_call_id_then_approves(client: Client, cli: Cli) -> None:
    log = CallLog()
    spec = deploy_agent(log)
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        workflow_id = await start_run(cli, worker.task_queue, agent)
        await wait_until_waiting(cli, workflow_id)
        wrong = await cli("approve", workflow_id, "nope")
        right = await cli("approve", workflow_id, "d1", "--by", "alice")
        result = await client.get_workflow_handle_for(AgentWorkflow.run, workflow_id).result()
        done = await cli("status", workflow_id)
        late = await cli("approve", workflow_id, "d1")
    assert wrong.code == 1
    assert wrong.out == ""
    assert "no pending approval for tool call id 'nope'; pending: ['d1']" in wrong.err
    assert right.code == 0, right.err
    assert right.out.strip() == "tool call 'd1' approved"
    assert result.output == "finished"
    assert log.calls == [("deploy", {"env": "prod"})]
    assert "status      completed" in done.out.splitlines()
    assert "result      finished" in done.out.splitlines()
    assert late.code == 1
    assert f"workflow {workflow_id!r} is completed; it no longer accepts approval" in late.err


async def test_approve_with_overridden_arguments(client: Client, cli: Cli) -> None:
    log = CallLog()
    spec = deploy_agent(log)
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        workflow_id = await start_run(cli, worker.task_queue, agent)
        await wait_until_waiting(cli, workflow_id)
        outcome = await cli("approve", workflow_id, "d1", "--args", '{"env": "staging"}', "--json")
        await client.get_workflow_handle_for(AgentWorkflow.run, workflow_id).result()
    assert outcome.code == 0, outcome.err
    assert outcome.json() == {
        "accepted": True,
        "message": "tool call 'd1' approved",
        "status": "running",  # the last missing decision: the run goes on
    }
    assert log.calls == [("deploy", {"env": "staging"})]


async def test_deny_with_a_reason(client: Client, cli: Cli) -> None:
    log = CallLog()
    spec = deploy_agent(log)
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        workflow_id = await start_run(cli, worker.task_queue, agent)
        await wait_until_waiting(cli, workflow_id)
        outcome = await cli("deny", workflow_id, "d1", "--reason", "change freeze", "--by", "bob")
        handle = client.get_workflow_handle_for(AgentWorkflow.run, workflow_id)
        result = await handle.result()
        latest = await handle.query(AgentWorkflow.latest_checkpoint)
    assert outcome.code == 0, outcome.err
    assert outcome.out.strip() == "tool call 'd1' denied"
    assert result.output == "finished"
    assert log.calls == []
    assert latest is not None
    denial = latest.state.message_history[2].parts[0]
    assert isinstance(denial, ToolReturnPart)
    assert denial.error_kind == "approval_denied"
    assert "change freeze" in denial.content


async def test_deny_needs_a_reason(cli: Cli) -> None:
    outcome = await cli("deny", "some-id", "d1")
    assert outcome.code == 2
    assert "--reason" in outcome.err


async def test_deferred_result(client: Client, cli: Cli) -> None:
    def background(job: str) -> str:
        raise CallDeferred("runs elsewhere")

    agent = unique("cli-deferred")
    model = TestModel.with_responses(
        [tool_response(call("background", "b1", job="x")), text_response("all done")]
    )
    spec = AgentBuilder(model).name(agent).tool(background).build()
    async with new_worker(client, agents=[spec]) as worker:
        workflow_id = await start_run(cli, worker.task_queue, agent)
        report = await wait_until_waiting(cli, workflow_id)
        status = await cli("status", workflow_id)
        wrong = await cli("deferred", workflow_id, "zzz", "--response", '"x"')
        right = await cli("deferred", workflow_id, "b1", "--response", '{"rows": 3}')
        result = await client.get_workflow_handle_for(AgentWorkflow.run, workflow_id).result()
    assert [d["tool_call_id"] for d in report["view"]["deferred_calls"]] == ["b1"]
    assert '  b1  background  {"job": "x"}  (runs elsewhere)' in status.out.splitlines()
    assert wrong.code == 1
    assert "no deferred call with id 'zzz'; deferred calls: ['b1']" in wrong.err
    assert right.code == 0, right.err
    assert "result for deferred call 'b1' recorded" in right.out
    assert result.output == "all done"


# -- suspend and resume ---------------------------------------------------------------------


async def test_resume_on_a_run_that_is_not_suspended_exits_1(client: Client, cli: Cli) -> None:
    spec = deploy_agent(CallLog())
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        workflow_id = await start_run(cli, worker.task_queue, agent)
        await wait_until_waiting(cli, workflow_id)
        outcome = await cli("resume", workflow_id)
        await cli("deny", workflow_id, "d1", "--reason", "cleanup")
        await client.get_workflow_handle(workflow_id).result()
    assert outcome.code == 1
    assert "run is not suspended (status: waiting)" in outcome.err
    assert "waits for approvals" in outcome.err


async def test_suspend_at_then_resume(client: Client, cli: Cli) -> None:
    spec = text_agent("resumed fine")
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        workflow_id = await start_run(
            cli, worker.task_queue, agent, "--suspend-at", "before_model_request"
        )
        report = await wait_until_waiting(cli, workflow_id)
        status = await cli("status", workflow_id)
        resumed = await cli("resume", workflow_id, "--reason", "looks good")
        result = await client.get_workflow_handle_for(AgentWorkflow.run, workflow_id).result()
        again = await cli("resume", workflow_id)
    assert report["view"]["node"] == "before_model_request"
    assert report["view"]["suspend_reason"] == "suspend_at before_model_request"
    assert (
        f"suspended   suspend_at before_model_request  (resume: durable-agent resume "
        f"{workflow_id})" in status.out.splitlines()
    )
    assert resumed.code == 0, resumed.err
    assert resumed.out.strip() == "run resumed"
    assert result.output == "resumed fine"
    assert again.code == 1
    assert "is completed; it no longer accepts resume" in again.err


async def test_suspend_signal_pauses_the_run(client: Client, cli: Cli) -> None:
    spec = deploy_agent(CallLog())
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        workflow_id = await start_run(cli, worker.task_queue, agent)
        await wait_until_waiting(cli, workflow_id)
        suspended = await cli("suspend", workflow_id, "--reason", "hold on")
        await cli("approve", workflow_id, "d1")
        deadline = asyncio.get_running_loop().time() + 20
        while (report := await status_json(cli, workflow_id))["view"]["suspend_reason"] is None:
            assert asyncio.get_running_loop().time() < deadline, report
            await asyncio.sleep(0.1)
        resumed = await cli("resume", workflow_id)
        result = await client.get_workflow_handle_for(AgentWorkflow.run, workflow_id).result()
    assert suspended.code == 0, suspended.err
    assert "suspend requested" in suspended.out
    assert report["view"]["suspend_reason"] == "hold on"
    assert resumed.code == 0, resumed.err
    assert result.output == "finished"


# -- checkpoints and list -------------------------------------------------------------------


async def test_checkpoints_list_the_nodes_in_order(client: Client, cli: Cli) -> None:
    spec = text_agent("ok")
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        run = await cli("run", agent, "hi", "--wait", "--task-queue", worker.task_queue)
        workflow_id = run.out.splitlines()[0]
        table = await cli("checkpoints", workflow_id)
        as_json = await cli("checkpoints", workflow_id, "--json")
        json_first = await cli("--json", "checkpoints", workflow_id)  # group options go first too
    assert table.code == 0, table.err
    header, *rows = table.out.strip().splitlines()
    assert header.split() == ["#", "NODE", "STEP", "STATUS", "MESSAGES", "BATCH", "PENDING"]
    assert [row.split()[0] for row in rows] == [str(i) for i in range(len(TEXT_RUN_NODES))]
    assert [row.split()[1] for row in rows] == TEXT_RUN_NODES
    assert rows[-1].split()[3] == "completed"
    assert [item["node"] for item in as_json.json()] == TEXT_RUN_NODES
    assert json_first.json() == as_json.json()


async def test_list_finds_a_waiting_run(client: Client, cli: Cli) -> None:
    spec = deploy_agent(CallLog())
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        workflow_id = await start_run(cli, worker.task_queue, agent)
        await wait_until_waiting(cli, workflow_id)
        deadline = asyncio.get_running_loop().time() + 10  # visibility lags behind
        while True:
            listed = await cli("list", "--status", "waiting", "--agent", agent, "--json")
            assert listed.code == 0, listed.err
            rows = [r for r in listed.json() if r["workflow_id"] == workflow_id]
            if rows and rows[0]["pending_approvals"] == 1:
                break
            assert asyncio.get_running_loop().time() < deadline, listed.out
            await asyncio.sleep(0.3)
        table = await cli("list", "--status", "waiting", "--agent", agent)
        completed = await cli("list", "--status", "completed", "--agent", agent, "--json")
        await cli("deny", workflow_id, "d1", "--reason", "cleanup")
        await client.get_workflow_handle(workflow_id).result()
    assert rows[0]["agent"] == agent
    assert rows[0]["status"] == "waiting"
    assert rows[0]["execution_status"] == "running"
    header, line = table.out.strip().splitlines()
    assert header.split() == ["WORKFLOW", "ID", "AGENT", "STATUS", "PENDING", "COST", "STARTED"]
    assert line.split()[:4] == [workflow_id, agent, "waiting", "1"]
    assert completed.json() == []


def test_list_query() -> None:
    assert list_query() == 'WorkflowType="AgentWorkflow"'
    assert list_query("waiting", "deployer") == (
        'WorkflowType="AgentWorkflow" AND AgentStatus="waiting" AND '
        'ExecutionStatus="Running" AND AgentName="deployer"'
    )
    assert list_query("completed") == 'WorkflowType="AgentWorkflow" AND AgentStatus="completed"'
    assert list_query(agent='say "hi"') == 'WorkflowType="AgentWorkflow" AND AgentName=\'say "hi"\''


# -- errors and exit codes ------------------------------------------------------------------


async def test_status_of_an_unknown_id_exits_3(cli: Cli) -> None:
    status = await cli("status", "no-such-workflow")
    approve = await cli("approve", "no-such-workflow", "d1")
    assert status.code == 3
    assert status.out == ""
    assert "no workflow with id 'no-such-workflow' in namespace 'default'" in status.err
    assert approve.code == 3


async def test_unreachable_server_exits_4(capsys: pytest.CaptureFixture[str]) -> None:
    code = await amain(["status", "anything", "--address", "127.0.0.1:1"])
    err = capsys.readouterr().err
    assert code == 4
    assert "cannot connect to the Temporal server at 127.0.0.1:1" in err
    assert "python worker.py --dev" in err


async def test_no_worker_answering_exits_5(client: Client, cli: Cli) -> None:
    workflow_id = unique("wf")
    await client.start_workflow(
        AgentWorkflow.run,
        AgentWorkflowInput(agent="nobody", prompt="hi"),
        id=workflow_id,
        task_queue=unique("no-worker"),
    )
    outcome = await cli("status", workflow_id, "--timeout", "1")
    await client.get_workflow_handle(workflow_id).terminate("test cleanup")
    assert outcome.code == 5
    assert "no worker answered the status query" in outcome.err


async def test_usage_errors_exit_2(cli: Cli, capsys: pytest.CaptureFixture[str]) -> None:
    bad_json = await cli("approve", "id", "d1", "--args", "{not json")
    not_object = await cli("approve", "id", "d1", "--args", "[1]")
    bad_node = await cli("run", "a", "b", "--suspend-at", "nowhere")
    both_quotes = await cli("list", "--agent", 'say "it\'s"')
    zero_timeout = await cli("status", "id", "--timeout", "0")
    no_command = await amain([])
    codes = (bad_json.code, not_object.code, bad_node.code, both_quotes.code, zero_timeout.code)
    assert (*codes, no_command) == (2, 2, 2, 2, 2, 2)
    assert "cannot search for a value with both kinds of quotes" in both_quotes.err
    assert "must be a number of seconds above 0, got 0" in zero_timeout.err
    assert "not valid JSON" in bad_json.err
    assert "expected a JSON object" in not_object.err
    assert "Invalid value for '--suspend-at': 'nowhere' is not one of" in bad_node.err
    assert await amain(["--help"]) == 0
    assert "exit codes:" in capsys.readouterr().out


async def test_module_entry_point(dev_server: DevServer) -> None:
    """`python -m durable_agent.cli`: the process's exit status is the documented code (the
    Temporal client's threads must not abort interpreter shutdown with 134)."""

    async def run(*argv: str) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "durable_agent.cli", *argv,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        out, err = await process.communicate()
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()

    helped = await run("status", "--help")
    unreachable = await run("status", "x", "--address", "127.0.0.1:1")
    listed = await run("list", "--limit", "1", "--address", dev_server.address)
    missing = await run("status", "no-such-workflow", "--address", dev_server.address)
    assert helped[0] == 0
    assert "3    workflow not found" in helped[1]
    assert unreachable[0] == 4
    assert unreachable[1] == ""
    assert "127.0.0.1:1" in unreachable[2]
    assert listed[0] == 0, listed[2]
    assert listed[1].startswith("WORKFLOW ID")
    assert missing[0] == 3, missing[2]


async def test_actions_on_a_workflow_that_is_not_an_agent_run_exit_1(
    client: Client, cli: Cli
) -> None:
    """No worker serves this workflow: the CLI must refuse at once, not wait for an answer
    (exit 5) or report a signal it sent as done (exit 0)."""
    other = await client.start_workflow(
        "NotAnAgent", id=unique("other"), task_queue=unique("no-worker")
    )
    started = asyncio.get_running_loop().time()
    outcomes = {
        "approve": await cli("approve", other.id, "d1", "--timeout", "30"),
        "resume": await cli("resume", other.id, "--timeout", "30"),
        "suspend": await cli("suspend", other.id, "--reason", "x", "--timeout", "30"),
        "status": await cli("status", other.id, "--timeout", "30"),
    }
    elapsed = asyncio.get_running_loop().time() - started
    history = await other.fetch_history()
    await other.terminate("test cleanup")
    assert elapsed < 10
    for name, outcome in outcomes.items():
        assert outcome.code == 1, (name, outcome)
        assert outcome.out == "", name
        assert outcome.err.strip() == (
            f"durable-agent: workflow {other.id!r} is not an agent run: its type is "
            "'NotAnAgent', not 'AgentWorkflow'"
        ), name
    assert not any(
        e.HasField("workflow_execution_signaled_event_attributes") for e in history.events
    )


# -- the process: Ctrl-C, the console script, `durable-agent worker` ------------------------

CONSOLE_SCRIPT = Path(sys.executable).parent / "durable-agent"


async def read_line(stream: asyncio.StreamReader, timeout: float = 30) -> str:
    line = await asyncio.wait_for(stream.readline(), timeout)
    return line.decode()


async def test_run_wait_json_prints_the_id_first_and_ctrl_c_exits_130(
    client: Client, dev_server: DevServer
) -> None:
    queue = unique("no-worker")
    process = await asyncio.create_subprocess_exec(
        str(CONSOLE_SCRIPT), "run", "nobody", "hi", "--wait", "--json",
        "--task-queue", queue, "--address", dev_server.address,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    first = json.loads(await read_line(process.stdout))
    process.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(process.communicate(), 30)
    description = await client.get_workflow_handle(first["workflow_id"]).describe()
    await client.get_workflow_handle(first["workflow_id"]).terminate("test cleanup")
    assert process.returncode == 130, err.decode()
    assert set(first) == {"workflow_id", "run_id"}
    assert first["workflow_id"].startswith("agent-nobody-")
    assert out == b""  # nothing after the id: the run has not ended
    assert f"the run goes on: durable-agent status {first['workflow_id']}" in err.decode()
    assert description.status is not None
    assert description.status.name == "RUNNING"


@pytest.mark.server
def test_worker_help_is_the_workers() -> None:
    helped = subprocess.run(
        [str(CONSOLE_SCRIPT), "worker", "--help"], capture_output=True, text=True, timeout=60
    )
    listed = subprocess.run(
        [str(CONSOLE_SCRIPT), "--help"], capture_output=True, text=True, timeout=60
    )
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("Usage: durable-agent worker")
    for flag in ("--agents MODULE", "--dev", "--log-format", "--no-examples"):
        assert flag in helped.stdout
    assert "TEMPORAL_ADDRESS" in helped.stdout
    assert listed.returncode == 0
    assert "  worker " in listed.stdout


async def test_durable_agent_worker_serves_a_run(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    """`durable-agent --address A worker --agents M`: the group's --address reaches the worker
    (TEMPORAL_ADDRESS points nowhere), which registers M's agents and serves their runs."""
    queue = unique("cli-worker")
    (tmp_path / "release").touch()  # tests.worker_agents' slow tool returns at once
    log = tmp_path / "worker.log"
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": "127.0.0.1:1",
        "TEMPORAL_TASK_QUEUE": queue,
        "DA_TEST_DIR": str(tmp_path),
        "PYTHONPATH": str(ROOT),
    }
    with open(log, "ab") as output:
        process = await asyncio.create_subprocess_exec(
            str(CONSOLE_SCRIPT), "--address", dev_server.address,
            "worker", "--agents", "tests.worker_agents", "--log-format", "json",
            cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        handle = await AgentClient(client, task_queue=queue).start("crash-demo", "go")
        result = await asyncio.wait_for(handle.result(), 60)
    finally:
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), 60)
    assert result.output == "finished after the slow tool", log.read_text()
    assert code == 0, log.read_text()
    assert '"worker started"' in log.read_text()


async def test_status_of_a_run_with_a_large_payload_finds_the_dev_stack_storage(
    dev_server: DevServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The dev stack keeps payloads over 64 KiB in .temporal/payloads; the CLI run from the
    same folder reads them without DURABLE_AGENT_STORAGE, and elsewhere says what to set."""
    monkeypatch.delenv("DURABLE_AGENT_STORAGE", raising=False)
    payloads = tmp_path / "stack" / ".temporal" / "payloads"
    payloads.mkdir(parents=True)
    storage = external_storage_from_env({"DURABLE_AGENT_STORAGE": f"file://{payloads}"})
    stored = await Client.connect(
        dev_server.address, plugins=[DurableAgentPlugin(external_storage=storage)]
    )
    name = unique("big-status")
    big = "y" * 100_000
    agent = AgentBuilder(TestModel.with_text(big)).name(name).build()
    async with new_worker(stored, agents=[agent]) as worker:
        run = await AgentClient(stored, task_queue=worker.task_queue).start(name, "go")
        await run.result()
        argv = ["status", run.id, "--json", "--address", dev_server.address]
        monkeypatch.chdir(tmp_path / "stack")
        capsys.readouterr()
        found = await amain(argv)
        found_out = capsys.readouterr().out
        monkeypatch.chdir(tmp_path)
        missing = await amain(argv)
        missing_err = capsys.readouterr().err
    assert found == 0
    assert big in found_out
    assert missing == 1
    assert "set DURABLE_AGENT_STORAGE as the worker has it" in missing_err
