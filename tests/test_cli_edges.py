"""The CLI at the edges a newcomer and a tester found (issue 38, items 7, 8, 10, 14, 17).

A run that fails at its very start is reported as failed (exit 1), not "started"; `--json`
names the run's id; `status` and `list` show a quota wait; spelling and duplicated output;
`watch` of a finished lead shows each child's records under the call that started it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import pytest
import structlog
from temporalio.client import Client

from durable_agent import AgentBuilder
from durable_agent.engine.quotas import ModelQuota
from durable_agent.models.openai import OpenAIChatModel
from durable_agent.temporal import AgentClient, DurableAgentPlugin
from durable_agent.temporal.client import RunFailed
from durable_agent.temporal.devserver import DevServer

from . import subagent_agents
from .cli_support import Cli, cli_runner
from .helpers import CallLog
from .support.openai_server import FakeOpenAIServer, TextReply
from .temporal_support import (
    deploy_agent,
    new_replayer,
    new_worker,
    text_agent,
    unique,
    wait_for_status,
)

pytestmark = pytest.mark.server


@pytest.fixture(autouse=True)
def quiet_worker_logs() -> Iterator[None]:
    """The in-process worker logs to the stdout the commands' output is read from."""
    with structlog.testing.capture_logs():
        yield


@pytest.fixture
def cli(dev_server: DevServer, capsys: pytest.CaptureFixture[str]) -> Cli:
    return cli_runner(dev_server.address, capsys)


# -- item 7: a run that fails at its start is a failure --------------------------------------


async def test_run_of_an_unknown_agent_reports_the_failure_and_exits_1(
    client: Client, cli: Cli
) -> None:
    async with new_worker(client) as worker:
        plain = await cli("run", "nosuchagent", "hi", "--task-queue", worker.task_queue)
        scripted = await cli(
            "run", "nosuchagent", "hi", "--json", "--task-queue", worker.task_queue
        )
    assert plain.code == 1, plain
    workflow_id = plain.out.strip()
    assert workflow_id.startswith("agent-nosuchagent-")
    assert "started" not in plain.err
    assert f"durable-agent: run {workflow_id} failed: unknown_agent: no agent named " in plain.err
    assert scripted.code == 1, scripted
    started, report = scripted.json_lines()
    assert started["run_id"] == report["run_id"]
    assert report["failure"].startswith("unknown_agent: no agent named 'nosuchagent'")


async def test_fork_at_a_boundary_that_does_not_exist_reports_the_failure_and_exits_1(
    client: Client, cli: Cli
) -> None:
    spec = text_agent("ok", "edge-fork")
    async with new_worker(client, agents=[spec]) as worker:
        queue = worker.task_queue
        source = await AgentClient(client, task_queue=queue).start(spec.name, "hi")
        await source.result()
        outcome = await cli("fork", source.id, "--at", "999", "--task-queue", queue)
    assert outcome.code == 1, outcome
    assert "forked" not in outcome.err
    assert "index_out_of_range: checkpoint index 999 is out of range" in outcome.err


async def test_a_run_no_worker_has_taken_yet_is_still_started_at_once(cli: Cli) -> None:
    """Waiting for the start is brief: with no worker on the queue, `run` says started."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    outcome = await cli("run", "anyone", "hi", "--task-queue", unique("nobody"))
    assert outcome.code == 0, outcome
    assert "started; follow it with: durable-agent status" in outcome.err
    assert loop.time() - began < 8


# -- item 8: run --json names the run ---------------------------------------------------------


async def test_run_json_prints_the_run_id_with_and_without_wait(client: Client, cli: Cli) -> None:
    spec = text_agent("fine", "edge-json")
    async with new_worker(client, agents=[spec]) as worker:
        queue = worker.task_queue
        started = await cli("run", spec.name, "hi", "--json", "--task-queue", queue)
        waited = await cli("run", spec.name, "hi", "--json", "--wait", "--task-queue", queue)
        assert started.code == 0, started
        assert waited.code == 0, waited
        for outcome in (started, waited):
            lines = outcome.json_lines()
            described = await client.get_workflow_handle(lines[0]["workflow_id"]).describe()
            assert lines[0]["run_id"] == described.run_id
            assert lines[-1]["run_id"] == described.run_id


# -- item 10: status and list show a quota wait -----------------------------------------------


async def test_status_and_list_show_a_quota_wait(client: Client, cli: Cli) -> None:
    """One request per 10 s: after a first run, the second waits for its turn; `status`
    and `list` (from the run's memo, without a worker) say so, naming the key."""
    task_queue = unique("quota-cli")
    key = "openai:gpt-4o-mini"
    with FakeOpenAIServer(api_key="sk-test") as server:
        server.enqueue(*[TextReply("fine") for _ in range(2)])
        name = unique("quota-shown")
        model = OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key="sk-test")
        agent = AgentBuilder(model).name(name).build()
        quotas = {key: ModelQuota(requests_per_minute=6)}
        quoted = await Client.connect(
            client.service_client.config.target_host, plugins=[DurableAgentPlugin(quotas=quotas)]
        )
        async with new_worker(quoted, task_queue, agents=[agent]):
            agents = AgentClient(client, task_queue=task_queue)
            first = await agents.start(name, "first")
            await asyncio.wait_for(first.result(), 30)
            second = await agents.start(name, "second")
            for _ in range(100):
                if (await second.status()).quota_wait is not None:
                    break
                await asyncio.sleep(0.1)
            shown = await cli("status", second.id, "--task-queue", task_queue)
            for _ in range(100):
                listed = await cli("list", "--agent", name, "--json")
                runs = {r["workflow_id"]: r for r in listed.json()}
                if runs.get(second.id, {}).get("quota_wait"):
                    break
                await asyncio.sleep(0.1)
            table = await cli("list", "--agent", name)
            await asyncio.wait_for(second.result(), 30)
            # The memo's commands are behind a patch: the history replays as recorded.
            history = await second.handle.fetch_history()
            await new_replayer([agent], quotas=quotas).replay_workflow(history)
            for _ in range(100):
                after = await cli("list", "--agent", name, "--json")
                if {r["workflow_id"]: r for r in after.json()}[second.id]["status"] == "completed":
                    break
                await asyncio.sleep(0.1)
    assert shown.code == 0, shown
    assert f"quota wait  {key} since " in shown.out
    assert runs[second.id]["quota_wait"]["key"] == key
    assert runs[first.id]["quota_wait"] is None
    assert f"running (waiting for quota {key})" in table.out
    assert {r["workflow_id"]: r for r in after.json()}[second.id]["quota_wait"] is None


# -- item 17: watch of a finished lead, spelling, duplicated output ---------------------------


async def test_watch_of_a_finished_lead_shows_each_childs_records_under_its_call(
    client: Client, cli: Cli
) -> None:
    """Read after the fact, the lead's stream is all there at once: each child's records
    still come between the lead's `subagent_start` and `subagent_end` of its call, as they
    do when watched live (they used to follow all of the lead's)."""
    async with new_worker(client, agents=list(subagent_agents.AGENTS)) as worker:
        run = await AgentClient(client, task_queue=worker.task_queue).start("checker", "tides")
        await run.result()
        records = [r async for r in run.stream(children=True)]
        watched = await cli("watch", run.id)
    own = [(i, r) for i, r in enumerate(records) if r.workflow_id is None]
    starts = {
        r.data["tool_call_id"]: (i, r.data["workflow_id"])
        for i, r in own
        if r.kind == "subagent_start"
    }
    ends = {r.data["tool_call_id"]: i for i, r in own if r.kind == "subagent_end"}
    assert sorted(starts) == ["k1", "k2"]
    for call, (begun, child) in starts.items():
        theirs = [i for i, r in enumerate(records) if r.workflow_id == child]
        assert theirs, call
        assert begun < min(theirs), call
        assert max(theirs) < ends[call], call
    assert watched.code == 0, watched.err
    lines = watched.out.splitlines()
    child_done = next(
        i for i, line in enumerate(lines) if re.match(r"^    \[\d+\] completed: ", line)
    )
    lead_end = next(
        i for i, line in enumerate(lines) if "sub-agent analyst finished for k2" in line
    )
    assert child_done < lead_end, watched.out


async def test_list_and_status_say_cancelled_and_status_says_a_failure_once(
    client: Client, cli: Cli
) -> None:
    """One spelling, `RunStatus`'s, in `list` and `status` (text and JSON); a closed run's
    failure is printed once, not as its error and again as its failure."""
    spec = deploy_agent(CallLog(), "edge-cancel")
    async with new_worker(client, agents=[spec]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        run = await agents.start(spec.name, "ship it")
        await wait_for_status(run.handle, "waiting")
        await run.handle.cancel()
        with pytest.raises(RunFailed):
            await run.result()
        unknown = await agents.start("nosuchagent", "hi")
        with pytest.raises(RunFailed):
            await unknown.result()
        shown = await cli("status", run.id)
        shown_json = await cli("status", run.id, "--json")
        failed = await cli("status", unknown.id)
        for _ in range(100):
            listed = await cli("list", "--agent", spec.name, "--json")
            if listed.json() and listed.json()[0]["execution_status"] != "running":
                break
            await asyncio.sleep(0.1)
        table = await cli("list", "--agent", spec.name)
    for outcome in (shown, shown_json, listed, table):
        assert outcome.code == 0, outcome
        assert "canceled" not in outcome.out, outcome.out
    assert f"{run.id}  (cancelled)" in shown.out
    assert shown_json.json()["execution_status"] == "cancelled"
    assert listed.json()[0]["status"] == listed.json()[0]["execution_status"] == "cancelled"
    assert " cancelled " in table.out
    assert failed.code == 0, failed
    assert failed.out.count("no agent named 'nosuchagent'") == 1, failed.out
    assert "failure     unknown_agent: no agent named 'nosuchagent'" in failed.out
