"""`durable-agent watch` and `durable-agent checkpoints` against a real dev server.

The live view is tested through a real terminal (tmux): the text appears while the model
writes it, and the command to approve shows when the run waits. The rest runs the CLI
in-process (`amain`), as tests/test_cli.py does: --json, the plain-line output (steering
messages included), bad input and its exit codes, and checkpoints of a run that continued
as new, also after retention deleted one of its runs.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from temporalio import workflow
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from durable_agent import AgentBuilder, ModelResponse, TestModel, TextPart, ToolCallPart
from durable_agent.cli.app import amain
from durable_agent.temporal import AgentActivityConfig, AgentClient, AgentRegistration
from durable_agent.temporal.devserver import DevServer, temporal_cli

from .cli_support import Cli, cli_runner
from .helpers import CallLog
from .temporal_support import deploy_agent as shared_deploy_agent
from .temporal_support import fast_activity, new_worker, unique, wait_for_status

LONG_TEXT = (
    "I looked at the release notes and the error budget, and everything says it is safe "
    "to deploy now."
)


@pytest.fixture(autouse=True)
def quiet_worker_logs() -> Iterator[None]:
    with structlog.testing.capture_logs():
        yield


@pytest.fixture
def cli(dev_server: DevServer, capsys: pytest.CaptureFixture[str]) -> Cli:
    return cli_runner(dev_server.address, capsys)


def deploy(env: str) -> str:
    return f"deployed to {env}"


def deploy_agent(*, delay: float = 0.0, steps: int = 1, **config: Any) -> AgentRegistration:
    """Says what it will do (streamed), asks to deploy (approval), then answers."""
    name = unique("watch")
    script = [
        ModelResponse(
            parts=[
                TextPart(text=f"Check {i}: all good."),
                ToolCallPart(id=f"c{i}", name="deploy", arguments={"env": f"stage{i}"}),
            ]
        )
        for i in range(1, steps)
    ]
    script += [
        ModelResponse(
            parts=[
                TextPart(text=LONG_TEXT),
                ToolCallPart(id="d1", name="deploy", arguments={"env": "prod"}),
            ]
        ),
        ModelResponse(parts=[TextPart(text="Deployed to prod.")]),
    ]
    model = TestModel.with_responses(script).streamed(chunk=4, delay=delay)
    agent = AgentBuilder(model).name(name).tool(deploy).approval_required_tools(["deploy"]).build()
    fast = fast_activity()
    return AgentRegistration(
        agent,
        AgentActivityConfig(
            prepare_model_request=fast,
            model_request=fast,
            tool_call=fast,
            validate_output=fast,
            **config,
        ),
    )


async def finished_run(client: Client, agent: str, worker_queue: str) -> str:
    agents = AgentClient(client)
    handle = await agents.start(agent, "deploy", task_queue=worker_queue)
    result = asyncio.ensure_future(handle.result())
    while not result.done():
        view = await handle.status()
        undecided = [p for p in view.pending_approvals if not p.decided]
        if view.status == "waiting" and undecided:
            await handle.approve(undecided[0].tool_call_id, by="alice")
        await asyncio.sleep(0.05)
    await result
    return handle.id


async def test_watch_json_prints_every_record_once_and_resumes_from_a_seq(
    client: Client, cli: Cli
) -> None:
    hosted = deploy_agent()
    agent = hosted.agent.name
    async with new_worker(client, agents=[hosted]) as worker:
        workflow_id = await finished_run(client, agent, worker.task_queue)
        whole = await cli("watch", workflow_id, "--json")
        rest = await cli("watch", workflow_id, "--from", "20", "--json")
        plain = await cli("watch", workflow_id)
    assert whole.code == 0, whole.err
    records = whole.json_lines()
    assert [r["seq"] for r in records] == list(range(len(records)))
    assert rest.json_lines() == records[20:]
    assert plain.code == 0, plain.err
    assert f"durable-agent approve {workflow_id} d1" in plain.out
    assert f"step 1: {LONG_TEXT}" in plain.out
    assert "d1 approved by alice" in plain.out
    assert "completed: Deployed to prod." in plain.out


@workflow.defn(name="NotAnAgentToWatch")
class NotAnAgentToWatch:
    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)


async def test_watch_bad_input_gives_clear_messages_and_exit_codes(
    client: Client, cli: Cli
) -> None:
    hosted = deploy_agent()
    agent = hosted.agent.name
    async with new_worker(client, workflows=[NotAnAgentToWatch], agents=[hosted]) as worker:
        workflow_id = await finished_run(client, agent, worker.task_queue)
        last = (await cli("watch", workflow_id, "--json")).json_lines()[-1]["seq"]
        unknown = await cli("watch", "no-such-run")
        other = await client.start_workflow(
            NotAnAgentToWatch.run, id=unique("other"), task_queue=worker.task_queue
        )
        not_agent = await cli("watch", other.id)
        await other.terminate()
        negative = await cli("watch", workflow_id, "--from", "-1")
        past = await cli("watch", workflow_id, "--from", str(last + 50))
        caught_up = await cli("watch", workflow_id, "--from", str(last + 1), "--json")
        history = await client.get_workflow_handle(workflow_id).fetch_history()
    assert unknown.code == 3
    assert "no workflow with id 'no-such-run'" in unknown.err
    assert not_agent.code == 1
    assert "is not an agent run: its type is 'NotAnAgentToWatch'" in not_agent.err
    assert negative.code == 2
    assert "-1 is not in the range x>=0" in negative.err
    assert past.code == 1
    assert f"its last record is seq {last}" in past.err
    assert caught_up.code == 0
    assert caught_up.out == ""
    assert f"there is nothing from seq {last + 1} on" in caught_up.err
    after = await client.get_workflow_handle(workflow_id).fetch_history()
    assert len(after.events) == len(history.events), "watching changes nothing"


async def test_watch_exits_1_for_a_failed_run(client: Client, cli: Cli) -> None:
    def boom(env: str) -> str:
        raise RuntimeError("the deploy service is down")

    name = unique("watch-fail")
    model = TestModel.with_responses(
        [ModelResponse(parts=[ToolCallPart(id="b1", name="boom", arguments={"env": "x"})])]
    )
    fast = fast_activity(maximum_attempts=1)
    agent = AgentRegistration(
        AgentBuilder(model).name(name).tool(boom).build(),
        AgentActivityConfig(model_request=fast, tool_call=fast),
    )
    async with new_worker(client, agents=[agent]) as worker:
        handle = await AgentClient(client).start(name, "go", task_queue=worker.task_queue)
        watched = await cli("watch", handle.id)
    assert watched.code == 1
    assert "failed: " in watched.out


async def test_checkpoints_cli_lists_every_boundary_of_a_run_that_continued_as_new(
    client: Client, cli: Cli, dev_server: DevServer
) -> None:
    hosted = deploy_agent(steps=4, continue_as_new_after_steps=1)
    agent = hosted.agent.name
    async with new_worker(client, agents=[hosted]) as worker:
        workflow_id = await finished_run(client, agent, worker.task_queue)
        handle = AgentClient(client).get(workflow_id)
        view = await handle.status()
        runs = await handle.runs()
        table = await cli("checkpoints", workflow_id)
        as_json = await cli("checkpoints", workflow_id, "--json")
        records = (await cli("watch", workflow_id, "--json")).json_lines()

        await delete_run(dev_server.address, client, workflow_id, runs[0].run_id)
        gone_table = await cli("checkpoints", workflow_id)
        gone_records = (await cli("watch", workflow_id, "--json")).json_lines()
    assert len(runs) >= 3
    assert table.code == 0, table.err
    _, *rows = table.out.strip().splitlines()
    assert [int(row.split()[0]) for row in rows] == list(range(view.checkpoint_count))
    assert [row.split()[1] for row in rows][:2] == ["run_start", "prepare_model_request"]
    assert [row.split()[1] for row in rows][-1] == "run_complete"
    assert len(as_json.out and json.loads(as_json.out)) == view.checkpoint_count
    assert [r["seq"] for r in records] == list(range(len(records)))

    first_count = runs[1].first_checkpoint
    assert gone_table.code == 0, gone_table.err
    _, *gone_rows = gone_table.out.strip().splitlines()
    assert [int(row.split()[0]) for row in gone_rows] == list(
        range(first_count, view.checkpoint_count)
    )
    assert (
        f"note: checkpoints 0-{first_count - 1} cannot be shown: run {runs[0].run_id}"
        in gone_table.err
    )
    assert gone_records == records[runs[1].first_seq :], "the rest of the stream still reads"


async def delete_run(address: str, client: Client, workflow_id: str, run_id: str) -> None:
    """What namespace retention does to a closed run: `temporal workflow delete`."""
    deleted = subprocess.run(
        [
            *(temporal_cli(), "workflow", "delete", "--address", address),
            *("--workflow-id", workflow_id, "--run-id", run_id),
        ],
        input="y\n",
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    for _ in range(180):  # deletion is asynchronous
        try:
            await client.get_workflow_handle(workflow_id, run_id=run_id).describe()
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return
            raise
        await asyncio.sleep(0.5)
    raise AssertionError(f"run {run_id} was not deleted within 90 s")


# -- through a real terminal ----------------------------------------------------------------


@pytest.fixture
def tmux() -> Iterator[Callable[..., str]]:
    """A private tmux server (its own socket): start a session, read its screen."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    socket = f"da-watch-{uuid.uuid4().hex[:8]}"

    def run(*args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", socket, *args], capture_output=True, text=True, check=False, timeout=10
        )
        return done.stdout

    yield run
    run("kill-server")


def screen(tmux: Callable[..., str]) -> str:
    return tmux("capture-pane", "-p", "-t", "watch", "-S", "-200")


async def wait_for_screen(
    tmux: Callable[..., str], found: Callable[[str], bool], what: str, timeout: float = 30
) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = screen(tmux)
        if found(text):
            return text
        await asyncio.sleep(0.05)
    raise AssertionError(f"the terminal never showed {what}; it shows:\n{screen(tmux)}")


async def test_watch_in_a_terminal_shows_text_as_it_streams_and_the_approval_command(
    client: Client, dev_server: DevServer, tmux: Callable[..., str]
) -> None:
    hosted = deploy_agent(delay=0.12)
    agent = hosted.agent.name
    agents = AgentClient(client)
    async with new_worker(client, agents=[hosted]) as worker:
        handle = await agents.start(agent, "deploy", task_queue=worker.task_queue)
        command = (
            f"{sys.executable} -m durable_agent.cli watch {handle.id} "
            f"--address {dev_server.address}; echo WATCH-EXIT=$?; sleep 60"
        )
        root = Path(__file__).parent.parent.absolute()
        tmux(
            "new-session",
            "-d",
            "-s",
            "watch",
            "-x",
            "140",
            "-y",
            "45",
            "-c",
            str(root),
            "-e",
            f"PYTHONPATH={root}",
            command,
        )
        partial = await wait_for_screen(
            tmux,
            lambda text: "I looked at the" in text and LONG_TEXT[:60] not in text.replace("\n", ""),
            "the first words of the answer before the rest",
        )
        assert "step 1" in partial
        whole = await wait_for_screen(
            tmux,
            lambda text: f"approve: durable-agent approve {handle.id} d1" in text,
            "the approval command",
        )
        assert "waiting" in whole
        assert "deny:    durable-agent deny" in whole
        await handle.approve("d1", by="alice")
        done = await wait_for_screen(tmux, lambda text: "WATCH-EXIT=" in text, "watch ending")
        await handle.result()
    assert "WATCH-EXIT=0" in done
    assert "completed" in done
    assert "output: Deployed to prod." in done
    assert "approved by alice" in done


async def test_watch_shows_steering_messages(
    client: Client, dev_server: DevServer, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = shared_deploy_agent(CallLog(), "watch-steer")
    name = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        queue = worker.task_queue
        agents = AgentClient(client, task_queue=queue)
        run = await agents.start(name, "ship")
        await wait_for_status(run.handle, "waiting")
        await run.steer("also check Rome")
        await run.approve("d1", by="alice")
        await run.result()
        capsys.readouterr()
        code = await amain(
            ["watch", run.id, "--address", dev_server.address, "--task-queue", queue]
        )
        out = capsys.readouterr().out
    assert code == 0
    assert "steered: also check Rome" in out
