"""What the working nodes take and return: their inputs and outcomes.

Every node input is a `RunRef` (which run and step it works for) with the node's own
fields; a tool call ends in one `ToolCallOutcome`, an output check in one `OutputOutcome`.
These are the values that cross a node's boundary, so on Temporal they are the activities'
inputs and results, kept in history: their class names and fields are a wire contract
(payloads name no module). Kept apart from `nodes`, which does the work, so the contract
reads on its own; every name is also importable from `nodes`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypedDict

from pydantic import BaseModel, Field, TypeAdapter

from ..contract._fields import omit_empty, omit_none, trusted
from ..contract.environment import EnvironmentChange
from ..contract.messages import ModelMessage, ModelResponse, RetryPromptPart, ToolCall, ToolReturn
from ..contract.tools import ToolDefinition
from ..contract.toolsets import ToolsetTool
from ..contract.usage import Usage

__all__ = [
    "ListToolsInput",
    "ModelRequestInput",
    "OutputOk",
    "OutputOutcome",
    "OutputOutcomeAdapter",
    "OutputRetry",
    "PrepareModelRequestInput",
    "RunRef",
    "RunRefFields",
    "ToolApprovalNeeded",
    "ToolCallInput",
    "ToolCallOutcome",
    "ToolCallOutcomeAdapter",
    "ToolDeferred",
    "ToolReturned",
    "ToolRetry",
    "ValidateOutputInput",
    "WorkspaceMergeInput",
]


class RunRefFields(TypedDict):
    run_id: str
    conversation_id: str
    run_step: int
    timestamp: str | None
    metadata: dict[str, Any]


class RunRef(BaseModel):
    """Which run and step a node works for; shared by every node input."""

    run_id: str
    conversation_id: str
    run_step: int
    timestamp: str | None = omit_none()
    metadata: dict[str, Any] = omit_empty(factory=dict)

    def fields(self) -> RunRefFields:
        return RunRefFields(
            run_id=self.run_id,
            conversation_id=self.conversation_id,
            run_step=self.run_step,
            timestamp=self.timestamp,
            metadata=self.metadata,
        )


class PrepareModelRequestInput(RunRef):
    """Only what needs rendering; tool returns and retry prompts are added by the loop."""

    prompt: str | None = None
    include_instructions: bool = False

    @classmethod
    def for_run(
        cls, ref: RunRef, *, prompt: str | None, include_instructions: bool
    ) -> PrepareModelRequestInput:
        return cls(**ref.fields(), prompt=prompt, include_instructions=include_instructions)


class ModelRequestInput(RunRef):
    messages: list[ModelMessage]
    toolset_tools: list[ToolDefinition] = omit_empty(factory=list)
    """The run's listed toolset tools, shown to the model next to the function tools."""

    @classmethod
    def for_run(
        cls,
        ref: RunRef,
        *,
        messages: list[ModelMessage],
        toolset_tools: list[ToolDefinition] | None = None,
    ) -> ModelRequestInput:
        # Not validated: the history is the loop's own, already-validated state, and
        # revalidating it on every request would make each step cost O(history).
        return cls.model_construct(
            run_id=ref.run_id,
            conversation_id=ref.conversation_id,
            run_step=ref.run_step,
            timestamp=ref.timestamp,
            metadata=ref.metadata,
            messages=messages,
            toolset_tools=toolset_tools or [],
        )


class ListToolsInput(RunRef):
    """Which of the agent's toolsets to list."""

    toolset: str

    @classmethod
    def for_run(cls, ref: RunRef, *, toolset: str) -> ListToolsInput:
        return cls(**ref.fields(), toolset=toolset)


class ToolCallInput(RunRef):
    call: ToolCall
    retry: int = omit_empty(0)
    approved: bool = omit_empty(False)
    override_arguments: dict[str, Any] | None = omit_none()
    idempotency_key: str | None = omit_none()
    """None (on Temporal): the activity derives the usual `<workflow id>:<call id>`."""
    toolset_tool: ToolsetTool | None = omit_none()
    """Set for a call of a toolset tool: the tool as the run listed it (its schema checks
    the arguments, its toolset runs the call)."""
    toolset_digest: str | None = omit_none()
    """The digest of the listing `toolset_tool` comes from, to tell whether it changed."""

    @classmethod
    def for_run(
        cls,
        ref: RunRef,
        *,
        call: ToolCall,
        retry: int,
        approved: bool,
        override_arguments: dict[str, Any] | None,
        idempotency_key: str | None,
        toolset_tool: ToolsetTool | None = None,
        toolset_digest: str | None = None,
    ) -> ToolCallInput:
        # Not validated: every value is the loop's own (a step's cost, not the history's).
        return trusted(
            cls,
            **ref.fields(),
            call=call,
            retry=retry,
            approved=approved,
            override_arguments=override_arguments,
            idempotency_key=idempotency_key,
            toolset_tool=toolset_tool,
            toolset_digest=toolset_digest,
        )


class ToolReturned(BaseModel):
    """The tool ran; its return goes to the model."""

    kind: Literal["return"] = "return"
    tool_return: ToolReturn
    toolset_changed: bool = omit_empty(False)
    """A toolset tool's toolset now offers other tools than the run listed: list again."""
    usage: Usage | None = omit_none()
    """What the call spent on models beyond the call itself (a sub-agent's run): added to
    the run's usage, so a parent's usage includes its sub-agents' at any depth."""
    workspace: EnvironmentChange | None = omit_none()
    """What the call changed in the run's workspace (None: nothing, or no workspace): the
    loop applies it in call order. Left out of JSON when unset, so histories of runs
    without one decode as before."""


class ToolRetry(BaseModel):
    """The call could not run as asked (bad arguments, `ModelRetry`); the model tries again."""

    kind: Literal["retry"] = "retry"
    tool_return: ToolReturn


class ToolApprovalNeeded(BaseModel):
    """The tool raised `ApprovalRequired`: the call waits for a human."""

    kind: Literal["approval_required"] = "approval_required"
    reason: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class ToolDeferred(BaseModel):
    """The tool raised `CallDeferred`: its result arrives later from outside."""

    kind: Literal["deferred"] = "deferred"
    reason: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


ToolCallOutcome = Annotated[
    ToolReturned | ToolRetry | ToolApprovalNeeded | ToolDeferred, Field(discriminator="kind")
]
ToolCallOutcomeAdapter: TypeAdapter[ToolCallOutcome] = TypeAdapter(ToolCallOutcome)


class WorkspaceMergeInput(RunRef):
    """The changes calls of one response made, each from `base` (in call order), to merge
    over `base`; the answer says what that is from `current`, the run's tree now."""

    base: str
    current: str
    changes: list[str]

    @classmethod
    def for_run(
        cls, ref: RunRef, *, base: str, current: str, changes: list[str]
    ) -> WorkspaceMergeInput:
        return cls(**ref.fields(), base=base, current=current, changes=changes)


class ValidateOutputInput(RunRef):
    response: ModelResponse
    attempt: int = 0

    @classmethod
    def for_run(cls, ref: RunRef, *, response: ModelResponse, attempt: int) -> ValidateOutputInput:
        return cls(**ref.fields(), response=response, attempt=attempt)


class OutputOk(BaseModel):
    kind: Literal["ok"] = "ok"
    output: Any = None
    structured_output: Any = None


class OutputRetry(BaseModel):
    kind: Literal["retry"] = "retry"
    retry_prompt: RetryPromptPart


OutputOutcome = Annotated[OutputOk | OutputRetry, Field(discriminator="kind")]
OutputOutcomeAdapter: TypeAdapter[OutputOutcome] = TypeAdapter(OutputOutcome)
