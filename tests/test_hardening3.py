"""Hardening 3 (issue 26): what a newcomer and an exploratory test pass found.

Each test failed before its fix. CLI items run the installed `durable-agent` console script
or the CLI's own entry point against a real dev server; the items whose tests live next to
their feature say where (malformed workflow input: `test_temporal_cli.py`; a fork resuming
into a wait, `fork --at -1`, retry before a first checkpoint: `test_forks.py`; the Web UI's
escaping: `test_web_ui.py`).
"""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
from pathlib import Path

import pytest
import structlog
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from durable_agent import AgentBuilder, InvalidInput, TestModel, ToolApprovalDecision
from durable_agent.cli.app import amain
from durable_agent.contract.decisions import read_deferred_response
from durable_agent.engine.spec import AgentSpec
from durable_agent.temporal import AgentClient, DurableAgentPlugin
from durable_agent.temporal.client import Rejected
from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.storage import external_storage_from_env

from .helpers import call, text_response, tool_response
from .temporal_support import new_worker, unique

ROOT = Path(__file__).resolve().parent.parent
CONSOLE_SCRIPT = Path(sys.executable).parent / "durable-agent"


@pytest.fixture(autouse=True)
def _quiet() -> object:
    with structlog.testing.capture_logs():
        yield


def deploy_agent(prefix: str = "h3") -> AgentSpec:
    def deploy(env: str) -> str:
        return f"deployed to {env}"

    name = unique(prefix)
    model = TestModel.with_responses(
        [tool_response(call("deploy", "d1", env="prod")), text_response("finished")]
    )
    return AgentBuilder(model).name(name).tool(deploy).approval_required_tools(["deploy"]).build()


async def until(handle: object, status: str) -> None:
    for _ in range(400):
        if (await handle.status()).status == status:  # type: ignore[attr-defined]
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never {status}")


# -- 7. arguments that are not UTF-8 -------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        [b"run", b"weather", b"\xff\xfe"],
        [b"steer", b"t1", b"\xff"],
        [b"status", b"\xff"],
    ],
    ids=["run", "steer", "status"],
)
@pytest.mark.server
def test_arguments_that_are_not_utf8_are_a_usage_error(argv: list[bytes]) -> None:
    done = subprocess.run(
        [bytes(CONSOLE_SCRIPT), *argv, b"--address", b"127.0.0.1:1"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert "is not valid UTF-8 text" in err


# -- 9. long prompts from a file or standard input -----------------------------------------


async def test_a_prompt_of_a_million_characters_comes_from_a_file_or_stdin(
    client: Client, dev_server: DevServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique("h3-long")
    agent = AgentBuilder(TestModel.with_text("read it")).name(name).build()
    prompt = "x" * 999_999 + "!"
    task = tmp_path / "task.md"
    task.write_text(prompt + "\n")
    async with new_worker(client, agents=[agent]) as worker:
        queue = worker.task_queue
        common = ["--address", dev_server.address, "--task-queue", queue, "--json"]
        from_file = await amain(["run", name, "--prompt-file", str(task), *common])
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(prompt.encode())))
        from_stdin = await amain(["run", name, "-", *common])
        agents = AgentClient(client, task_queue=queue)
        runs = [run async for run in agents.list(agent=name)]
        for _ in range(100):
            if len(runs) == 2:
                break
            await asyncio.sleep(0.1)
            runs = [run async for run in agents.list(agent=name)]
        results = [await agents.get(run.workflow_id).result() for run in runs]
    assert (from_file, from_stdin) == (0, 0)
    assert [r.output for r in results] == ["read it", "read it"]
    history = await agents.get(runs[0].workflow_id).handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    assert len(started.input.payloads[0].data) > 1_000_000


@pytest.mark.server
def test_run_without_a_prompt_is_a_usage_error() -> None:
    done = subprocess.run(
        [str(CONSOLE_SCRIPT), "run", "weather", "--address", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "give the prompt: PROMPT, PROMPT - (standard input) or --prompt-file" in done.stderr


# -- 12. one rule for decisions, whoever sends them ----------------------------------------


async def test_an_empty_denial_reason_is_refused_by_the_cli_and_the_client(
    client: Client, dev_server: DevServer, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = deploy_agent()
    name = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        run = await agents.start(name, "ship")
        await until(run, "waiting")
        capsys.readouterr()
        code = await amain(
            ["deny", run.id, "d1", "--reason", "  ", "--address", dev_server.address]
        )
        err = capsys.readouterr().err
        with pytest.raises(Rejected, match="give a reason to deny the call"):
            await run.deny("d1", "")
        view = await run.status()
        await run.handle.terminate("test done")
    assert code == 2
    assert "give a reason to deny the call: the agent's model reads it" in err
    assert [p.decided for p in view.pending_approvals] == [False]


@pytest.mark.parametrize(
    ("text", "value"),
    [('{"rows": 3}', {"rows": 3}), ('"done"', "done"), ("3", 3), ("{oops", None), ("", None)],
)
def test_a_deferred_result_is_json_for_the_cli_and_the_inbox_alike(
    text: str, value: object
) -> None:
    if value is None:
        with pytest.raises(ValueError, match="JSON"):
            read_deferred_response(text)
    else:
        assert read_deferred_response(text) == value


async def test_cli_deferred_refuses_text_that_is_not_json(
    dev_server: DevServer, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    code = await amain(
        ["deferred", "w1", "c1", "--response", "{oops", "--address", dev_server.address]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "not valid JSON" in err


# -- 2 and 14. chat: nothing decided without an answer ----------------------------------------


async def test_chat_leaves_the_call_waiting_at_ctrl_d_and_asks_again_at_a_bare_enter(
    client: Client,
    dev_server: DevServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from .test_sessions import Echo, echo_agent

    name = unique("h3-chat")
    agent = echo_agent(name, Echo())
    async with new_worker(client, agents=[agent]) as worker:
        queue = worker.task_queue
        # A bare Enter at the approval question asks again; end of input (Ctrl-D) leaves.
        monkeypatch.setattr("sys.stdin", io.StringIO("deploy\n\n"))
        capsys.readouterr()
        code = await asyncio.wait_for(
            amain(["chat", name, "--address", dev_server.address, "--task-queue", queue]), 60
        )
        err = capsys.readouterr().err
        agents = AgentClient(client, task_queue=queue)
        session_id = err.split("session ", 1)[1].split(" ", 1)[0]
        view = await agents.get(session_id).status()
        await agents.get(session_id).handle.terminate("test done")
    assert code == 0, err
    assert err.count("needs approval") == 2, err
    assert "is still waiting for a decision: durable-agent approve" in err
    assert "denied" not in err
    assert view.status == "waiting"
    assert [p.decided for p in view.pending_approvals] == [False]


async def test_chat_with_an_unknown_agent_says_so(
    client: Client, dev_server: DevServer, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    async with new_worker(client) as worker:
        monkeypatch.setattr("sys.stdin", io.StringIO("hello\n"))
        capsys.readouterr()
        code = await asyncio.wait_for(
            amain(
                [
                    "chat",
                    unique("nobody"),
                    "--address",
                    dev_server.address,
                    "--task-queue",
                    worker.task_queue,
                ]
            ),
            60,
        )
        err = capsys.readouterr().err
    assert code == 1
    assert "is failed: unknown_agent: no agent named" in err


# -- 15. the sample agents answer what they are asked ---------------------------------------


async def test_sample_agents_answer_the_latest_prompt() -> None:
    sys.path.insert(0, str(ROOT))
    from workflows.agents import build_deployer, build_weather

    weather = build_weather()
    first = await weather.run("Weather in Rome?")
    second = await weather.run("And in Oslo?", message_history=first.messages)
    assert "Oslo" in str(second.output)
    deployer = build_deployer()
    earlier = await deployer.run("Deploy v5 to prod")
    approvals = {p.tool_call_id: ToolApprovalDecision.approved() for p in earlier.pending_approvals}
    earlier = await deployer.resume_after_hitl(earlier.state, approvals=approvals)
    assert earlier.status == "completed"
    later = await deployer.run("Deploy v6 to staging", message_history=earlier.messages)
    asked = [p.arguments for p in later.pending_approvals]
    assert asked == [{"env": "staging", "version": "v6"}]


# -- 16. watch shows steering --------------------------------------------------------------


async def test_watch_shows_steering_messages(
    client: Client, dev_server: DevServer, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = deploy_agent("h3-steer")
    name = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        queue = worker.task_queue
        agents = AgentClient(client, task_queue=queue)
        run = await agents.start(name, "ship")
        await until(run, "waiting")
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


# -- 11. idle timeouts out of range ---------------------------------------------------------


@pytest.mark.parametrize("idle", [-5, 0, 1e18])
async def test_an_idle_timeout_out_of_range_fails_the_run_and_the_status_query_answers(
    client: Client, idle: float
) -> None:
    name = unique("h3-idle")
    agent = AgentBuilder(TestModel.with_text("hi")).name(name).build()
    async with new_worker(client, agents=[agent]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        with pytest.raises(InvalidInput, match="idle_timeout_seconds"):
            await agents.start(name, "", session=True, idle_timeout_seconds=idle)
        handle = await client.start_workflow(
            "AgentWorkflow",
            {"agent": name, "prompt": "", "session": True, "idle_timeout_seconds": idle},
            id=unique("h3-idle"),
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


# -- 10. the CLI finds the dev stack's payload store -----------------------------------------


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
    name = unique("h3-big")
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
