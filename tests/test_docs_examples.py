"""Every ```python block of README.md and docs/**/*.md runs (issue 25, item 8).

Conventions of the pages (what a reader may assume, and what this test does):

- **A page is one session.** Its blocks run in page order in one namespace, in a process of
  their own (`tests/support/docs_runner.py`) whose working directory stands for the
  reader's project: a later block uses what an earlier one defined. Top-level `await` works,
  as in `python -m asyncio` or a notebook; a block that calls `asyncio.run` runs as a script.
- **Services come from the environment, as a user's would.** A model example talks to a
  real local HTTP server speaking its provider's wire protocol (`tests/support/*_server.py`),
  reached through `OPENAI_BASE_URL` / `ANTHROPIC_BASE_URL` and a key in the environment, or
  on the address the example names. A Temporal example reaches a real dev server and the
  sample application's worker (`python worker.py`) through `TEMPORAL_ADDRESS` and
  `TEMPORAL_TASK_QUEUE`.
- **HTML comments complete a page** (mkdocs does not render them):
  - `<!-- example: setup` + code + `-->` is a hidden block, run where it stands: the
    imports and definitions a fragment leaves out, or the runs it acts on
    (`tests/support/docs_runs.py`), or checks of what the block before it did.
  - `<!-- example: file NAME -->` before a block writes it to NAME in the project instead of
    running it (it is a module the next blocks import); with code after NAME, the comment is
    a hidden file of its own.
  - `<!-- example: background -->` before a block that serves until stopped
    (`await worker.run()`) runs it as a task while the rest of the page runs.
  - `<!-- example: not run: REASON -->` before a block leaves it out; the test lists and
    counts those (`NOT_RUN`), and a new one fails it until it is added there.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from durable_agent.temporal.devserver import DevServer

from .sample_support import ROOT, sample_worker
from .support.anthropic_server import FakeAnthropicServer, MessageReply, Text, Thinking, ToolUse
from .support.openai_server import FakeOpenAIServer, TextReply, ToolCallsReply
from .support.responses_server import (
    FakeResponsesServer,
    FunctionCall,
    OutputText,
    Reasoning,
    ResponseReply,
)

pytestmark = pytest.mark.server

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

NOT_RUN = {
    (
        "docs/mcp.md",
        "needs npx, GitHub's MCP server from npm with a GitHub token, and a remote MCP server "
        "(tests/test_mcp.py runs the same API against local MCP servers)",
    ),
}
"""The page and reason of each block marked `<!-- example: not run: REASON -->`."""

TEMPORAL_PAGES = {"docs/temporal.md", "docs/time-travel.md", "docs/streams.md", "docs/quotas.md"}
"""Pages whose examples talk to a Temporal server and the sample application's worker."""


@dataclass
class Step:
    kind: str  # run | file | background | not run
    source: str
    path: str
    line: int
    name: str = ""
    hidden: bool = False


TOKEN = re.compile(r"^```python\n(.*?)^```$|^<!-- example: (.*?)-->$", re.MULTILINE | re.DOTALL)


def steps(page: Path) -> list[Step]:
    """The page's blocks and hidden blocks, in page order, as the conventions above read them."""
    text = page.read_text()
    path = page.relative_to(ROOT).as_posix()
    found: list[Step] = []
    pending: tuple[str, str] | None = None  # a comment's kind (and name) for the next block
    for match in TOKEN.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        if match.group(1) is not None:
            kind, name = pending or ("run", "")
            found.append(Step(kind, match.group(1), path, line + 1, name))
            pending = None
            continue
        head, _, code = match.group(2).partition("\n")
        head, code = head.strip(), textwrap.dedent(code)
        if head == "setup":
            found.append(Step("run", code, path, line + 1, hidden=True))
        elif head.startswith("file ") and code.strip():
            found.append(Step("file", code, path, line + 1, head[5:].strip(), hidden=True))
        elif head.startswith("file "):
            pending = ("file", head[5:].strip())
        elif head == "background":
            pending = ("background", "")
        elif head.startswith("not run:"):
            pending = ("not run", head[8:].strip())
        else:
            raise AssertionError(f"{path}:{line}: unknown example comment {head!r}")
    assert pending is None, f"{path}: a comment {pending} with no block after it"
    return found


def pages_with_examples() -> list[str]:
    return [
        page.relative_to(ROOT).as_posix()
        for page in PAGES
        if any(s.kind != "not run" and not s.hidden for s in steps(page))
    ]


def test_every_python_block_runs_or_says_why_not() -> None:
    """Counts the blocks; the ones left out are exactly those `NOT_RUN` lists, reasons and all."""
    every = [s for page in PAGES for s in steps(page) if not s.hidden]
    skipped = {(s.path, s.name) for s in every if s.kind == "not run"}
    assert skipped == NOT_RUN
    run = [s for s in every if s.kind != "not run"]
    assert len(run) >= 20, "examples were dropped from the pages, or left out"
    print(f"{len(run)} of {len(every)} python blocks run; not run:")
    for path, reason in sorted(skipped):
        print(f"  {path}: {reason}")


# -- the services the pages' examples reach ----------------------------------------------------


@pytest.fixture(scope="module")
def sample_app(
    dev_server: DevServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """`python worker.py` on a task queue of its own, and the environment that reaches it."""
    log = tmp_path_factory.mktemp("sample") / "worker.log"
    with sample_worker(dev_server, log) as env:
        yield {k: env[k] for k in ("TEMPORAL_ADDRESS", "TEMPORAL_TASK_QUEUE")}


def bind_to(port: int, server: FakeOpenAIServer) -> FakeOpenAIServer:
    """Starts `server` on `port` (another run of this test may hold it for a moment)."""
    for _ in range(100):
        try:
            return server.start()
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"port {port} stayed busy")


def model_server(path: str) -> tuple[Any, dict[str, str], Callable[[Any], None]] | None:
    """The provider server a model page's examples talk to, scripted with the answers they
    need; the environment that points them at it; and what it must have been asked."""
    if path == "docs/runtime.md":
        server: Any = FakeOpenAIServer(api_key="sk-docs").start()
        server.enqueue(
            ToolCallsReply([("call_1", "get_weather", {"city": "Paris"})]),
            ToolCallsReply([("call_2", "deploy", {"env": "prod"})]),
            TextReply('{"summary": "Sunny in Paris, deployed to prod.", "deployed": true}'),
        )
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-docs"}
        return server, env, lambda s: expect_requests(s.requests, 3)
    if path == "docs/models-openai-chat.md":  # the example names Ollama's address
        server = bind_to(11434, FakeOpenAIServer(api_key=None, port=11434))
        server.enqueue(TextReply("Hello!"))
        return server, {}, lambda s: expect_requests(s.requests, 1)
    if path == "docs/models-anthropic.md":
        server = FakeAnthropicServer(api_key="sk-ant-docs").start()
        server.enqueue(
            MessageReply([Thinking("Use the tool."), ToolUse("get_weather", {"city": "Paris"})]),
            MessageReply([Thinking("It is sunny."), Text("Sunny in Paris.")]),
        )
        env = {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-ant-docs"}
        return server, env, lambda s: expect_requests(s.requests, 2)
    if path == "docs/models-openai-responses.md":
        server = FakeResponsesServer(api_key="sk-docs").start()
        server.enqueue(
            ResponseReply(
                [Reasoning(["Use the tool."]), FunctionCall("get_weather", {"city": "Paris"})]
            ),
            ResponseReply([Reasoning(["It is sunny."]), OutputText("Sunny in Paris.")]),
        )
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-docs"}
        return server, env, lambda s: expect_requests(s.requests, 2)
    return None


def expect_requests(requests: list[Any], count: int) -> None:
    statuses = [r.status for r in requests]
    assert statuses == [200] * count, statuses


# -- running a page -----------------------------------------------------------------------------


def run_page(path: str, project: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    page_steps = [s for s in steps(ROOT / path) if s.kind != "not run"]
    script = project / "steps.json"
    script.write_text(json.dumps([s.__dict__ for s in page_steps]))
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "ANTHROPIC_", "TEMPORAL_", "DURABLE_AGENT_"))
    }
    return subprocess.run(
        [sys.executable, "-m", "tests.support.docs_runner", str(script)],
        cwd=project,
        env={**base, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("path", [p for p in pages_with_examples() if p not in TEMPORAL_PAGES])
def test_the_pages_examples_run(path: str, tmp_path: Path) -> None:
    check_page(path, tmp_path, {})


@pytest.mark.parametrize("path", sorted(TEMPORAL_PAGES))
def test_the_temporal_pages_examples_run(
    path: str, tmp_path: Path, sample_app: dict[str, str]
) -> None:
    check_page(path, tmp_path, sample_app)


def check_page(path: str, project: Path, env: dict[str, str]) -> None:
    served = model_server(path)
    try:
        ran = run_page(path, project, {**env, **(served[1] if served else {})})
    finally:
        if served:
            served[0].close()
    assert ran.returncode == 0, f"{path}:\n{ran.stdout[-2000:]}\n{ran.stderr[-6000:]}"
    if served:
        served[2](served[0])
    expected = OUTPUT.get(path)
    if expected:
        assert expected in ran.stdout, ran.stdout


OUTPUT = {
    "README.md": "Deployed to prod.",
    "docs/runtime.md": "summary='Sunny in Paris, deployed to prod.' deployed=True",
    "docs/models-openai-chat.md": "Hello!",
    "docs/models-anthropic.md": "Sunny in Paris.",
    "docs/models-openai-responses.md": "Sunny in Paris.",
}
"""What a page's examples print (their `# ...` comments say so), where the page shows it."""
