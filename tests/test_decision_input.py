"""One rule for what a person decides, whoever sends it (the CLI, `AgentRunHandle`, the
inbox): a denial needs a reason, since the model reads it (`denial_problem`), and a deferred
call's result is JSON, a text in quotes included (`read_deferred_response`). Refused before
anything is sent, so the call stays pending."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog
from temporalio.client import Client

from durable_agent.cli.app import amain
from durable_agent.contract.decisions import read_deferred_response
from durable_agent.temporal import AgentClient
from durable_agent.temporal.client import Rejected
from durable_agent.temporal.devserver import DevServer

from .helpers import CallLog
from .temporal_support import deploy_agent, new_worker, wait_for_status


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with structlog.testing.capture_logs():
        yield


async def test_an_empty_denial_reason_is_refused_by_the_cli_and_the_client(
    client: Client, dev_server: DevServer, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = deploy_agent(CallLog(), "deny-empty")
    name = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        run = await agents.start(name, "ship")
        await wait_for_status(run.handle, "waiting")
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
