"""docker-compose.temporal.yml: a PostgreSQL-backed Temporal server for users' own machines.

Docker cannot run here, so the file is checked statically (structure, pinned images, ports,
wiring between services), the search-attribute setup script is run against a fake `temporal`
CLI, `docker compose config` validates it where a compose binary is installed, and worker.py
is checked to use the TEMPORAL_* variables the compose file gives it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from durable_agent.temporal import DEFAULT_TASK_QUEUE
from durable_agent.temporal.devserver import SEARCH_ATTRIBUTE_FLAGS
from durable_agent.temporal.search_attributes import SEARCH_ATTRIBUTES

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.temporal.yml"

POSTGRES = "postgresql"
TEMPORAL = "temporal"
ADMIN_TOOLS = "temporal-admin-tools"
UI = "temporal-ui"
WORKER = "worker"

EXPECTED_IMAGES = {
    POSTGRES: "postgres",
    TEMPORAL: "temporalio/auto-setup",
    ADMIN_TOOLS: "temporalio/admin-tools",
    UI: "temporalio/ui",
    WORKER: "python",
}
EXPECTED_SEARCH_ATTRIBUTES = {
    "AgentName": "Keyword",
    "AgentStatus": "Keyword",
    "PendingApprovals": "Int",
    "ForkedFrom": "Keyword",
}
DEPENDS_ON_CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    services = compose["services"]
    assert isinstance(services, dict)
    return services


def environment(service: dict[str, Any]) -> dict[str, str | None]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        pairs = (item.split("=", 1) if "=" in item else (item, None) for item in env)
        return {key: value for key, value in pairs}
    return {key: None if value is None else str(value) for key, value in env.items()}


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def published_ports(service: dict[str, Any]) -> dict[int, int]:
    """container port -> host port."""
    ports: dict[int, int] = {}
    for entry in service.get("ports") or []:
        if isinstance(entry, dict):
            ports[int(entry["target"])] = int(entry["published"])
            continue
        parts = str(entry).split("/")[0].split(":")
        assert len(parts) >= 2, f"port {entry!r} is not published on the host"
        ports[int(parts[-1])] = int(parts[-2])
    return ports


def command_text(service: dict[str, Any]) -> str:
    command = service.get("command") or ""
    return command if isinstance(command, str) else "\n".join(map(str, command))


def shell_script(service: dict[str, Any]) -> str:
    """The `sh -c` script of a service as the shell sees it once compose has unescaped `$$`."""
    command = service["command"]
    entrypoint = service.get("entrypoint") or []
    argv = [*([entrypoint] if isinstance(entrypoint, str) else entrypoint), *command]
    assert "-c" in argv, f"not an `sh -c` command: {argv}"
    raw = str(argv[argv.index("-c") + 1])
    unescaped = re.findall(r"(?<!\$)\$(?:\$\$)*(?!\$)", raw)
    assert not unescaped, "a single `$` would be interpolated by docker compose; write `$$`"
    return raw.replace("$$", "$")


def image_parts(image: str) -> tuple[str, str]:
    repository, _, tag = image.rpartition(":")
    assert repository, f"image {image!r} has no tag"
    assert "/" not in tag, f"image {image!r} has no tag"
    return repository, tag


# --- the file and its services ----------------------------------------------------------


def test_compose_file_parses_and_defines_the_services(services: dict[str, dict[str, Any]]) -> None:
    assert set(EXPECTED_IMAGES) <= set(services)


@pytest.mark.parametrize(("name", "repository"), sorted(EXPECTED_IMAGES.items()))
def test_images_are_pinned(services: dict[str, dict[str, Any]], name: str, repository: str) -> None:
    image_repository, tag = image_parts(services[name]["image"])
    assert image_repository == repository
    assert tag != "latest"
    assert re.match(r"^\d+(\.\d+)*", tag), f"{name}: tag {tag!r} is not a version"


def test_temporal_images_share_the_server_version(services: dict[str, dict[str, Any]]) -> None:
    _, server = image_parts(services[TEMPORAL]["image"])
    _, admin_tools = image_parts(services[ADMIN_TOOLS]["image"])
    assert re.fullmatch(r"1\.2\d\.\d+", server)
    assert admin_tools.split("-")[0] == server


def test_ports_are_published(services: dict[str, dict[str, Any]]) -> None:
    assert published_ports(services[TEMPORAL]) == {7233: 7233}
    assert published_ports(services[UI]) == {8080: 8080}
    assert "ports" not in services[POSTGRES]


def test_postgresql_has_a_healthcheck_and_a_named_volume(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    postgres = services[POSTGRES]
    assert "pg_isready" in str(postgres["healthcheck"]["test"])
    mounts = {str(v).split(":")[1]: str(v).split(":")[0] for v in postgres["volumes"]}
    data = mounts.get("/var/lib/postgresql/data")
    assert data, "PostgreSQL's data directory is not on a volume"
    assert data in (compose.get("volumes") or {}), f"{data} is not a named volume"


def test_temporal_uses_postgresql(services: dict[str, dict[str, Any]]) -> None:
    env = environment(services[TEMPORAL])
    postgres_env = environment(services[POSTGRES])
    assert env["DB"] == "postgres12"
    assert env["DB_PORT"] == "5432"
    assert env["POSTGRES_SEEDS"] == POSTGRES
    assert env["POSTGRES_USER"] == postgres_env["POSTGRES_USER"]
    assert env["POSTGRES_PWD"] == postgres_env["POSTGRES_PASSWORD"]
    assert depends_on(services[TEMPORAL]) == {POSTGRES: "service_healthy"}


def test_dynamic_config_is_mounted_and_parses(services: dict[str, dict[str, Any]]) -> None:
    temporal = services[TEMPORAL]
    path = environment(temporal)["DYNAMIC_CONFIG_FILE_PATH"]
    assert path
    # auto-setup resolves a relative path against its working directory, /etc/temporal.
    target = path if path.startswith("/") else f"/etc/temporal/{path}"
    mounts = {}
    for volume in temporal["volumes"]:
        source, container_path, *_ = str(volume).split(":")
        mounts[container_path] = source
    assert target in mounts, f"{target} is not mounted into the temporal service"
    source = ROOT / mounts[target]
    assert source.is_file(), f"{mounts[target]} does not exist in the repo"

    config = yaml.safe_load(source.read_text())
    assert isinstance(config, dict)
    assert config
    for key, entries in config.items():
        assert isinstance(entries, list), key
        assert entries, key
        assert all(isinstance(entry, dict) and "value" in entry for entry in entries), key
    # AgentWorkflow takes approvals through Workflow Updates.
    assert config["frontend.enableUpdateWorkflowExecution"][0]["value"] is True


def test_ui_points_at_the_temporal_service(services: dict[str, dict[str, Any]]) -> None:
    env = environment(services[UI])
    assert env["TEMPORAL_ADDRESS"] == f"{TEMPORAL}:7233"
    assert env["TEMPORAL_CORS_ORIGINS"]
    assert TEMPORAL in depends_on(services[UI])


def test_depends_on_names_existing_services_with_consistent_conditions(
    services: dict[str, dict[str, Any]],
) -> None:
    for name, service in services.items():
        for dependency, condition in depends_on(service).items():
            assert dependency in services, f"{name} depends on unknown service {dependency}"
            assert dependency != name
            assert condition in DEPENDS_ON_CONDITIONS, f"{name}: {condition}"
            target = services[dependency]
            if condition == "service_healthy":
                assert "healthcheck" in target, f"{name} waits for {dependency} to be healthy"
            if condition == "service_completed_successfully":
                assert target.get("restart", "no") in ("no", "on-failure"), dependency
            # A service outside any profile cannot wait for one only started in a profile.
            if not service.get("profiles"):
                assert not target.get("profiles"), f"{name} depends on profiled {dependency}"


def test_named_volumes_are_declared(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    declared = set(compose.get("volumes") or {})
    for name, service in services.items():
        for volume in service.get("volumes") or []:
            source = str(volume).split(":")[0]
            if not source.startswith((".", "/", "~")):
                assert source in declared, f"{name} uses undeclared volume {source}"


# --- the search attributes --------------------------------------------------------------


def test_expected_search_attributes_match_the_project() -> None:
    from_keys = {key.name: key.indexed_value_type.name.capitalize() for key in SEARCH_ATTRIBUTES}
    assert from_keys == EXPECTED_SEARCH_ATTRIBUTES
    assert SEARCH_ATTRIBUTE_FLAGS == EXPECTED_SEARCH_ATTRIBUTES


def test_setup_job_creates_the_search_attributes(services: dict[str, dict[str, Any]]) -> None:
    admin = services[ADMIN_TOOLS]
    assert environment(admin)["TEMPORAL_ADDRESS"] == f"{TEMPORAL}:7233"
    assert environment(admin).get("TEMPORAL_NAMESPACE", "default") == "default"
    assert TEMPORAL in depends_on(admin)
    assert admin.get("restart", "no") == "no"
    script = shell_script(admin)
    assert "temporal operator search-attribute create" in script
    for name, kind in EXPECTED_SEARCH_ATTRIBUTES.items():
        assert re.search(rf"--name {name} --type {kind}\b", script), (name, kind)


FAKE_TEMPORAL = r"""#!/bin/sh
# A stand-in for the temporal CLI: logs each call, answers like a server that starts slowly.
echo "$*" >> "$FAKE_DIR/calls"
count() {
  n=$(cat "$FAKE_DIR/$1" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "$FAKE_DIR/$1"; echo $n
}
case "$*" in
  "operator namespace describe"*)
    [ "$(count describe)" -ge 3 ] && exit 0
    echo "connection refused" >&2; exit 1 ;;
  *"search-attribute create"*"--name AgentStatus"*)
    echo "$FAKE_AGENT_STATUS" >&2; exit 1 ;;
  *"search-attribute create"*"--name PendingApprovals"*)
    [ "$(count pending)" -ge 2 ] && exit 0
    echo "Unavailable: frontend is not ready" >&2; exit 1 ;;
  *"search-attribute create"*) exit 0 ;;
  *"search-attribute list"*)
    printf 'Name Type\nAgentName Keyword\nAgentStatus Keyword\n'
    printf 'PendingApprovals Int\nForkedFrom Keyword\n' ;;
  *) echo "unexpected call: $*" >&2; exit 2 ;;
esac
"""


def run_setup_script(
    script: str, tmp_path: Path, agent_status_error: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    sh = shutil.which("sh")
    if sh is None:
        pytest.skip("no POSIX sh to run the setup script with")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in {"temporal": FAKE_TEMPORAL, "sleep": "#!/bin/sh\nexit 0\n"}.items():
        path = bin_dir / name
        path.write_text(body)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "FAKE_DIR": str(tmp_path),
        "FAKE_AGENT_STATUS": agent_status_error,
        "TEMPORAL_ADDRESS": "temporal:7233",
        "TEMPORAL_NAMESPACE": "default",
    }
    result = subprocess.run(
        [sh, "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    calls = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    return result, calls


def test_setup_script_waits_retries_and_tolerates_existing_attributes(
    services: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    script = shell_script(services[ADMIN_TOOLS])
    result, calls = run_setup_script(
        script, tmp_path, "Error: search attribute AgentStatus already exists"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert calls[:3] == ["operator namespace describe default"] * 3
    creates = [call for call in calls if "search-attribute create" in call]
    for name, kind in EXPECTED_SEARCH_ATTRIBUTES.items():
        expected = (
            f"operator search-attribute create --namespace default --name {name} --type {kind}"
        )
        assert expected in creates
    assert sum("PendingApprovals" in call for call in creates) == 2  # retried once
    assert calls[-1] == "operator search-attribute list --namespace default"


def test_setup_script_fails_on_an_attribute_of_another_type(
    services: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    script = shell_script(services[ADMIN_TOOLS])
    result, _ = run_setup_script(
        script,
        tmp_path,
        'search attribute "AgentStatus" already exists and has different type Text',
    )
    assert result.returncode != 0
    assert "different type" in result.stderr


@pytest.mark.parametrize("service", [ADMIN_TOOLS, WORKER])
def test_shell_scripts_parse(services: dict[str, dict[str, Any]], service: str) -> None:
    sh = shutil.which("sh")
    if sh is None:
        pytest.skip("no POSIX sh to check the script with")
    result = subprocess.run(
        [sh, "-n", "-c", shell_script(services[service])],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


# --- the worker service ----------------------------------------------------------------


def test_worker_service(services: dict[str, dict[str, Any]]) -> None:
    worker = services[WORKER]
    assert worker["profiles"] == ["worker"]
    env = environment(worker)
    assert env["TEMPORAL_ADDRESS"] == f"{TEMPORAL}:7233"
    assert env["TEMPORAL_ADDRESS"] == environment(services[UI])["TEMPORAL_ADDRESS"]
    assert env["TEMPORAL_NAMESPACE"] == "default"
    assert env["TEMPORAL_TASK_QUEUE"] == "durable-agent" == DEFAULT_TASK_QUEUE
    assert depends_on(worker)[ADMIN_TOOLS] == "service_completed_successfully"
    assert worker["working_dir"] == "/app"
    assert any(str(v).split(":")[:2] == [".", "/app"] for v in worker["volumes"])
    assert "pip install" in command_text(worker)
    assert "[openai,s3]" in command_text(worker), "the worker can reach S3 storage"
    assert re.search(r"python worker\.py\b", command_text(worker))
    passed_through = {k for k, v in env.items() if v is None}
    assert {"DURABLE_AGENT_STORAGE", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID"} <= passed_through


def test_comments_explain_how_to_use_it() -> None:
    text = COMPOSE_FILE.read_text()
    assert "docker compose -f docker-compose.temporal.yml up -d" in text
    assert "TEMPORAL_ADDRESS=localhost:7233 python worker.py" in text
    assert "http://localhost:8080" in text


# --- docker compose itself --------------------------------------------------------------


def compose_command() -> list[str] | None:
    docker = shutil.which("docker")
    if docker is not None:
        probe = subprocess.run(
            [docker, "compose", "version"], capture_output=True, text=True, check=False
        )
        if probe.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy is not None else None


@pytest.mark.parametrize("profile", [[], ["--profile", "worker"]], ids=["default", "worker"])
def test_docker_compose_config_validates(profile: list[str]) -> None:
    command = compose_command()
    if command is None:
        pytest.skip(
            "neither the docker compose v2 plugin (`docker compose version` fails) nor "
            "docker-compose is installed"
        )
    result = subprocess.run(
        [*command, "-f", str(COMPOSE_FILE), *profile, "config", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- worker.py reads the TEMPORAL_* variables -------------------------------------------


def worker_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "OPENAI_"))}
    env.update(overrides)
    return env


def test_worker_uses_the_compose_environment(services: dict[str, dict[str, Any]]) -> None:
    """worker.py hands TEMPORAL_ADDRESS/NAMESPACE/TASK_QUEUE to run_worker as given."""
    compose_env = {
        key: value
        for key, value in environment(services[WORKER]).items()
        if key.startswith("TEMPORAL_") and value is not None
    }
    probe = (
        "import json, sys, worker\n"
        "import durable_agent.temporal.worker as library\n"
        "async def fake_run_worker(address, namespace, task_queue, **options):\n"
        "    print(json.dumps([address, namespace, task_queue]))\n"
        "library.run_worker = fake_run_worker\n"
        "sys.exit(worker.main(['--no-examples', '--agents', 'tests.worker_agents']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env=worker_env(**compose_env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    used = json.loads(result.stdout.strip().splitlines()[-1])
    assert used == ["temporal:7233", "default", "durable-agent"]


def test_worker_connects_to_TEMPORAL_ADDRESS() -> None:
    """`python worker.py` against a closed port fails, naming the address it tried."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound but not listening: connections are refused
        address = f"127.0.0.1:{closed.getsockname()[1]}"
        result = subprocess.run(
            [sys.executable, "worker.py", "--no-examples", "--agents", "tests.worker_agents"],
            cwd=ROOT,
            env=worker_env(TEMPORAL_ADDRESS=address),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert address in output, output
