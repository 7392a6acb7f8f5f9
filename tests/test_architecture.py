"""The one-way rules of docs/architecture.md, read off every module's imports (issue 25).

cli, inbox → temporal → core: nothing in the core imports the Temporal integration, nothing
in the integration imports a front end, no module imports itself through others (issue 37),
and the workflow's components stay small.
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


def test_nothing_but_front_ends_imports_the_test_kit() -> None:
    """`durable_agent.testing` and `durable_agent.evals` sit on the Temporal integration
    (issue 40): the core and the integration never import them; the CLI may (export, eval),
    and evals builds on testing."""
    kit = ("durable_agent.testing", "durable_agent.evals")
    users = ("testing", "evals", "cli")
    for path in PACKAGE.rglob("*.py"):
        if path.relative_to(PACKAGE).parts[0] in users:
            continue
        for name in imported(path):
            assert not name.startswith(kit), f"{path.relative_to(PACKAGE)} imports {name}"
    for path in modules("testing"):
        for name in imported(path):
            assert not name.startswith("durable_agent.evals"), path.relative_to(PACKAGE)


def test_the_client_side_never_imports_workflow_components() -> None:
    """Clients (`client/`, `streams`) read the workflow's wire models and handler names,
    never its internals (the class itself, for typed handles, is the one exception)."""
    client_side = [
        *modules("temporal/client"),
        PACKAGE / "temporal" / "streams.py",
        PACKAGE / "temporal" / "run_errors.py",
    ]
    for path in client_side:
        for name in imported(path):
            internal = name.startswith("durable_agent.temporal.workflow.")
            if name == "durable_agent.temporal.workflow.AgentWorkflow":
                continue
            assert not internal, f"{path.relative_to(PACKAGE)} imports {name}"


MODULES = {
    ".".join(p.parts[:-1] if p.name == "__init__.py" else p.with_suffix("").parts): path
    for path in PACKAGE.rglob("*.py")
    for p in [path.relative_to(PACKAGE.parent)]
}
"""Every module of the package by its dotted name (a package by its `__init__`'s)."""


def runs(importer: str) -> set[str]:
    """The `durable_agent` modules importing `importer` runs through its own imports, as
    Python runs them: every import counts (under `if TYPE_CHECKING:` or in a function too: a
    module that needs its importer to be imported first is in a circle whenever it runs),
    each to the module it names and to every package around that module which `importer`
    is not inside (importing `a.b.c` runs `a/__init__` and `a/b/__init__` first, while a
    module's own packages are already running when it is imported). A name taken from a
    package's `__init__` is an arrow to it, from inside the package as well; a package's
    `__init__` importing its children is not, by itself, a circle with them."""
    path = MODULES[importer]
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
    named: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                named.add(submodule if submodule in MODULES else base)
    arrows: set[str] = set()
    for name in named:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if not name:
            continue  # not a module of durable_agent
        arrows.add(name)
        around = name.rpartition(".")[0]
        while around:
            if importer != around and not importer.startswith(around + "."):
                arrows.add(around)
            around = around.rpartition(".")[0]
    arrows.discard(importer)
    return arrows


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = [stack.pop()]
            while component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_import_circles() -> None:
    """Arrows go one way everywhere in the package: no module needs, through the modules it
    imports, its own import to have finished (issue 37)."""
    graph = {module: runs(module) for module in MODULES}
    found = [
        ", ".join(f"{a} -> {b}" for a in circle for b in sorted(graph[a] & set(circle)))
        for circle in circles(graph)
    ]
    assert not found, "import circles:\n" + "\n".join(found)


def test_the_circle_finder_sees_what_python_runs() -> None:
    """An import of a module in a package runs the package's `__init__` for an importer from
    outside it; a package's `__init__` importing its children is no circle with them."""
    temporal = runs("durable_agent.temporal.streams")
    assert "durable_agent.temporal.run_errors" in temporal
    client = runs("durable_agent.temporal.client.handle")
    assert "durable_agent.temporal.client" not in client  # its own package
    assert "durable_agent.temporal.workflow" in client  # `from ..workflow import AgentWorkflow`
    graph = {"p": {"p.a", "p.b"}, "p.a": {"p.b"}, "p.b": set(), "q": {"p.a", "p"}}
    assert circles(graph) == []
    assert circles({**graph, "p.b": {"q"}}) == [["p", "p.a", "p.b", "q"]]


def test_modules_stay_small() -> None:
    for path in PACKAGE.rglob("*.py"):
        lines = len(path.read_text().splitlines())
        assert lines <= 500, f"{path.relative_to(PACKAGE)} has {lines} lines"
    workflow = PACKAGE / "temporal" / "workflow" / "agent_workflow.py"
    assert len(workflow.read_text().splitlines()) <= 450


FLOORS = {
    "contract": 0,
    "models": 1,
    "mcp": 1,
    "environments": 1,
    "engine": 2,
    "agent": 3,
    "": 4,  # durable_agent/__init__.py: the core's public API (`durable_agent.Agent`, ...)
    "temporal": 5,
    "testing": 6,
    "evals": 7,
    "inbox": 8,
    "cli": 9,
}
"""The floors of docs/architecture.md (issue 37): the contract (the shared nouns) at the
bottom; the model providers, MCP toolsets and environments on it, each importing only the
contract; the engine (nodes, runner, controller, loop); the agent (Agent, AgentBuilder, the
in-process driver); the Temporal integration; the test kit and evals; the front ends."""


def _floor_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in FLOORS else ""


def test_every_package_has_a_floor() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages <= set(FLOORS), f"packages without a floor: {packages - set(FLOORS)}"


def test_each_floor_imports_only_the_floors_below_it() -> None:
    """A module imports its own package and the floors below it, never a floor beside it
    (models do not import mcp, engine does not import agent) or above it."""
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        own = relative.parts[0] if len(relative.parts) > 1 else ""
        for name in imported(path):
            other = _floor_of(name)
            if other == own:
                continue
            assert FLOORS[other] < FLOORS[own], (
                f"{relative} (floor {own or 'durable_agent'}) imports {name} (floor "
                f"{other or 'durable_agent'}): arrows point down only"
            )


def test_no_import_is_placed_late_to_dodge_a_circle() -> None:
    for path in PACKAGE.rglob("*.py"):
        assert "noqa: E402" not in path.read_text(), f"{path.relative_to(PACKAGE)}"
