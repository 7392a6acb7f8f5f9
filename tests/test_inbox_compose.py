"""The `inbox` service of docker-compose.temporal.yml.

Docker cannot run here, so the service is checked statically like the others
(tests/test_docker_compose.py), and the command it ends with is run for real against the
test dev server with the environment the compose file gives it.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from durable_agent.inbox.auth import hash_password
from durable_agent.temporal.devserver import DevServer

from .temporal_support import free_port
from .test_docker_compose import (
    ADMIN_TOOLS,
    TEMPORAL,
    WORKER,
    command_text,
    depends_on,
    environment,
    published_ports,
    shell_script,
)

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parent.parent
INBOX = "inbox"


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    import yaml

    data = yaml.safe_load((ROOT / "docker-compose.temporal.yml").read_text())
    found: dict[str, dict[str, Any]] = data["services"]
    return found


def test_the_inbox_service_is_wired_like_the_worker(services: dict[str, dict[str, Any]]) -> None:
    inbox, worker = services[INBOX], services[WORKER]
    assert inbox["profiles"] == ["inbox"]
    assert inbox["image"] == worker["image"]
    assert published_ports(inbox) == {8234: 8234}
    assert all(str(p).startswith("127.0.0.1:") for p in inbox["ports"]), "no auth-less exposure"
    assert depends_on(inbox) == {
        TEMPORAL: "service_started",
        ADMIN_TOOLS: "service_completed_successfully",
    }
    env = environment(inbox)
    assert env["TEMPORAL_ADDRESS"] == "temporal:7233"
    passed_through = {k for k, v in env.items() if v is None}
    assert {
        "DURABLE_AGENT_INBOX_USERS",
        "DURABLE_AGENT_INBOX_SECRET",
        "DURABLE_AGENT_APPROVAL_KEYS",
    } <= passed_through
    assert environment(worker).get("DURABLE_AGENT_APPROVAL_KEYS", "set") is None, (
        "the worker must get the same approval keys as the inbox"
    )
    assert '"/tmp/src[inbox]"' in command_text(inbox)
    assert "/healthz" in str(inbox["healthcheck"]["test"])


def test_the_inbox_script_parses(services: dict[str, dict[str, Any]]) -> None:
    sh = shutil.which("sh")
    if sh is None:
        pytest.skip("no POSIX sh to check the script with")
    done = subprocess.run(
        [sh, "-n", "-c", shell_script(services[INBOX])], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


async def test_the_inbox_command_runs_with_the_compose_environment(
    services: dict[str, dict[str, Any]], dev_server: DevServer
) -> None:
    """The service's last line (`exec durable-agent inbox ...`) serves /healthz, given the
    service's environment with the server address and port of this test."""
    script = shell_script(services[INBOX])
    (line,) = [ln.strip() for ln in script.splitlines() if ln.strip().startswith("exec ")]
    argv = shlex.split(line)[1:]
    assert argv[:2] == ["durable-agent", "inbox"]
    port = free_port()
    argv = [re.sub(r"^8234$", str(port), a) for a in argv]
    env = {k: v for k, v in environment(services[INBOX]).items() if v is not None}
    env.update(
        TEMPORAL_ADDRESS=dev_server.address,
        DURABLE_AGENT_INBOX_USERS=f"alice:{hash_password('pw')}:ops",
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "durable_agent.cli",
        *argv[1:],
        env={**{k: v for k, v in os.environ.items() if not k.startswith("DURABLE_AGENT_")}, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    assert process.stdout is not None
    try:
        first = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        assert first.startswith(f"Approvals inbox: http://localhost:{port}  (users: alice;"), first
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = (await reader.read()).decode()
        writer.close()
        assert answer.startswith("HTTP/1.1 200")
    finally:
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 30) == 0
