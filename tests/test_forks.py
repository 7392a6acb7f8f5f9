"""Time travel: forks from any recorded boundary and retries of failed runs, on a real dev
server, counting every model request and tool call (per workflow id) to prove that
nothing recorded before the boundary is done again."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest
import structlog
from temporalio import activity
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from durable_agent import (
    AgentBuilder,
    AgentExecutionNode,
    AgentOverrides,
    FunctionModel,
    InstructionPart,
    InvalidInput,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    TestModel,
    ToolReturnPart,
)
from durable_agent.cli.app import amain
from durable_agent.temporal import AgentActivityConfig, AgentClient, AgentRegistration
from durable_agent.temporal.client import AgentRunError, RunFailed
from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.search_attributes import FORKED_FROM
from durable_agent.temporal.wire import ResumeFrom
from tests.temporal_support import client_knowing

from .helpers import RecordingExecutor, call, text_response, tool_response
from .temporal_support import activity_summaries, fast_activity, new_worker, unique

TOOL_RUN_NODES = [
    "run_start",
    "prepare_model_request",
    "before_model_request",
    "model_response",
    "tool_call",
    "tool_return",
    "prepare_model_request",
    "before_model_request",
    "model_response",
    "validate_output",
    "run_complete",
]


class Counts:
    """Model requests and tool calls, per workflow id (or `local` in-process)."""

    def __init__(self) -> None:
        self.model: Counter[str] = Counter()
        self.tools: Counter[str] = Counter()
        self.instructions: list[list[str]] = []
        self.temperatures: list[float | None] = []
        self.broken = False

    @staticmethod
    def key() -> str:
        if not activity.in_activity():
            return "local"
        return activity.info().workflow_id or "?"


def weather_model(counts: Counts, prefix: str = "It is") -> FunctionModel:
    def answer(messages: list[ModelMessage], info: Any) -> ModelResponse:
        counts.model[counts.key()] += 1
        counts.instructions.append(
            [
                part.content
                for message in messages
                if isinstance(message, ModelRequest)
                for part in message.parts
                if isinstance(part, InstructionPart)
            ]
        )
        counts.temperatures.append(info.settings.temperature if info.settings else None)
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return tool_response(call("weather", "w1", city="Paris"))
        return text_response(f"{prefix} {returns[0].content}.")

    return FunctionModel(answer, name=f"weather-{prefix}")


def weather_agent(name: str, counts: Counts) -> Any:
    async def weather(city: str) -> str:
        counts.tools[counts.key()] += 1
        if counts.broken:
            raise RuntimeError("the weather service is down")
        return f"sunny in {city}"

    return (
        AgentBuilder(weather_model(counts))
        .name(name)
        .instructions("Be brief.")
        .tool(weather)
        .allowed_models({"strong": weather_model(counts, "Strong model says: it is")})
        .build()
    )


async def _cli(
    capsys: pytest.CaptureFixture[str], server: DevServer, queue: str, *argv: str
) -> tuple[int, str, str]:
    """`durable-agent ARGV` on `queue`: exit code, stdout, stderr."""
    capsys.readouterr()
    code = await amain([*argv, "--address", server.address, "--task-queue", queue])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


async def _failure(handle: Any) -> str:
    with pytest.raises(RunFailed) as failed:
        await asyncio.wait_for(handle.result(), 30)
    return failed.value.failure


# -- forks ---------------------------------------------------------------------------------


async def test_fork_at_every_boundary_redoes_nothing_before_it(client: Client) -> None:
    name, counts = unique("fork"), Counts()
    agent = weather_agent(name, counts)
    async with new_worker(client, agents=[agent]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        source = await agents.start(name, "Weather in Paris?")
        expected = await source.result()
        nodes = [e.node.value for e in await source.checkpoints()]
        assert nodes == TOOL_RUN_NODES
        forks = [await source.fork(i, f"{source.id}-at-{i}") for i in range(len(nodes))]
        results = await asyncio.gather(*(fork.result() for fork in forks))
        views = [await fork.status() for fork in forks]
        listed: set[str] = set()
        for _ in range(100):  # visibility lags the runs a little
            listed = {run.workflow_id async for run in agents.list(forked_from=source.id)}
            if len(listed) == len(forks):
                break
            await asyncio.sleep(0.2)
        described = await forks[0].describe()

    assert counts.model[source.id] == 2
    assert counts.tools[source.id] == 1
    for index, (fork, result, view) in enumerate(zip(forks, results, views, strict=True)):
        rest = nodes[index:]
        assert result.output == expected.output == "It is sunny in Paris.", index
        assert counts.model[fork.id] == rest.count("before_model_request"), nodes[index]
        assert counts.tools[fork.id] == rest.count("tool_call"), nodes[index]
        assert result.conversation_id == expected.conversation_id
        assert result.run_id != expected.run_id  # a run of its own
        assert view.forked_from is not None
        assert (view.forked_from.workflow_id, view.forked_from.index) == (source.id, index)
        assert view.forked_from.node.value == nodes[index]
    assert listed == {fork.id for fork in forks}
    assert described.typed_search_attributes.get(FORKED_FROM) == source.id


async def test_fork_into_an_earlier_run_of_a_continued_chain(client: Client) -> None:
    name, counts = unique("fork-chain"), Counts()
    agent = AgentRegistration(
        weather_agent(name, counts), AgentActivityConfig(continue_as_new_after_steps=1)
    )
    async with new_worker(client, agents=[agent]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        source = await agents.start(name, "Weather in Paris?")
        expected = await source.result()
        view = await source.status()
        latest_run = (await source.describe()).run_id
        fork = await source.fork(2)  # before the first model request: in the first run
        result = await fork.result()
        fork_view = await fork.status()
        # Retention deleting the first run: a fork into it says so.
        origin = fork_view.forked_from
        assert origin is not None
        await _delete_run(client, source.id, origin.run_id)
        gone = await source.fork(2)
        failure = await _failure(gone)

    assert view.continued_as_new >= 1
    assert result.output == expected.output
    assert counts.model[fork.id] == 2
    assert counts.tools[fork.id] == 1
    assert origin.index == 2
    assert origin.node.value == "before_model_request"
    assert origin.run_id != latest_run
    assert failure.startswith("source_run_deleted: ")
    assert origin.run_id in failure
    assert counts.model[gone.id] == 0


async def _delete_run(client: Client, workflow_id: str, run_id: str) -> None:
    await client.workflow_service.delete_workflow_execution(
        DeleteWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
        )
    )
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    for _ in range(180):  # deletion is asynchronous (about half a minute on the dev server)
        try:
            await handle.describe()
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return
            raise
        await asyncio.sleep(0.5)
    raise AssertionError(f"run {run_id} was not deleted within 90 s")


async def test_fork_with_another_model_settings_and_instructions(client: Client) -> None:
    name, counts = unique("fork-override"), Counts()
    agent = weather_agent(name, counts)
    async with new_worker(client, agents=[agent]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        source = await agents.start(name, "Weather in Paris?")
        await source.result()
        counts.instructions.clear()
        counts.temperatures.clear()
        fork = await source.fork(
            6,  # the second prepare_model_request
            model="strong",
            model_settings=ModelSettings(temperature=0.0),
            instructions="Answer in one line.",
        )
        result = await fork.result()
        records = [record async for record in fork.stream()]
        # A name the agent does not allow is refused before anything starts by a client that
        # knows the agent (a worker refuses it too, tests/test_provider_workflows.py).
        knowing = AgentClient(await client_knowing(client, agent), task_queue=worker.task_queue)
        with pytest.raises(
            InvalidInput, match=r"no allowed model named 'huge' \(allowed: strong\)"
        ):
            await knowing.get(source.id).fork(6, model="huge")

    assert result.output == "Strong model says: it is sunny in Paris."
    assert [r.seq for r in records] == list(range(len(records)))
    assert records[0].kind == "forked"
    assert records[0].data["workflow_id"] == source.id
    assert (records[0].data["index"], records[0].data["node"]) == (6, "prepare_model_request")
    assert [r.kind for r in records[-2:]] == ["run_complete", "node_complete"]
    assert counts.instructions == [["Answer in one line."]]
    assert counts.temperatures == [0.0]


async def test_fork_a_running_and_then_a_cancelled_source(client: Client) -> None:
    name, counts = unique("fork-live"), Counts()
    agent = weather_agent(name, counts)
    async with new_worker(client, agents=[agent]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        source = await agents.start(
            name, "Weather in Paris?", suspend_at=[AgentExecutionNode.TOOL_CALL]
        )
        for _ in range(100):
            if (await source.status()).suspend_reason:
                break
            await asyncio.sleep(0.1)
        live = await source.fork()  # its latest checkpoint: the suspended tool_call
        live_result = await live.result()
        await source.cancel()
        with pytest.raises(RunFailed, match="cancelled"):
            await source.result()
        after = await source.fork()
        after_result = await after.result()
        origin = (await after.status()).forked_from
    assert live_result.output == after_result.output == "It is sunny in Paris."
    assert counts.model[source.id] == 1
    assert counts.tools[source.id] == 0  # it was suspended before its tool ran
    assert (counts.model[live.id], counts.tools[live.id]) == (1, 1)
    assert (counts.model[after.id], counts.tools[after.id]) == (1, 1)
    assert origin is not None
    assert (origin.index, origin.node.value) == (4, "tool_call")


# -- bad sources ---------------------------------------------------------------------------


async def test_bad_sources_fail_at_once_and_run_nothing(client: Client) -> None:
    name, other, counts = unique("fork-bad"), unique("fork-other"), Counts()
    hosted = [weather_agent(name, counts), weather_agent(other, counts)]
    async with new_worker(client, agents=hosted) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        source = await agents.start(name, "Weather in Paris?")
        await source.result()
        billing = await client.start_workflow("Billing", id=unique("billing"), task_queue="none")
        cases = {
            "not_an_agent_run": (name, ResumeFrom(workflow_id=billing.id)),
            "source_not_found": (name, ResumeFrom(workflow_id="no-such-run-404")),
            "index_out_of_range": (name, ResumeFrom(workflow_id=source.id, index=99)),
            "checkpoint_not_found": (
                name,
                ResumeFrom(workflow_id=source.id, checkpoint_id="ckpt_nope"),
            ),
            "agent_mismatch": (other, ResumeFrom(workflow_id=source.id, index=2)),
        }
        outcomes: dict[str, tuple[str, list[tuple[str, str]]]] = {}
        for kind, (agent, where) in cases.items():
            fork = await agents.start(agent, "", resume_from=where)
            outcomes[kind] = (await _failure(fork), await activity_summaries(fork.handle))
        with pytest.raises(InvalidInput, match="index=-1 is negative"):
            await agents.start(name, "", resume_from=ResumeFrom(workflow_id=source.id, index=-1))
        await billing.terminate()

    for kind, (failure, summaries) in outcomes.items():
        assert failure.startswith(f"{kind}: "), failure
        assert [activity for activity, _ in summaries] == ["load_checkpoint"], kind
    assert "'no-such-run-404'" in outcomes["source_not_found"][0]
    assert "(its type is 'Billing')" in outcomes["not_an_agent_run"][0]
    assert "index 99 is out of range" in outcomes["index_out_of_range"][0]
    assert "11 checkpoint(s) so far (indexes 0 to 10)" in outcomes["index_out_of_range"][0]
    assert "'ckpt_nope'" in outcomes["checkpoint_not_found"][0]
    mismatch = outcomes["agent_mismatch"][0]
    assert f"agent {name!r}, not {other!r}" in mismatch
    assert set(counts.model) == {source.id}
    assert set(counts.tools) == {source.id}


# -- retry ---------------------------------------------------------------------------------


async def test_retry_after_the_tool_is_fixed_pays_only_for_what_failed(client: Client) -> None:
    name, counts = unique("retry"), Counts()
    counts.broken = True
    agent = AgentRegistration(
        weather_agent(name, counts),
        AgentActivityConfig(tool_call=fast_activity(maximum_attempts=2)),
    )
    async with new_worker(client, agents=[agent]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        source = await agents.start(name, "Weather in Paris?")
        failure = await _failure(source)
        failed_run = (await source.describe()).run_id
        nodes = [e.node.value for e in await source.checkpoints()]
        at_failure = await _failure(await source.fork(len(nodes) - 1))
        paused = await agents.start(name, "Weather?", suspend_at=[AgentExecutionNode.RUN_START])
        with pytest.raises(AgentRunError, match="is still running; retry is for a run that"):
            await paused.retry()
        await paused.cancel()
        counts.broken = False
        retried = await source.retry()
        result = await retried.result()
        view = await retried.status()
        described = await retried.describe()
        with pytest.raises(AgentRunError, match="completed; retry is for a run that failed"):
            await retried.retry()

    assert "the weather service is down" in failure
    assert nodes[-2:] == ["tool_call", "run_failed"]
    assert at_failure.startswith("checkpoint_not_resumable: checkpoint #5 ")
    assert "records the run's failure; fork from #4" in at_failure
    assert retried.id == source.id  # a new run of the same workflow id
    assert described.run_id != failed_run
    assert result.output == "It is sunny in Paris."
    assert counts.model[source.id] == 2  # one before the failure, one after the fix
    assert counts.tools[source.id] == 3  # two failed attempts, then the fixed tool once
    assert view.forked_from is not None
    assert view.forked_from.run_id == failed_run
    assert view.forked_from.node.value == "tool_call"
    assert described.typed_search_attributes.get(FORKED_FROM) == source.id


async def test_retry_takes_a_new_id_when_the_server_refuses_the_old_one(client: Client) -> None:
    name, counts = unique("retry-id"), Counts()
    counts.broken = True
    agent = AgentRegistration(
        weather_agent(name, counts),
        AgentActivityConfig(tool_call=fast_activity(maximum_attempts=1)),
    )
    complete = [AgentExecutionNode.RUN_COMPLETE]
    async with new_worker(client, agents=[agent]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        source = await agents.start(name, "Weather in Paris?", suspend_at=complete)
        await _failure(source)
        failed = agents.get(source.id, (await source.describe()).run_id)
        counts.broken = False
        first = await failed.retry()  # keeps suspend_at: it waits at run_complete
        for _ in range(100):
            if (await first.status()).suspend_reason:
                break
            await asyncio.sleep(0.1)
        second = await failed.retry()  # the id is taken by the running first retry
        for retry in (first, second):
            for _ in range(100):
                if (await retry.status()).suspend_reason:
                    break
                await asyncio.sleep(0.1)
            await retry.resume()
        results = [await first.result(), await second.result()]
    assert first.id == source.id
    assert second.id.startswith(f"{source.id}-retry-")
    assert [r.output for r in results] == ["It is sunny in Paris."] * 2


# -- in-process ----------------------------------------------------------------------------


async def test_in_process_resume_with_overrides() -> None:
    counts, executor = Counts(), RecordingExecutor()
    agent = weather_agent("local-fork", counts).with_executor(executor)
    first = await agent.run("Weather in Paris?")
    checkpoint = executor.checkpoints[6]  # the second prepare_model_request
    assert checkpoint.node.value == "prepare_model_request"
    counts.instructions.clear()
    again = await agent.resume(
        checkpoint, overrides=AgentOverrides(model="strong", instructions="One line.")
    )
    assert first.output == "It is sunny in Paris."
    assert again.output == "Strong model says: it is sunny in Paris."
    assert counts.instructions == [["One line."]]
    assert counts.model["local"] == 3
    assert counts.tools["local"] == 1
    with pytest.raises(Exception, match="no allowed model named 'x'"):
        await agent.resume(checkpoint, overrides=AgentOverrides(model="x"))


# -- the CLI -------------------------------------------------------------------------------


async def test_cli_fork_retry_and_list(
    client: Client, dev_server: DevServer, capsys: pytest.CaptureFixture[str]
) -> None:
    name, counts = unique("fork-cli"), Counts()
    agent = AgentRegistration(
        weather_agent(name, counts),
        AgentActivityConfig(tool_call=fast_activity(maximum_attempts=1)),
    )

    with structlog.testing.capture_logs():
        async with new_worker(client, agents=[agent]) as worker:
            queue = worker.task_queue
            agents = AgentClient(client, task_queue=queue)
            source = await agents.start(name, "Weather in Paris?")
            await source.result()
            forked = await _cli(
                capsys,
                dev_server,
                queue,
                "fork",
                source.id,
                "--at",
                "2",
                "--id",
                f"{source.id}-x",
                "--wait",
            )
            shown = await _cli(capsys, dev_server, queue, "status", f"{source.id}-x")
            out_of_range = await _cli(
                capsys, dev_server, queue, "fork", source.id, "--at", "99", "--wait"
            )
            bad_settings = await _cli(
                capsys, dev_server, queue, "fork", source.id, "--settings", '{"temperature": "hot"}'
            )
            completed = await _cli(capsys, dev_server, queue, "retry", source.id)
            counts.broken = True
            failing = await agents.start(name, "Weather in Paris?")
            await _failure(failing)
            counts.broken = False
            retried = await _cli(capsys, dev_server, queue, "retry", failing.id, "--wait")
            listed: tuple[int, str, str] = (0, "", "")
            for _ in range(100):
                listed = await _cli(
                    capsys, dev_server, queue, "list", "--forked-from", source.id, "--json"
                )
                if len(json.loads(listed[1])) == 2:
                    break
                await asyncio.sleep(0.2)

    assert forked[0] == 0, forked
    assert forked[1].splitlines() == [f"{source.id}-x", "It is sunny in Paris."]
    assert f"forked {source.id} at #2" in forked[2]
    assert f"forked from {source.id} #2  (before_model_request, step 0, ckpt_" in shown[1]
    assert out_of_range[0] == 1
    assert "index_out_of_range: checkpoint index 99 is out of range" in out_of_range[2]
    assert bad_settings[0] == 2
    assert "not valid model settings (temperature:" in bad_settings[2]
    assert completed[0] == 1
    assert f"run {source.id!r} is completed; retry is for a run that failed" in completed[2]
    assert retried[0] == 0, retried
    assert retried[1].splitlines() == [failing.id, "It is sunny in Paris."]
    assert f"retrying {failing.id} from the boundary before its failure" in retried[2]
    forks = {run["workflow_id"] for run in json.loads(listed[1])}
    assert f"{source.id}-x" in forks
    assert len(forks) == 2  # and the fork that failed at once


async def until_waiting(run: Any) -> None:
    """Polls `run`'s status until it is `waiting` (at most 10 s)."""
    for _ in range(200):
        if (await run.status()).status == "waiting":
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{run.id} did not come to wait: {await run.status()}")


def approval_agent(name: str, counts: Counts) -> Any:
    """Calls `deploy` (call d1, needing approval), then answers."""

    def answer(messages: list[ModelMessage], info: Any) -> ModelResponse:
        counts.model[counts.key()] += 1
        if not any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
            return tool_response(call("deploy", "d1", env="prod"))
        return text_response("deployed")

    def deploy(env: str) -> str:
        counts.tools[counts.key()] += 1
        return f"deployed to {env}"

    return (
        AgentBuilder(FunctionModel(answer))
        .name(name)
        .tool(deploy)
        .approval_required_tools(["deploy"])
        .build()
    )


async def test_a_fork_that_resumes_into_a_wait_records_its_first_boundary(
    client: Client, dev_server: DevServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 26, item 3: a fork of a run waiting for approval waits too, and its first
    boundary is a checkpoint of its own: listed, forkable, and what a retry goes on from."""
    name, counts = unique("fork-wait"), Counts()
    agent = approval_agent(name, counts)

    with structlog.testing.capture_logs():
        async with new_worker(client, agents=[agent]) as worker:
            queue = worker.task_queue
            agents = AgentClient(client, task_queue=queue)
            source = await agents.start(name, "Deploy")
            await until_waiting(source)
            fork = await source.fork(workflow_id=f"{source.id}-f")
            await until_waiting(fork)
            for _ in range(200):  # its boundaries are queried as `fork` will read them
                if await fork.checkpoints():
                    break
                await asyncio.sleep(0.05)
            listed = await _cli(capsys, dev_server, queue, "checkpoints", fork.id, "--json")
            again = await _cli(
                capsys, dev_server, queue, "fork", fork.id, "--id", f"{fork.id}-again"
            )
            # The fork of the fork may load its checkpoint after the retry below has taken
            # its source's id: it reads the run it was made from all the same.
            await fork.handle.terminate("testing retry")
            retried = await _cli(capsys, dev_server, queue, "retry", fork.id)
            retried_run = agents.get(retried[1].strip())
            await until_waiting(retried_run)
            await retried_run.approve("d1", by="alice")
            result = await retried_run.result()
            forked_again = agents.get(f"{fork.id}-again")
            for _ in range(200):
                forked_again_status = (await forked_again.status()).status
                if forked_again_status != "running":
                    break
                await asyncio.sleep(0.05)
            for run in (source, forked_again):
                await run.handle.terminate("test done")

    assert listed[0] == 0, listed
    nodes = [c["node"] for c in json.loads(listed[1])]
    assert nodes, "the fork's first boundary is listed"
    assert again[0] == 0, again
    assert retried[0] == 0, retried
    assert result.output == "deployed"
    assert counts.tools[retried_run.id] == 1
    assert forked_again_status == "waiting", "the fork of the fork went on from its source"


async def test_a_fork_reads_the_run_it_was_made_from_even_after_a_new_run_takes_its_id(
    client: Client,
) -> None:
    """The race behind a flaky fork-of-a-fork: the fork names its source by workflow id, and
    a retry may start a new run under that id before the fork's `load_checkpoint` runs.
    Here nothing polls while the source is terminated and its id given to another run; once
    a worker is back, the fork still goes on from the run it was made from."""
    name, counts = unique("fork-pinned"), Counts()
    other = unique("fork-pinned-other")
    hosted = [
        approval_agent(name, counts),
        AgentBuilder(TestModel.with_text("other")).name(other).build(),
    ]

    async with new_worker(client, agents=hosted) as worker:
        queue = worker.task_queue
        agents = AgentClient(client, task_queue=queue)
        source = await agents.start(name, "Deploy")
        await until_waiting(source)
    # no worker: the fork is started, but cannot load its checkpoint yet
    fork = await agents.get(source.id).fork(workflow_id=f"{source.id}-f")
    await source.handle.terminate("replaced")
    replacement = await agents.start(other, "hello", workflow_id=source.id)
    async with new_worker(client, task_queue=queue, agents=hosted):
        assert (await replacement.result()).output == "other"
        await until_waiting(fork)
        await fork.approve("d1", by="alice")
        result = await fork.result()
    assert result.output == "deployed"
    assert counts.tools[fork.id] == 1


async def test_cli_refuses_a_negative_fork_index_and_a_retry_with_nothing_to_go_on_from(
    client: Client, dev_server: DevServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 26, item 8: `fork --at -1` is a usage error before anything starts; `retry` of
    a run that failed before its first checkpoint is refused and says why."""
    async with new_worker(client) as worker:
        queue = worker.task_queue
        capsys.readouterr()
        negative = await amain(["fork", "anything", "--at", "-1", "--address", dev_server.address])
        negative_err = capsys.readouterr().err
        agents = AgentClient(client, task_queue=queue)
        doomed = await agents.start(unique("no-such-agent"), "hello")
        with pytest.raises(RunFailed):
            await asyncio.wait_for(doomed.result(), 30)
        capsys.readouterr()
        retried = await amain(
            ["retry", doomed.id, "--address", dev_server.address, "--task-queue", queue]
        )
        retried_err = capsys.readouterr().err
    assert negative == 2
    assert "Error: Invalid value for '--at': -1 is negative" in negative_err
    assert "Traceback" not in negative_err
    assert retried == 1
    assert "failed before its first checkpoint (unknown_agent: no agent named" in retried_err
