"""`pip install -e .` (what `./scripts/dev` and `./scripts/test` run) prints no setuptools
banner (issue 38, item 18), and building the wheel prints no deprecation of the project's
license metadata.

setuptools installs a flat-layout project in editable mode through an import finder of its
own unless the layout is declared (`package-dir = {"" = "."}`), and prints a
`BuildBackendWarning: Editable installation.` banner every time it does. Declared, the
install is a `.pth` file naming the checkout, and says nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.server, pytest.mark.timeout(600)]


def test_the_editable_install_prints_no_banner(tmp_path: Path) -> None:
    """Installed from a copy (its build files land there, not in the working tree)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(
        REPO / "durable_agent",
        source / "durable_agent",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    venv.create(tmp_path / "venv", with_pip=True, clear=True)
    python = tmp_path / "venv" / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # As the scripts do: a recent pip shows what the build backend warns.
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--upgrade", "pip"],
        capture_output=True,
        timeout=300,
        check=True,
        env=env,
    )
    done = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "-e", str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "Editable installation" not in output, output
    assert "BuildBackendWarning" not in output, output
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (pth,) = Path(site).glob("__editable__.durable_agent-*.pth")
    assert pth.read_text().strip() == str(source.resolve())
    found = subprocess.run(
        [python, "-c", "import importlib.util as u; print(u.find_spec('durable_agent').origin)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env=env,
    ).stdout.strip()
    assert found == str(source.resolve() / "durable_agent" / "__init__.py")


def test_building_the_package_prints_no_license_deprecation(tmp_path: Path) -> None:
    """setuptools warned that `license = { text = ... }` is deprecated on every install."""
    source = tmp_path / "source"
    shutil.copytree(
        REPO,
        source,
        ignore=shutil.ignore_patterns(".git", ".venv", ".temporal", "build", "*.egg-info"),
    )
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", tmp_path / "dist", source],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "project.license" not in out.stdout + out.stderr
    assert "License classifiers are deprecated" not in out.stdout + out.stderr
