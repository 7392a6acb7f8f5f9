"""The approvals inbox, driven in headless Chromium (Playwright, the system chromium).

A real dev server, a real worker and the real inbox app served by uvicorn; the browser
logs in, reads the pending calls and clicks the buttons. Forged and CSRF-less requests go
through the same browser session with Playwright's request API.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
import shutil
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from durable_agent import (
    AgentBuilder,
    CallDeferred,
    FunctionModel,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from durable_agent.engine.spec import AgentSpec
from durable_agent.inbox import InboxSettings, create_app
from durable_agent.inbox.auth import User, UserDirectory, hash_password
from durable_agent.inbox.server import InboxServer
from durable_agent.models import AgentInfo
from durable_agent.temporal import AgentWorkflow, DurableAgentPlugin
from durable_agent.temporal.client import AgentClient
from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.encryption import generate_key
from durable_agent.temporal.signing import ApprovalKeys
from durable_agent.temporal.wire import ApprovalSignal

from .temporal_support import new_worker, start_agent, wait_for_status

playwright_api = pytest.importorskip("playwright.async_api", reason="pip install playwright")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}
GROUPS = {"alice": ("release",), "bob": ("dev",), "carol": ("ops",)}
"""alice may decide `deploy` by name, carol through the ops group, bob not at all."""


@pytest.fixture(scope="module")
def users() -> UserDirectory:
    return UserDirectory(
        User(name, hash_password(password), GROUPS[name]) for name, password in PASSWORDS.items()
    )


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Any]:
    assert CHROMIUM, "chromium is not installed: run `apt-get install -y chromium`"
    async with playwright_api.async_playwright() as driver:
        launched = await driver.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield launched
        await launched.close()


class Agents:
    """A deployer (approval by alice or ops) and a reporter (a deferred call), both with
    fresh names; the model echoes what the tool returned, so the test reads what it saw."""

    def __init__(self) -> None:
        suffix = uuid.uuid4().hex[:6]
        self.deployer = f"inbox-deployer-{suffix}"
        self.reporter = f"inbox-reporter-{suffix}"
        self.twice = f"inbox-twice-{suffix}"
        self.deployed: list[dict[str, Any]] = []

        def deploy(env: str, replicas: int = 1) -> str:
            """Deploy the service."""
            self.deployed.append({"env": env, "replicas": replicas})
            return f"deployed {env} with {replicas} replicas"

        def fetch_report(day: str) -> str:
            """Ask the data team for a report; it arrives later."""
            raise CallDeferred("the data team sends it")

        self.hosted: list[AgentSpec] = [
            AgentBuilder(FunctionModel(_script("deploy", {"env": "prod", "replicas": 2}, "d1")))
            .name(self.deployer)
            .instructions("You deploy carefully.")
            .tool(deploy)
            .approval_required_tools(["deploy"])
            .approvers({"deploy": ["alice", "ops"]})
            .build(),
            AgentBuilder(FunctionModel(_script("fetch_report", {"day": "monday"}, "r1")))
            .name(self.reporter)
            .tool(fetch_report)
            .build(),
            AgentBuilder(FunctionModel(_deploy_twice))
            .name(self.twice)
            .tool(deploy)
            .approval_required_tools(["deploy"])
            .approvers({"deploy": ["alice"]})
            .build(),
        ]
        """The three agents, for the worker to host."""

    @property
    def names(self) -> tuple[str, ...]:
        return (self.deployer, self.reporter, self.twice)


def _deploy_twice(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Deploys to staging (d1), then to prod (d2), each call waiting for its approval."""
    returned = sum(
        isinstance(part, ToolReturnPart)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
    )
    if returned == 2:
        return ModelResponse(parts=[TextPart(text="both deployed")])
    env = ("staging", "prod")[returned]
    call = ToolCallPart(id=f"d{returned + 1}", name="deploy", arguments={"env": env})
    return ModelResponse(parts=[call])


def _script(tool: str, arguments: dict[str, Any], call_id: str) -> Any:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if isinstance(last, ModelRequest):
            returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
            if returns:
                return ModelResponse(parts=[TextPart(text=f"model saw: {returns[0].content}")])
        return ModelResponse(
            parts=[
                TextPart(text=f"I will call {tool}."),
                ToolCallPart(id=call_id, name=tool, arguments=arguments),
            ]
        )

    return respond


@asynccontextmanager
async def serving(
    client: Client,
    worker: Worker,
    agents: Agents,
    users: UserDirectory | None,
    **options: Any,
) -> AsyncIterator[str]:
    keys = options.pop("approval_keys", None)
    settings = InboxSettings(
        secret="s" * 40, users=users, poll_seconds=0.5, agents=agents.names, **options
    )
    inbox_client = AgentClient(client, task_queue=worker.task_queue, approval_keys=keys)
    async with InboxServer(create_app(inbox_client, settings), "127.0.0.1", 0) as server:
        yield server.url


async def login(browser: Any, url: str, user: str) -> Any:
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    await page.goto(url + "/")
    assert "/login" in page.url
    await page.fill("input[name=username]", user)
    await page.fill("input[name=password]", PASSWORDS[user])
    await page.click("button[type=submit]")
    await page.wait_for_url(url + "/")
    return page


def card(page: Any, handle: WorkflowHandle[Any, Any]) -> Any:
    return page.locator(f'article[data-workflow-id="{handle.id}"]')


async def open_card(
    browser: Any, url: str, user: str, handle: WorkflowHandle[Any, Any]
) -> tuple[Any, Any]:
    """`user`'s inbox page, once the run's card is on it, and that card."""
    page = await login(browser, url, user)
    run = card(page, handle)
    await run.wait_for(timeout=15_000)
    return page, run


async def accepted_decisions(
    client: Client, handle: WorkflowHandle[Any, Any]
) -> list[ApprovalSignal]:
    """The approvals the run accepted, as they are in its history."""
    converter = client.data_converter.payload_converter
    history = await handle.fetch_history()
    decisions = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            request = event.workflow_execution_update_accepted_event_attributes.accepted_request
            if request.input.name == "submit_approval":
                (payload,) = request.input.args.payloads
                decisions.append(converter.from_payload(payload, ApprovalSignal))
    return decisions


async def csrf_of(page: Any) -> str:
    token: str = await page.locator("input[name=csrf_token]").first.get_attribute("value")
    return token


async def deploy_run(client: Client, worker: Worker, agents: Agents) -> WorkflowHandle[Any, Any]:
    handle = await start_agent(
        client, worker, agents.deployer, "ship v2 to prod", approval_timeout_seconds=3600
    )
    await wait_for_status(handle, "waiting")
    return handle


# -- tests ----------------------------------------------------------------------------------


async def test_an_approver_sees_the_waiting_call_and_approves_it(
    client: Client, dev_server: DevServer, browser: Any, users: UserDirectory
) -> None:
    agents = Agents()
    async with (
        new_worker(client, agents=agents.hosted) as worker,
        serving(client, worker, agents, users) as url,
    ):
        page = await login(browser, url, "alice")
        await page.wait_for_selector("[data-testid=empty]")
        handle = await deploy_run(client, worker, agents)  # appears without a reload
        run = card(page, handle)
        await run.wait_for(timeout=15_000)
        text = await run.inner_text()
        assert agents.deployer in text
        assert "deploy needs approval" in text
        assert "d1" in text
        assert "ship v2 to prod" in text  # the conversation that led to it
        assert "I will call deploy." in text
        assert re.search(r"waiting\s+\d+ s ago", text), text
        assert re.search(r"expires\s+in 59 min", text), text
        assert "approvers\talice, ops" in text or "approvers alice, ops" in text.replace("\n", " ")
        arguments = json.loads(await run.locator("textarea[name=arguments]").input_value())
        assert arguments == {"env": "prod", "replicas": 2}

        await run.locator("[data-testid=approve]").click()
        flash = run.locator("[data-testid=flash]")
        await flash.wait_for()
        assert (await flash.inner_text()).startswith("approved deploy (d1) as alice; the run is")
        result = await handle.result()
        assert result.output == "model saw: deployed prod with 2 replicas"
        assert agents.deployed == [{"env": "prod", "replicas": 2}]
        (decision,) = await accepted_decisions(client, handle)
        assert (decision.decided_by, decision.groups, decision.approved) == (
            "alice",
            ["release"],
            True,
        )
        await page.locator(f'article[data-workflow-id="{handle.id}"]').wait_for(
            state="detached", timeout=15_000
        )
        await page.context.close()


async def test_a_list_asked_for_before_a_decision_does_not_swap_its_answer_away(
    client: Client, browser: Any, users: UserDirectory
) -> None:
    """The list polls every half second here; one poll is held in the browser until the
    approval's answer is on the page, then let through: the confirmation must stay."""
    agents = Agents()
    async with (
        new_worker(client, agents=agents.hosted) as worker,
        serving(client, worker, agents, users) as url,
    ):
        handle = await deploy_run(client, worker, agents)
        page, run = await open_card(browser, url, "alice", handle)
        held, decided, release = asyncio.Event(), asyncio.Event(), asyncio.Event()
        polls = 0

        async def hold(route: Any) -> None:
            nonlocal polls
            polls += 1
            if polls == 1:
                held.set()
                await decided.wait()
            else:
                await release.wait()  # later polls would show the run as it is after
            await route.continue_()

        await page.route("**/runs?*", hold)
        await asyncio.wait_for(held.wait(), 10)
        await run.locator("[data-testid=approve]").click()
        flash = run.locator("[data-testid=flash]")
        await flash.wait_for()
        async with page.expect_event(
            "requestfinished", lambda request: "/runs?" in request.url, timeout=10_000
        ):
            decided.set()
        await page.wait_for_timeout(300)  # htmx swaps (or drops) the list just after
        assert await flash.is_visible()
        assert (await flash.inner_text()).startswith("approved deploy (d1) as alice")
        release.set()
        await handle.result()
        await page.unroute("**/runs?*")
        await page.context.close()


async def test_a_list_that_comes_back_while_a_decision_is_sent_does_not_swap_its_card_away(
    client: Client, browser: Any, users: UserDirectory
) -> None:
    """A poll asked for before the click whose answer lands while the approval is on its way
    (a busy server): swapped in, it would replace the card the approval's answer is meant
    for, and the confirmation would go to a card no longer on the page."""
    agents = Agents()
    async with (
        new_worker(client, agents=agents.hosted) as worker,
        serving(client, worker, agents, users) as url,
    ):
        handle = await deploy_run(client, worker, agents)
        page, run = await open_card(browser, url, "alice", handle)
        held, posting, polls = asyncio.Event(), asyncio.Event(), 0
        listed, release = asyncio.Event(), asyncio.Event()

        async def hold_list(route: Any) -> None:
            nonlocal polls
            polls += 1
            if polls == 1:
                held.set()
                await posting.wait()  # asked before the click, answered while it is sent
                # as if the list had changed meanwhile: answered in full, not "unchanged"
                stale = re.sub(r"([?&]v=)[^&]*", r"\1stale", route.request.url)
                await route.continue_(url=stale)
                return
            # later polls would show the finished run gone, confirmation and all, before a
            # loaded browser looked for it
            await release.wait()
            await route.continue_()

        async def hold_decision(route: Any) -> None:
            posting.set()
            await listed.wait()  # the list's answer is on the page before this one
            await asyncio.sleep(0.3)  # htmx swaps it just after
            await route.continue_()

        def finished(request: Any) -> None:
            if "/runs?" in request.url:
                listed.set()

        page.on("requestfinished", finished)
        await page.route("**/runs?*", hold_list)
        await page.route("**/approve", hold_decision)
        await asyncio.wait_for(held.wait(), 10)
        await run.locator("[data-testid=approve]").click()
        flash = page.locator("#runs [data-testid=flash]")
        await flash.wait_for(timeout=10_000)
        assert (await flash.inner_text()).startswith("approved deploy (d1) as alice")
        release.set()
        await handle.result()
        await page.unroute("**/runs?*")
        await page.unroute("**/approve")
        await page.context.close()


async def test_a_confirmation_stays_a_while_after_its_run_has_left_the_list(
    client: Client, browser: Any, users: UserDirectory
) -> None:
    """Approved, the run goes on and finishes: the next list no longer holds it, yet its
    card and confirmation stay on the page for a few seconds (read, not flashed), then go."""
    agents = Agents()
    async with (
        new_worker(client, agents=agents.hosted) as worker,
        serving(client, worker, agents, users) as url,
    ):
        handle = await deploy_run(client, worker, agents)
        page, run = await open_card(browser, url, "alice", handle)
        await run.locator("[data-testid=approve]").click()
        flash = run.locator("[data-testid=flash]")
        await flash.wait_for()
        answered = time.monotonic()
        await handle.result()
        # a list without the run was swapped in, and the answered card put back
        await page.wait_for_function(
            "id => document.querySelector(`#runs article[data-kept][data-workflow-id='${id}']`)",
            arg=handle.id,
            timeout=15_000,
        )
        assert (await flash.inner_text()).startswith("approved deploy (d1) as alice")
        assert await run.locator("form").count() == 0, "the kept card offers no decision"
        await run.wait_for(state="detached", timeout=20_000)
        assert time.monotonic() - answered >= 7.5, "kept for KEEP_MS (8 s) after its answer"
        await page.context.close()


async def test_a_confirmation_stays_on_the_card_of_the_runs_next_call(
    client: Client, browser: Any, users: UserDirectory
) -> None:
    """Approved, the run asks for its next approval: the list's new card for it shows the
    new call and, for a few seconds, the confirmation of the one just decided."""
    agents = Agents()
    async with (
        new_worker(client, agents=agents.hosted) as worker,
        serving(client, worker, agents, users) as url,
    ):
        handle = await start_agent(
            client, worker, agents.twice, "ship it", approval_timeout_seconds=3600
        )
        await wait_for_status(handle, "waiting")
        page, run = await open_card(browser, url, "alice", handle)
        await run.locator("[data-testid=approve]").click()
        await run.locator("[data-testid=flash]").wait_for()
        second = run.locator("form[action$='/calls/d2/approve']")
        await second.wait_for(timeout=15_000)
        flash = run.locator("[data-testid=flash]")
        assert (await flash.inner_text()).startswith("approved deploy (d1) as alice")
        await second.locator("[data-testid=approve]").click()
        await run.locator("[data-testid=flash]", has_text="(d2)").wait_for()
        assert (await handle.result()).output == "both deployed"
        await page.context.close()


async def test_a_non_approver_gets_no_usable_button_and_a_forged_post_is_refused(
    client: Client, browser: Any, users: UserDirectory
) -> None:
    agents = Agents()
    async with (
        new_worker(client, agents=agents.hosted) as worker,
        serving(client, worker, agents, users) as url,
    ):
        handle = await deploy_run(client, worker, agents)
        page, run = await open_card(browser, url, "bob", handle)
        assert await run.locator("[data-testid=approve]").is_disabled()
        assert await run.locator("[data-testid=deny]").is_disabled()
        assert await run.locator("textarea").count() == 0
        refusal = await run.locator("[data-testid=refusal]").inner_text()
        assert (
            refusal
            == "'bob' (groups: dev) may not decide tool 'deploy'; its approvers are alice, ops"
        )
        before = await handle.query(AgentWorkflow.status)

        forged = await page.request.post(
            f"{url}/runs/{handle.id}/calls/d1/approve",
            form={"csrf_token": await csrf_of(page), "arguments": ""},
        )
        assert forged.status == 403
        assert (
            "you may not decide this call: 'bob' (groups: dev) may not decide tool 'deploy'"
            in html.unescape(await forged.text())
        )
        # decided_by is the session's identity, never a form field
        as_alice = await page.request.post(
            f"{url}/runs/{handle.id}/calls/d1/deny",
            form={"csrf_token": await csrf_of(page), "reason": "no", "decided_by": "alice"},
        )
        assert as_alice.status == 403
        assert await handle.query(AgentWorkflow.status) == before
        assert agents.deployed == []
        await page.context.close()
        await handle.terminate("test done")


async def test_a_denial_needs_a_reason_and_the_reason_reaches_the_model(
    client: Client, browser: Any, users: UserDirectory
) -> None:
    agents = Agents()
    async with (
        new_worker(client, agents=agents.hosted) as worker,
        serving(client, worker, agents, users) as url,
    ):
        handle = await deploy_run(client, worker, agents)
        # carol is an approver through the ops group
        page, run = await open_card(browser, url, "carol", handle)
        before = await handle.query(AgentWorkflow.status)
        await run.locator("[data-testid=deny]").click()
        flash = run.locator("[data-testid=flash]")
        await flash.wait_for()
        assert await flash.inner_text() == (
            "give a reason to deny the call: the agent's model reads it"
        )
        assert await handle.query(AgentWorkflow.status) == before

        await run.locator("[data-testid=reason]").fill("change freeze until Monday")
        await run.locator("[data-testid=deny]").click()
        await page.wait_for_function(
            "() => document.body.innerText.includes('denied deploy (d1) as carol')"
        )
        result = await handle.result()
        assert result.output == "model saw: The call was not approved: change freeze until Monday"
        assert agents.deployed == []
        (decision,) = await accepted_decisions(client, handle)
        assert (decision.decided_by, decision.groups, decision.approved) == (
            "carol",
            ["ops"],
            False,
        )
        await page.context.close()


async def test_bad_arguments_a_second_click_and_a_deferred_result(
    client: Client, browser: Any, users: UserDirectory
) -> None:
    agents = Agents()
    async with (
        new_worker(client, agents=agents.hosted) as worker,
        serving(client, worker, agents, users) as url,
    ):
        handle = await deploy_run(client, worker, agents)
        page = await login(browser, url, "alice")
        stale = await login(browser, url, "carol")
        run = card(page, handle)
        await run.wait_for(timeout=15_000)
        await card(stale, handle).wait_for(timeout=15_000)
        before = await handle.query(AgentWorkflow.status)

        arguments = run.locator("textarea[name=arguments]")
        await arguments.fill('{"env": "prod", "replicas": "many"}')
        await run.locator("[data-testid=approve]").click()
        flash = run.locator("[data-testid=flash]")
        await flash.wait_for()
        message = await flash.inner_text()
        assert message.startswith(
            "the run refused it: override_arguments for tool 'deploy' (call 'd1') are invalid:"
        ), message
        assert "replicas" in message
        await run.locator("textarea[name=arguments]").fill('{"env": "prod", ')
        await run.locator("[data-testid=approve]").click()
        await page.wait_for_function(
            "() => document.body.innerText.includes('the arguments are not valid JSON')"
        )
        assert await handle.query(AgentWorkflow.status) == before

        await run.locator("textarea[name=arguments]").fill('{"env": "prod", "replicas": 5}')
        await run.locator("[data-testid=approve]").click()
        await page.wait_for_function(
            "() => document.body.innerText.includes('approved deploy (d1) with your arguments')"
        )
        # carol's click comes second (her page loaded the form before alice decided)
        second = await stale.request.post(
            f"{url}/runs/{handle.id}/calls/d1/approve",
            form={"csrf_token": await csrf_of(stale), "arguments": ""},
            headers={"HX-Request": "true"},
        )
        assert second.status == 409
        assert re.search(
            r"tool call &#39;d1&#39; of run \S+ is no longer waiting for a decision|"
            r"run \S+ is (running|completed); it is no longer waiting for anyone",
            await second.text(),
        ), await second.text()
        assert (await handle.result()).output == "model saw: deployed prod with 5 replicas"
        assert agents.deployed == [{"env": "prod", "replicas": 5}]
        assert len(await accepted_decisions(client, handle)) == 1

        report = await start_agent(client, worker, agents.reporter, "monday's report please")
        await wait_for_status(report, "waiting")
        deferred = card(page, report)
        await deferred.wait_for(timeout=15_000)
        assert "fetch_report waits for its result" in await deferred.inner_text()
        await deferred.locator("[data-testid=response]").fill('{"rows": 3}')
        await deferred.locator("[data-testid=deliver]").click()
        await deferred.locator("[data-testid=flash]").wait_for()
        assert (await report.result()).output == "model saw: {'rows': 3}"
        await page.context.close()
        await stale.context.close()


async def test_login_and_csrf_are_enforced(
    client: Client, browser: Any, users: UserDirectory
) -> None:
    agents = Agents()
    async with (
        new_worker(client, agents=agents.hosted) as worker,
        serving(client, worker, agents, users) as url,
    ):
        handle = await deploy_run(client, worker, agents)
        context = await browser.new_context()
        anonymous = context.request
        assert (await anonymous.get(f"{url}/runs")).status == 401
        response = await anonymous.get(f"{url}/", max_redirects=0)
        assert response.status == 303
        assert response.headers["location"] == "/login?next=/"
        refused = await anonymous.post(f"{url}/runs/{handle.id}/calls/d1/approve", form={})
        assert refused.status == 401
        assert handle.id not in await refused.text()

        page = await context.new_page()
        await page.goto(f"{url}/login")
        await page.fill("input[name=username]", "alice")
        await page.fill("input[name=password]", "wrong")
        await page.click("button[type=submit]")
        assert "wrong user name or password" in await page.inner_text("body")
        no_token = await context.request.post(
            f"{url}/login", form={"username": "alice", "password": PASSWORDS["alice"]}
        )
        assert no_token.status == 403

        page = await login(browser, url, "alice")
        await card(page, handle).wait_for(timeout=15_000)
        before = await handle.query(AgentWorkflow.status)
        without = await page.request.post(f"{url}/runs/{handle.id}/calls/d1/approve", form={})
        assert without.status == 403
        assert "CSRF token" in await without.text()
        wrong = await page.request.post(
            f"{url}/runs/{handle.id}/calls/d1/approve", form={"csrf_token": "x" * 43}
        )
        assert wrong.status == 403
        headers = (await page.request.get(f"{url}/")).headers
        assert headers["x-frame-options"] == "DENY"
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert await handle.query(AgentWorkflow.status) == before
        assert agents.deployed == []
        await context.close()
        await page.context.close()
        await handle.terminate("test done")


async def test_a_trusted_header_is_the_identity_and_without_it_nothing_is_shown(
    client: Client, browser: Any
) -> None:
    agents = Agents()
    async with (
        new_worker(client, agents=agents.hosted) as worker,
        serving(
            client,
            worker,
            agents,
            None,
            trusted_user_header="X-Forwarded-User",
            trusted_groups_header="X-Forwarded-Groups",
        ) as url,
    ):
        handle = await deploy_run(client, worker, agents)
        context = await browser.new_context()
        missing = await context.request.get(f"{url}/")
        assert missing.status == 401
        assert handle.id not in await missing.text()
        proxied = await browser.new_context(
            extra_http_headers={
                "X-Forwarded-User": "dana@example.com",
                "X-Forwarded-Groups": "ops,qa",
            }
        )
        page = await proxied.new_page()
        await page.goto(f"{url}/")
        run = card(page, handle)
        await run.wait_for(timeout=15_000)
        assert "dana@example.com" in await page.inner_text("header.top")
        await run.locator("[data-testid=approve]").click()
        await run.locator("[data-testid=flash]").wait_for()
        assert (await handle.result()).output == "model saw: deployed prod with 2 replicas"
        (decision,) = await accepted_decisions(client, handle)
        assert (decision.decided_by, decision.groups) == ("dana@example.com", ["ops", "qa"])
        await context.close()
        await proxied.close()


async def test_the_inbox_signs_for_a_worker_that_requires_signatures(
    dev_server: DevServer, browser: Any, users: UserDirectory
) -> None:
    keys = ApprovalKeys.parse(generate_key("inbox-test"))
    keyed = await Client.connect(
        dev_server.address, plugins=[DurableAgentPlugin(approval_keys=keys)]
    )
    agents = Agents()
    async with (
        new_worker(keyed, agents=agents.hosted) as worker,
        serving(keyed, worker, agents, users, approval_keys=keys) as url,
    ):
        handle = await deploy_run(keyed, worker, agents)
        page, run = await open_card(browser, url, "alice", handle)
        await page.screenshot(path=str(ARTIFACTS / "inbox_signed.png"))
        await run.locator("[data-testid=approve]").click()
        await run.locator("[data-testid=flash]").wait_for()
        assert (await handle.result()).output == "model saw: deployed prod with 2 replicas"
        (decision,) = await accepted_decisions(keyed, handle)
        assert decision.signature is not None
        assert decision.signature.startswith("v1:inbox-test:")
        await page.context.close()


async def test_screenshot_of_the_inbox(client: Client, browser: Any, users: UserDirectory) -> None:
    """The picture in the README (tests/artifacts/inbox.png; copied to docs/ by hand)."""
    agents = Agents()
    async with (
        new_worker(client, agents=agents.hosted) as worker,
        serving(client, worker, agents, users) as url,
    ):
        deploy = await deploy_run(client, worker, agents)
        report = await start_agent(client, worker, agents.reporter, "monday's sales report")
        await wait_for_status(report, "waiting")
        page = await login(browser, url, "alice")
        await card(page, deploy).wait_for(timeout=15_000)
        await card(page, report).wait_for(timeout=15_000)
        await asyncio.sleep(0.5)
        ARTIFACTS.mkdir(exist_ok=True)
        await page.screenshot(path=str(ARTIFACTS / "inbox.png"), full_page=True)
        await page.context.close()
        await deploy.terminate("test done")
        await report.terminate("test done")


async def test_a_suspended_run_is_resumed_from_the_inbox(
    client: Client, browser: Any, users: UserDirectory
) -> None:
    agents = Agents()
    async with (
        new_worker(client, agents=agents.hosted) as worker,
        serving(client, worker, agents, users) as url,
    ):
        handle = await start_agent(
            client, worker, agents.deployer, "ship it", suspend_at=["before_model_request"]
        )
        view = await wait_for_status(handle, "waiting")
        assert view.suspend_reason
        # resuming needs no approver
        page, run = await open_card(browser, url, "bob", handle)
        assert "Suspended:" in await run.inner_text()
        await run.get_by_role("button", name="Resume").click()
        await page.wait_for_function(
            "() => document.body.innerText.includes('resumed')", timeout=15_000
        )
        resumed = await wait_for_status(handle, "waiting")
        assert resumed.suspend_reason is None
        assert [p.tool_call_id for p in resumed.pending_approvals] == ["d1"]
        await page.context.close()
        await handle.terminate("test done")


async def test_an_unknown_run_or_call_is_answered_with_what_is_true(
    client: Client, browser: Any, users: UserDirectory
) -> None:
    """Issue 26, item 12: a decision for a run that does not exist is a 404 saying so (it
    was a 502), and one for a call id the run never had is a 404 naming it (it said
    someone had decided it); a deferred result that is not JSON is refused as by the CLI."""
    agents = Agents()
    async with (
        new_worker(client, agents=agents.hosted) as worker,
        serving(client, worker, agents, users) as url,
    ):
        handle = await deploy_run(client, worker, agents)
        page, _ = await open_card(browser, url, "alice", handle)
        token = await csrf_of(page)
        no_run = await page.request.post(
            f"{url}/runs/no-such-run-404/calls/d1/approve",
            form={"csrf_token": token, "arguments": ""},
        )
        no_call = await page.request.post(
            f"{url}/runs/{handle.id}/calls/c9/approve",
            form={"csrf_token": token, "arguments": ""},
        )
        no_run_text = html.unescape(await no_run.text())
        no_call_text = html.unescape(await no_call.text())
        before = await handle.query(AgentWorkflow.status)
        await page.context.close()
        await handle.terminate("test done")
    assert no_run.status == 404
    assert "no-such-run-404" in no_run_text
    assert no_call.status == 404
    assert f"run {handle.id} has no pending call 'c9'" in no_call_text
    assert [p.decided for p in before.pending_approvals] == [False]


async def test_a_sub_agents_call_shows_once_under_its_top_level_run_and_is_approved_there(
    client: Client, browser: Any, users: UserDirectory
) -> None:
    agents = Agents()
    lead_name = f"inbox-lead-{uuid.uuid4().hex[:6]}"
    deployer = next(agent for agent in agents.hosted if agent.name == agents.deployer)
    lead = (
        AgentBuilder(FunctionModel(_script(agents.deployer, {"prompt": "ship v3"}, "L1")))
        .name(lead_name)
        .subagent(deployer)
        .build()
    )
    # The inbox is told of the sub-agent too: its own run must still not get a card.
    names = (lead_name, agents.deployer)
    async with new_worker(client, agents=[*agents.hosted, lead]) as worker:
        settings = InboxSettings(secret="s" * 40, users=users, poll_seconds=0.5, agents=names)
        inbox_client = AgentClient(client, task_queue=worker.task_queue)
        async with InboxServer(create_app(inbox_client, settings), "127.0.0.1", 0) as server:
            handle = await start_agent(client, worker, lead_name, "release v3")
            await wait_for_status(handle, "waiting", timeout=30)
            page, run = await open_card(browser, server.url, "alice", handle)
            text = await run.inner_text()
            assert "deploy needs approval" in text
            assert f"asked by sub-agent {agents.deployer}" in text
            conversation = run.locator("[data-testid=subagent-conversation]")
            await conversation.locator("summary").click()
            assert "ship v3" in await conversation.inner_text()  # the sub-agent's prompt
            await asyncio.sleep(1.5)  # a few polls: the child's own run gets no card
            assert await page.locator("section.call[data-call-id=d1]").count() == 1
            assert await page.locator("article.run").count() == 1

            await run.locator("[data-testid=approve]").click()
            flash = run.locator("[data-testid=flash]")
            await flash.wait_for()
            assert "approved deploy (d1) as alice" in await flash.inner_text()
            result = await asyncio.wait_for(handle.result(), 60)
            await page.context.close()
    assert result.output == "model saw: model saw: deployed prod with 2 replicas"
    assert agents.deployed == [{"env": "prod", "replicas": 2}]


async def test_a_note_typed_in_the_inbox_reaches_the_model_and_is_signed_into_history(
    client: Client, browser: Any, users: UserDirectory
) -> None:
    agents = Agents()
    async with (
        new_worker(client, agents=agents.hosted) as worker,
        serving(client, worker, agents, users) as url,
    ):
        handle = await deploy_run(client, worker, agents)
        page, run = await open_card(browser, url, "alice", handle)
        await run.locator("[data-testid=note]").fill("watch the error rate")
        await run.locator("[data-testid=approve]").click()
        await run.locator("[data-testid=flash]").wait_for()
        result = await handle.result()
        assert result.output == (
            "model saw: deployed prod with 2 replicas\n\n"
            "Note from the approver (alice): watch the error rate"
        )
        (decision,) = await accepted_decisions(client, handle)
        assert (decision.decided_by, decision.note) == ("alice", "watch the error rate")
        await page.context.close()


async def test_calls_of_one_id_held_by_two_sub_agents_have_addresses_of_their_own(
    client: Client,
) -> None:
    """Each pending call's address names the workflow that holds it: deciding one of two
    sub-agents' `p1` decides that one; its losing side of a race is told 409, not 404."""
    from durable_agent.inbox.auth import Identity
    from durable_agent.inbox.decisions import act, answer

    from . import subagent_agents

    async with new_worker(client, agents=list(subagent_agents.AGENTS)) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        run = await agents.start("twins", "write and edit")
        for _ in range(200):
            view = await run.status()
            if len([p for p in view.pending_approvals if not p.decided]) == 2:
                break
            await asyncio.sleep(0.1)
        holders = {p.agent: p.workflow_id for p in view.pending_approvals}
        alice = Identity("alice")
        form: Any = {"reason": "not this one"}
        text, code = await answer(act(agents, "deny", run.id, "p1", form, alice))
        assert code == 409
        assert "pending in more than one workflow" in text
        text, code = await answer(act(agents, "deny", run.id, "p1", form, alice, holders["editor"]))
        assert code == 200, text
        text, code = await answer(act(agents, "deny", run.id, "p1", form, alice, holders["editor"]))
        assert code == 409, text  # decided already: the losing side of a race
        text, code = await answer(
            act(agents, "deny", run.id, "p1", form, alice, "no-such-workflow")
        )
        assert code == 404, text
        text, code = await answer(
            act(agents, "approve", run.id, "p1", {}, alice, holders["writer"])
        )
        assert code == 200, text
        result = await asyncio.wait_for(run.result(), 60)
        assert result.status == "completed"
