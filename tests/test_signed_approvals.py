"""Signed approvals and approvers, enforced by the workflow on a real dev server.

With `DURABLE_AGENT_APPROVAL_KEYS` on the worker, a decision counts only if it is signed
with one of the keys for an approver the agent allows; without keys the approvers list is
still checked against the (claimed) `decided_by` and `groups`. A dropped signal is recorded
in history, so the run replays on a worker with other keys or none.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from durable_agent import AgentBuilder, TestModel, ToolApprovalDecision, UserError
from durable_agent.temporal import AgentWorkflow, DurableAgentPlugin
from durable_agent.temporal.client import AgentClient, AgentRunError, Rejected
from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.encryption import generate_key
from durable_agent.temporal.queries import AgentStatusView
from durable_agent.temporal.signing import (
    ENV_VAR,
    ApprovalKeyError,
    ApprovalKeys,
    sign_signal,
    signed_message,
)
from durable_agent.temporal.wire import ApprovalSignal

from .helpers import call, text_response, tool_response
from .mcp_support import DemoServer
from .temporal_support import new_replayer, new_worker, start_agent, wait_for_status

NEW = generate_key("k-new")
OLD = generate_key("k-old")
ROTATED = ApprovalKeys.parse(f"{NEW},{OLD}")
"""The worker's keys after a rotation: the new key signs, the old one still verifies."""


class Deployer:
    """An agent whose `deploy` needs approval by alice or the ops group; counts each run."""

    def __init__(self) -> None:
        self.name = f"signed-{uuid.uuid4().hex[:8]}"
        self.deployed: list[dict[str, Any]] = []

        def deploy(env: str, replicas: int = 1) -> str:
            self.deployed.append({"env": env, "replicas": replicas})
            return f"deployed {env} x{replicas}"

        self.agent = (
            AgentBuilder(
                TestModel.with_responses(
                    [tool_response(call("deploy", "d1", env="prod")), text_response("done")]
                )
            )
            .name(self.name)
            .tool(deploy)
            .approval_required_tools(["deploy"])
            .approvers({"deploy": ["alice", "ops"]})
            .build()
        )


@pytest.fixture
async def keyed_client(dev_server: DevServer) -> Client:
    return await Client.connect(
        dev_server.address, plugins=[DurableAgentPlugin(approval_keys=ROTATED)]
    )


@pytest.fixture
def deployer() -> Deployer:
    return Deployer()


@pytest.fixture
async def keyed_worker(keyed_client: Client, deployer: Deployer) -> AsyncIterator[Worker]:
    """A worker with the keys, hosting the test's `deployer`."""
    async with new_worker(keyed_client, agents=[deployer.agent]) as worker:
        yield worker


async def waiting_run(client: Client, worker: Worker, agent: Deployer) -> WorkflowHandle[Any, Any]:
    handle = await start_agent(client, worker, agent.name, "ship it", approval_timeout_seconds=600)
    await wait_for_status(handle, "waiting")
    return handle


async def refusal(handle: WorkflowHandle[Any, Any], request: ApprovalSignal) -> ApplicationError:
    with pytest.raises(WorkflowUpdateFailedError) as caught:
        await handle.execute_update(AgentWorkflow.submit_approval, request)
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError)
    return cause


async def replays_without_keys(handle: WorkflowHandle[Any, Any], agent: Deployer) -> None:
    """The history replays on a worker that has no approval keys at all."""
    replayer = new_replayer(agents=[agent.agent])
    await replayer.replay_workflow(await handle.fetch_history())


# -- on a worker with keys -----------------------------------------------------------------


async def test_unsigned_update_is_rejected_and_unsigned_signal_dropped(
    keyed_client: Client, keyed_worker: Worker, deployer: Deployer
) -> None:
    agent = deployer
    handle = await waiting_run(keyed_client, keyed_worker, agent)
    before = await handle.query(AgentWorkflow.status)
    unsigned = ApprovalSignal(tool_call_id="d1", approved=True, decided_by="alice")

    cause = await refusal(handle, unsigned)
    assert cause.type == "unauthorized_approval"
    assert cause.message == (
        "the decision for tool call 'd1' is not signed, and this worker accepts only signed "
        f"approvals ({ENV_VAR} is set on it); decide in the approvals inbox, or with "
        f"`durable-agent approve`/`deny` given {ENV_VAR}"
    )

    await handle.signal(AgentWorkflow.approval, unsigned)
    await handle.signal(AgentWorkflow.approval, unsigned.model_copy(update={"approved": False}))
    after = await wait_for_refusals(handle, 2)
    assert after.model_copy(update={"refused_decisions": []}) == before
    assert [(r.tool_call_id, r.decided_by) for r in after.refused_decisions] == [
        ("d1", "alice"),
        ("d1", "alice"),
    ]
    assert all("is not signed" in r.reason for r in after.refused_decisions)
    assert agent.deployed == []
    await replays_without_keys(handle, agent)

    agents = AgentClient(keyed_client)
    accepted = await agents.get(handle.id).approve("d1", by="alice")
    assert accepted.status == "running"
    result = await handle.result()
    assert result.output == "done"
    assert agent.deployed == [{"env": "prod", "replicas": 1}]
    await replays_without_keys(handle, agent)


async def wait_for_refusals(handle: WorkflowHandle[Any, Any], count: int) -> AgentStatusView:
    """The status once the run has refused `count` approval signals: a refused signal has no
    caller to answer, so the run tells it in its status (and changes nothing else)."""
    for _ in range(100):
        view = await handle.query(AgentWorkflow.status)
        if len(view.refused_decisions) >= count:
            return view
        await asyncio.sleep(0.1)
    raise AssertionError(f"the run never refused {count} signals: {view.refused_decisions}")


async def test_a_signature_for_another_call_run_or_approver_is_rejected(
    keyed_client: Client, keyed_worker: Worker, deployer: Deployer
) -> None:
    agent = deployer
    handle = await waiting_run(keyed_client, keyed_worker, agent)

    def signed(workflow_id: str, call_id: str, by: str) -> ApprovalSignal:
        request = ApprovalSignal(tool_call_id=call_id, approved=True, decided_by=by)
        return sign_signal(ROTATED, workflow_id, request)

    mismatch = "the signature does not match the decision for tool call 'd1': it was made for"
    forged = [
        signed(handle.id, "d2", "alice").model_copy(update={"tool_call_id": "d1"}),
        signed(handle.id, "d1", "alice").model_copy(update={"decided_by": "mallory"}),
        signed(handle.id, "d1", "mallory").model_copy(update={"groups": ["ops"]}),
        signed(handle.id, "d1", "alice").model_copy(update={"override_arguments": {"env": "x"}}),
        signed("another-run", "d1", "alice"),
    ]
    for request in forged:
        cause = await refusal(handle, request)
        assert cause.type == "unauthorized_approval"
        assert cause.message.startswith(mismatch), cause.message
    assert agent.deployed == []
    await handle.terminate("test done")


async def test_only_the_agents_approvers_may_decide_even_when_signed(
    keyed_client: Client, keyed_worker: Worker, deployer: Deployer
) -> None:
    agent = deployer
    handle = await waiting_run(keyed_client, keyed_worker, agent)
    bob = sign_signal(
        ROTATED,
        handle.id,
        ApprovalSignal(tool_call_id="d1", approved=True, decided_by="bob", groups=["dev"]),
    )
    cause = await refusal(handle, bob)
    assert cause.message == (
        "'bob' (groups: dev) may not decide tool 'deploy'; its approvers are alice, ops"
    )
    nobody = sign_signal(ROTATED, handle.id, ApprovalSignal(tool_call_id="d1", approved=True))
    assert "names no approver" in (await refusal(handle, nobody)).message
    with pytest.raises(Rejected, match="'bob' \\(groups: dev\\) may not decide"):
        await AgentClient(keyed_client).get(handle.id).approve("d1", by="bob", groups=["dev"])

    carol_in_ops = AgentClient(keyed_client).get(handle.id)
    await carol_in_ops.deny("d1", "not during the freeze", by="carol", groups=["ops"])
    result = await handle.result()
    assert agent.deployed == []
    assert result.status == "completed"
    decided = await handle.query(AgentWorkflow.latest_checkpoint)
    assert decided is not None


async def test_an_old_key_still_verifies_after_rotation_and_an_unknown_one_does_not(
    keyed_client: Client, keyed_worker: Worker, deployer: Deployer
) -> None:
    agent = deployer
    handle = await waiting_run(keyed_client, keyed_worker, agent)
    stranger = ApprovalKeys.parse(generate_key("k-other"))
    unknown = sign_signal(
        stranger, handle.id, ApprovalSignal(tool_call_id="d1", approved=True, decided_by="alice")
    )
    assert (await refusal(handle, unknown)).message == (
        "the decision for tool call 'd1' is signed with key id 'k-other', which this worker "
        f"does not have (it has 'k-new', 'k-old'); add that key to {ENV_VAR} after the active "
        "one, or sign with a current key"
    )
    stale = sign_signal(
        ROTATED,
        handle.id,
        ApprovalSignal(tool_call_id="d1", approved=True, decided_by="alice"),
        now=datetime.now(UTC) - timedelta(hours=2),
    )
    assert (
        "more than 1:00:00 before the workflow received it"
        in (await refusal(handle, stale)).message
    )

    old_only = ApprovalKeys.parse(OLD)
    assert old_only.active == "k-old"
    await (
        AgentClient(keyed_client, approval_keys=old_only)
        .get(handle.id)
        .approve("d1", by="alice", override_arguments={"env": "prod", "replicas": 3})
    )
    assert (await handle.result()).output == "done"
    assert agent.deployed == [{"env": "prod", "replicas": 3}]


# -- on a worker without keys --------------------------------------------------------------


async def test_without_keys_the_claimed_approver_is_checked(client: Client) -> None:
    agent = Deployer()
    async with new_worker(client, agents=[agent.agent]) as worker:
        handle = await waiting_run(client, worker, agent)
        view = await handle.query(AgentWorkflow.status)
        (pending,) = view.pending_approvals
        assert pending.approvers == ["alice", "ops"]
        assert pending.overridable is True
        assert pending.waiting_since is not None
        assert pending.expires_at == pending.waiting_since + timedelta(seconds=600)

        bob = ApprovalSignal(tool_call_id="d1", approved=True, decided_by="bob")
        cause = await refusal(handle, bob)
        assert cause.type == "unauthorized_approval"
        assert cause.message == (
            "'bob' (groups: none) may not decide tool 'deploy'; its approvers are alice, ops"
        )
        await handle.signal(AgentWorkflow.approval, bob)
        (refused,) = (await wait_for_refusals(handle, 1)).refused_decisions
        assert (refused.decided_by, refused.reason) == ("bob", cause.message)
        assert agent.deployed == []
        await handle.signal(
            AgentWorkflow.approval,
            ApprovalSignal(tool_call_id="d1", approved=True, decided_by="dana", groups=["ops"]),
        )
        assert (await handle.result()).output == "done"
    assert agent.deployed == [{"env": "prod", "replicas": 1}]
    await replays_without_keys(handle, agent)
    keyed = new_replayer(agents=[agent.agent], approval_keys=ROTATED)
    await keyed.replay_workflow(await handle.fetch_history())


# -- configuration -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("k1", f"{ENV_VAR}: an entry is not `id:base64key` (entry number 1)"),
        ("k1:not-base64!", f"{ENV_VAR}: key 'k1' is not valid base64"),
        ("k1:c2hvcnQ=", f"{ENV_VAR}: key 'k1' is 5 bytes; HMAC-SHA256 needs 32"),
    ],
)
def test_keys_that_do_not_parse_stop_the_worker_and_the_client_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, spec: str, message: str
) -> None:
    with pytest.raises(ApprovalKeyError) as caught:
        ApprovalKeys.parse(spec)
    assert str(caught.value).startswith(message)
    monkeypatch.setenv(ENV_VAR, spec)
    from durable_agent.temporal.worker import WorkerStartError, plugin

    with pytest.raises(WorkerStartError) as stopped:
        plugin()
    assert stopped.value.message.startswith(message)


async def test_the_client_refuses_to_start_with_bad_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "k1:c2hvcnQ=")
    with pytest.raises(AgentRunError, match=f"^{ENV_VAR}: key 'k1' is 5 bytes"):
        await AgentClient.connect("127.0.0.1:1")


def test_the_signed_message_is_canonical() -> None:
    at = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)

    def signal(arguments: dict[str, Any], groups: list[str]) -> ApprovalSignal:
        decision = ToolApprovalDecision.approved(override_arguments=arguments, decided_by="alice")
        envelope = ApprovalSignal.envelope("d1", decision, groups)
        return envelope.model_copy(update={"signed_at": at})

    one = signed_message("wf", signal({"b": 1, "a": [1.5]}, ["ops", "dev"]))
    two = signed_message("wf", signal({"a": [1.5], "b": 1}, ["dev", "ops", "dev"]))
    assert one == two
    # Byte for byte what release 0.3 signed: a signature made by an earlier client verifies.
    assert one == (
        b"durable-agent approval v1\n"
        b'{"approved":true,"arguments":{"a":[1.5],"b":1},"decided_by":"alice",'
        b'"groups":["dev","ops"],"reason":null,"signed_at":"2026-12-01T09:30:00.000000Z",'
        b'"tool_call_id":"d1","workflow_id":"wf"}'
    )
    assert repr(ROTATED) == "ApprovalKeys(active='k-new', key_ids=['k-new', 'k-old'])"


@pytest.mark.parametrize(
    ("approvers", "message"),
    [
        ({"deploy": "alice"}, "approvers['deploy'] must be a list of user or group names"),
        ({"deploy": []}, "approvers['deploy'] is empty"),
        ({"deploy": ["alice", " "]}, "approvers['deploy']: names must be non-empty strings"),
        ({"nope": ["alice"]}, "approvers names unknown tool(s) ['nope']; registered tools"),
    ],
)
def test_approvers_are_checked_when_the_agent_is_built(
    approvers: dict[str, Any], message: str
) -> None:
    def deploy(env: str) -> str:
        return env

    with pytest.raises(UserError) as caught:
        AgentBuilder(TestModel.with_text("ok")).tool(deploy).approvers(approvers).build()
    assert str(caught.value).startswith(message)


@pytest.mark.server
async def test_approvers_of_a_toolset_tool_are_checked_at_the_first_listing() -> None:
    """An MCP tool's name is known only once the server lists it: a misspelt approvers key
    (which would leave the real tool to anyone) fails the run there, like a misspelt
    approval_required_tools name."""
    demo = DemoServer()
    misspelt = (
        AgentBuilder(TestModel.with_text("x"))
        .toolset(demo.stdio())
        .approval_required_tools(["add"])
        .approvers({"ad": ["ops"]})
        .build()
    )
    with pytest.raises(UserError, match=r"approvers names unknown tool\(s\) \['ad'\]"):
        await misspelt.run("go")
    script = [tool_response(call("add", "c1", a=1, b=2)), text_response("ok")]
    agent = (
        AgentBuilder(TestModel.with_responses(script))
        .toolset(demo.stdio())
        .approval_required_tools(["add"])
        .approvers({"add": ["ops"]})
        .build()
    )
    result = await agent.run("go")
    assert result.status == "waiting"
    assert agent.approvers_of("add") == frozenset({"ops"})
    assert demo.calls("add") == []
