"""python -m benchmarks [MEASURE ...] [--quick] [--out DIR] [--report FILE]

Runs the measures (all by default), each writing DIR/MEASURE.json, then renders the report
from every JSON file in DIR. `python -m benchmarks report` only renders it. `--quick` runs
each measure small but the upgrade (a few minutes in all), into a temporary folder unless `--out`
says otherwise: a check that the harness works, not a measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import (
    history,
    loop,
    memory,
    objects,
    profile,
    quota,
    replay,
    report,
    streaming,
    testkit,
    throughput,
    upgrade,
    workspace,
)
from benchmarks.harness import Session, log, write_json
from durable_agent.cli.logs import configure_logging

HERE = Path(__file__).parent
TEMPORAL = {
    "throughput": throughput.measure,
    "history": history.measure,
    "replay": replay.measure,
    "profile": profile.measure,
    "objects": objects.measure,
    "memory": memory.measure,
    "streaming": streaming.measure,
    "quota": quota.measure,
    "testkit": testkit.measure,
    "workspace": workspace.measure,
    "upgrade": upgrade.measure,
}
MEASURES = ["loop", *TEMPORAL]


async def run(measures: list[str], quick: bool, out: Path, command: str) -> None:
    configure_logging("console", level=logging.WARNING)
    if "loop" in measures:
        log("loop")
        began = time.perf_counter()
        results = loop.measure(quick)
        write_json(out / "loop.json", "loop", command, time.perf_counter() - began, results)
    wanted = [m for m in measures if m in TEMPORAL]
    if wanted:
        async with Session() as session:
            for name in wanted:
                log(name)
                began = time.perf_counter()
                results = await TEMPORAL[name](session, quick)
                took = time.perf_counter() - began
                write_json(out / f"{name}.json", name, command, took, results)


def main(argv: list[str] | None = None) -> None:
    items = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("measures", nargs="*", choices=[*MEASURES, "report", []])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--report", type=Path)
    args = parser.parse_args(items)
    out = args.out or (
        Path(tempfile.mkdtemp(prefix="durable-agent-bench-")) if args.quick else HERE / "results"
    )
    # Results written elsewhere get their report beside them, not over the committed one.
    target = args.report or (out / "RESULTS.md" if args.quick or args.out else HERE / "RESULTS.md")
    if args.measures != ["report"]:
        # --quick leaves out the upgrade (minutes at any size that queues runs for the quota):
        # tests/test_upgrade_load.py runs the same upgrade at CI's size
        every = [m for m in MEASURES if m != "upgrade"] if args.quick else MEASURES
        measures = [m for m in MEASURES if m in args.measures] or every
        command = " ".join(["python -m benchmarks", *items])
        asyncio.run(run(measures, args.quick, out, command))
    target.write_text(report.render(out))
    log(f"results in {out}, report in {target}")


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the SDK's native threads can abort interpreter finalization
