"""A rolling upgrade under load at full size (issue 41, item 2): 2,000 runs of four kinds
(approval waits, slow tool calls, sub-agents waiting for their approval, runs waiting for the
model quota) started on the previous release's worker, the server and that worker
SIGKILLed together, today's worker with one of the previous release beside it until that one
is drained. tests/upgrade_load.py does the upgrade and its checks (tests/test_upgrade_load.py
runs it at CI's size); this measure runs it at FULL size, or at ten runs with `--quick`.

It has its own server (one it can kill), so it does not use the session's. What it reports:
the problems found (none is the goal: no run lost, approved tools once, denied never, no
workflow task failure), wall time by phase, and each run's delay from what let it go on to
its end, the slowest run named."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from benchmarks.harness import Session, log

__all__ = ["measure"]


async def measure(session: Session, quick: bool) -> dict[str, Any]:
    from tests.upgrade_load import FULL, PREVIOUS_RELEASE, Load, rolling_upgrade

    # --quick checks the harness: ten runs, two or more of each kind
    quick_load = Load(deployers=4, slow=2, leads=2, quoted=2, rpm=120, overlap=5, timeout=120)
    load = quick_load if quick else FULL
    directory = Path(tempfile.mkdtemp(prefix="durable-agent-upgrade-", dir=session.directory))
    log(f"  {load.runs} runs from {PREVIOUS_RELEASE}'s worker to today's, in {directory}")
    outcome = await rolling_upgrade(directory, load, log=log)
    for problem in outcome.problems[:20]:
        log(f"  problem: {problem}")
    return {
        "previous_release": PREVIOUS_RELEASE,
        "problems": outcome.problems,
        **outcome.figures,
    }
