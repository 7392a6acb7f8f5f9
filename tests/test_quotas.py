"""Model quotas (#30): many runs, two worker processes, one provider limit.

A local chat-completions server enforces a request limit the way providers do (429 with
Retry-After once more than LIMIT requests came in the last WINDOW seconds). With the quota
configured on the workers, runs wait their turn and the server refuses (almost) nothing;
without it, the same load meets many 429s and still completes through retries.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Worker

from durable_agent.contract.errors import UserError
from durable_agent.engine.quotas import (
    SEND_MARGIN,
    SHORT_SEND_MARGIN,
    ModelQuota,
    QuotaWindow,
    estimate_tokens,
    model_key,
    parse_quota,
)
from durable_agent.models.openai import OpenAIChatModel
from durable_agent.temporal import DurableAgentPlugin
from durable_agent.temporal.client import AgentClient
from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.quota import KeeperView, QuotaKeeper, keeper_id
from durable_agent.temporal.quota.activities import wait_for_slot
from durable_agent.temporal.quota.wire import KEEPER_WORKFLOW, KeeperInput, QuotaAsk, QuotaTicket
from durable_agent.temporal.registry import AgentRegistration

from .support.limited_server import limited_server
from .support.openai_server import ErrorReply, FakeOpenAIServer, TextReply
from .temporal_support import start_worker_process, unique

LIMIT = 10
WINDOW = 10.0
RETRY_AFTER = 4.0
RUNS = 20


def test_quota_specs_parse_and_bad_ones_say_what_to_write() -> None:
    key, quota = parse_quota("openai:gpt-4.1=rpm:60,tpm:30000,concurrent:8")
    assert key == "openai:gpt-4.1"
    assert quota == ModelQuota(requests_per_minute=60, tokens_per_minute=30000, max_concurrent=8)
    assert quota.burst_requests() == 10
    for bad in ("gpt-4.1=rpm:60", "openai:gpt-4.1", "openai:x=rpm:0", "openai:x=rph:5"):
        with pytest.raises(UserError, match="--quota"):
            parse_quota(bad)
    assert model_key(OpenAIChatModel("gpt-4o-mini", base_url="http://x")) == "openai:gpt-4o-mini"
    assert model_key(OpenAIChatModel("llama", base_url="http://x", provider="groq")) == (
        "groq:llama"
    )


def test_the_window_keeps_a_sixth_of_a_minute_in_any_ten_seconds() -> None:
    window = QuotaWindow(ModelQuota(requests_per_minute=60, max_concurrent=3))
    now, granted = 0.0, []
    while len(granted) < 30:
        wait = window.wait(now, 10)
        if wait is None:  # three in flight: the oldest ends
            window.settle(now, granted[-3], 10, 10)
            continue
        now += wait
        window.grant(now, 10)
        granted.append(now)
    for start in granted:
        assert sum(1 for t in granted if start <= t < start + 10) <= 10
        assert sum(1 for t in granted if start <= t < start + 60) <= 60
    assert granted[-1] >= 20  # 30 requests at 10 per 10 s


def _simulate(window: QuotaWindow, count: int, duration: float) -> list[float]:
    """Grant times of `count` requests that each take `duration` s, asked all at once."""
    now, granted = 0.0, []
    ends: list[tuple[float, float]] = []  # (when it ends, when it was granted)
    while len(granted) < count:
        for end in [e for e in ends if e[0] <= now]:
            window.settle(end[0], end[1], 10, 10)
            ends.remove(end)
        wait = window.wait(now, 10)
        if wait == 0:
            window.grant(now, 10)
            granted.append(now)
            ends.append((now + duration, now))
            continue
        # on to the next thing that can make room: a request ending, or the wait
        now = min([e[0] for e in ends] + ([now + wait] if wait else []))
    return granted


def test_an_ended_request_counts_from_when_it_was_sent() -> None:
    """Issue 41: counted until it ended, a minute's requests took a minute plus their
    durations; counted from its grant (as the provider counts it) they take the minute,
    never more than the burst in any 10 s of sends, and a request in flight still counts."""
    quota = ModelQuota(requests_per_minute=60)
    by_end = _simulate(QuotaWindow(quota), 40, duration=3.0)
    by_send = _simulate(QuotaWindow(quota, by_send=True), 40, duration=3.0)
    for granted in (by_end, by_send):
        for start in granted:
            assert sum(1 for t in granted if start <= t < start + 10) <= 10
    assert by_send[-1] < by_end[-1]
    assert by_send[-1] <= 30 + 4 * 1.0  # 40 at 10 per 10 s: 30 s, a send margin each round
    window = QuotaWindow(quota, by_send=True)
    for _ in range(10):
        window.grant(0.0, 10)
    waiting = window.wait(15.0, 10)  # ten still in flight: they count in every span
    assert waiting is not None
    assert waiting > 0


def test_a_token_estimate_uses_the_last_usage_it_has() -> None:
    from durable_agent import ModelRequest, ModelResponse, TextPart, UserPromptPart
    from durable_agent.contract.usage import Usage

    first = [ModelRequest(parts=[UserPromptPart(content="x" * 400)])]
    assert estimate_tokens(first) > 100
    answered = ModelResponse(
        parts=[TextPart(text="ok")],
        usage=Usage(input_tokens=500, output_tokens=50, total_tokens=550),
    )
    assert estimate_tokens([*first, answered]) == 550 + 50


async def _burst(client: Client, task_queue: str) -> float:
    agents = AgentClient(client, task_queue=task_queue)
    started = time.monotonic()
    runs = await asyncio.gather(
        *(
            agents.start("quoted", f"question {i}", workflow_id=unique("quoted"))
            for i in range(RUNS)
        )
    )
    results = await asyncio.wait_for(asyncio.gather(*(run.result() for run in runs)), 180)
    assert [r.status for r in results] == ["completed"] * RUNS
    return time.monotonic() - started


@contextmanager
def workers(
    dev_server: DevServer, task_queue: str, tmp_path: Path, base_url: str, *quota: str
) -> Iterator[list[Any]]:
    extra = [arg for spec in quota for arg in ("--quota", spec)]
    environ = {"OPENAI_BASE_URL": base_url}
    processes = [
        start_worker_process(
            dev_server.address,
            task_queue,
            tmp_path,
            tmp_path / f"worker{i}.log",
            agents="tests.quota_agents",
            extra=extra,
            environ=environ,
        )
        for i in range(2)
    ]
    try:
        yield processes
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(30)


async def test_with_the_quota_twenty_runs_on_two_workers_keep_to_the_providers_limit(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    task_queue = unique("quota")
    quota = f"openai:gpt-4o-mini=rpm:{int(LIMIT * 60 / WINDOW)}"
    with (
        limited_server(limit=LIMIT, window=WINDOW, retry_after=RETRY_AFTER) as limited,
        workers(dev_server, task_queue, tmp_path, limited.server.base_url, quota),
    ):
        elapsed = await _burst(client, task_queue)
        keeper = await client.get_workflow_handle(
            keeper_id(task_queue, "openai:gpt-4o-mini")
        ).query(QuotaKeeper.state)
    total = limited.answered + limited.refused
    assert limited.answered == RUNS
    assert limited.refused <= 0.025 * total, (limited.refused, total)
    # 20 requests at 10 per 10 s: the second ten go out once the first ten left the window.
    assert elapsed >= WINDOW
    assert elapsed < 4 * WINDOW
    assert isinstance(keeper, KeeperView)
    assert keeper.waiting == 0
    assert keeper.in_flight == 0
    assert keeper.granted_last_minute == RUNS


async def test_without_the_quota_the_same_load_meets_many_429s_and_still_completes(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    task_queue = unique("unquoted")
    with (
        limited_server(limit=LIMIT, window=WINDOW, retry_after=RETRY_AFTER) as limited,
        workers(dev_server, task_queue, tmp_path, limited.server.base_url),
    ):
        await _burst(client, task_queue)
    assert limited.answered == RUNS
    assert limited.refused >= RUNS // 2


async def test_runs_wait_their_turn_in_status_and_higher_priority_goes_first(
    client: Client,
) -> None:
    """One request per 10 s: after a first run, a priority-5 and a priority-1 run wait (the
    `status` query's `quota_wait` says for which key); the priority-1 run goes first."""
    from durable_agent import AgentBuilder
    from durable_agent.temporal import AgentWorkflow, DurableAgentPlugin

    from .temporal_support import new_worker

    task_queue = unique("priority")
    with FakeOpenAIServer(api_key="sk-test") as server:
        server.enqueue(*[TextReply("fine") for _ in range(3)])
        name = unique("quoted-here")
        model = OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key="sk-test")
        agent = AgentBuilder(model).name(name).build()
        quotas = {"openai:gpt-4o-mini": ModelQuota(requests_per_minute=6)}
        # the worker's own client carries the quotas, as `python worker.py --quota` does
        quoted = await Client.connect(
            client.service_client.config.target_host, plugins=[DurableAgentPlugin(quotas=quotas)]
        )
        async with new_worker(quoted, task_queue, agents=[agent]):
            agents = AgentClient(client, task_queue=task_queue)
            first = await agents.start(name, "first")
            await asyncio.wait_for(first.result(), 30)
            low = await agents.start(name, "low", priority=5)
            high = await agents.start(name, "high", priority=1)
            for run in (low, high):
                for _ in range(100):
                    view = await run.handle.query(AgentWorkflow.status)
                    if view.quota_wait is not None:
                        break
                    await asyncio.sleep(0.1)
                assert view.quota_wait is not None
                assert view.quota_wait.key == "openai:gpt-4o-mini"
            done = asyncio.as_completed([low.result(), high.result()], timeout=60)
            order = [(await next_done).run_id for next_done in done]
    high_result = await high.result()
    assert order[0] == high_result.run_id
    assert [r.body["messages"][-1]["content"] for r in server.requests] == [
        "first",
        "high",
        "low",
    ]


async def test_a_priority_out_of_range_is_refused_before_anything_starts(client: Client) -> None:
    from durable_agent.contract.errors import InvalidInput

    with pytest.raises(InvalidInput, match="priority=9 is out of range"):
        await AgentClient(client, task_queue=unique("nowhere")).start("quoted", "x", priority=9)


@pytest.mark.server
async def test_runs_waiting_for_quota_survive_a_killed_worker_and_a_server_restart(
    tmp_path: Path,
) -> None:
    from .temporal_support import connect, free_port, start_worker_process

    server = DevServer(tmp_path / "quota.db", port=free_port(), ui_port=None)
    await server.start()
    task_queue = unique("quota-restart")
    quota = f"openai:gpt-4o-mini=rpm:{int(LIMIT * 60 / WINDOW)}"
    spare = None
    try:
        client = await connect(server.address)
        with (
            limited_server(limit=LIMIT, window=WINDOW, retry_after=RETRY_AFTER) as limited,
            workers(server, task_queue, tmp_path, limited.server.base_url, quota) as processes,
        ):
            agents = AgentClient(client, task_queue=task_queue)
            runs = [
                await agents.start("quoted", f"q{i}", workflow_id=unique("quoted"))
                for i in range(RUNS)
            ]
            for _ in range(300):  # the first ten answered, the others waiting their turn
                if limited.answered >= LIMIT:
                    break
                await asyncio.sleep(0.05)
            processes[0].send_signal(signal.SIGKILL)
            processes[0].wait(10)
            server.stop(signal.SIGKILL)
            await asyncio.sleep(1)
            await server.start()
            spare = start_worker_process(
                server.address,
                task_queue,
                tmp_path,
                tmp_path / "spare.log",
                agents="tests.quota_agents",
                extra=["--quota", quota],
                environ={"OPENAI_BASE_URL": limited.server.base_url},
            )
            client = await connect(server.address)
            handles = [client.get_workflow_handle(run.id) for run in runs]
            results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 240)
    finally:
        if spare is not None and spare.poll() is None:
            spare.send_signal(signal.SIGTERM)
            spare.wait(30)
        server.stop()
    assert [r["status"] for r in results] == ["completed"] * RUNS
    total = limited.answered + limited.refused
    assert limited.refused <= 0.025 * total, (limited.refused, total)
    assert limited.max_in_any_window(list(limited.accepted_all)) <= LIMIT


async def test_a_429_pauses_the_key_for_every_run_not_only_the_one_refused(
    client: Client,
) -> None:
    """A run's request meets a 429 with Retry-After 3: the keeper pauses the key, so a second
    run that asks meanwhile waits out the pause instead of meeting a 429 of its own."""
    from durable_agent import AgentBuilder
    from durable_agent.temporal import AgentWorkflow, DurableAgentPlugin

    from .temporal_support import new_worker

    task_queue = unique("paused")
    key = "openai:gpt-4o-mini"
    with FakeOpenAIServer(api_key="sk-test") as server:
        server.enqueue(ErrorReply.rate_limit(3), TextReply("first"), TextReply("second"))
        name = unique("quoted-429")
        model = OpenAIChatModel("gpt-4o-mini", base_url=server.base_url, api_key="sk-test")
        agent = AgentBuilder(model).name(name).build()
        quotas = {key: ModelQuota(requests_per_minute=600)}
        # the worker's own client carries the quotas, as `python worker.py --quota` does
        quoted = await Client.connect(
            client.service_client.config.target_host, plugins=[DurableAgentPlugin(quotas=quotas)]
        )
        async with new_worker(quoted, task_queue, agents=[agent]):
            agents = AgentClient(client, task_queue=task_queue)
            first = await agents.start(name, "first")
            keeper = client.get_workflow_handle(keeper_id(task_queue, key))
            for _ in range(100):
                state = await _keeper_state(keeper)
                if state is not None and state.paused_until is not None:
                    break
                await asyncio.sleep(0.1)
            assert state is not None
            assert state.paused_until is not None
            second = await agents.start(name, "second")
            view = None
            for _ in range(50):
                view = await second.handle.query(AgentWorkflow.status)
                if view.quota_wait is not None:
                    break
                await asyncio.sleep(0.1)
            assert view is not None
            assert view.quota_wait is not None  # waiting out the pause, not refused
            await asyncio.wait_for(asyncio.gather(first.result(), second.result()), 60)
    statuses = [r.status for r in server.requests]
    assert statuses.count(429) == 1
    assert len(server.requests) == 3


MEMBER_KEYS = ("openai:gpt-4o-mini", "openai:gpt-4.1")


async def _fallback_agent(
    client: Client, server: FakeOpenAIServer
) -> tuple[AgentRegistration, Client]:
    """An agent whose `FallbackModel` asks gpt-4o-mini, then gpt-4.1 (two attempts
    each), on `server`; and a client carrying a quota for each member, for its worker."""
    from durable_agent import AgentBuilder
    from durable_agent.models import FallbackModel
    from durable_agent.temporal import DurableAgentPlugin
    from durable_agent.temporal.registry import AgentActivityConfig

    from .temporal_support import fast_activity

    model = FallbackModel(
        *(
            OpenAIChatModel(key.partition(":")[2], base_url=server.base_url, api_key="sk-test")
            for key in MEMBER_KEYS
        )
    )
    name = unique("fallback-quoted")
    fast = AgentActivityConfig(model_request=fast_activity(maximum_attempts=2))
    hosted = AgentRegistration(AgentBuilder(model).name(name).build(), fast)
    quotas = {key: ModelQuota(requests_per_minute=600) for key in MEMBER_KEYS}
    quoted = await Client.connect(
        client.service_client.config.target_host, plugins=[DurableAgentPlugin(quotas=quotas)]
    )
    return hosted, quoted


async def test_a_fallback_models_members_each_wait_for_their_own_quota(client: Client) -> None:
    """The first member fails twice (its retry policy) and the second answers: each member's
    request was granted by its own key's keeper and given back. (Before, the chain's own key,
    `openai:fallback:...`, matched no quota: a fallback run asked no keeper at all.)"""
    from .temporal_support import new_worker

    task_queue = unique("fallback-quota")
    with FakeOpenAIServer(api_key="sk-test") as server:
        server.enqueue(ErrorReply(500, "boom"), ErrorReply(500, "boom"), TextReply("from 4.1"))
        hosted, quoted = await _fallback_agent(client, server)
        name = hosted.agent.name
        async with new_worker(quoted, task_queue, agents=[hosted]):
            run = await AgentClient(client, task_queue=task_queue).start(name, "hello")
            result = await asyncio.wait_for(run.result(), 60)
            states = {
                key: await _keeper_state(client.get_workflow_handle(keeper_id(task_queue, key)))
                for key in MEMBER_KEYS
            }
    assert result.output == "from 4.1"
    assert [r.status for r in server.requests] == [500, 500, 200]
    for key, state in states.items():
        assert state is not None, f"no keeper for {key}: the member was not limited"
        assert (state.granted_last_minute, state.in_flight) == (1, 0), (key, state)


async def test_fallback_runs_from_before_member_quotas_replay_on_a_worker_with_them(
    client: Client,
) -> None:
    """A fallback run recorded without member quotas (as every one was before them) asked no
    keeper; a worker with the quotas replays it as it ran, and its own runs as they ran."""
    from .temporal_support import new_replayer, new_worker

    with FakeOpenAIServer(api_key="sk-test") as server:
        hosted, quoted = await _fallback_agent(client, server)
        name = hosted.agent.name
        histories = []
        for worker_client in (client, quoted):  # without the quotas, then with them
            server.enqueue(ErrorReply(500, "boom"), ErrorReply(500, "boom"), TextReply("ok"))
            task_queue = unique("fallback-replayed")
            async with new_worker(worker_client, task_queue, agents=[hosted]):
                run = await AgentClient(client, task_queue=task_queue).start(name, "hello")
                assert (await asyncio.wait_for(run.result(), 60)).output == "ok"
                histories.append(await run.handle.fetch_history())
    quotas = {key: ModelQuota(requests_per_minute=600) for key in MEMBER_KEYS}
    for history in histories:
        replayed = await new_replayer(agents=[hosted], quotas=quotas).replay_workflow(
            history, raise_on_replay_failure=False
        )
        assert replayed.replay_failure is None, replayed.replay_failure


async def _keeper_state(keeper: Any) -> KeeperView | None:
    try:
        state: KeeperView = await keeper.query(QuotaKeeper.state)
    except Exception:  # not started yet
        return None
    return state


def test_a_sent_request_counts_from_its_reported_send_within_grant_and_now() -> None:
    """A busy keeper hears of a send seconds after it: counting from when it heard would
    hold the next requests back as long. The sender's time is kept between the grant and
    the keeper's now, so a skewed clock cannot move a request out of what it could be."""
    quota = ModelQuota(requests_per_minute=6)  # one per 10 s
    window = QuotaWindow(quota, by_send=True)
    window.grant(0.0, 10)
    assert window.sent(0.0, 10, now=4.0, reported=1.0) == 1.0
    window.settle(5.0, 1.0, 10, None)
    assert window.wait(5.0, 10) == 1.0 + SEND_MARGIN + 10 - 5.0
    assert window.sent(0.0, 10, now=4.0) == 4.0  # 0.4.0's activities report no time
    assert window.sent(2.0, 10, now=4.0, reported=1.0) == 2.0  # not before its grant
    assert window.sent(2.0, 10, now=4.0, reported=9.0) == 4.0  # not after it was heard of


def test_a_slot_granted_ahead_counts_from_its_opening_with_the_short_margin() -> None:
    """Keepers since the direct path grant a slot before it opens: the grant counts from
    its opening, and an ended request counts half a second past its send, not a second."""
    quota = ModelQuota(requests_per_minute=6)  # one per 10 s
    window = QuotaWindow(quota, by_send=True, margin=SHORT_SEND_MARGIN)
    window.grant(0.0, 10)
    window.settle(3.0, 0.0, 10, None)
    assert window.wait(8.0, 10) == SHORT_SEND_MARGIN + 10 - 8.0
    window.grant(10.5, 10)  # granted at 8.5, two seconds ahead of its opening
    assert window.wait(9.0, 10) == 10.0  # in flight: nothing more until it ends
    window.settle(12.0, 10.5, 10, None)
    assert window.wait(12.0, 10) == 10.5 + SHORT_SEND_MARGIN + 10 - 12.0
    restored = QuotaWindow.restore(quota, window.snapshot(), 0, 0.0, by_send=True)
    assert restored.margin == SEND_MARGIN  # keepers recorded before keep theirs


async def test_a_request_granted_ahead_waits_in_its_activity_until_its_slot() -> None:
    opens = datetime.now(UTC) + timedelta(seconds=0.3)
    await wait_for_slot(QuotaTicket(keeper="k", ask_id="a", not_before=opens))
    assert datetime.now(UTC) >= opens
    began = time.monotonic()
    await wait_for_slot(QuotaTicket(keeper="k", ask_id="a", not_before=opens))  # passed
    await wait_for_slot(QuotaTicket(keeper="k", ask_id="a"))  # granted with the slot open
    assert time.monotonic() - began < 0.1


async def test_a_grant_for_a_run_that_has_ended_is_free_again(client: Client) -> None:
    """The keeper tells grants with one local activity; a run that ended before its grant
    came cannot be told, and its slot goes back to the window at once."""
    quota = ModelQuota(requests_per_minute=60, max_concurrent=1)
    key = "openai:gpt-4o-mini"
    queue = unique("ended")
    plugin = DurableAgentPlugin([], quotas={key: quota})
    async with Worker(client, task_queue=queue, plugins=[plugin]):
        keeper = await client.start_workflow(
            KEEPER_WORKFLOW,
            KeeperInput(key=key, quota=quota),
            id=keeper_id(queue, key),
            task_queue=queue,
            start_signal="ask",
            start_signal_args=[QuotaAsk(ask_id="gone", requester=unique("no-such-run"), tokens=1)],
        )
        for _ in range(100):
            state = await _keeper_state(keeper)
            if state is not None and state.granted_last_minute == 1 and state.in_flight == 0:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"the ended run's grant is still held: {state}")
        history = await keeper.fetch_history()
        told = [
            e
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
            and b"tell_quota_grants"
            in e.marker_recorded_event_attributes.details["data"].SerializeToString()
        ]
        assert len(told) == 1
        await keeper.terminate("test over")
