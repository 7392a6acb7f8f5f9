"""`tests/head_start.py`: a marked test's scenario starts with the session, in a process of
its own, and the test reads what it wrote (or why it failed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.server  # the inner sessions start the scenarios' processes

ROOT = Path(__file__).parent.parent

SCENARIOS = {
    # writes its outcome, after leaving a sign that it started
    "fine.py": """
import json, pathlib, sys
pathlib.Path("started-fine").write_text("yes")
pathlib.Path(sys.argv[1]).write_text(json.dumps({"answer": 42}))
""",
    "broken.py": """
import sys
print("the scenario's own words")
sys.exit(3)
""",
    "other.py": """
import json, pathlib, sys
pathlib.Path("started-other").write_text("yes")
pathlib.Path(sys.argv[1]).write_text("{}")
""",
}

TESTS = """
import pytest


@pytest.mark.head_start("fine")
async def test_reads_the_outcome(head_start):
    assert await head_start.outcome(timeout=60) == {"answer": 42}


@pytest.mark.head_start("broken")
async def test_sees_the_failure(head_start):
    await head_start.outcome(timeout=60)


@pytest.mark.head_start("other")
async def test_other(head_start):
    await head_start.outcome(timeout=60)


async def test_without_a_marker(head_start):
    pass
"""


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A project of its own whose sessions load the plugin, as this suite's conftest does."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    pytester.makeini("[pytest]\nasyncio_mode = auto\n")
    pytester.makeconftest('pytest_plugins = ["tests.head_start"]\n')
    pytester.makepyfile(**{name.removesuffix(".py"): body for name, body in SCENARIOS.items()})
    pytester.makepyfile(test_inner=TESTS)
    return pytester


def test_a_scenario_is_read_its_failure_shown_and_a_missing_marker_named(
    inner: pytest.Pytester,
) -> None:
    result = inner.runpytest_subprocess("-k", "not other")
    result.assert_outcomes(passed=1, failed=1, errors=1)
    result.stdout.fnmatch_lines(["*broken exited with 3:*", "*the scenario's own words*"])
    result.stdout.fnmatch_lines(["*test_without_a_marker uses the head_start fixture without*"])
    assert (inner.path / "started-fine").exists()


def test_a_test_left_out_starts_no_scenario(inner: pytest.Pytester) -> None:
    result = inner.runpytest_subprocess("-k", "reads_the_outcome")
    result.assert_outcomes(passed=1)
    assert (inner.path / "started-fine").exists()
    assert not (inner.path / "started-other").exists()
