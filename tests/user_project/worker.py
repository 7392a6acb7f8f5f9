"""The user's worker: their workflows and activities, with the inventory agent hosted next to
them by `DurableAgentPlugin(agents=[...])`, over a client that carries their own codec.

    TEMPORAL_ADDRESS=localhost:7233 TASK_QUEUE=acme python worker.py
"""

from __future__ import annotations

import asyncio
import json
import os
import signal

from agents import inventory
from codec import AcmeZlibCodec
from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.worker import Worker

import activities
import durable_agent
import workflows
from durable_agent.temporal import DurableAgentPlugin
from durable_agent.temporal.worker import exit_process


async def main() -> None:
    client = await Client.connect(
        os.environ.get("TEMPORAL_ADDRESS", "localhost:7233"),
        data_converter=DataConverter(payload_codec=AcmeZlibCodec()),
        plugins=[DurableAgentPlugin(agents=[inventory])],
    )
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    async with Worker(
        client,
        task_queue=os.environ.get("TASK_QUEUE", "acme"),
        workflows=[workflows.ParentWorkflow],
        activities=[activities.file_report],
    ):
        # One line for whoever started us: which modules were loaded, from where.
        modules = {"durable_agent": durable_agent, "workflows": workflows, "activities": activities}
        print(json.dumps({"ready": {k: m.__file__ for k, m in modules.items()}}), flush=True)
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
    exit_process(0)  # skips finalization, which the SDK's native threads can abort
