"""`Usage.cost`: priced from genai-prices where the response is produced, summed per run,
shown on Temporal, and `UsageLimits(cost_limit=...)` in-process and on Temporal."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Sequence
from typing import Any

import pytest
from genai_prices import Usage as PriceUsage
from genai_prices import calc_price
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from durable_agent import (
    AgentBuilder,
    Model,
    ModelMessage,
    ModelRequestParameters,
    ModelResponse,
    TestModel,
    TextPart,
    Usage,
    UsageLimitExceeded,
    UsageLimits,
)
from durable_agent.engine.pricing import dollars, price
from durable_agent.inbox import InboxSettings, create_app
from durable_agent.inbox.server import InboxServer
from durable_agent.temporal import AgentWorkflow
from durable_agent.temporal.client import AgentClient
from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.wire import ApprovalSignal

from .cli_support import cli_runner
from .helpers import call
from .temporal_support import new_worker, start_agent, unique, wait_for_status


class PricedModel(Model):
    """A scripted model served by a named provider, its responses reporting the token counts
    scripted for them, so they are priced. Stateless: the script position is the number of
    responses already in the conversation."""

    def __init__(self, responses: Sequence[ModelResponse], *, provider: str, model: str) -> None:
        self._responses = list(responses)
        self._provider = provider
        self._model = model
        self.request_count = 0

    @property
    def model_name(self) -> str:
        return self._model

    @property
    def provider(self) -> str | None:
        return self._provider

    async def request(
        self, messages: list[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse:
        self.request_count += 1
        position = sum(1 for m in messages if m.kind == "response")
        return self._responses[position].model_copy(update={"model_name": self._model})


def answer(text: str, **tokens: int) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text=text)], usage=Usage(**tokens))


def calls(**tokens: int) -> ModelResponse:
    return ModelResponse(parts=[call("lookup", "c1", key="k")], usage=Usage(**tokens))


def table(provider: str, model: str, **tokens: int) -> float:
    """genai-prices' own answer."""
    return float(calc_price(PriceUsage(**tokens), model, provider_id=provider).total_price)


def lookup(key: str) -> str:
    return f"value of {key}"


FIRST = {"input_tokens": 12_000, "output_tokens": 800, "cache_read_tokens": 4_000}
SECOND = {"input_tokens": 13_000, "output_tokens": 300}


def two_step_agent(name: str, model: str = "gpt-4o", **limits: Any) -> Any:
    priced = PricedModel([calls(**FIRST), answer("done", **SECOND)], provider="openai", model=model)
    builder = AgentBuilder(priced).name(name).tool(lookup)
    if limits:
        builder = builder.usage_limits(UsageLimits(**limits))
    return builder.build()


# -- pricing ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "model", "tokens"),
    [
        ("openai", "gpt-4o", {"input_tokens": 1_000, "output_tokens": 500}),
        (
            "openai",
            "gpt-4o",
            {"input_tokens": 9_000, "output_tokens": 10, "cache_read_tokens": 8_000},
        ),
        (
            "anthropic",
            "claude-sonnet-4-5",
            {
                "input_tokens": 5_000,
                "output_tokens": 700,
                "cache_read_tokens": 2_000,
                "cache_write_tokens": 1_000,
            },
        ),
    ],
)
def test_a_known_model_costs_what_the_price_table_says(
    provider: str, model: str, tokens: dict[str, int]
) -> None:
    cost = price(provider, model, Usage(**tokens))
    assert cost is not None
    assert cost > 0
    assert cost == pytest.approx(table(provider, model, **tokens), rel=1e-12)


def test_cached_tokens_are_cheaper_than_fresh_ones() -> None:
    fresh = price("openai", "gpt-4o", Usage(input_tokens=10_000))
    cached = price("openai", "gpt-4o", Usage(input_tokens=10_000, cache_read_tokens=8_000))
    assert fresh is not None
    assert cached is not None
    assert cached < fresh


def test_unknown_models_and_models_without_a_provider_are_not_priced() -> None:
    usage = Usage(input_tokens=100, output_tokens=10)
    assert price("openai", "no-such-model-anywhere", usage) is None
    assert price("no-such-provider", "gpt-4o", usage) is None
    assert price(None, "gpt-4o", usage) is None
    assert price("openai", "gpt-4o", Usage()) is None  # no usage reported


def test_costs_add_up_and_none_means_nothing_was_priced() -> None:
    assert Usage().add(Usage()).cost is None
    assert Usage(cost=0.5).add(Usage()).cost == 0.5
    assert Usage().add(Usage(cost=0.25)).cost == 0.25
    assert Usage(cost=0.5).add(Usage(cost=0.25)).cost == 0.75
    assert "cost" not in Usage(input_tokens=3).model_dump(mode="json")
    assert json.loads(Usage(cost=0.5).model_dump_json())["cost"] == 0.5


# -- in-process ---------------------------------------------------------------------------------


async def test_a_run_costs_the_sum_of_its_priced_requests() -> None:
    result = await two_step_agent(unique("priced")).run("go")
    expected = table("openai", "gpt-4o", **FIRST) + table("openai", "gpt-4o", **SECOND)
    assert result.output == "done"
    assert result.usage.cost == pytest.approx(expected, rel=1e-12)
    responses = [m for m in result.messages if isinstance(m, ModelResponse)]
    assert [r.usage.cost for r in responses] == pytest.approx(
        [table("openai", "gpt-4o", **FIRST), table("openai", "gpt-4o", **SECOND)], rel=1e-12
    )


async def test_a_run_of_an_unknown_model_has_no_cost() -> None:
    result = await two_step_agent(unique("unpriced"), model="no-such-model-anywhere").run("go")
    assert result.output == "done"
    assert result.usage.cost is None
    assert result.usage.input_tokens == FIRST["input_tokens"] + SECOND["input_tokens"]
    plain = await AgentBuilder(TestModel.with_text("ok")).build().run("hi")
    assert plain.usage.cost is None
    assert "cost" not in plain.usage.model_dump(mode="json")


async def test_cost_limit_stops_before_a_request_the_budget_cannot_cover() -> None:
    first = table("openai", "gpt-4o", **FIRST)
    # The first request fits; the second is estimated at what the first cost, which is more
    # than is left: the run stops before sending it.
    agent = two_step_agent(unique("budget"), cost_limit=first * 1.5)
    with pytest.raises(UsageLimitExceeded) as raised:
        await agent.run("go")
    assert raised.value.limit == "cost_limit"
    assert "next model request" in str(raised.value)
    assert agent.model.request_count == 1


async def test_cost_limit_stops_after_the_request_that_passed_it() -> None:
    first = table("openai", "gpt-4o", **FIRST)
    agent = two_step_agent(unique("budget"), cost_limit=first / 2)
    with pytest.raises(UsageLimitExceeded) as raised:
        await agent.run("go")
    assert raised.value.limit == "cost_limit"
    assert "cost reached" in str(raised.value)
    assert agent.model.request_count == 1


async def test_a_budget_that_covers_the_run_lets_it_finish() -> None:
    first = table("openai", "gpt-4o", **FIRST)
    second = table("openai", "gpt-4o", **SECOND)
    result = await two_step_agent(unique("budget"), cost_limit=(first + second) * 1.01 + first).run(
        "go"
    )
    assert result.output == "done"


# -- on Temporal --------------------------------------------------------------------------------


async def test_cost_on_temporal_in_result_status_and_checkpoints(client: Client) -> None:
    name = unique("priced")
    agent = two_step_agent(name)
    expected = table("openai", "gpt-4o", **FIRST) + table("openai", "gpt-4o", **SECOND)
    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, name, "go")
        result = await handle.result()
        view = await handle.query(AgentWorkflow.status)
        latest = await handle.query(AgentWorkflow.latest_checkpoint)
    assert result.usage.cost == pytest.approx(expected, rel=1e-12)
    assert view.usage.cost == pytest.approx(expected, rel=1e-12)
    assert latest is not None
    assert latest.resume.usage.cost == pytest.approx(expected, rel=1e-12)


async def test_cost_limit_fails_a_run_on_temporal(client: Client) -> None:
    name = unique("budget")
    agent = two_step_agent(name, cost_limit=table("openai", "gpt-4o", **FIRST) * 1.5)
    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, name, "go")
        with pytest.raises(WorkflowFailureError) as raised:
            await handle.result()
    cause = raised.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "usage_limit_exceeded"
    assert "cost_limit" in cause.message
    assert agent.model.request_count == 1


# -- shown to people: durable-agent status / list, the inbox -----------------------------------


def approval_agent(name: str) -> Any:
    """Spends one priced request, then waits for approval of `lookup`."""
    priced = PricedModel(
        [calls(**FIRST), answer("done", **SECOND)], provider="openai", model="gpt-4o"
    )
    return AgentBuilder(priced).name(name).tool(lookup).approval_required_tools(["lookup"]).build()


async def test_status_list_and_inbox_show_the_cost(
    client: Client, dev_server: DevServer, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = cli_runner(dev_server.address, capsys)
    name = unique("shown")
    agent = approval_agent(name)
    first = table("openai", "gpt-4o", **FIRST)
    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, name, "go")
        await wait_for_status(handle, "waiting")
        status = await cli("status", handle.id)
        as_json = await cli("status", handle.id, "--json")
        deadline = asyncio.get_running_loop().time() + 15  # visibility lags behind
        while True:
            listed = await cli("list", "--agent", name, "--json")
            rows = [r for r in listed.json() if r["workflow_id"] == handle.id]
            if rows and rows[0]["cost"] is not None:
                break
            assert asyncio.get_running_loop().time() < deadline, listed.out
            await asyncio.sleep(0.3)
        listed_table = await cli("list", "--agent", name)
        app = create_app(
            AgentClient(client),
            InboxSettings(secret="s" * 40, trusted_user_header="X-User", agents=(name,)),
        )
        async with InboxServer(app, "127.0.0.1", 0) as server:
            page = await asyncio.to_thread(_get, server.url + "/", {"X-User": "alice"})
        await handle.execute_update(
            AgentWorkflow.submit_approval, ApprovalSignal(tool_call_id="c1", approved=True)
        )
        result = await handle.result()
        closed = await cli("list", "--agent", name, "--json")

    usage_line = next(line for line in status.out.splitlines() if line.startswith("usage"))
    assert f"cost={dollars(first)}" in usage_line
    assert as_json.json()["view"]["usage"]["cost"] == pytest.approx(first, rel=1e-12)
    assert rows[0]["cost"] == pytest.approx(first, rel=1e-12)
    header, line = listed_table.out.strip().splitlines()
    assert header.split()[5] == "COST"
    assert line.split()[4] == dollars(first)
    assert 'data-testid="cost"' in page
    assert dollars(first) in page
    total = first + table("openai", "gpt-4o", **SECOND)
    assert result.usage.cost == pytest.approx(total, rel=1e-12)
    closed_rows = [r for r in closed.json() if r["workflow_id"] == handle.id]
    assert closed_rows[0]["cost"] == pytest.approx(total, rel=1e-12)


def _get(url: str, headers: dict[str, str]) -> str:
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        body: bytes = response.read()
    return body.decode()


def test_dollars_reads_as_people_write_prices() -> None:
    assert dollars(None) == "-"
    assert dollars(0.0685) == "$0.0685"
    assert dollars(0.00725) == "$0.00725"
    assert dollars(0.012) == "$0.0120"
    assert dollars(1234.5) == "$1,234.50"
    assert dollars(0.0000123) == "$0.000012"
