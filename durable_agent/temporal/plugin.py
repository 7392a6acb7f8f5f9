"""One plugin that wires the converter, the workflow, the activities and the sandbox.

Pass it to `Client.connect(plugins=[DurableAgentPlugin()])`; a `Worker` built from that
client picks up the workflow and activities, and the CLI and tests use the same object.
"""

from __future__ import annotations

import dataclasses

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    PayloadCodec,
)
from temporalio.plugin import SimplePlugin
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from .workflow import AgentWorkflow

__all__ = ["PASSTHROUGH_MODULES", "DurableAgentPlugin", "data_converter"]

PASSTHROUGH_MODULES = ("durable_agent", "activities", "pydantic", "pydantic_core", "structlog")
"""Loaded once, outside the sandbox: the registry must be the worker's own instance."""


def data_converter() -> DataConverter:
    return pydantic_data_converter


class DurableAgentPlugin(SimplePlugin):
    def __init__(
        self, *, converter: DataConverter | None = None, codec: PayloadCodec | None = None
    ) -> None:
        """`codec` (e.g. `durable_agent.temporal.encryption.EncryptionCodec`) encodes every payload.

        With a codec, failure messages and stack traces move into an encoded payload too,
        since a tool's or model's error text can quote the conversation.
        """
        from durable_agent.temporal.activities import (
            ALL_ACTIVITIES,  # activities import workflow inputs
        )

        converter = converter or data_converter()
        if codec is not None:
            converter = dataclasses.replace(
                converter,
                payload_codec=codec,
                failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
            )
        super().__init__(
            "durable-agent.DurableAgentPlugin",
            data_converter=converter,
            workflows=[AgentWorkflow],
            activities=list(ALL_ACTIVITIES),
            workflow_runner=SandboxedWorkflowRunner(
                restrictions=SandboxRestrictions.default.with_passthrough_modules(
                    *PASSTHROUGH_MODULES
                )
            ),
        )
        self.codec = codec

    @classmethod
    def from_env(cls) -> DurableAgentPlugin:
        """Encrypts payloads when DURABLE_AGENT_ENCRYPTION_KEYS is set; raises
        `durable_agent.temporal.encryption.EncryptionError` when the keys there are malformed."""
        from .encryption import codec_from_env

        return cls(codec=codec_from_env())
