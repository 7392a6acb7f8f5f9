"""`durable-agent chat` on a real dev server: prompts from stdin, answers (streamed when
the model streams) on stdout, approvals asked inline (nothing decided without an answer:
a bare Enter asks again, end of input leaves the call waiting), reattaching with --id, and
an agent no worker hosts said so."""

from __future__ import annotations

import asyncio
import io
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import structlog
from temporalio.client import Client

from durable_agent import AgentBuilder, FunctionModel, ModelMessage, ModelRequest, UserPromptPart
from durable_agent.cli.app import amain
from durable_agent.temporal import AgentClient
from durable_agent.temporal.devserver import DevServer

from .temporal_support import new_worker, unique
from .test_sessions import Echo, echo_agent, until_status


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with structlog.testing.capture_logs():
        yield


async def _chat(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    dev_server: DevServer,
    queue: str,
    lines: str,
    *argv: str,
) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(lines))
    capsys.readouterr()
    code = await asyncio.wait_for(
        amain(["chat", *argv, "--address", dev_server.address, "--task-queue", queue]), 60
    )
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _session_id(err: str) -> str:
    found = re.search(r"session (\S+) with ", err)
    assert found, err
    return found.group(1)


async def test_chat_two_turns_then_end(
    client: Client,
    dev_server: DevServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = unique("chat")
    agent = echo_agent(name, Echo())
    async with new_worker(client, agents=[agent]) as worker:
        code, out, err = await _chat(
            monkeypatch, capsys, dev_server, worker.task_queue, "hello\n\nagain\n/end\n", name
        )
        session = AgentClient(client, task_queue=worker.task_queue).get(_session_id(err))
        result = await session.result()
    assert code == 0, err
    assert out.splitlines() == ["assistant> 1: hello", "assistant> 2: again"]
    assert f"session {session.id} ended" in err
    assert result.output == "2: again"


async def test_chat_asks_for_approvals_inline(
    client: Client,
    dev_server: DevServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = unique("chat-hitl")
    agent = echo_agent(name, Echo())
    lines = "deploy\ny\ndeploy\nnot during the freeze\n/end\n"
    async with new_worker(client, agents=[agent]) as worker:
        code, out, err = await _chat(
            monkeypatch, capsys, dev_server, worker.task_queue, lines, name, "--by", "alice"
        )
    assert code == 0, err
    assert out.splitlines() == ["assistant> deployed", "assistant> deployed"]
    assert 'tool deploy {"env": "prod"} needs approval as alice' in err
    assert "approved d1" in err
    assert "denied d5: not during the freeze" in err


async def test_chat_reattaches_with_id(
    client: Client,
    dev_server: DevServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = unique("chat-again")
    agent = echo_agent(name, Echo())
    async with new_worker(client, agents=[agent]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        session = await agents.start(name, "first", session=True)
        await until_status(session, "awaiting_prompt")
        queue = worker.task_queue
        code, out, err = await _chat(
            monkeypatch, capsys, dev_server, queue, "more\n", "--id", session.id
        )
        await session.end_session()
        result = await session.result()
        not_a_session = await agents.start(name, "deploy")
        refused = await _chat(
            monkeypatch, capsys, dev_server, queue, "hi\n", "--id", not_a_session.id
        )
        await not_a_session.cancel()
        usage = await _chat(monkeypatch, capsys, dev_server, queue, "")
    assert code == 0, err
    assert f"session {session.id} ({name}, 1 turn(s) so far)" in err
    assert out.splitlines() == ["assistant> 2: more"]
    assert f"come back with: durable-agent chat --id {session.id}" in err
    assert result.output == "2: more"
    assert refused[0] == 1
    assert "is not a session" in refused[2]
    assert usage[0] == 2
    assert "give AGENT to start a session, or --id ID" in usage[2]


async def test_chat_streams_the_answer(
    client: Client,
    dev_server: DevServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def writes(messages: list[ModelMessage], info: Any) -> AsyncIterator[str]:
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        prompt = "".join(p.text for p in last.parts if isinstance(p, UserPromptPart))
        for piece in ("Hello ", "to ", prompt):
            await asyncio.sleep(0.3)
            yield piece

    name = unique("chat-stream")
    agent = AgentBuilder(FunctionModel(stream_function=writes)).name(name).build()
    async with new_worker(client, agents=[agent]) as worker:
        code, out, err = await _chat(
            monkeypatch, capsys, dev_server, worker.task_queue, "you\n/end\n", name
        )
    assert code == 0, err
    assert out.splitlines() == ["assistant> Hello to you"]


# -- nothing decided without an answer ---------------------------------------------------


async def test_chat_leaves_the_call_waiting_at_ctrl_d_and_asks_again_at_a_bare_enter(
    client: Client,
    dev_server: DevServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = unique("chat-undecided")
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
