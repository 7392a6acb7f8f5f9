"""`durable-agent watch`'s live view shows a run's workspace changes (issue 39, part 2): the
latest ones, each as `+added ~modified -deleted`, under the tree the run has now. The lines a
non-terminal watch prints are checked on a dev server in tests/test_workspace_cli.py."""

from __future__ import annotations

import io

from rich.console import Console

from durable_agent.cli.live import SHOWN_CHANGES, RunView, workspace_change
from durable_agent.contract.records import AgentStreamRecord, WorkspaceChangedData


def change(seq: int, **paths: list[str]) -> AgentStreamRecord:
    data = {"environment_ref": f"workspace:{seq:064x}", **paths}
    return AgentStreamRecord(seq=seq, kind="workspace_changed", run_id="r", data=data)


def rendered(view: RunView) -> str:
    out = io.StringIO()
    Console(file=out, width=200, no_color=True).print(view.render())
    return out.getvalue()


def test_the_live_view_shows_the_latest_workspace_changes() -> None:
    view = RunView("coder-1")
    view.apply(change(1, added=["greet.py"]))
    view.apply(change(2, modified=["greet.py"], added=["README.md"], deleted=["old.txt"]))
    shown = rendered(view)
    assert f"workspace workspace:{2:064x}" in shown
    assert "+greet.py" in shown
    assert "+README.md ~greet.py -old.txt" in shown
    for seq in range(3, 3 + SHOWN_CHANGES + 2):
        view.apply(change(seq, added=[f"step{seq}.txt"]))
    shown = rendered(view)
    assert "+step3.txt" not in shown  # only the latest are shown
    assert f"+step{2 + SHOWN_CHANGES + 2}.txt" in shown
    assert "(4 earlier changes)" in shown


def test_a_change_of_many_paths_says_how_many_more() -> None:
    data = WorkspaceChangedData(added=[f"f{i}" for i in range(20)], environment_ref="workspace:x")
    line = workspace_change(data)
    assert line.startswith("+f0 +f1 ")
    assert line.endswith("… and 8 more")
