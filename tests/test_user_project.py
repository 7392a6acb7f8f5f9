"""The wheel, installed into a fresh venv, hosts an agent in a user's own project.

This is what a user does: build (or download) the wheel, `pip install` it into a clean
environment, and write a project in the shape of Temporal's starter templates, with its own
`workflows.py`, `activities.py`, `worker.py` and a codec of its own (`tests/user_project/`).
Its `ParentWorkflow` runs the `inventory` agent as a child workflow, then its own activity.

Checked here: the wheel holds only `durable_agent`; the user's top-level `workflows` and
`activities` modules are the ones imported (none ship in the wheel to shadow them); the run
completes with the agent's tool result and the user's activity result; and the server holds
payloads in the user's codec encoding, so the plugin kept the codec instead of replacing it.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import venv
import zipfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_agent.temporal.devserver import DevServer

from .history_payloads import is_patch_marker, payloads_in
from .temporal_support import unique

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = Path(__file__).resolve().parent / "user_project"
NOT_IN_WHEEL = ("workflows", "activities", "worker", "examples", "tests", "benchmarks")
SOURCE_IGNORED = (".git", ".venv", "__pycache__", "*.egg-info", "build", "dist", ".temporal")
SOURCE_IGNORED_TOO = (".mypy_cache", ".ruff_cache", ".pytest_cache", "node_modules", "artifacts")

pytestmark = [pytest.mark.server, pytest.mark.timeout(600)]


@dataclass(frozen=True)
class FreshEnv:
    wheel: Path
    python: Path
    env: dict[str, str]
    """Environment for the venv's processes: nothing of this test run's own path leaks in."""


def run(command: list[str | Path], *, what: str, timeout: float, **options: object) -> str:
    """Runs a step of the setup; a failure says which step, and shows its output."""
    try:
        done = subprocess.run(
            [str(c) for c in command],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **options,  # type: ignore[call-overload]
        )
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"{what}: still running after {timeout:.0f} s ({error.cmd})")
    if done.returncode != 0:
        pytest.fail(
            f"{what} failed (exit {done.returncode}): {' '.join(map(str, command))}\n"
            f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
        )
    return str(done.stdout)


@pytest.fixture(scope="module")
def fresh_env(tmp_path_factory: pytest.TempPathFactory) -> FreshEnv:
    """Wheel built from the repository, installed with its dependencies into a new venv.

    The source is copied first so the build's `build/` and `*.egg-info` land in the copy,
    not in a working tree others may be building in; the copy has everything the repository
    has (the application, tests, benchmarks), so the wheel's contents are really filtered.
    """
    root = tmp_path_factory.mktemp("fresh")
    source = root / "source"
    shutil.copytree(
        REPO, source, ignore=shutil.ignore_patterns(*SOURCE_IGNORED, *SOURCE_IGNORED_TOO)
    )
    started = time.monotonic()
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", root / "dist", source],
        what="building the wheel",
        timeout=300,
    )
    (wheel,) = (root / "dist").glob("durable_agent-*.whl")
    venv.create(root / "venv", with_pip=True, clear=True)
    python = root / "venv" / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONNOUSERSITE"] = "1"
    # pip's own cache (and any local wheelhouse in pip's config) keep repeat runs quick.
    run(
        [python, "-m", "pip", "install", "--disable-pip-version-check", "-q", wheel],
        what=(
            "installing the wheel and its dependencies into a fresh venv (pip needs the "
            "package registry, or its cache, for pydantic, structlog and temporalio)"
        ),
        timeout=420,
        env=env,
    )
    print(f"wheel built and installed into a fresh venv in {time.monotonic() - started:.1f} s")
    return FreshEnv(wheel=wheel, python=python, env=env)


def test_wheel_holds_only_durable_agent(fresh_env: FreshEnv) -> None:
    with zipfile.ZipFile(fresh_env.wheel) as archive:
        top = {name.split("/", 1)[0] for name in archive.namelist()}
    dist_info = {name for name in top if name.endswith(".dist-info")}
    assert len(dist_info) == 1, top
    assert top - dist_info == {"durable_agent"}, f"unexpected top-level entries: {top}"
    assert not {n.removesuffix(".py") for n in top} & set(NOT_IN_WHEEL)


def test_fresh_venv_has_no_application_modules(fresh_env: FreshEnv, tmp_path: Path) -> None:
    """Outside a project, `workflows` and `activities` are not importable: the wheel ships
    none to shadow the user's, and `durable_agent` comes from the venv, not the repo."""
    out = run(
        [
            fresh_env.python,
            "-c",
            "import importlib.util as u, json, durable_agent.temporal as t; "
            "print(json.dumps({'workflows': u.find_spec('workflows') is None, "
            "'activities': u.find_spec('activities') is None, 'at': t.__file__}))",
        ],
        what="importing durable_agent in the fresh venv",
        timeout=60,
        cwd=tmp_path,
        env=fresh_env.env,
    )
    found = json.loads(out)
    assert found["workflows"], found
    assert found["activities"], found
    assert Path(found["at"]).is_relative_to(fresh_env.python.parent.parent), found


def user_codec_module() -> ModuleType:
    """The user project's `codec.py`, under a name that cannot clash with anything here."""
    spec = importlib.util.spec_from_file_location("user_project_codec", TEMPLATE / "codec.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
async def user_worker(
    fresh_env: FreshEnv, dev_server: DevServer, tmp_path: Path
) -> AsyncIterator[tuple[Path, dict[str, str], dict[str, str]]]:
    """The user's `worker.py`, run by the fresh venv's python from the project directory."""
    project = tmp_path / "acme"
    shutil.copytree(TEMPLATE, project, ignore=shutil.ignore_patterns("__pycache__"))
    env = {**fresh_env.env, "TEMPORAL_ADDRESS": dev_server.address, "TASK_QUEUE": unique("acme")}
    stderr = (tmp_path / "worker.stderr").open("w+")
    process = await asyncio.create_subprocess_exec(
        str(fresh_env.python),
        "worker.py",
        cwd=project,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
    )
    assert process.stdout is not None
    try:
        try:
            line = await asyncio.wait_for(process.stdout.readline(), timeout=60)
        except TimeoutError:
            line = b""
        if not line:
            stderr.seek(0)
            pytest.fail(f"the user's worker did not start:\n{stderr.read()[-4000:]}")
        yield project, env, json.loads(line)["ready"]
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), timeout=15)
            except TimeoutError:
                process.kill()
                await process.wait()
        stderr.close()


async def test_user_project_runs_an_agent_as_a_child_workflow(
    fresh_env: FreshEnv,
    dev_server: DevServer,
    user_worker: tuple[Path, dict[str, str], dict[str, str]],
) -> None:
    project, env, loaded = user_worker
    venv_root = fresh_env.python.parent.parent
    assert Path(loaded["durable_agent"]).is_relative_to(venv_root), loaded
    assert Path(loaded["workflows"]) == project / "workflows.py", loaded
    assert Path(loaded["activities"]) == project / "activities.py", loaded

    workflow_id = unique("stock")
    starter = await asyncio.create_subprocess_exec(
        str(fresh_env.python),
        "starter.py",
        "WIDGET-9",
        workflow_id,
        cwd=project,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(starter.communicate(), timeout=90)
    except TimeoutError:
        starter.kill()
        await starter.wait()
        pytest.fail(f"starter.py did not finish in 90 s (workflow {workflow_id})")
    assert starter.returncode == 0, err.decode()[-4000:]
    printed = json.loads(out.decode().strip().splitlines()[-1])
    assert printed["result"] == {
        "agent_output": "Checked: WIDGET-9: 12 in stock.",
        "report": "REPORT: CHECKED: WIDGET-9: 12 IN STOCK.",
        "agent_workflow_id": f"{workflow_id}-agent",
    }

    # The server's copy, read by a client with no codec: every payload the workflows and
    # activities wrote is in the user's encoding (search attributes are never encoded).
    codec = user_codec_module()
    plain = await Client.connect(dev_server.address)
    parent = await plain.get_workflow_handle(workflow_id).fetch_history()
    children = [
        e.child_workflow_execution_started_event_attributes.workflow_execution.workflow_id
        for e in parent.events
        if e.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED
    ]
    assert children == [f"{workflow_id}-agent"]
    child = await plain.get_workflow_handle(children[0]).fetch_history()
    activity_types = {
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in child.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    assert {"model_request", "tool_call"} <= activity_types, activity_types
    checked = 0
    for history in (parent, child):
        for event in history.events:
            for path, payload in payloads_in(event):
                if "search_attributes" in path or is_patch_marker(path, payload):
                    continue
                assert payload.metadata.get("encoding") == codec.ENCODING, (
                    f"{EventType.Name(event.event_type)}{path} is not in the user's encoding: "
                    f"{payload.metadata}"
                )
                checked += 1
    assert checked >= 10, checked
    decoded = await codec.AcmeZlibCodec().decode(
        [parent.events[0].workflow_execution_started_event_attributes.input.payloads[0]]
    )
    assert json.loads(decoded[0].data) == {"sku": "WIDGET-9"}
