"""`durable-agent chat AGENT` (a new session) and `durable-agent chat --id ID` (back to one).

An interactive conversation on a session run: each line read is the next prompt
(`send_prompt`); the answer is printed as the model writes it (from the run's stream, so a
streaming model's text appears as it comes), tool calls are shown as they run, and a call
that needs approval is asked about inline (`y` approves, anything else denies with that
text as the reason); a call decided elsewhere meanwhile (the inbox, `durable-agent approve`)
is noticed while the question waits, said, and the turn goes on. `/end` ends the session;
end of input (Ctrl-D) leaves it waiting, to come back to with `--id`; Ctrl-C ends the chat
at once (exit 130, what was typed is dropped, as a shell drops it) and leaves the session
as it is. The session lives on Temporal, not in this process: closing the terminal loses
nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import sys
import threading
from collections.abc import AsyncGenerator, Awaitable
from dataclasses import dataclass, field
from typing import Any

import click

from durable_agent.contract.records import (
    AgentStreamRecord,
    ApprovalDecidedData,
    ApprovalRequestedData,
    ModelDeltaData,
    ModelResponseData,
    RunCompleteData,
    RunFailedData,
    ToolCallData,
)
from durable_agent.temporal.client import AgentRunError, AgentRunHandle, Rejected, RunFailed
from durable_agent.temporal.wire import AgentStatusView, AgentWorkflowResult

from .context import APPROVAL_SECONDS, EPILOG, EXIT_OK, EXIT_REJECTED, Settings, connection_options
from .output import compact, err, out, output_text

__all__ = ["chat"]

END_COMMANDS = frozenset({"/end"})
LEAVE_COMMANDS = frozenset({"/quit", "/exit"})
STARTING_POLLS = 100
"""How many times (0.1 s apart) a new session is asked whether its first task has run."""
SETTLE_SECONDS = 5.0
"""How long, after a turn has answered, the stream may take to deliver its last records."""


class Lines:
    """stdin's lines, each read by a daemon thread while a prompt waits for it.

    Not `asyncio.to_thread`: a read in the loop's executor cannot be abandoned, so Ctrl-C
    at a prompt would wait for an Enter (`asyncio.run` joins the executor's threads) and a
    question answered elsewhere could not stop asking. A read abandoned here keeps its
    thread, and the next prompt takes the line it reads."""

    def __init__(self) -> None:
        self._pending: asyncio.Future[str] | None = None

    async def read(self, prompt: str) -> str | None:
        """One line (None at end of input), `prompt` written to stderr first."""
        sys.stderr.write(prompt)
        sys.stderr.flush()
        if self._pending is None:
            self._pending = self._start()
        line = await asyncio.shield(self._pending)
        self._pending = None
        return line.rstrip("\n") if line else None

    def discard_typed(self) -> None:
        """Drops what was typed for a question that no longer stands (half a line still
        in the terminal, or a line read and not yet taken), so it cannot become the answer
        to the next one."""
        if self._pending is not None and self._pending.done():
            self._pending = None
        with contextlib.suppress(Exception):  # not a terminal (a pipe, a test's StringIO)
            import termios

            if sys.stdin.isatty():
                termios.tcflush(sys.stdin.fileno(), termios.TCIFLUSH)

    @staticmethod
    def _start() -> asyncio.Future[str]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[str] = loop.create_future()
        stream = sys.stdin

        def settle(line: str) -> None:
            if not future.done():
                future.set_result(line)

        def read() -> None:
            try:
                line = stream.readline()
            except (OSError, ValueError):  # stdin closed
                line = ""
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                loop.call_soon_threadsafe(settle, line)

        threading.Thread(target=read, name="durable-agent-chat-stdin", daemon=True).start()
        return future


class LeftWaiting(Exception):
    """The person left (Ctrl-D) at an approval question: the call stays undecided."""

    def __init__(self, call_id: str) -> None:
        super().__init__(call_id)
        self.call_id = call_id


@dataclass
class Turn:
    """What one turn has printed, so a streamed answer is not printed twice."""

    streamed: set[int] = field(default_factory=set)
    attempts: dict[int, int] = field(default_factory=dict)
    printed: bool = False
    open_line: bool = False


class Chat:
    def __init__(self, handle: AgentRunHandle, by: str | None) -> None:
        self.handle = handle
        self.by = by
        self.position = 0
        """The seq of the next record not yet shown."""
        self.lines = Lines()

    async def run(self) -> int:
        try:
            return await self._chat()
        except asyncio.CancelledError:  # Ctrl-C: the CLI exits 130 ("interrupted")
            err(
                "\nthe session goes on; come back with: durable-agent chat --id "
                f"{shlex.quote(self.handle.id)}"
            )
            raise
        except LeftWaiting as left:
            run, call = shlex.quote(self.handle.id), shlex.quote(left.call_id)
            err(
                f"\n{left.call_id} is still waiting for a decision: durable-agent approve {run} "
                f"{call} (or deny {run} {call} --reason ...); come back with: "
                f"durable-agent chat --id {run}"
            )
            return EXIT_OK

    async def _chat(self) -> int:
        self.position = await self.handle.stream_position()
        view = await self.handle.status()
        for _ in range(STARTING_POLLS):
            if view.status != "starting":
                break
            await asyncio.sleep(0.1)
            view = await self.handle.status()
        if view.status in ("failed", "cancelled", "completed"):
            # An unknown agent, a bad input: say why instead of following a turn.
            err(f"durable-agent: session {self.handle.id} is {view.status}: {view.error}")
            return EXIT_REJECTED
        if view.status != "awaiting_prompt":
            await self._follow_open_turn(view)
        while True:
            line = await self.lines.read("you> ")
            if line is None or line.strip() in LEAVE_COMMANDS:
                err(
                    f"\nthe session goes on; come back with: durable-agent chat --id "
                    f"{shlex.quote(self.handle.id)} (or end it there with /end)"
                )
                return EXIT_OK
            if line.strip() in END_COMMANDS:
                await self.handle.end_session()
                await self.handle.result()
                err(f"session {self.handle.id} ended")
                return EXIT_OK
            if not line.strip():
                continue
            try:
                result = await self._turn(line)
            except RunFailed as error:
                err(f"durable-agent: {error.failure}")
                return EXIT_REJECTED
            if result is None:
                return EXIT_REJECTED

    async def _turn(self, prompt: str) -> AgentWorkflowResult | None:
        answer = asyncio.ensure_future(self.handle.send_prompt(prompt))
        turn = Turn()
        try:
            await self._follow(turn, answer)
            result = await answer
        finally:
            answer.cancel()
        if not turn.printed:
            text = output_text(result)
            if text:
                out(f"assistant> {text}")
        return result

    async def _follow_open_turn(self, view: AgentStatusView) -> None:
        """Reattached during a turn: answer what it waits for, then follow it to its end."""
        if view.session is None:
            raise AgentRunError(
                f"run {self.handle.id!r} is not a session; start one with: durable-agent chat "
                f"{view.agent}",
                workflow_id=self.handle.id,
            )
        err(f"session {self.handle.id} is in a turn ({view.status}); following it")
        after = self.position - 1 if self.position else None
        for pending in view.pending_approvals:
            if not pending.decided:
                await self._decide(
                    pending.tool_call_id, pending.tool_name, pending.arguments, after
                )
        await self._follow(Turn(), None)

    async def _follow(self, turn: Turn, answer: asyncio.Future[AgentWorkflowResult] | None) -> None:
        """Shows the turn's records until it completes or fails; once its answer has come,
        the stream gets `SETTLE_SECONDS` to deliver the rest."""
        records = self.handle.stream(self.position - 1 if self.position else None)
        iterator = aiter(records)
        following: asyncio.Future[AgentStreamRecord] | None = None
        try:
            while True:
                if following is None:
                    following = asyncio.ensure_future(anext(iterator))
                waits: set[asyncio.Future[Any]] = {following}
                if answer is not None and not answer.done():
                    waits.add(answer)
                settle = SETTLE_SECONDS if answer is not None and answer.done() else None
                done, _ = await asyncio.wait(waits, timeout=settle, return_when="FIRST_COMPLETED")
                if not done:
                    break  # answered, and the stream had its moment
                if following not in done:
                    assert answer is not None
                    if answer.exception() is not None:
                        break
                    continue
                try:
                    record = following.result()
                except StopAsyncIteration:
                    break
                following = None
                self.position = record.seq + 1
                if await self._show(turn, record):
                    break
        finally:
            if following is not None:
                following.cancel()
                await asyncio.gather(following, return_exceptions=True)
            if isinstance(records, AsyncGenerator):
                await records.aclose()
        if turn.open_line:
            out()

    async def _show(self, turn: Turn, record: AgentStreamRecord) -> bool:
        """Prints one record of the turn; True once the turn has ended."""
        data = record.data
        if isinstance(data, ModelDeltaData) and data.part == "text":
            step, attempt = data.run_step, data.attempt
            if turn.attempts.get(step, attempt) < attempt:
                sys.stdout.write("\n[retrying] ")
            turn.attempts[step] = attempt
            if step not in turn.streamed:
                sys.stdout.write("assistant> ")
                turn.streamed.add(step)
            sys.stdout.write(data.text)
            sys.stdout.flush()
            turn.printed = turn.open_line = True
        elif isinstance(data, ModelResponseData):
            if data.run_step in turn.streamed:
                out()
                turn.open_line = False
            elif data.text:
                out(f"assistant> {data.text}")
                turn.printed = True
        elif isinstance(data, ToolCallData):
            err(f"  · tool {data.tool_name} {compact(data.arguments)}")
        elif isinstance(data, ApprovalRequestedData):
            await self._decide(data.tool_call_id, data.tool_name, data.arguments, record.seq)
        elif isinstance(data, RunFailedData):
            err(f"  · the turn failed: {data.kind}: {data.message}")
            return True
        elif isinstance(data, RunCompleteData):
            return True
        return False

    async def _decide(self, call_id: str, tool: str, arguments: object, after: int | None) -> None:
        """Asks until the person answers: y approves, any other text denies with that text
        as the reason. A bare Enter asks again; Ctrl-D (end of input) leaves the call
        waiting and the chat (`LeftWaiting`): nothing is decided without an answer. Meanwhile
        the run's records after seq `after` are watched: once the call is decided elsewhere
        (the inbox, another terminal) the question stops, says by whom, and the turn goes
        on."""
        who = f" as {self.by}" if self.by else ""
        question = (
            f"  · tool {tool} {compact(arguments)} needs approval{who}: y approves, a reason "
            "denies, Ctrl-D leaves it waiting> "
        )
        watching = asyncio.ensure_future(self._decided_elsewhere(call_id, after))
        try:
            while True:
                reading = asyncio.ensure_future(self.lines.read(question))
                await asyncio.wait({reading, watching}, return_when="FIRST_COMPLETED")
                if not reading.done():
                    reading.cancel()
                    self._moved_on(call_id, watching.result())
                    return
                line = reading.result()
                if line is None:
                    raise LeftWaiting(call_id)
                if await self._answer(call_id, line.strip()):
                    return
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)

    async def _answer(self, call_id: str, reply: str) -> bool:
        """Sends the person's answer; False when the question must be asked again."""
        if not reply:
            return False
        try:
            if reply.lower() in ("y", "yes"):
                await self.handle.approve(call_id, by=self.by)
                err(f"  · approved {call_id}")
            else:
                await self.handle.deny(call_id, reply, by=self.by)
                err(f"  · denied {call_id}: {reply}")
            return True
        except Rejected as error:
            err(f"  · {error.message}")
            if "already" in error.message:
                return True  # someone else decided it meanwhile
            err("  · answer again, or Ctrl-D to leave it for someone who may decide")
            return False

    async def _decided_elsewhere(
        self, call_id: str, after: int | None
    ) -> ApprovalDecidedData | None:
        """The decision on `call_id` once the run records it; None if the run ends first."""
        records = self.handle.stream(after)
        try:
            async for record in records:
                data = record.data
                if isinstance(data, ApprovalDecidedData) and data.tool_call_id == call_id:
                    return data
        finally:
            if isinstance(records, AsyncGenerator):
                await records.aclose()
        return None

    def _moved_on(self, call_id: str, decided: ApprovalDecidedData | None) -> None:
        self.lines.discard_typed()
        if decided is None:
            err(f"\n  · the run ended before {call_id} was decided")
            return
        how = "approved" if decided.approved else "denied"
        by = f" by {decided.decided_by}" if decided.decided_by else ""
        why = f": {decided.reason}" if decided.reason and not decided.approved else ""
        err(f"\n  · {call_id} was decided elsewhere: {how}{by}{why}")


@click.command(epilog=EPILOG)
@click.argument("agent", required=False)
@click.option("--id", "workflow_id", metavar="ID", help="reattach to session ID instead")
@click.option(
    "--idle-timeout",
    type=APPROVAL_SECONDS,
    help="end a new session after this many seconds without a prompt",
)
@click.option(
    "--by",
    metavar="NAME",
    default=lambda: os.environ.get("USER"),
    help="who decides approvals asked inline (default $USER)",
)
@connection_options(group=False)
@click.pass_obj
def chat(
    settings: Settings,
    agent: str | None,
    workflow_id: str | None,
    idle_timeout: float | None,
    by: str | None,
) -> Awaitable[int]:
    """Chat with AGENT on a new session, or with --id ID on an existing one.

    Each line is a prompt; the answer streams in. /end ends the session, Ctrl-D or /quit
    leaves it waiting (come back with --id)."""
    if agent is None and workflow_id is None:
        raise click.UsageError("give AGENT to start a session, or --id ID to reattach to one")

    async def talk() -> int:
        agents = await settings.connect()
        if workflow_id is not None:
            handle = agents.get(workflow_id)
            view = await handle.status()
            if agent is not None and view.agent != agent:
                raise click.BadParameter(
                    f"session {workflow_id!r} is a session of agent {view.agent!r}, not {agent!r}",
                    param_hint="'AGENT'",
                )
            turns = view.session.turns if view.session else 0
            err(f"session {workflow_id} ({view.agent}, {turns} turn(s) so far)")
        else:
            assert agent is not None
            handle = await agents.start(agent, "", session=True, idle_timeout_seconds=idle_timeout)
            err(f"session {handle.id} with {agent}; /end ends it, Ctrl-D leaves it waiting")
        return await Chat(handle, by).run()

    return talk()
