"""Encrypted payloads: Temporal stores ciphertext, only key holders (and the codec server) read it.

The integration tests run agents against the real dev server through a client whose plugin
encrypts, then read the raw history with a client that has no codec, exactly what Temporal's
database (and anyone with access to it) holds.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, WorkflowExecution
from temporalio.api.history.v1 import History
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.client import Client

from durable_agent import AgentBuilder, AgentExecutionNode, TestModel
from durable_agent.temporal import (
    AgentWorkflow,
    AgentWorkflowInput,
    DurableAgentPlugin,
    ResumeSignal,
)
from durable_agent.temporal.codec_server import CodecServer, make_server
from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.encryption import (
    ENCODING,
    ENV_VAR,
    KEY_ID_METADATA,
    EncryptionCodec,
    EncryptionError,
    codec_from_env,
    generate_key,
    parse_keys,
)
from durable_agent.temporal.registry import AgentActivityConfig, AgentRegistration

from .helpers import call, text_response, tool_response
from .history_payloads import is_patch_marker, is_search_attribute, payloads_in
from .temporal_support import fast_activity, free_port, new_worker, wait_for_status

KEY_A = os.urandom(32)
KEY_B = os.urandom(32)
CODEC_A = EncryptionCodec({"a": KEY_A}, "a")
CODEC_BA = EncryptionCodec({"b": KEY_B, "a": KEY_A}, "b")
CODEC_B = EncryptionCodec({"b": KEY_B}, "b")

MARKERS = {
    "prompt": "PROMPT-MARKER-7f3a",
    "argument": "ARGUMENT-MARKER-91cc",
    "result": "RESULT-MARKER-2b8e",
    "error": "ERROR-MARKER-c4d1",
    "memo": "MEMO-MARKER-5e60",
}
TOKEN = "codec-test-token"


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def payload(data: bytes, encoding: bytes = b"json/plain") -> Payload:
    return Payload(metadata={"encoding": encoding}, data=data)


async def encrypting_client(address: str, codec: EncryptionCodec) -> Client:
    return await Client.connect(address, plugins=[DurableAgentPlugin(codec=codec)])


async def raw_history(address: str, workflow_id: str) -> History:
    """The history as the server stores it, through a client with no codec at all."""
    plain = await Client.connect(address)
    history = History()
    token = b""
    while True:
        page = await plain.workflow_service.get_workflow_execution_history(
            GetWorkflowExecutionHistoryRequest(
                namespace=plain.namespace,
                execution=WorkflowExecution(workflow_id=workflow_id),
                next_page_token=token,
            )
        )
        history.events.extend(page.history.events)
        token = page.next_page_token
        if not token:
            return history


def base64_strings(document: Any) -> Iterator[bytes]:
    """Every string in a JSON document that is base64 (bytes fields: payload data), decoded."""
    if isinstance(document, dict):
        for value in document.values():
            yield from base64_strings(value)
    elif isinstance(document, list):
        for value in document:
            yield from base64_strings(value)
    elif isinstance(document, str):
        with contextlib.suppress(ValueError):
            yield base64.b64decode(document, validate=True)


def marker_agent(name: str) -> AgentRegistration:
    attempts = {"lookup": 0}

    def lookup(query: str) -> str:
        attempts["lookup"] += 1
        if attempts["lookup"] == 1:  # Temporal retries it; the failure stays in history
            raise RuntimeError(f"flaky backend: {MARKERS['error']} for {query}")
        return f"found {MARKERS['result']} for {query}"

    model = TestModel.with_responses(
        [
            tool_response(call("lookup", "c1", query=MARKERS["argument"])),
            text_response("done"),
        ]
    )
    agent = AgentBuilder(model).name(name).instructions("Be brief.").tool(lookup).build()
    fast_retry = fast_activity(initial_interval=0.1, maximum_interval=0.1, heartbeat=30)
    return AgentRegistration(agent, AgentActivityConfig(tool_call=fast_retry))


@dataclasses.dataclass
class EncryptedRun:
    workflow_id: str
    output: Any
    messages: list[Any]
    history: History


@pytest.fixture(scope="module")
async def encrypted_run(dev_server: DevServer) -> EncryptedRun:
    """One agent run through an encrypting client and worker, shared by the history tests."""
    client = await encrypting_client(dev_server.address, CODEC_A)
    name = unique("secret")
    agent = marker_agent(name)
    async with new_worker(client, agents=[agent]) as worker:
        handle = await client.start_workflow(
            AgentWorkflow.run,
            AgentWorkflowInput(agent=name, prompt=f"find {MARKERS['prompt']}"),
            id=unique("enc"),
            task_queue=worker.task_queue,
            memo={"note": MARKERS["memo"]},
            static_summary=f"summary {MARKERS['prompt']}",
        )
        result = await handle.result()
        latest = await handle.query(AgentWorkflow.latest_checkpoint)
        memo = await handle.describe()
    assert latest is not None
    assert (await memo.memo_value("note")) == MARKERS["memo"]
    return EncryptedRun(
        handle.id,
        result.output,
        latest.state.message_history,
        await raw_history(dev_server.address, handle.id),
    )


# -- (1) what Temporal stores ----------------------------------------------------------------


async def test_run_completes_and_history_holds_only_ciphertext(encrypted_run: EncryptedRun) -> None:
    assert encrypted_run.output == "done"
    conversation = json.dumps([m.model_dump(mode="json") for m in encrypted_run.messages])
    for marker in ("prompt", "argument", "result"):  # the run really carried them
        assert MARKERS[marker] in conversation

    history = encrypted_run.history
    stored = history.SerializeToString()
    as_json = json_format.MessageToJson(history)
    decoded_strings = b" ".join(base64_strings(json.loads(as_json)))
    for marker in MARKERS.values():
        assert marker.encode() not in stored, marker
        assert marker not in as_json, marker
        assert marker.encode() not in decoded_strings, marker

    found = list(payloads_in(history))
    patches = [(path, p) for path, p in found if is_patch_marker(path, p)]
    encrypted = [
        (path, p) for path, p in found if not is_search_attribute(path) and (path, p) not in patches
    ]
    searchable = [(path, p) for path, p in found if is_search_attribute(path)]
    assert len(patches) < 10, patches  # Temporal's own markers, the patch id alone
    assert len(encrypted) > 10
    for path, p in encrypted:
        assert p.metadata["encoding"] == ENCODING, path
        assert p.metadata[KEY_ID_METADATA] == b"a", path
        assert set(p.metadata) == {"encoding", KEY_ID_METADATA}, path  # nothing else leaks
        for marker in MARKERS.values():
            assert marker.encode() not in p.data, path
    paths = " ".join(path for path, _ in encrypted)
    for kind in ("input", "result", "memo", "user_metadata.summary", "last_failure"):
        assert kind in paths, f"no encrypted payload under {kind}"

    # Search attributes are indexed by the server, so Temporal never runs them through the
    # codec: AgentName/AgentStatus/PendingApprovals stay readable. They hold no content.
    assert searchable
    for path, p in searchable:
        assert p.metadata["encoding"] == b"json/plain", path
        assert json.loads(p.data) is not None

    # Control: the same payloads, decrypted with the key, do contain every marker.
    decrypted = await CODEC_A.decode([p for _, p in encrypted])
    opened = b" ".join(p.data for p in decrypted)
    for marker in ("prompt", "argument", "result", "memo"):
        assert MARKERS[marker].encode() in opened, marker
    failures = [
        e.activity_task_started_event_attributes.last_failure
        for e in history.events
        if e.activity_task_started_event_attributes.HasField("last_failure")
    ]
    assert failures
    assert failures[0].message == "Encoded failure"  # the text itself is in the payload
    attributes = await CODEC_A.decode([failures[0].encoded_attributes])
    assert MARKERS["error"].encode() in attributes[0].data
    assert json.loads(attributes[0].data)["message"].startswith("flaky backend")


# -- (2) key rotation ------------------------------------------------------------------------


async def test_rotation_old_keys_decrypt_new_key_encrypts() -> None:
    old = await CODEC_A.encode([payload(b'"secret"')])
    assert old[0].metadata[KEY_ID_METADATA] == b"a"

    assert await CODEC_BA.decode(old) == [payload(b'"secret"')]
    new = await CODEC_BA.encode([payload(b'"newer"')])
    assert new[0].metadata[KEY_ID_METADATA] == b"b"
    assert await CODEC_B.decode(new) == [payload(b'"newer"')]

    with pytest.raises(EncryptionError) as error:
        await CODEC_B.decode(old)
    message = str(error.value)
    assert "'a'" in message
    assert ENV_VAR in message
    assert KEY_A.hex() not in message


async def test_rotation_mid_run_on_the_server(dev_server: DevServer) -> None:
    """A run started under key A resumes under B,A; afterwards a B-only client cannot read A."""
    name = unique("rotate")
    model = TestModel.with_responses([text_response(f"after rotation {MARKERS['result']}")])
    agent = AgentBuilder(model).name(name).build()
    task_queue = unique("tq")
    client_a = await encrypting_client(dev_server.address, CODEC_A)
    # max_cached_workflows=0: no sticky queue
    async with new_worker(client_a, task_queue, max_cached_workflows=0, agents=[agent]):
        handle = await client_a.start_workflow(
            AgentWorkflow.run,
            AgentWorkflowInput(
                agent=name,
                prompt=MARKERS["prompt"],
                suspend_at=[AgentExecutionNode.BEFORE_MODEL_REQUEST],
            ),
            id=unique("rot"),
            task_queue=task_queue,
            memo={"note": MARKERS["memo"]},
        )
        await wait_for_status(handle, "waiting")

    client_ba = await encrypting_client(dev_server.address, CODEC_BA)
    async with new_worker(client_ba, task_queue, agents=[agent]):
        rotated = client_ba.get_workflow_handle_for(AgentWorkflow.run, handle.id)
        await rotated.signal(AgentWorkflow.resume, ResumeSignal())
        result = await rotated.result()
        assert (await (await rotated.describe()).memo_value("note")) == MARKERS["memo"]
    assert result.output == f"after rotation {MARKERS['result']}"

    history = await raw_history(dev_server.address, handle.id)
    key_ids = [
        p.metadata[KEY_ID_METADATA]
        for path, p in payloads_in(history)
        if not is_search_attribute(path) and not is_patch_marker(path, p)
    ]
    assert key_ids[0] == b"a"  # the start, under the old key
    assert key_ids[-1] == b"b"  # the result, under the new one
    assert set(key_ids) == {b"a", b"b"}

    client_b = await encrypting_client(dev_server.address, CODEC_B)
    description = await client_b.get_workflow_handle(handle.id).describe()
    with pytest.raises(EncryptionError, match=f"key id 'a'.*{ENV_VAR}"):
        await description.memo_value("note")


# -- (3) the codec server ----------------------------------------------------------------------


@pytest.fixture
def codec_server() -> Iterator[CodecServer]:
    server = make_server(CODEC_A, port=0, token=TOKEN)
    thread = server.serve_in_thread()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


def post(
    server: CodecServer, path: str, body: Any, token: str | None = TOKEN
) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": "application/json", "X-Namespace": "default"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(server.url + path, data, headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def as_json(payloads: list[Payload]) -> dict[str, Any]:
    return {"payloads": [json_format.MessageToDict(p) for p in payloads]}


def from_json(body: bytes) -> list[Payload]:
    return [json_format.ParseDict(p, Payload()) for p in json.loads(body)["payloads"]]


async def test_codec_server_decodes_history_payloads(
    encrypted_run: EncryptedRun, codec_server: CodecServer
) -> None:
    stored = [p for path, p in payloads_in(encrypted_run.history) if not is_search_attribute(path)]
    status, headers, body = post(codec_server, "/decode", as_json(stored))
    assert status == 200, body
    assert headers["Access-Control-Allow-Origin"] == "http://localhost:8233"
    decoded = from_json(body)
    assert len(decoded) == len(stored)
    assert all(p.metadata["encoding"] != ENCODING for p in decoded)
    text = b" ".join(p.data for p in decoded)
    for marker in ("prompt", "argument", "result", "memo"):
        assert MARKERS[marker].encode() in text, marker

    # The wire format is base64 in JSON, as the Web UI sends it.
    wire = json.loads(body)["payloads"][0]
    assert base64.b64decode(wire["metadata"]["encoding"]).startswith(b"json/")


async def test_codec_server_encode_round_trip_and_errors(codec_server: CodecServer) -> None:
    status, _, body = post(codec_server, "/encode", as_json([payload(b'"hello"')]))
    assert status == 200
    encoded = from_json(body)
    assert encoded[0].metadata["encoding"] == ENCODING
    status, _, body = post(codec_server, "/decode", as_json(encoded))
    assert from_json(body) == [payload(b'"hello"')]

    status, _, body = post(codec_server, "/decode", {"payloads": []})
    assert (status, json.loads(body)) == (200, {"payloads": []})

    foreign = await CODEC_B.encode([payload(b'"x"')])
    status, _, body = post(codec_server, "/decode", as_json(foreign))
    assert status == 400
    assert b"key id 'b'" in body
    assert ENV_VAR.encode() in body

    assert post(codec_server, "/decode", b"not json")[0] == 400
    assert post(codec_server, "/nowhere", {"payloads": []})[0] == 404


async def test_codec_server_requires_the_token(codec_server: CodecServer) -> None:
    body = as_json(await CODEC_A.encode([payload(b'"secret"')]))
    status, headers, _ = post(codec_server, "/decode", body, token=None)
    assert status == 401
    assert headers["Access-Control-Allow-Origin"] == "http://localhost:8233"  # UI sees why
    assert post(codec_server, "/decode", body, token="wrong")[0] == 401
    assert post(codec_server, "/encode", body, token="wrong")[0] == 401
    assert post(codec_server, "/decode", body)[0] == 200


def preflight(server: CodecServer, origin: str) -> tuple[int, Any]:
    request = urllib.request.Request(
        server.url + "/decode",
        method="OPTIONS",
        headers={  # and no token: browsers never send credentials on a preflight
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,x-namespace,authorization",
        },
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, response.headers


def test_codec_server_answers_the_cors_preflight(codec_server: CodecServer) -> None:
    status, headers = preflight(codec_server, "http://localhost:8233")
    assert status == 200
    assert headers["Access-Control-Allow-Origin"] == "http://localhost:8233"
    assert "POST" in headers["Access-Control-Allow-Methods"]
    allowed = {h.strip() for h in headers["Access-Control-Allow-Headers"].split(",")}
    assert {"content-type", "x-namespace", "authorization"} <= allowed
    _, other = preflight(codec_server, "http://evil.example")
    assert other["Access-Control-Allow-Origin"] != "http://evil.example"


async def test_temporal_cli_shows_plaintext_through_the_codec_server(
    encrypted_run: EncryptedRun, codec_server: CodecServer, dev_server: DevServer
) -> None:
    """The Go CLI speaks the remote codec protocol too: a cross-check of the wire format."""

    def show(*extra: str) -> str:
        return subprocess.run(
            [
                "temporal",
                "workflow",
                "show",
                "--address",
                dev_server.address,
                "--workflow-id",
                encrypted_run.workflow_id,
                "--output",
                "json",
                *extra,
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout

    def payload_bytes(output: str) -> bytes:  # JSON output keeps payload data in base64
        return b" ".join(base64_strings(json.loads(output)))

    assert MARKERS["prompt"].encode() not in payload_bytes(show())
    decoded = payload_bytes(
        show("--codec-endpoint", codec_server.url, "--codec-auth", f"Bearer {TOKEN}")
    )
    assert MARKERS["prompt"].encode() in decoded
    assert MARKERS["result"].encode() in decoded


# -- (4) the codec itself --------------------------------------------------------------------


async def test_tampered_ciphertext_fails_authentication() -> None:
    [sealed] = await CODEC_A.encode([payload(b'"secret"')])
    data = bytearray(sealed.data)
    data[-1] ^= 1
    tampered = Payload(metadata=dict(sealed.metadata), data=bytes(data))
    with pytest.raises(EncryptionError, match="key id 'a' failed authentication"):
        await CODEC_A.decode([tampered])
    truncated = Payload(metadata=dict(sealed.metadata), data=sealed.data[:10])
    with pytest.raises(EncryptionError, match="failed authentication"):
        await CODEC_A.decode([truncated])
    # The key id is bound as associated data: relabelling a ciphertext does not pass.
    same_key_other_id = EncryptionCodec({"a": KEY_A, "a2": KEY_A}, "a")
    relabelled = Payload(metadata={**sealed.metadata, KEY_ID_METADATA: b"a2"}, data=sealed.data)
    with pytest.raises(EncryptionError, match="failed authentication"):
        await same_key_other_id.decode([relabelled])


async def test_plaintext_passes_through_decode_and_encode_hides_everything() -> None:
    plain = [payload(b'"old run"'), Payload(metadata={"encoding": b"binary/null"})]
    assert await CODEC_A.decode(plain) == plain
    first, second = await CODEC_A.encode([plain[0], plain[0]])
    assert first.data != second.data  # a fresh nonce each time
    assert b"old run" not in first.data
    assert b"json/plain" not in first.data
    assert dict(first.metadata) == {"encoding": ENCODING, KEY_ID_METADATA: b"a"}
    assert await CODEC_A.decode([first, plain[0], second]) == [plain[0]] * 3


def test_keys_from_env_and_their_errors() -> None:
    entry_a = f"a:{base64.b64encode(KEY_A).decode()}"
    entry_b = f"b:{base64.b64encode(KEY_B).decode()}"
    codec = EncryptionCodec.from_env({ENV_VAR: f" {entry_b} , {entry_a} ,"})
    assert (codec.active, codec.key_ids) == ("b", ["b", "a"])
    assert base64.b64encode(KEY_A).decode() not in repr(codec)

    short = base64.b64encode(b"x" * 16).decode()
    cases = {
        f"{entry_a},weak:{short}": "key 'weak' is 16 bytes; AES-256 needs 32",
        "nokey": "not `id:base64key`",
        "a:!!notbase64!!": "key 'a' is not valid base64",
        f"{entry_a},{entry_a}": "key id 'a' is listed twice",
        f"k/1:{base64.b64encode(KEY_A).decode()}": "must be 1-64 letters",
    }
    for spec, expected in cases.items():
        with pytest.raises(EncryptionError, match=expected) as error:
            EncryptionCodec.from_env({ENV_VAR: spec})
        assert base64.b64encode(KEY_A).decode() not in str(error.value)
    with pytest.raises(EncryptionError, match=f"{ENV_VAR} is not set"):
        EncryptionCodec.from_env({})
    assert codec_from_env({}) is None  # unset: no encryption, and no `cryptography` needed
    assert codec_from_env({ENV_VAR: " "}) is None
    assert codec_from_env({ENV_VAR: entry_a}).key_ids == ["a"]  # type: ignore[union-attr]
    with pytest.raises(EncryptionError, match="AES-256 needs 32"):
        EncryptionCodec({"a": b"short"}, "a")


@pytest.mark.server
def test_generate_key_command() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "durable_agent.temporal.encryption",
            "generate-key",
            "--id",
            "prod-2025",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    keys, active = parse_keys(out)
    assert active == "prod-2025"
    assert len(keys["prod-2025"]) == 32
    key_id, _, _ = generate_key().partition(":")
    assert key_id.startswith("k")
    assert generate_key() != generate_key()


@pytest.mark.server
def test_generate_key_needs_no_cryptography_package() -> None:
    """`./scripts/dev`'s venv used to lack `cryptography`, and generate-key failed there."""
    probe = (
        "import sys; sys.modules['cryptography'] = None\n"
        "from durable_agent.temporal.encryption import main, parse_keys\n"
        "main(['generate-key', '--id', 'k1'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    key_id, _, secret = out.stdout.strip().partition(":")
    assert key_id == "k1"
    assert len(base64.b64decode(secret)) == 32


# -- the Web UI, through the codec server ------------------------------------------------------


class CodecDevServer(DevServer):
    def __init__(self, *args: Any, codec_endpoint: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.codec_endpoint = codec_endpoint

    def command(self) -> list[str]:
        return [*super().command(), "--ui-codec-endpoint", self.codec_endpoint]


@pytest.fixture
async def ui_with_codec(tmp_path: Any) -> AsyncIterator[tuple[CodecDevServer, CodecServer]]:
    ui_port = free_port()
    codec_server = make_server(
        CODEC_A, port=0, cors_origins=[f"http://127.0.0.1:{ui_port}", f"http://localhost:{ui_port}"]
    )
    codec_server.serve_in_thread()
    server = CodecDevServer(
        tmp_path / "dev.db", port=free_port(), ui_port=ui_port, codec_endpoint=codec_server.url
    )
    await server.start()
    yield server, codec_server
    server.stop()
    codec_server.shutdown()
    codec_server.server_close()


@pytest.mark.server
async def test_web_ui_shows_decrypted_input(
    ui_with_codec: tuple[CodecDevServer, CodecServer],
) -> None:
    from .test_web_ui import CHROMIUM, wait_for_texts

    assert CHROMIUM, "chromium is not installed: run `apt-get install -y chromium`"
    playwright = pytest.importorskip("playwright.async_api", reason="pip install playwright")
    server, _ = ui_with_codec
    client = await encrypting_client(server.address, CODEC_A)
    name = unique("ui-secret")
    agent = AgentBuilder(TestModel.with_text("ok")).name(name).build()
    async with new_worker(client, agents=[agent]) as worker:
        handle = await client.start_workflow(
            AgentWorkflow.run,
            AgentWorkflowInput(agent=name, prompt=MARKERS["prompt"]),
            id=unique("ui-enc"),
            task_queue=worker.task_queue,
            static_summary=f"summary {MARKERS['memo']}",
        )
        await handle.result()
    description = await handle.describe()
    url = f"{server.ui_url}/namespaces/default/workflows/{handle.id}/{description.run_id}/history"
    async with playwright.async_playwright() as driver:
        browser = await driver.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        )
        page = await browser.new_page(viewport={"width": 1600, "height": 1100})
        await page.goto(url, wait_until="domcontentloaded")
        text = await wait_for_texts(page, [MARKERS["prompt"], "model_request · step 1"])
        await browser.close()
    assert "binary/encrypted" not in text
