"""Starts `ParentWorkflow` and prints its result as JSON.

TEMPORAL_ADDRESS=localhost:7233 TASK_QUEUE=acme python starter.py WIDGET-9 [workflow-id]
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
import uuid

from codec import AcmeZlibCodec
from temporalio.client import Client
from temporalio.converter import DataConverter

from durable_agent.temporal import DurableAgentPlugin
from durable_agent.temporal.worker import exit_process
from workflows import ParentWorkflow, StockQuestion


async def main(sku: str, workflow_id: str) -> None:
    # No agents: on a client the plugin only sets the converter (the codec stays ours).
    client = await Client.connect(
        os.environ.get("TEMPORAL_ADDRESS", "localhost:7233"),
        data_converter=DataConverter(payload_codec=AcmeZlibCodec()),
        plugins=[DurableAgentPlugin()],
    )
    answer = await client.execute_workflow(
        ParentWorkflow.run,
        StockQuestion(sku=sku),
        id=workflow_id,
        task_queue=os.environ.get("TASK_QUEUE", "acme"),
    )
    print(json.dumps({"workflow_id": workflow_id, "result": dataclasses.asdict(answer)}))


if __name__ == "__main__":
    sku = sys.argv[1] if len(sys.argv) > 1 else "WIDGET-9"
    workflow_id = sys.argv[2] if len(sys.argv) > 2 else f"stock-{uuid.uuid4()}"
    asyncio.run(main(sku, workflow_id))
    exit_process(0)  # skips finalization, which the SDK's native threads can abort
