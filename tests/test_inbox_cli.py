"""`durable-agent inbox` as a command, and `durable-agent approve` signing with the key."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from temporalio.client import Client

from durable_agent import AgentBuilder, TestModel
from durable_agent.cli.app import amain
from durable_agent.inbox.auth import (
    InboxConfigError,
    LoginThrottle,
    UserDirectory,
    verify_password,
)
from durable_agent.inbox.server import InboxServer
from durable_agent.temporal import DurableAgentPlugin
from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.encryption import generate_key
from durable_agent.temporal.signing import ENV_VAR, ApprovalKeys

from .helpers import call, text_response, tool_response
from .temporal_support import free_port, new_worker, start_agent, wait_for_status

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parent.parent


def cli(
    *args: str, env: dict[str, str] | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_agent.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )


def test_hash_password_prints_a_hash_that_verifies_and_a_users_entry(tmp_path: Path) -> None:
    done = cli("inbox", "hash-password", "--stdin", stdin="s3cret\n")
    assert done.returncode == 0, done.stderr
    assert verify_password("s3cret", done.stdout.strip())
    entry = cli(
        "inbox", "hash-password", "--stdin", "--user", "alice", "--group", "ops", stdin="pw\n"
    )
    users = tmp_path / "users.toml"
    users.write_text(entry.stdout)
    directory = UserDirectory.from_file(users)
    identity = directory.authenticate("alice", "pw")
    assert identity is not None
    assert identity.groups == ("ops",)
    assert directory.authenticate("alice", "nope") is None


@pytest.mark.parametrize(
    ("args", "env", "code", "message"),
    [
        ([], {}, 2, "the inbox needs users: pass --users FILE"),
        (["--users", "missing.toml"], {}, 2, "users file missing.toml does not exist"),
        (
            ["--trusted-groups-header", "X-G"],
            {},
            2,
            "--trusted-groups-header needs --trusted-user-header",
        ),
        (
            ["--trusted-user-header", "X-Forwarded-User"],
            {ENV_VAR: "k1:c2hvcnQ="},
            1,
            f"{ENV_VAR}: key 'k1' is 5 bytes; HMAC-SHA256 needs 32",
        ),
        (
            ["--trusted-user-header", "X-U"],
            {"DURABLE_AGENT_INBOX_SECRET": "short"},
            2,
            "DURABLE_AGENT_INBOX_SECRET is 5 characters",
        ),
    ],
)
def test_a_bad_setting_stops_the_inbox_at_start_naming_it(
    args: list[str], env: dict[str, str], code: int, message: str
) -> None:
    clean = {"DURABLE_AGENT_INBOX_USERS": "", "DURABLE_AGENT_INBOX_USERS_FILE": "", ENV_VAR: ""}
    done = cli("inbox", "--address", "127.0.0.1:1", *args, env={**clean, **env})
    assert done.returncode == code, (done.stdout, done.stderr)
    assert message in done.stderr


async def test_the_inbox_command_serves_until_interrupted(
    dev_server: DevServer, tmp_path: Path
) -> None:
    entry = cli("inbox", "hash-password", "--stdin", "--user", "alice", stdin="pw\n")
    users = tmp_path / "users.toml"
    users.write_text(entry.stdout)
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "durable_agent.cli",
        "inbox",
        "--port",
        str(port),
        "--users",
        str(users),
        "--address",
        dev_server.address,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, ENV_VAR: ""},
    )
    assert process.stdout is not None
    line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
    assert line.startswith(f"Approvals inbox: http://localhost:{port}  (users: alice;"), line
    assert "decisions NOT signed" in line
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    answer = (await reader.read()).decode()
    writer.close()
    assert answer.startswith("HTTP/1.1 200")
    assert answer.endswith("ok")
    process.send_signal(signal.SIGINT)
    assert await asyncio.wait_for(process.wait(), 30) == 0


async def test_durable_agent_approve_signs_with_the_key(
    dev_server: DevServer, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    spec = generate_key("cli-key")
    keyed = await Client.connect(
        dev_server.address, plugins=[DurableAgentPlugin(approval_keys=ApprovalKeys.parse(spec))]
    )
    ran: list[str] = []

    def deploy(env: str) -> str:
        ran.append(env)
        return "deployed"

    name = f"cli-signed-{uuid.uuid4().hex[:6]}"
    agent = (
        AgentBuilder(
            TestModel.with_responses(
                [tool_response(call("deploy", "d1", env="prod")), text_response("ok")]
            )
        )
        .name(name)
        .tool(deploy)
        .approval_required_tools(["deploy"])
        .approvers({"deploy": ["ops"]})
        .build()
    )
    async with new_worker(keyed, agents=[agent]) as worker:
        handle = await start_agent(keyed, worker, name, "ship")
        await wait_for_status(handle, "waiting")
        base = ["--address", dev_server.address, "--task-queue", worker.task_queue]
        monkeypatch.setenv(ENV_VAR, "")
        assert (
            await amain([*base, "approve", handle.id, "d1", "--by", "erin", "--group", "ops"]) == 1
        )
        assert "is not signed" in capsys.readouterr().err
        monkeypatch.setenv(ENV_VAR, spec)
        assert await amain([*base, "approve", handle.id, "d1", "--by", "erin"]) == 1
        assert "'erin' (groups: none) may not decide tool 'deploy'" in capsys.readouterr().err
        assert (
            await amain([*base, "approve", handle.id, "d1", "--by", "erin", "--group", "ops"]) == 0
        )
        assert (await handle.result()).output == "ok"
    assert ran == ["prod"]


async def test_the_dev_worker_serves_the_inbox_with_a_printed_login(tmp_path: Path) -> None:
    """`python worker.py --dev` (what ./scripts/dev runs) serves the inbox next to the UI."""
    from playwright.async_api import async_playwright

    inbox_port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "DURABLE_AGENT_"))}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "worker.py",
        "--dev",
        "--no-demo",
        "--no-examples",
        "--db",
        str(tmp_path / "dev.db"),
        "--port",
        str(free_port()),
        "--ui-port",
        str(free_port()),
        "--inbox-port",
        str(inbox_port),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    try:
        found = None
        while found is None:
            line = (await asyncio.wait_for(process.stdout.readline(), 90)).decode()
            assert line, "the dev worker ended before it served the inbox"
            found = re.search(r"Approvals inbox: (\S+)  \(log in as dev / (\S+), groups ops", line)
        url, password = found.groups()
        assert url == f"http://localhost:{inbox_port}"
        assert (tmp_path / "inbox-dev-password").read_text().strip() == password
        async with async_playwright() as driver:
            session = await driver.request.new_context()
            login_page = await (await session.get(f"{url}/login")).text()
            token = re.search(r'name="csrf_token" value="([^"]+)"', login_page)
            assert token is not None
            inbox = await session.post(
                f"{url}/login",
                form={"csrf_token": token.group(1), "username": "dev", "password": password},
            )
            assert inbox.status == 200
            assert "Waiting on a human" in await inbox.text()
            await session.dispose()
    finally:
        process.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(process.wait(), 60) == 0


def test_five_wrong_passwords_lock_a_name_for_a_minute() -> None:
    throttle = LoginThrottle()
    for second in range(5):
        assert throttle.blocked_for("alice", now=100.0 + second) == 0
        throttle.failed("alice", now=100.0 + second)
    assert throttle.blocked_for("alice", now=105.0) == pytest.approx(59.0)
    assert throttle.blocked_for("bob", now=105.0) == 0
    assert throttle.blocked_for("alice", now=165.0) == 0


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("alice:md5$abc", "the password hash of user 'alice' is not `scrypt$N$r$p$salt$hash`"),
        ("alice", "user 'alice' has no password_hash string"),
        ("al ice", "user 'al' has no password_hash string"),
    ],
)
def test_a_bad_users_entry_is_refused_naming_the_user(spec: str, message: str) -> None:
    with pytest.raises(InboxConfigError) as caught:
        UserDirectory.from_spec(spec)
    assert message in str(caught.value)


async def test_a_taken_port_is_an_error_naming_it() -> None:
    app = Starlette()
    async with InboxServer(app, "127.0.0.1", 0) as first:
        with pytest.raises(InboxConfigError, match=f"cannot listen on 127.0.0.1:{first.port}"):
            await InboxServer(app, "127.0.0.1", first.port).start()
