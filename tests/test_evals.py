"""`durable_agent.evals.evaluate` and `durable-agent eval` (issue 40, points 4 and 5): a
pydantic-evals dataset of prompts, each case a run, in-process and durable on a test
environment's worker; evaluators see an `EvalRun`; a waiting case is reported as waiting;
the same name again pays nothing twice; bad input is a clear error."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic_evals import Case, Dataset
from pydantic_evals.evaluators import Evaluator, EvaluatorContext
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError

from durable_agent import UnknownAgentError
from durable_agent.cli import amain
from durable_agent.evals import EvalRun, InvalidDataset, evaluate
from durable_agent.temporal import AgentClient
from durable_agent.temporal.devserver import DevServer
from durable_agent.testing import AgentTestEnvironment

from .eval_agents import AGENTS, deployer, forecaster
from .temporal_support import connect, start_worker_process, unique


@dataclass
class CallsForecast(Evaluator[str, EvalRun]):
    """Asserts the run called `forecast` twice, for the prompt's city, in order."""

    def evaluate(self, ctx: EvaluatorContext[str, EvalRun]) -> bool:
        calls = ctx.output.tool_calls
        city = ctx.inputs.split()[-1].rstrip("?")
        return [c.name for c in calls] == ["forecast", "forecast"] and [
            c.arguments for c in calls
        ] == [{"city": city, "day": 0}, {"city": city, "day": 1}]


@dataclass
class Completed(Evaluator[str, EvalRun]):
    def evaluate(self, ctx: EvaluatorContext[str, EvalRun]) -> bool:
        return ctx.output.status == "completed"


@dataclass
class Explodes(Evaluator[str, EvalRun]):
    def evaluate(self, ctx: EvaluatorContext[str, EvalRun]) -> bool:
        if "Oslo" in ctx.inputs:
            raise RuntimeError("the evaluator broke")
        return True


CITIES = ["Paris", "Oslo", "Rome"]


def dataset(cities: list[str] = CITIES, *evaluators: Evaluator[str, EvalRun]) -> Dataset:
    return Dataset(
        name="weather",
        cases=[Case(name=city.lower(), inputs=f"Weather in {city}?") for city in cities],
        evaluators=[CallsForecast(), Completed(), *evaluators],
    )


def requests(folder: Path) -> list[str]:
    path = folder / "model_requests"
    return path.read_text().splitlines() if path.exists() else []


# -- in process ---------------------------------------------------------------------------------


async def test_in_process_each_case_is_a_run_with_its_calls_and_cost() -> None:
    report = await evaluate(forecaster, dataset(CITIES, Explodes()), progress=False)
    assert [case.name for case in report.cases] == ["paris", "oslo", "rome"]
    for case in report.cases:
        assert all(result.value for result in case.assertions.values()), case.name
        assert case.output.status == "completed"
        assert case.output.output == f"Sunny in {case.inputs.split()[-1]}"
        assert case.output.workflow_id is None
        assert case.metrics["cost"] == pytest.approx(0.003)
    oslo = next(case for case in report.cases if case.name == "oslo")
    assert [f.name for f in oslo.evaluator_failures] == ["Explodes"]
    assert "the evaluator broke" in oslo.evaluator_failures[0].error_message
    assert all(not c.evaluator_failures for c in report.cases if c.name != "oslo")
    total = next(a for a in report.analyses if a.title == "total cost")
    assert total.value == pytest.approx(0.009)
    rendered = report.render()
    assert "cost" in rendered
    assert "total cost" in rendered


async def test_a_case_that_waits_for_a_person_in_process() -> None:
    report = await evaluate(deployer, dataset(["Paris"]), progress=False)
    [case] = report.cases
    assert case.output.status == "waiting"
    assert [c.name for c in case.output.tool_calls] == ["forecast"]


async def test_inputs_that_are_not_prompts_are_refused() -> None:
    bad = Dataset(name="bad", cases=[Case(name="a", inputs="ok"), Case(name="b", inputs={"x": 1})])
    with pytest.raises(InvalidDataset, match=r"case 'b' .* inputs must be a prompt .* dict"):
        await evaluate(forecaster, bad)
    empty = Dataset(name="empty", cases=[Case(name="a", inputs="  ")])
    with pytest.raises(InvalidDataset, match="non-empty str"):
        await evaluate(forecaster, empty)
    with pytest.raises(InvalidDataset, match=r"needs a pydantic_evals\.Dataset"):
        await evaluate(forecaster, [Case(inputs="x")])  # type: ignore[arg-type]


# -- durable, on a test environment -------------------------------------------------------------


@pytest.mark.server
async def test_durable_cases_are_reused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DA_TEST_DIR", str(tmp_path))
    # The dev server: with cases in flight at once on a busy machine, the time-skipping
    # server skipped through a case's workflow task timeouts until it timed out (docs/evals.md)
    async with AgentTestEnvironment([forecaster, deployer], time_skipping=False) as env:
        report = await evaluate(
            forecaster, dataset(), client=env.client, name="v1", max_concurrency=2
        )
        assert {case.output.workflow_id for case in report.cases} == {
            "eval-v1-paris",
            "eval-v1-oslo",
            "eval-v1-rome",
        }
        failed = {
            (c.name, name): (c.output.status, c.output.error, len(c.output.tool_calls))
            for c in report.cases
            for name, r in c.assertions.items()
            if not r.value
        }
        assert failed == {}
        assert report.cases[0].metrics["cost"] == pytest.approx(0.003)
        assert len(requests(tmp_path)) == 9

        again = await evaluate("forecaster", dataset(), client=env.client, name="v1")
        assert len(requests(tmp_path)) == 9  # nothing paid twice
        assert [c.output.output for c in again.cases] == [c.output.output for c in report.cases]

        with pytest.raises(UnknownAgentError, match=r"no worker on task queue .* 'nobody'"):
            await evaluate("nobody", dataset(["Paris"]), client=env.client, name="x")

        module = tmp_path / "weather_evals.py"
        module.write_text(
            textwrap.dedent(
                """
                from pydantic_evals import Case, Dataset
                from pydantic_evals.evaluators import Contains

                cases = Dataset(
                    name="cli",
                    cases=[Case(name="paris", inputs="Weather in Paris?")],
                    evaluators=[Contains("Lisbon")],
                )
                not_prompts = Dataset(name="np", cases=[Case(name="a", inputs=1)])
                """
            )
        )
        monkeypatch.chdir(tmp_path)
        monkeypatch.syspath_prepend(str(tmp_path))
        where = ["--address", env.temporal.service_client.config.target_host]
        where += ["--task-queue", env.task_queue]
        assert await amain(["eval", "weather_evals:cases", "--agent", "forecaster", *where]) == 1
        assert await amain(["eval", "weather_evals:nope", "--agent", "forecaster", *where]) == 2
        assert await amain(["eval", "weather_evals:not_prompts", "--agent", "x", *where]) == 2
        assert (
            await amain(["eval", "weather_evals:cases", "--agent", "nobody", "--name", "n", *where])
            == 2
        )
        assert await amain(["eval", "no_colon", "--agent", "forecaster", *where]) == 2


@pytest.mark.server
async def test_a_durable_case_that_waits_for_a_person_is_reported_waiting() -> None:
    """On a server whose clock runs (under time skipping, awaiting the result jumps past
    any wait for a person)."""
    async with AgentTestEnvironment([deployer], time_skipping=False) as env:
        waiting = await evaluate(deployer, dataset(["Paris"]), client=env.client, name="hitl")
        [case] = waiting.cases
        assert case.output.status == "waiting"
        assert [c.name for c in case.output.tool_calls] == ["forecast"]
        assert case.output.usage.requests == 1


async def completed(client: Any, cities: list[str]) -> set[str]:
    """The prompts of the cases whose runs have completed."""
    done = set()
    for city in cities:
        handle = client.get_workflow_handle(f"eval-crash-{city.lower()}")
        with contextlib.suppress(RPCError):
            if (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED:
                done.add(f"Weather in {city}?")
    return done


@pytest.mark.server
async def test_a_worker_killed_mid_evaluation_and_the_evaluation_resumed(
    dev_server: DevServer, tmp_path: Path
) -> None:
    queue = unique("evals")
    client = await connect(dev_server.address)
    agents = AgentClient(client, task_queue=queue)
    cities = [f"City{i}" for i in range(8)]
    environ = {"EVAL_TOOL_SECONDS": "0.5"}
    log = tmp_path / "worker.log"
    worker = start_worker_process(
        dev_server.address, queue, tmp_path, log, agents="tests.eval_agents", environ=environ
    )
    first = asyncio.ensure_future(
        evaluate(forecaster, dataset(cities), client=agents, name="crash", max_concurrency=4)
    )
    try:
        for _ in range(300):  # until some cases are done and others are running
            if len(await completed(client, cities)) >= 2:
                break
            await asyncio.sleep(0.1)
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    finally:
        first.cancel()  # the evaluation's process stops too (as a Ctrl-C would)
    with pytest.raises(asyncio.CancelledError):
        await first
    finished_before = await completed(client, cities)
    assert 1 <= len(finished_before) < len(cities)

    worker = start_worker_process(
        dev_server.address, queue, tmp_path, log, agents="tests.eval_agents", environ=environ
    )
    try:
        report = await evaluate(
            forecaster, dataset(cities), client=agents, name="crash", max_concurrency=4
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait()
    assert len(report.cases) == len(cities)
    assert all(all(r.value for r in c.assertions.values()) for c in report.cases), log.read_text()
    lines = requests(tmp_path)
    for prompt in finished_before:  # finished cases were reused, not run again
        assert sorted(line for line in lines if line.startswith(f"{prompt}|")) == [
            f"{prompt}|1",
            f"{prompt}|2",
            f"{prompt}|3",
        ]
    per_case = {
        f"Weather in {c}?": [x for x in lines if x.startswith(f"Weather in {c}?|")] for c in cities
    }
    for prompt, made in per_case.items():
        # each step paid once; a request cut off by the kill may have been sent again
        assert {line.split("|")[1] for line in made} == {"1", "2", "3"}, prompt
        assert len(made) <= 4, (prompt, made)
    assert sum(len(made) for made in per_case.values()) <= 3 * len(cities) + 4
    workflows = [w async for w in client.list_workflows(f"TaskQueue = '{queue}'")]
    assert sorted({w.id for w in workflows}) == sorted(f"eval-crash-{c.lower()}" for c in cities)
    assert len(workflows) == len(cities)  # one run per case: none started twice


def _unused(value: Any) -> None:
    """Keeps AGENTS imported: the worker processes load this module by name."""


_unused(AGENTS)
