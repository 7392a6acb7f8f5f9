"""Client scenarios for tests/test_wire_compat.py, written against the client API that
80075cc (the last commit before the 0.4 layout) and today's tree share, so the same code
drives a run with either release's `durable_agent`.

In the test's own process it runs on today's tree. `run_with_tree` runs it in a subprocess
with another tree's `durable_agent` first on sys.path (`python -P`, so neither the script's
directory nor the working directory comes before it; the editable install of today's tree
comes after it), checks that the release's own package was imported, as
`record_release_histories.TreeWorkers` does for workers, and reads the JSON it prints.

The agents are those of tests/upgrade_agents.py, hosted by a worker of the other tree. Every
answer is the JSON the release's own models dump, so the test compares what each side
understood of the other's wire format.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import durable_agent
from durable_agent.temporal import AgentClient, AgentRunHandle, ApprovalSignal
from durable_agent.temporal.signing import sign_signal

TESTS_DIR = Path(__file__).resolve().parent
BOOT = (
    "import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; "
    "import wire_clients; wire_clients.main(sys.argv[1:])"
)
"""Puts the tree, then tests/ (for this module), first on sys.path before anything imports
`durable_agent`."""


async def until(
    handle: AgentRunHandle, check: Callable[[Any], bool], what: str, timeout: float = 30
) -> dict[str, Any]:
    """The run's `status` view (as JSON) once `check` holds for it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        view = await handle.status()
        if check(view):
            answer: dict[str, Any] = view.model_dump(mode="json")
            return answer
        if loop.time() > deadline:
            raise AssertionError(f"{handle.id}: never {what} (last status: {view!r})")
        await asyncio.sleep(0.1)


def pending(call_id: str) -> Callable[[Any], bool]:
    return lambda view: (
        view.status == "waiting" and any(p.tool_call_id == call_id for p in view.pending_approvals)
    )


def suspended(run_step: int) -> Callable[[Any], bool]:
    return lambda view: (
        view.status == "waiting" and view.suspend_reason is not None and view.run_step == run_step
    )


async def read(handle: AgentRunHandle) -> dict[str, Any]:
    """What this release's reader makes of a run that has ended: its records, checkpoints,
    status and result."""
    records = [record.model_dump(mode="json") async for record in handle.stream()]
    checkpoints = [evidence.model_dump(mode="json") for evidence in await handle.checkpoints()]
    return {
        "id": handle.id,
        "records": records,
        "checkpoints": checkpoints,
        "status": (await handle.status()).model_dump(mode="json"),
        "result": (await handle.result()).model_dump(mode="json"),
    }


async def approved_by_update(agents: AgentClient) -> dict[str, Any]:
    """A run steered while it waits for approval, then approved by the (signed, when the
    client has keys) `submit_approval` update that `approve` sends."""
    handle = await agents.start("upgrade-deployer", "ship it")
    waiting = await until(handle, pending("d1"), "waiting for approval of d1")
    steered = await handle.steer("mind the freeze")
    approved = await handle.approve("d1", by="alice")
    await handle.result()
    return {
        "waiting": waiting,
        "steered": steered.model_dump(mode="json"),
        "approved": approved.model_dump(mode="json"),
        **await read(handle),
    }


async def denied_by_signal(agents: AgentClient) -> dict[str, Any]:
    """A run denied by an `approval` signal, signed with this client's keys as the inbox
    and `durable-agent deny` sign."""
    handle = await agents.start("upgrade-deployer", "ship it")
    waiting = await until(handle, pending("d1"), "waiting for approval of d1")
    signal = ApprovalSignal(tool_call_id="d1", approved=False, reason="freeze", decided_by="bob")
    if agents.approval_keys is not None:
        signal = sign_signal(agents.approval_keys, handle.id, signal)
    await handle.handle.signal("approval", signal)
    await handle.result()
    return {"waiting": waiting, **await read(handle)}


async def resumed_by_update(agents: AgentClient) -> dict[str, Any]:
    """A run suspended at both of its `before_model_request` boundaries, resumed each time
    by the `resume_run` update."""
    handle = await agents.start("upgrade-weather", "weather?", suspend_at=["before_model_request"])
    first = await until(handle, suspended(0), "suspended before its first request")
    resumed = [(await handle.resume("go on")).model_dump(mode="json")]
    second = await until(handle, suspended(1), "suspended before its second request")
    resumed.append((await handle.resume()).model_dump(mode="json"))
    await handle.result()
    return {"suspended": [first, second], "resumed": resumed, **await read(handle)}


async def refused_signal(agents: AgentClient) -> dict[str, Any]:
    """A run sent an unsigned `approval` signal (refused where the worker has approval keys:
    a signal cannot answer, so since 80075cc today's worker says so on the stream), then
    approved by the update. Not in `SCENARIOS`: 80075cc's worker records nothing for it."""
    handle = await agents.start("upgrade-deployer", "ship it")
    await until(handle, pending("d1"), "waiting for approval of d1")
    unsigned = ApprovalSignal(tool_call_id="d1", approved=True, decided_by="mallory")
    await handle.handle.signal("approval", unsigned)
    await handle.approve("d1", by="alice")
    await handle.result()
    return await read(handle)


SCENARIOS: dict[str, Callable[[AgentClient], Awaitable[dict[str, Any]]]] = {
    "approved_by_update": approved_by_update,
    "denied_by_signal": denied_by_signal,
    "resumed_by_update": resumed_by_update,
}


async def scenarios(agents: AgentClient) -> dict[str, Any]:
    """Every scenario, at once, by name."""
    results = await asyncio.gather(*(scenario(agents) for scenario in SCENARIOS.values()))
    return dict(zip(SCENARIOS, results, strict=True))


async def readings(agents: AgentClient, workflow_ids: Sequence[str]) -> dict[str, Any]:
    """`read` of each run, by id (runs the other release's client drove)."""
    return {wid: await read(agents.get(wid)) for wid in workflow_ids}


async def _main(command: str, arguments: Sequence[str]) -> dict[str, Any]:
    agents = await AgentClient.connect()  # TEMPORAL_ADDRESS, _TASK_QUEUE, approval keys
    if command == "scenarios":
        return await scenarios(agents)
    if command == "read":
        return await readings(agents, arguments)
    if command == "refused_signal":
        return await refused_signal(agents)
    raise SystemExit(f"unknown command {command!r}")


def main(argv: Sequence[str]) -> None:
    """`BOOT`'s entry: argv is the tree, tests/, the command and its arguments."""
    tree, _, command, *arguments = argv
    package = Path(durable_agent.__file__).resolve().parent
    expected = (Path(tree) / "durable_agent").resolve()
    if package != expected:
        raise SystemExit(f"imported durable_agent from {package}, not {expected}")
    answer = asyncio.run(_main(command, arguments))
    print(json.dumps({"durable_agent": str(package), "answer": answer}), flush=True)
    sys.stderr.flush()
    # The answer is out: leave without finalizing the interpreter, which the SDK's native
    # threads can abort ("PyGILState_Release ... finalizing", exit -6) after a clean run.
    os._exit(0)


def run_with_tree(
    tree: Path, command: str, *arguments: str, env: dict[str, str], timeout: float = 120
) -> dict[str, Any]:
    """`command` run by this module under `tree`'s `durable_agent`; its JSON answer."""
    done = subprocess.run(
        [sys.executable, "-P", "-c", BOOT, str(tree), str(TESTS_DIR), command, *arguments],
        cwd=tree,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise AssertionError(
            f"the client of {tree} failed ({done.returncode}) on {command}:\n{done.stderr[-6000:]}"
        )
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    expected = str((tree / "durable_agent").resolve())
    assert printed["durable_agent"] == expected, printed["durable_agent"]
    answer: dict[str, Any] = printed["answer"]
    return answer
