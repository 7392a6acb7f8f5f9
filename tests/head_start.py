"""Scenarios that mostly wait start when the session does, in a process of their own.

A test marked `head_start("package.module")` has its scenario run as `python -m
package.module OUTCOME.json` from the moment the session's tests are collected, beside the
other tests; the test itself awaits `head_start.outcome()` when its turn comes and checks
what the scenario wrote. For a scenario that spends minutes waiting on its own Temporal
server (the 5,000-step run: two activity round trips a step, eight minutes, little CPU)
the suite then pays its wait once, alongside everything else, instead of on its own.

Only a test that is selected starts its scenario (`-k`, `-m` leave the others alone); a
scenario still running when the session ends (its test was not reached) is stopped.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

__all__ = ["HEAD_START", "HeadStart"]

HEAD_START = "head_start"
_started = pytest.StashKey[dict[str, "HeadStart"]]()


@dataclass
class HeadStart:
    """One scenario's process and where it writes."""

    module: str
    directory: Path
    cwd: Path
    """Where `python -m` finds the module: the session's root directory."""
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def out(self) -> Path:
        return self.directory / "outcome.json"

    @property
    def log(self) -> Path:
        return self.directory / "output.log"

    def start(self) -> None:
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", self.module, str(self.out)],
                cwd=self.cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # stopped as a group, with its dev server
            )

    async def outcome(self, timeout: float) -> dict[str, Any]:
        """What the scenario wrote, once it ended; its output if it failed or overran."""
        process = self.process
        assert process is not None, f"{self.module} was not started"
        deadline = asyncio.get_running_loop().time() + timeout
        while process.poll() is None:
            if asyncio.get_running_loop().time() > deadline:
                self.stop()
                raise AssertionError(
                    f"{self.module} still ran after {timeout:.0f} s:\n{self._tail()}"
                )
            await asyncio.sleep(1)
        if process.returncode != 0 or not self.out.exists():
            raise AssertionError(f"{self.module} exited with {process.returncode}:\n{self._tail()}")
        outcome: dict[str, Any] = json.loads(self.out.read_text())
        return outcome

    def stop(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def _tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{HEAD_START}(module): the test's scenario runs as `python -m module OUTCOME.json` "
        "from the session's start; the test reads it through the `head_start` fixture",
    )
    config.stash[_started] = {}


def pytest_collection_finish(session: pytest.Session) -> None:
    started = session.config.stash[_started]
    for item in session.items:
        marker = item.get_closest_marker(HEAD_START)
        if marker is None:
            continue
        (module,) = marker.args
        directory = Path(tempfile.mkdtemp(prefix="head-start-"))
        scenario = HeadStart(module, directory, session.config.rootpath)
        started[item.nodeid] = scenario
        scenario.start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    for scenario in session.config.stash[_started].values():
        scenario.stop()


@pytest.fixture
def head_start(request: pytest.FixtureRequest) -> HeadStart:
    """The scenario the requesting test's `head_start` marker started."""
    scenario = request.config.stash[_started].get(request.node.nodeid)
    if scenario is None:
        pytest.fail(
            f"{request.node.nodeid} uses the head_start fixture without a "
            '`@pytest.mark.head_start("package.module")` marker'
        )
    return scenario
