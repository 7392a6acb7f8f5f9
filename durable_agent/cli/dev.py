"""The embedded default: `python worker.py --dev` (what `./scripts/dev` runs).

Starts the Temporal dev server (SQLite file, Web UI), then the worker, the approvals inbox
and one example run waiting for approval, and prints what to do next last, so it is the
last thing on the screen. A second copy refuses to start while the first holds its ports:
it would otherwise talk to the first one's server and run its own agents on the same task
queue.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import structlog
from temporalio.client import Client

from durable_agent.temporal import AgentWorkflow, AgentWorkflowInput
from durable_agent.temporal.client import AgentRunError
from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.worker import plugin

from .context import dev_payloads

if TYPE_CHECKING:
    from durable_agent.inbox.server import InboxServer

__all__ = [
    "DEMO_AGENT",
    "Around",
    "DevStack",
    "PortTaken",
    "dev_storage",
    "port_holder",
    "refuse_taken_ports",
]

log = structlog.get_logger("durable_agent.dev")

DEMO_AGENT = "deployer"
DEMO_PROMPT = "Deploy v2.1 to prod"
DEMO_ID_PREFIX = "demo-deployer-"


class PortTaken(Exception):
    """A port the dev stack needs is in use; the message names it and its holder."""


def dev_storage(db: str | os.PathLike[str]) -> str:
    """Where the embedded default keeps large payloads: on local disk next to the database.
    The CLI and the inbox find the same place from the same database path."""
    return f"file://{dev_payloads(db)}"


def port_holder(port: int) -> str | None:
    """Who listens on `port` on this machine (`pid 123 (temporal)`), read from /proc; None
    when it cannot be told (another user's process, not Linux)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(inode)
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            links = [os.readlink(fd) for fd in (proc / "fd").iterdir()]
        except OSError:
            continue
        if any(link in {f"socket:[{inode}]" for inode in inodes} for link in links):
            try:
                name = (proc / "comm").read_text().strip()
            except OSError:
                name = "?"
            return f"pid {proc.name} ({name})"
    return None


def _in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def refuse_taken_ports(ports: dict[str, int]) -> None:
    """Raises `PortTaken` naming each port of `ports` (what it is for → number) in use."""
    taken = []
    for role, port in ports.items():
        if _in_use(port):
            holder = port_holder(port)
            held = f" by {holder}" if holder else ""
            taken.append(f"{role} port {port} is in use{held}")
    if taken:
        raise PortTaken(
            "; ".join(taken) + ". Is `./scripts/dev` already running? Stop it (Ctrl-C in its "
            "terminal), or pick other ports with --port, --ui-port and --inbox-port"
        )


@dataclass
class Around:
    """What the dev stack started around the worker, to stop with it."""

    inbox: InboxServer | None = None
    repeater: asyncio.Task[None] | None = None

    async def stop(self) -> None:
        if self.repeater is not None:
            self.repeater.cancel()
        if self.inbox is not None:
            await self.inbox.stop()


@dataclass
class DevStack:
    """What `--dev` adds around the worker, and its settings."""

    db: str
    port: int
    ui_port: int
    inbox_port: int
    inbox: bool
    demo: bool
    namespace: str

    def server(self) -> DevServer:
        return DevServer(
            self.db,
            port=self.port,
            ui_port=self.ui_port,
            namespace=self.namespace,
            ui_codec_endpoint=os.environ.get("DURABLE_AGENT_CODEC_ENDPOINT"),
        )

    async def around_the_worker(
        self,
        server: DevServer,
        namespace: str,
        task_queue: str,
        *,
        ready: asyncio.Event,
        running: asyncio.Task[None],
        stop: asyncio.Event,
    ) -> Around:
        """Once the worker polls: the inbox, the demo run, then the banner, printed last
        (and again at each Enter). Nothing if the worker stopped before it polled."""
        waiting = asyncio.ensure_future(ready.wait())
        await asyncio.wait([waiting, running], return_when=asyncio.FIRST_COMPLETED)
        around = Around()
        if not ready.is_set():
            waiting.cancel()
            return around
        lines = [f"Temporal Web UI: {server.ui_url}  (server {server.address}, data in {self.db})"]
        if self.inbox:
            started = await start_inbox(self, server.address, task_queue)
            if started is not None:
                around.inbox, line = started
                lines.append(line)
        demo_id = await demo_run(server.address, namespace, task_queue) if self.demo else None
        text = banner(lines, demo_id)
        print(text, flush=True)
        around.repeater = asyncio.ensure_future(repeat_on_enter(text, stop))
        return around

    def check_ports(self) -> None:
        ports = {"the Temporal dev server's": self.port, "the Web UI's": self.ui_port}
        if self.inbox:
            ports["the approvals inbox's"] = self.inbox_port
        refuse_taken_ports(ports)


async def start_inbox(
    stack: DevStack, address: str, task_queue: str
) -> tuple[InboxServer, str] | None:
    """The approvals inbox next to the Web UI, and the line that says how to log in; None
    without the `inbox` extra (the worker runs on without it)."""
    try:
        from durable_agent.inbox import InboxConfigError
        from durable_agent.inbox.dev import start_dev_inbox
    except ImportError:
        log.warning("no approvals inbox: pip install 'durable-agent[inbox]' for it")
        return None
    try:
        return await start_dev_inbox(
            address,
            stack.namespace,
            task_queue,
            port=stack.inbox_port,
            directory=Path(stack.db).parent,
        )
    except (InboxConfigError, AgentRunError) as error:
        log.warning("no approvals inbox", error=str(error))
        return None


async def demo_run(address: str, namespace: str, task_queue: str) -> str:
    """The example run waiting for approval: a new one only if no earlier one is still open
    (waiting, or stopped with the stack before it got there), so restarting the stack does
    not pile them up. Its workflow id."""
    client = await Client.connect(address, namespace=namespace, plugins=[plugin()])
    query = (
        f'WorkflowType="AgentWorkflow" AND WorkflowId STARTS_WITH "{DEMO_ID_PREFIX}" '
        'AND ExecutionStatus="Running"'
    )
    async for execution in client.list_workflows(query, limit=1):
        log.info("demo run already open", workflow_id=execution.id)
        return execution.id
    handle = await client.start_workflow(
        AgentWorkflow.run,
        AgentWorkflowInput(agent=DEMO_AGENT, prompt=DEMO_PROMPT),
        id=f"{DEMO_ID_PREFIX}{os.getpid()}",
        task_queue=task_queue,
        static_summary="Demo: deployer agent waiting for approval of `deploy`",
    )
    log.info("demo run started", workflow_id=handle.id)
    return handle.id


def banner(lines: Sequence[str], demo_id: str | None) -> str:
    """What to do next, printed after everything else has started."""
    out = ["", "durable-agent dev stack is up.", *(f"  {line}" for line in lines)]
    out.append("  In another terminal: source .venv/bin/activate")
    if demo_id is not None:
        out += [
            f"Demo run {demo_id} is waiting for approval:",
            f"  see it:      durable-agent status '{demo_id}'",
            f"  approve it:  durable-agent approve '{demo_id}' call_deploy_0 --by dev",
            f"  or deny it:  durable-agent deny '{demo_id}' call_deploy_0 --reason 'not today'",
        ]
    out.append("Press Enter to print this again, Ctrl-C to stop everything.")
    return "\n".join(out) + "\n"


async def repeat_on_enter(text: str, stop: asyncio.Event) -> None:
    """Prints `text` again each time Enter is pressed, until `stop` (log lines scroll the
    first copy away). Does nothing without a terminal on standard input."""
    loop = asyncio.get_running_loop()
    if not os.isatty(0):
        return
    reader = asyncio.StreamReader()
    try:
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(os.dup(0), "rb", 0)
        )
    except (OSError, ValueError):
        return
    while not stop.is_set():
        line = await reader.readline()
        if not line:
            return
        print(text, flush=True)
