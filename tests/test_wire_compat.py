"""Wire formats across the 0.4 layout (issue 37): a client of 80075cc, the last commit
before it, and a worker of today's tree understand each other, and so do today's client and
a worker of 80075cc.

Users upgrade workers and clients (the CLI, the inbox, their own services) one at a time, so
for a while each side talks to the other release. Issue 37 made stream records typed
payloads and one `ToolApprovalDecision` the approval signal wraps, promising the same JSON:
this holds it to that promise on a real server. 80075cc's tree is extracted with
`git archive`; its worker runs as a subprocess (`TreeWorkers`), its client as a subprocess
with its own `durable_agent` first on sys.path (`wire_clients.run_with_tree`). Both clients
run the same scenarios (`wire_clients`: a run steered and then approved by the
`submit_approval` update, one denied by the `approval` signal, one suspended twice and
resumed by the `resume_run` update), with one approval key on both sides, so every decision
is signed by one release and verified by the other. Each run is then read by both releases'
readers (stream, `checkpoints` and `status` queries), which must agree record for record.

80075cc's reader refuses record kinds it does not know, so today's worker adds none to runs
of what 80075cc could run: a refused approval signal is told by the run's status and
details, not by a record. (`workspace_changed` is new, and only runs with a workspace, which
80075cc did not have, make it; today's reader keeps a kind it does not know.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from durable_agent.temporal import AgentClient
from durable_agent.temporal.client import Rejected
from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.encryption import generate_key
from durable_agent.temporal.signing import ENV_VAR

from .faults.support import worker_log_errors
from .record_release_histories import ROOT, TreeWorkers, extract_release
from .wire_clients import pending, readings, run_with_tree, scenarios, until

pytestmark = pytest.mark.server

OLD = "80075cc"
"""The last commit before the 0.4 layout (the upgrade test's `v0.3.x-tip`)."""


@pytest.fixture(scope="module")
def old_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return extract_release(OLD, tmp_path_factory.mktemp("wire") / "tree")


@pytest.fixture
def approval_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """One approval key for the workers (they inherit the environment) and both clients:
    every worker here accepts only signed decisions."""
    key = generate_key()
    monkeypatch.setenv(ENV_VAR, key)
    return key


def client_env(workers: TreeWorkers, key: str) -> dict[str, str]:
    return {
        "TEMPORAL_ADDRESS": workers.address,
        "TEMPORAL_TASK_QUEUE": workers.task_queue,
        ENV_VAR: key,
    }


async def todays_client(workers: TreeWorkers, key: str) -> AgentClient:
    env = client_env(workers, key)
    return await AgentClient.connect(workers.address, task_queue=workers.task_queue, environ=env)


async def old_client(tree: Path, workers: TreeWorkers, key: str, *args: str) -> dict[str, Any]:
    """80075cc's client running `wire_clients` (in a thread: it blocks until it exits)."""
    env = client_env(workers, key)
    return await asyncio.to_thread(run_with_tree, tree, *args, env=env)


def kinds(records: list[dict[str, Any]]) -> list[str]:
    return [record["kind"] for record in records]


def data_of(records: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [record["data"] for record in records if record["kind"] == kind]


def check_records(run: dict[str, Any]) -> None:
    """What any reader must make of any run: records numbered 0, 1, 2, ... from one run,
    opening with `run_start` and ending with the run; a checkpoint for every boundary the
    `checkpoints` query lists, each right after its boundary's `node_start`."""
    records = run["records"]
    assert [record["seq"] for record in records] == list(range(len(records)))
    assert {record["run_id"] for record in records} == {run["result"]["run_id"]}
    assert records[0]["kind"] == "run_start"
    assert kinds(records)[-2:] == ["run_complete", "node_complete"]
    assert data_of(records, "run_complete") == [{"output": run["result"]["output"]}]
    checkpoints = [(r["seq"], r["node"]) for r in records if r["kind"] == "checkpoint"]
    assert checkpoints == [
        (evidence["cursor"]["stream_cursor"] + 1, evidence["node"])
        for evidence in run["checkpoints"]
    ]
    assert run["status"]["checkpoint_count"] == len(checkpoints)


def check_scenarios(answers: dict[str, Any]) -> None:
    """The scenarios' outcomes, whichever release ran the client and which the worker."""
    approved = answers["approved_by_update"]
    assert approved["waiting"]["status"] == "waiting"
    assert [
        (p["tool_call_id"], p["tool_name"]) for p in approved["waiting"]["pending_approvals"]
    ] == [("d1", "deploy")]
    assert approved["steered"] == {
        "accepted": True,
        "message": "steering message queued for the model's next request",
        "status": "waiting",
    }
    assert approved["approved"] == {
        "accepted": True,
        "message": "tool call 'd1' approved",
        "status": "running",
    }
    assert approved["result"]["output"] == "done: deployed to prod"
    assert data_of(approved["records"], "steered") == [{"message": "mind the freeze"}]
    assert data_of(approved["records"], "approval_decided") == [
        {
            "tool_call_id": "d1",
            "tool_name": "deploy",
            "approved": True,
            "decided_by": "alice",
            "reason": None,
            "overridden": False,
        }
    ]

    denied = answers["denied_by_signal"]
    assert [p["tool_call_id"] for p in denied["waiting"]["pending_approvals"]] == ["d1"]
    assert denied["result"]["output"] == "not deployed (approval_denied)"
    assert data_of(denied["records"], "approval_decided") == [
        {
            "tool_call_id": "d1",
            "tool_name": "deploy",
            "approved": False,
            "decided_by": "bob",
            "reason": "freeze",
            "overridden": False,
        }
    ]

    resumed = answers["resumed_by_update"]
    assert [(v["node"], v["run_step"]) for v in resumed["suspended"]] == [
        ("before_model_request", 0),
        ("before_model_request", 1),
    ]
    assert (
        resumed["resumed"]
        == [{"accepted": True, "message": "run resumed", "status": "running"}] * 2
    )
    assert resumed["result"]["output"] == "weather: sunny in Paris; sunny in Oslo"
    assert (
        data_of(resumed["records"], "suspended")
        == [{"reason": "suspend_at before_model_request"}] * 2
    )
    assert data_of(resumed["records"], "resumed") == [{"reason": "go on"}, {"reason": None}]

    for run in answers.values():
        assert run["result"]["status"] == run["status"]["status"] == "completed"
        check_records(run)


def check_same_reading(first: dict[str, Any], second: dict[str, Any]) -> None:
    """Two releases' readers of one run agree: the same records (as JSON), checkpoints and
    result; the same status, but for the fields only the newer view has."""
    assert first["records"] == second["records"]
    assert first["checkpoints"] == second["checkpoints"]
    assert first["result"] == second["result"]
    shared = first["status"].keys() & second["status"].keys()
    assert {k: first["status"][k] for k in shared} == {k: second["status"][k] for k in shared}
    assert shared >= {"status", "pending_approvals", "usage", "checkpoint_count", "steering"}


async def test_a_client_of_80075cc_and_todays_worker(
    dev_server: DevServer, old_tree: Path, approval_key: str, tmp_path: Path
) -> None:
    async with TreeWorkers(dev_server.address, tmp_path, "wire-new-worker") as workers:
        worker = await workers.start_tree_worker(ROOT, "new-worker")

        # 80075cc's client drives runs on today's worker: starts, updates, a signal, signed
        # decisions, queries, and its reader parses today's records.
        answers = await old_client(old_tree, workers, approval_key, "scenarios")
        check_scenarios(answers)

        # Today's reader reads the same runs the same way.
        agents = await todays_client(workers, approval_key)
        ours = await readings(agents, [run["id"] for run in answers.values()])
        for run in answers.values():
            check_same_reading(run, ours[run["id"]])

        # A decision with today's `note`, read by 80075cc's reader: a field it does not
        # know reaches it as part of the record's JSON.
        handle = await agents.start("upgrade-deployer", "ship it")
        await until(handle, pending("d1"), "waiting for approval of d1")
        await handle.approve("d1", by="alice", note="after the freeze")
        assert (await handle.result()).output == (
            "done: deployed to prod\n\nNote from the approver (alice): after the freeze"
        )
        theirs = (await old_client(old_tree, workers, approval_key, "read", handle.id))[handle.id]
        check_records(theirs)
        assert data_of(theirs["records"], "approval_decided") == [
            {
                "tool_call_id": "d1",
                "tool_name": "deploy",
                "approved": True,
                "decided_by": "alice",
                "reason": None,
                "overridden": False,
                "note": "after the freeze",
            }
        ]
        check_same_reading(theirs, (await readings(agents, [handle.id]))[handle.id])

    assert worker_log_errors([worker]) == []


async def test_todays_client_and_a_worker_of_80075cc(
    dev_server: DevServer, old_tree: Path, approval_key: str, tmp_path: Path
) -> None:
    async with TreeWorkers(dev_server.address, tmp_path, "wire-old-worker") as workers:
        worker = await workers.start_tree_worker(old_tree, "old-worker")

        # Today's client drives runs on 80075cc's worker, which verifies its signatures.
        agents = await todays_client(workers, approval_key)
        answers = await scenarios(agents)
        check_scenarios(answers)

        # 80075cc's reader reads the same runs the same way.
        theirs = await old_client(
            old_tree, workers, approval_key, "read", *(run["id"] for run in answers.values())
        )
        for run in answers.values():
            check_same_reading(run, theirs[run["id"]])

        # A `note` is signed, and 80075cc's worker does not know the field: it verifies
        # the decision without it, so the signature fails and the decision is refused,
        # never applied with the note silently dropped. Without a note it verifies.
        handle = await agents.start("upgrade-deployer", "ship it")
        await until(handle, pending("d1"), "waiting for approval of d1")
        with pytest.raises(Rejected) as refused:
            await handle.approve("d1", by="alice", note="after the freeze")
        assert refused.value.type == "unauthorized_approval"
        assert "signature does not match" in str(refused.value)
        await handle.approve("d1", by="alice")
        assert (await handle.result()).output == "done: deployed to prod"

    assert worker_log_errors([worker]) == []


async def test_a_reader_of_80075cc_and_a_refused_approval_signal(
    dev_server: DevServer, old_tree: Path, approval_key: str, tmp_path: Path
) -> None:
    async with TreeWorkers(dev_server.address, tmp_path, "wire-refused") as workers:
        await workers.start_tree_worker(ROOT, "new-worker")
        run = await old_client(old_tree, workers, approval_key, "refused_signal")
        check_records(run)  # read to the end by 80075cc's reader: no kind it does not know
