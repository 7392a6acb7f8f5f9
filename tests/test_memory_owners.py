"""`benchmarks.memory_owners` blames an allocation on the code that answers for it."""

from __future__ import annotations

import tracemalloc

import pytest

from benchmarks.memory_owners import owner, parse


def frames(*places: tuple[str, int]) -> list[tracemalloc.Frame]:
    """A traceback as tracemalloc gives it: the oldest frame first."""
    return [tracemalloc.Frame(place) for place in places]


SDK = "/x/.venv/lib/python3.11/site-packages/temporalio/worker/_workflow_instance.py"
PYDANTIC = "/x/.venv/lib/python3.11/site-packages/pydantic/main.py"


def test_the_innermost_frame_of_ours_answers() -> None:
    traceback = frames(
        (SDK, 2846),
        ("/x/durable_agent/engine/loop/engine.py", 185),
        ("/x/durable_agent/temporal/executor.py", 113),
        (PYDANTIC, 280),
    )
    assert owner(traceback) == "durable_agent/temporal/executor.py:113"


def test_without_ours_the_sdk_answers_then_the_innermost() -> None:
    assert (
        owner(frames((SDK, 335), (PYDANTIC, 280))) == "temporalio/worker/_workflow_instance.py:335"
    )
    assert owner(frames(("/usr/lib/python3.11/random.py", 125))) == "random.py:125"


def test_frames_that_pass_the_sdk_on_answer_for_nothing() -> None:
    traceback = frames(
        ("/x/benchmarks/memory_owners.py", 165),
        ("/x/durable_agent/temporal/sandbox.py", 185),
        (SDK, 335),
        ("/usr/lib/python3.11/random.py", 125),
    )
    assert owner(traceback) == "temporalio/worker/_workflow_instance.py:335"


def test_no_side_named_means_both_and_a_wrong_one_is_refused() -> None:
    assert parse([]).sides == ["A", "B"]
    assert parse(["B", "--top", "5"]).sides == ["B"]
    with pytest.raises(SystemExit):
        parse(["C"])
