"""The documentation site builds without a warning, the README's example runs as written
(issue 25, item 8), and the docs name the library's defaults as they are."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from durable_agent import UsageLimits

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def nav_pages(nav: Any) -> list[str]:
    """Every page the site's navigation lists (a page left out of it is unreachable)."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in nav_pages(item)]
    return [page for value in nav.values() for page in nav_pages(value)]


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)


@pytest.mark.server
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """`mkdocs build --strict`: a broken link, a missing page in the nav or a docstring the
    API reference cannot render fails the build."""
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": str(Path(sys.executable).parent)},
        check=False,
    )
    assert built.returncode == 0, built.stderr
    reference = (tmp_path / "reference" / "core" / "index.html").read_text()
    assert "AgentBuilder" in reference
    assert "approval_required_tools" in reference
    architecture = (tmp_path / "architecture" / "index.html").read_text()
    assert "agent_workflow" in architecture


@pytest.mark.server
def test_the_readme_example_runs_as_written(tmp_path: Path) -> None:
    blocks = python_blocks(README.read_text())
    assert len(blocks) == 1, "the README has one example; the rest lives in docs/"
    script = tmp_path / "example.py"
    script.write_text(blocks[0])
    ran = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "Deployed to prod."
    assert len(blocks[0].splitlines()) <= 35


def test_the_readme_links_to_pages_that_exist() -> None:
    text = README.read_text()
    links = re.findall(r"\]\((docs/[^)#]+)", text)
    assert links, "the README links into the docs"
    for link in links:
        assert (ROOT / link).is_file(), link
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert pages == set(nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]))
    assert len(README.read_text().splitlines()) < 120, "the README is the landing page"


def test_the_docs_name_the_default_request_limit() -> None:
    limit = UsageLimits().request_limit
    assert limit == 50
    assert f"UsageLimits(request_limit={limit})" in (ROOT / "docs" / "runtime.md").read_text()
