"""The in-process loop benchmark runs its scenario with either model, and compares lengths."""

from __future__ import annotations

import asyncio
import sys

import pytest

from benchmarks import loop_step


@pytest.mark.parametrize("model", sorted(loop_step.MODELS))
def test_a_run_makes_every_lookup_with_either_model(model: str) -> None:
    elapsed, checkpoints = asyncio.run(loop_step.one_run(7, model))
    assert elapsed > 0
    # five boundaries a lookup; run_start, the final request's three, validate_output
    # and run_complete make six more
    assert checkpoints == 5 * 7 + 6


def test_lengths_are_timed_in_turns_and_compared(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    order: list[int] = []
    real = loop_step.one_run

    async def recording(steps: int, model: str = "test") -> tuple[float, int]:
        order.append(steps)
        return await real(steps, model)

    monkeypatch.setattr(loop_step, "one_run", recording)
    monkeypatch.setattr(
        sys, "argv", ["loop_step", "--steps", "3", "6", "--repeats", "2", "--model", "unscripted"]
    )
    loop_step.main()
    assert order == [3, 6, 3, 6]
    out = capsys.readouterr().out
    assert "steps per run:        3" in out
    assert "steps per run:        6" in out
    assert "6 / 3 steps, median per step:" in out


def test_a_length_under_one_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["loop_step", "--steps", "0"])
    with pytest.raises(SystemExit):
        loop_step.main()
