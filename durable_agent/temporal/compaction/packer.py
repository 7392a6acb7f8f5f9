"""The workflow side of the format: what a node activity input leaves out, and how a
result is read back.

One `RequestPacker` per run (the activity node runner's). It knows how many of the run's
messages the activity cache may hold (`cached`; for release 0.1's continued runs the
`offset` and digest of messages held by earlier runs), and sends each model request only
the messages after them, packed, with the digests that prove the prefix and the rebuild.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from durable_agent import AgentOverrides, ModelMessage, ModelResponse, ToolDefinition
    from durable_agent.contract.environment import ENVIRONMENT_REF
    from durable_agent.engine.node_io import ModelRequestInput, ToolCallInput, ToolCallOutcome

    from ..wire import HistoryRef, ModelRequestActivityInput, ToolCallActivityInput
    from .digest import DIGEST_CHARS, EMPTY_DIGEST, HistoryDigest, definitions_digest
    from .format import default_idempotency_key, pack_messages, unpack_response, unpack_tool_outcome

__all__ = ["RequestPacker"]


class RequestPacker:
    def __init__(
        self,
        *,
        history_offset: int = 0,
        history_digest: str = EMPTY_DIGEST,
        cached: int | None = None,
    ) -> None:
        self.offset = history_offset
        self.digest = HistoryDigest(history_offset, history_digest)
        self._definitions: tuple[list[ToolDefinition], str] | None = None
        self._cached_length = history_offset if cached is None else cached

    def digest_of(self, messages: list[ModelMessage]) -> str:
        """The digest of the whole conversation so far (for continue-as-new)."""
        return self.digest.advance(messages, self.offset + len(messages))

    def model_request(
        self,
        agent: str,
        input: ModelRequestInput,
        *,
        overrides: AgentOverrides | None,
        stream: bool,
    ) -> ModelRequestActivityInput:
        """The request's messages after what the activity holds, packed. Once the activity
        answers it holds them and its response too (`answered`)."""
        messages = input.messages
        total = self.offset + len(messages)
        prefix = min(self._cached_length, total)
        digest = self.digest.advance(messages, prefix)
        through = self.digest.peek(messages, total)
        new = messages[prefix - self.offset :]
        before = prefix - self.offset - 1
        return ModelRequestActivityInput(
            agent=agent,
            run_step=input.run_step,
            timestamp=input.timestamp,
            messages=pack_messages(
                new,
                previous=messages[before] if before >= 0 else None,
                timestamp=input.timestamp,
            ),
            through=through[:DIGEST_CHARS],
            history=HistoryRef(length=prefix, digest=digest[:DIGEST_CHARS]),
            toolset_digest=self._toolset_digest(input.toolset_tools),
            overrides=overrides,
            stream_deltas=stream,
        )

    def answered(self, input: ModelRequestInput, response: ModelResponse) -> ModelResponse:
        """The activity's packed response, whole again; the activity now caches the
        request's messages plus this response, which the loop appends."""
        self._cached_length = self.offset + len(input.messages) + 1
        return unpack_response(
            response,
            run_id=input.run_id,
            conversation_id=input.conversation_id,
            timestamp=input.timestamp,
        )

    def _toolset_digest(self, definitions: list[ToolDefinition]) -> str | None:
        """Toolset tools travel as a digest; the loop hands over the same list until its
        listings change, so the digest is computed once per listing, not per step."""
        if not definitions:
            return None
        if self._definitions is None or self._definitions[0] is not definitions:
            self._definitions = (definitions, definitions_digest(definitions))
        return self._definitions[1]

    @staticmethod
    def tool_call(agent: str, input: ToolCallInput, workflow_id: str) -> ToolCallActivityInput:
        """A tool is not told the time, and the activity derives the usual idempotency key
        itself (`default_idempotency_key`)."""
        update: dict[str, Any] = {"timestamp": None}
        if input.idempotency_key == default_idempotency_key(workflow_id, input.call.id):
            update["idempotency_key"] = None
        return ToolCallActivityInput(agent=agent, input=input.model_copy(update=update))

    @staticmethod
    def tool_outcome(outcome: dict[str, Any], input: ToolCallInput) -> ToolCallOutcome:
        base = input.metadata.get(ENVIRONMENT_REF)
        return unpack_tool_outcome(
            outcome, input.call.id, input.call.name, base if isinstance(base, str) else None
        )
