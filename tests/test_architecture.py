"""The one-way rules of docs/architecture.md, read off every module's imports (issue 25).

cli, inbox → temporal → core: nothing in the core imports the Temporal integration, nothing
in the integration imports a front end, and the workflow's components stay small.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "durable_agent"


def imported(path: Path) -> set[str]:
    """Absolute names of the `durable_agent` modules `path` imports."""
    tree = ast.parse(path.read_text())
    # The package a relative import starts from: a module's own, or (for __init__) itself.
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)[:-1]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = parts[: len(parts) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return {name for name in names if name.startswith("durable_agent")}


def modules(under: str) -> list[Path]:
    return sorted((PACKAGE / under).rglob("*.py")) if under else sorted(PACKAGE.glob("*.py"))


def test_the_core_imports_no_engine_and_no_front_end() -> None:
    core = [*modules(""), *modules("models"), *modules("mcp")]
    for path in core:
        for name in imported(path):
            assert not name.startswith(
                ("durable_agent.temporal", "durable_agent.cli", "durable_agent.inbox")
            ), f"{path.relative_to(PACKAGE)} imports {name}"


def test_the_temporal_integration_imports_no_front_end() -> None:
    for path in modules("temporal"):
        for name in imported(path):
            assert not name.startswith(("durable_agent.cli", "durable_agent.inbox")), (
                f"{path.relative_to(PACKAGE)} imports {name}"
            )


def test_the_client_side_never_imports_workflow_components() -> None:
    """Clients (`client/`, `streams`) read the workflow's wire models and handler names,
    never its internals (the class itself, for typed handles, is the one exception)."""
    client_side = [*modules("temporal/client"), PACKAGE / "temporal" / "streams.py"]
    for path in client_side:
        for name in imported(path):
            internal = name.startswith("durable_agent.temporal.workflow.")
            if name == "durable_agent.temporal.workflow.AgentWorkflow":
                continue
            assert not internal, f"{path.relative_to(PACKAGE)} imports {name}"


def test_modules_stay_small() -> None:
    for path in PACKAGE.rglob("*.py"):
        lines = len(path.read_text().splitlines())
        assert lines <= 500, f"{path.relative_to(PACKAGE)} has {lines} lines"
    workflow = PACKAGE / "temporal" / "workflow" / "agent_workflow.py"
    assert len(workflow.read_text().splitlines()) <= 450
