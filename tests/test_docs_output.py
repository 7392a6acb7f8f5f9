"""The guides show what the CLI prints (issue 38, item 17): docs/subagents.md's `status`
tree is rendered here by the CLI's own code from the run it describes and compared line by
line (it showed `2 requests, …` where the CLI prints `requests=2 tool_calls=1`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from durable_agent import Usage
from durable_agent.cli.output import StatusReport, print_status
from durable_agent.temporal.queries import AgentStatusView, SubagentView

ROOT = Path(__file__).resolve().parent.parent


def _tree_block(page: str) -> list[str]:
    """The `sub-agents (n):` lines of the page's `text` block that shows `status`."""
    text = (ROOT / page).read_text()
    block = next(
        b for b in re.findall(r"^```text\n(.*?)^```$", text, re.M | re.S) if "sub-agents (" in b
    )
    lines = block.splitlines()
    return lines[next(i for i, line in enumerate(lines) if line.startswith("sub-agents (")) :]


def test_the_sub_agent_tree_in_the_guide_is_what_status_prints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The research example waiting for the writer's approval, as docs/subagents.md has it
    (run ids elided with `…` there)."""
    researcher = "r1--researcher--run_…-1-call_researcher_0"
    writer = "r1--writer--run_…-2-call_writer_1"
    view = AgentStatusView(
        agent="research_lead",
        status="waiting",
        node="tool_call",
        run_step=2,
        subagents=[
            SubagentView(
                tool_call_id="call_researcher_0",
                agent="researcher",
                workflow_id=researcher,
                status="completed",
                usage=Usage(requests=2, tool_calls=1),
            ),
            SubagentView(
                tool_call_id="call_writer_1",
                agent="writer",
                workflow_id=writer,
                status="waiting",
                usage=Usage(requests=1),
            ),
        ],
    )
    report = StatusReport(
        workflow_id="r1",
        execution_status="running",
        task_queue="durable-agent",
        start_time=None,
        close_time=None,
        view=view,
    )
    print_status(report)
    printed = capsys.readouterr().out.splitlines()
    tree = printed[next(i for i, line in enumerate(printed) if line.startswith("sub-agents (")) :]
    assert _tree_block("docs/subagents.md") == tree
