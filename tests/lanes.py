"""The two lanes of the suite: `pytest -m "not server"` (the fast lane, run on every
change) and the whole suite (CI).

A test is in the slow lane when it is marked `server`: it needs a Temporal server, another
process or a browser. Tests that use the `dev_server` fixture (or one built on it, such as
`client`) are marked for them; every other slow test says so itself
(`pytestmark = pytest.mark.server`). So that a test cannot end up in the fast lane by
mistake, a test that is not marked and starts a process (a server, a worker, a browser, an
MCP server over stdio, tmux) or a Temporal test environment fails, naming what it started.
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

__all__ = ["SERVER", "SERVER_FIXTURES", "SLOW", "install"]

SERVER = "server"
UPGRADE_LOAD = "upgrade_load"
"""The rolling upgrade under load (tests/test_upgrade_load.py): also `server`; about two
minutes at CI's size, so it can be chosen (`-m upgrade_load`) or left out on its own."""
SLOW = "slow"
"""Tests of a few minutes each (the 5,000-step run, which starts with the session as a head
start (`tests/head_start.py`), the benchmark harness's quick mode and its instruction
count): also `server`; CI runs them, a developer may leave them out with `-m "not slow"`
(as the README says)."""
SERVER_FIXTURES = frozenset({"dev_server"})
"""Fixtures that start a Temporal server: a test using one (directly or through another
fixture) is marked `server`."""

_running: list[pytest.Item] = []
"""The test whose setup, call or teardown runs now (none between tests)."""


def _refuse(what: str) -> None:
    if not _running:
        return
    item = _running[-1]
    if item.get_closest_marker(SERVER) is None:
        raise RuntimeError(
            f"{item.nodeid} starts {what} but is not marked `server`, so it would run in "
            'the fast lane (`pytest -m "not server"`); mark it (or its module: '
            "`pytestmark = pytest.mark.server`)"
        )


def _guarded(original: Callable[..., Any], what: Callable[..., str]) -> Callable[..., Any]:
    @functools.wraps(original)
    def guard(*args: Any, **kwargs: Any) -> Any:
        _refuse(what(*args, **kwargs))
        return original(*args, **kwargs)

    return guard


def install() -> None:
    """Guards the ways a test starts something slow (called once, at configuration)."""
    popen = subprocess.Popen.__init__

    def process(self: object, args: Any, *rest: Any, **kwargs: Any) -> str:
        shown = args if isinstance(args, str) else " ".join(str(a) for a in args)
        return f"a process ({shown[:80]})"

    subprocess.Popen.__init__ = _guarded(popen, process)  # type: ignore[method-assign]
    for name in ("start_time_skipping", "start_local"):
        original = getattr(WorkflowEnvironment, name).__func__
        wrapped = _guarded(original, lambda *a, _n=name, **k: f"WorkflowEnvironment.{_n}")
        setattr(WorkflowEnvironment, name, classmethod(wrapped))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{SERVER}: needs a Temporal server, another process or a browser (left out of the "
        'fast lane, `pytest -m "not server"`)',
    )
    config.addinivalue_line(
        "markers",
        f"{UPGRADE_LOAD}: the rolling upgrade under load (previous release's worker, server "
        "and worker killed, today's worker finishes the runs); about two minutes",
    )
    config.addinivalue_line(
        "markers",
        f"{SLOW}: a few minutes each (the 5,000-step run, the benchmarks' quick mode and "
        "instruction count); in CI, left out locally with -m 'not slow'",
    )
    install()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(SERVER)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _running.append(item)
    try:
        yield
    finally:
        _running.pop()
