"""What a person sees in the Temporal Web UI for a run waiting for approval.

Drives the real UI (served by the dev server) in headless Chromium through Playwright,
using the system browser, so nothing is downloaded.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from durable_agent import AgentBuilder, TestModel
from durable_agent.temporal import AgentClient, AgentWorkflow, AgentWorkflowInput
from durable_agent.temporal.devserver import DevServer

from .helpers import call, text_response, tool_response
from .temporal_support import new_worker, wait_for_status

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"


async def frame_texts(page: object) -> str:
    texts = [await page.inner_text("body")]  # type: ignore[attr-defined]
    for frame in page.frames[1:]:  # type: ignore[attr-defined]
        try:
            texts.append(await frame.inner_text("body", timeout=2000))
        except Exception:
            continue
    return "\n".join(texts)


async def wait_for_texts(page: object, wanted: list[str], attempts: int = 100) -> str:
    text = ""
    for _ in range(attempts):
        text = await frame_texts(page)
        if all(w in text for w in wanted):
            return text
        await page.wait_for_timeout(200)  # type: ignore[attr-defined]
    missing = [w for w in wanted if w not in text]
    raise AssertionError(f"the Web UI never showed {missing}; it showed:\n{text[:3000]}")


async def test_web_ui_shows_summaries_and_pending_approval(
    client: Client, dev_server: DevServer
) -> None:
    assert CHROMIUM, (
        "chromium is not installed: run `apt-get install -y chromium` (scripts/test does)"
    )
    playwright = pytest.importorskip("playwright.async_api", reason="pip install playwright")
    name = f"ui-{uuid.uuid4().hex[:8]}"

    def deploy(env: str) -> str:
        return "deployed"

    def service_status(env: str) -> str:
        return "green"

    model = TestModel.with_responses(
        [
            tool_response(
                call("service_status", "s1", env="prod"), call("deploy", "d1", env="prod")
            ),
            text_response("done"),
        ]
    )
    agent = (
        AgentBuilder(model)
        .name(name)
        .tools([deploy, service_status])
        .approval_required_tools(["deploy"])
        .build()
    )
    async with new_worker(client, agents=[agent]) as worker:
        handle = await client.start_workflow(
            AgentWorkflow.run,
            AgentWorkflowInput(agent=name, prompt="ship it"),
            id=f"ui-{uuid.uuid4().hex[:8]}",
            task_queue=worker.task_queue,
            static_summary=f"agent `{name}`: ship it",
        )
        await wait_for_status(handle, "waiting")
        description = await handle.describe()
        base = f"{dev_server.ui_url}/namespaces/default/workflows/{handle.id}/{description.run_id}"
        ARTIFACTS.mkdir(exist_ok=True)
        async with playwright.async_playwright() as driver:
            browser = await driver.chromium.launch(
                executable_path=CHROMIUM,
                args=[
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--disable-background-networking",
                    "--disable-component-update",
                ],
            )
            page = await browser.new_page(viewport={"width": 1600, "height": 1100})
            await page.goto(f"{base}/history", wait_until="domcontentloaded")
            history = await wait_for_texts(
                page,
                ["model_request · step 1", "tool service_status · s1"],
            )
            await page.screenshot(path=str(ARTIFACTS / "ui_history.png"), full_page=True)
            await page.goto(f"{base}/user-metadata", wait_until="domcontentloaded")
            metadata = await wait_for_texts(
                page, ["status waiting", "Pending approvals", "d1", "tool deploy"]
            )
            await page.screenshot(path=str(ARTIFACTS / "ui_user_metadata.png"), full_page=True)
            await browser.close()
        await handle.terminate("test done")
    assert "tool deploy · d1" not in history  # a call awaiting approval is never scheduled
    assert "ship it" in metadata


HOSTILE = "`a` **BOLD** [Approve here](http://evil.example/) <img src=x onerror=alert(7)> `b`"


async def test_hostile_text_shows_literally_in_the_web_ui(
    client: Client, dev_server: DevServer
) -> None:
    """Issue 26, item 6: a prompt and tool arguments that are Markdown and HTML show as the
    text they are, in the run's summary and current details: no live link, no element."""
    assert CHROMIUM, "chromium is not installed: run `apt-get install -y chromium`"
    playwright = pytest.importorskip("playwright.async_api", reason="pip install playwright")
    name = f"ui-hostile-{uuid.uuid4().hex[:8]}"

    def deploy(env: str) -> str:
        return "deployed"

    model = TestModel.with_responses(
        [tool_response(call("deploy", "d1", env=HOSTILE)), text_response("done")]
    )
    agent = AgentBuilder(model).name(name).tool(deploy).approval_required_tools(["deploy"]).build()
    async with new_worker(client, agents=[agent]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        run = await agents.start(name, f"ship {HOSTILE}")
        handle = client.get_workflow_handle(run.id)
        await wait_for_status(handle, "waiting")
        description = await handle.describe()
        summary = await description.static_summary()
        details = await _current_details(handle)
        base = f"{dev_server.ui_url}/namespaces/default/workflows/{handle.id}/{description.run_id}"
        async with playwright.async_playwright() as driver:
            browser = await driver.chromium.launch(
                executable_path=CHROMIUM,
                args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
            )
            page = await browser.new_page(viewport={"width": 1600, "height": 1100})
            await page.goto(f"{base}/user-metadata", wait_until="domcontentloaded")
            shown = await wait_for_texts(page, ["Pending approvals", "[Approve here]"])
            links, images = [], []
            for frame in page.frames:
                links += await frame.eval_on_selector_all(
                    "a[href*='evil.example']", "els => els.map(e => e.href)"
                )
                images += await frame.eval_on_selector_all(
                    "img[src='x']", "els => els.map(e => e.outerHTML)"
                )
            await browser.close()
        await handle.terminate("test done")
    assert links == [], links
    assert images == [], images
    assert "**BOLD**" in shown, "the asterisks show: nothing was made bold"
    assert "<img src=x onerror=alert(7)>" in shown
    assert '{"tool_call_id": "...", "approved": true}' in shown, "straight quotes: it pastes"
    # What the server holds, read back: no Markdown or HTML the UI would act on.
    for text in (summary or "", details):
        assert "](http" not in text, text
        assert "<img" not in text.replace("\\<img", ""), text
        assert "\\[Approve here\\]" in text, text


async def _current_details(handle: Any) -> str:
    """The run's current details as the Web UI reads them (the metadata query)."""
    metadata = await handle.query("__temporal_workflow_metadata")
    return str(metadata.current_details)
