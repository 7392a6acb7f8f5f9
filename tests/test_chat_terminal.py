"""`durable-agent chat` in a real terminal (tmux), against the sample application: nothing
is decided without an explicit answer (issue 26, item 2); Ctrl-C at the idle prompt ends the
chat at once, and an approval question notices a decision made elsewhere (issue 38, item
16)."""

from __future__ import annotations

import contextlib
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from temporalio.client import Client

from durable_agent.temporal import AgentClient
from durable_agent.temporal.devserver import DevServer

from .sample_support import ROOT, sample_worker

TMUX = shutil.which("tmux")
CONSOLE_SCRIPT = Path(sys.executable).parent / "durable-agent"


def tmux(*args: str) -> str:
    assert TMUX, "tmux is not installed: run `apt-get install -y tmux` (scripts/test does)"
    done = subprocess.run([TMUX, *args], capture_output=True, text=True, timeout=30, check=True)
    return done.stdout


def screen(name: str) -> str:
    return tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", name)


def wait_for(name: str, text: str, count: int = 1, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    shown = ""
    while time.monotonic() < deadline:
        shown = screen(name)
        if shown.count(text) >= count:
            return shown
        time.sleep(0.2)
    raise AssertionError(f"the terminal never showed {text!r} {count} time(s):\n{shown}")


async def test_enter_asks_again_and_ctrl_d_leaves_the_call_waiting(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    name = f"chat-{uuid.uuid4().hex[:8]}"
    with sample_worker(dev_server, tmp_path / "worker.log") as env:
        exports = " ".join(
            f"{k}={shlex.quote(v)}" for k, v in env.items() if k.startswith("TEMPORAL_")
        )
        command = (
            f"cd {shlex.quote(str(ROOT))} && env {exports} {shlex.quote(str(CONSOLE_SCRIPT))} "
            "chat deployer --by dev; echo EXITED $?; sleep 60"
        )
        tmux("new-session", "-d", "-s", name, "-x", "220", "-y", "50", command)
        try:
            first = wait_for(name, "Ctrl-D leaves it waiting")
            session_id = first.split("session ", 1)[1].split(" ", 1)[0]
            tmux("send-keys", "-t", name, "Deploy v3 to staging", "Enter")
            wait_for(name, "needs approval as dev")
            tmux("send-keys", "-t", name, "Enter")
            wait_for(name, "needs approval as dev", count=2)
            tmux("send-keys", "-t", name, "C-d")
            shown = wait_for(name, "EXITED 0")
        finally:
            subprocess.run([TMUX, "kill-session", "-t", name], check=False, timeout=30)
        agents = AgentClient(client, task_queue=env["TEMPORAL_TASK_QUEUE"])
        view = await agents.get(session_id).status()
        await agents.get(session_id).handle.terminate("test done")
    assert "call_deploy_0 is still waiting for a decision: durable-agent approve" in shown
    assert "denied" not in shown
    assert view.status == "waiting"
    assert [(p.tool_call_id, p.decided) for p in view.pending_approvals] == [
        ("call_deploy_0", False)
    ]
    assert [p.arguments for p in view.pending_approvals] == [{"env": "staging", "version": "v3"}], (
        "the sample agent asks about this prompt"
    )


@contextlib.contextmanager
def chat_in_tmux(dev_server: DevServer, tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """`durable-agent chat deployer --by dev` in a tmux session of its own (its name, and the
    sample worker's environment); the shell says `EXITED <code>` when chat ends."""
    name = f"chat-{uuid.uuid4().hex[:8]}"
    with sample_worker(dev_server, tmp_path / "worker.log") as env:
        exports = " ".join(
            f"{k}={shlex.quote(v)}" for k, v in env.items() if k.startswith("TEMPORAL_")
        )
        command = (
            f"cd {shlex.quote(str(ROOT))} && env {exports} {shlex.quote(str(CONSOLE_SCRIPT))} "
            "chat deployer --by dev; echo EXITED $?; sleep 60"
        )
        tmux("new-session", "-d", "-s", name, "-x", "220", "-y", "50", command)
        try:
            yield name, env
        finally:
            subprocess.run([TMUX, "kill-session", "-t", name], check=False, timeout=30)


async def test_ctrl_c_at_the_idle_prompt_ends_the_chat_at_once(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    with chat_in_tmux(dev_server, tmp_path) as (name, env):
        first = wait_for(name, "Ctrl-D leaves it waiting")
        session_id = first.split("session ", 1)[1].split(" ", 1)[0]
        wait_for(name, "you> ")
        tmux("send-keys", "-t", name, "half a thought")  # typed, no Enter
        time.sleep(0.3)
        tmux("send-keys", "-t", name, "C-c")
        shown = wait_for(name, "EXITED 130", timeout=10)  # without waiting for an Enter
        agents = AgentClient(client, task_queue=env["TEMPORAL_TASK_QUEUE"])
        view = await agents.get(session_id).status()
        await agents.get(session_id).handle.terminate("test done")
    assert f"the session goes on; come back with: durable-agent chat --id {session_id}" in shown
    assert view.status == "awaiting_prompt"  # nothing was sent
    assert view.session is not None
    assert view.session.turns == 0


async def test_the_approval_question_notices_a_decision_made_elsewhere(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    with chat_in_tmux(dev_server, tmp_path) as (name, env):
        first = wait_for(name, "Ctrl-D leaves it waiting")
        session_id = first.split("session ", 1)[1].split(" ", 1)[0]
        tmux("send-keys", "-t", name, "Deploy v3 to staging", "Enter")
        wait_for(name, "needs approval as dev")
        tmux("send-keys", "-t", name, "y")  # half an answer, never sent
        agents = AgentClient(client, task_queue=env["TEMPORAL_TASK_QUEUE"])
        await agents.get(session_id).approve("call_deploy_0", by="alice")
        shown = wait_for(name, "call_deploy_0 was decided elsewhere: approved by alice")
        shown = wait_for(name, "assistant> Done.")
        shown = wait_for(name, "you> ", count=2)  # the next prompt, without an answer here
        tmux("send-keys", "-t", name, "Enter")  # the stale 'y' is not a prompt
        tmux("send-keys", "-t", name, "C-d")
        shown = wait_for(name, "EXITED 0")
        view = await agents.get(session_id).status()
        await agents.get(session_id).handle.terminate("test done")
    assert "approved call_deploy_0" not in shown  # chat sent no decision of its own
    assert view.status == "awaiting_prompt"
    assert view.session is not None
    assert view.session.turns == 1
