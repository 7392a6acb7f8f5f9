"""Running `durable-agent` in the test process, against the session's dev server."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from durable_agent.cli.app import amain

__all__ = ["Cli", "Outcome", "cli_runner"]


@dataclass
class Outcome:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def json_lines(self) -> list[Any]:
        """`run --json` and `watch --json` print one document per line."""
        return [json.loads(line) for line in self.out.splitlines()]


Cli = Callable[..., Awaitable[Outcome]]


def cli_runner(address: str, capsys: pytest.CaptureFixture[str]) -> Cli:
    """Runs `durable-agent ARGS --address ADDRESS` and returns code, stdout, stderr."""

    async def run(*argv: str) -> Outcome:
        capsys.readouterr()
        code = await amain([*argv, "--address", address])
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    return run
