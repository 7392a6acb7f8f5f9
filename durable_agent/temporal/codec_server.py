"""A codec server, so the Web UI and the `temporal` CLI can show encrypted payloads.

With `DURABLE_AGENT_ENCRYPTION_KEYS` set, Temporal stores only ciphertext (see
`durable_agent.temporal.encryption`), and the Web UI shows `binary/encrypted` blobs. The UI (in your
browser) and the CLI instead send those payloads to this server, which holds the keys and
returns plaintext. The keys never reach Temporal, and only people who can reach this server
(and hold its token, if one is set) can read the runs.

    export DURABLE_AGENT_ENCRYPTION_KEYS='k20250601-3fa2:BASE64'   # same keys as the worker
    python -m durable_agent.temporal.codec_server --port 8081

Point the UI at it, either once for everyone using the dev server:

    temporal server start-dev --ui-codec-endpoint http://localhost:8081

or per browser in the Web UI: the data-encoder icon (top right) → "Data Encoder" → set the
remote codec endpoint to `http://localhost:8081`. The CLI takes it per command:

    temporal workflow show -w w1 --codec-endpoint http://localhost:8081 \\
        --codec-auth "Bearer $DURABLE_AGENT_CODEC_TOKEN"

With `--token` (or `DURABLE_AGENT_CODEC_TOKEN`), requests must carry
`Authorization: Bearer <token>`; in the Web UI tick "Pass the user access token" only when
the UI itself has SSO tokens, otherwise use the CLI's `--codec-auth` or keep the server on
localhost without a token. The server binds 127.0.0.1 by default: a decoding endpoint
without a token on a shared interface lets anyone who reaches it read every run.

The protocol is Temporal's remote codec protocol: `POST /encode` and `POST /decode` with
`{"payloads": [{"metadata": {k: base64}, "data": base64}]}`, answered in the same shape.
CORS allows the UI's origin (`--cors-origin`, default http://localhost:8233), because the
requests come from the browser page, not from the UI server.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import http.server
import ipaddress
import json
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads
from temporalio.converter import PayloadCodec

__all__ = ["TOKEN_ENV_VAR", "CodecServer", "main", "make_server"]

TOKEN_ENV_VAR = "DURABLE_AGENT_CODEC_TOKEN"
DEFAULT_CORS_ORIGIN = "http://localhost:8233"
MAX_BODY_BYTES = 64 * 1024 * 1024
"""The UI batches a whole history page; Temporal's own payload limit is 2 MiB each."""
ALLOWED_HEADERS = "content-type,x-namespace,authorization"


class CodecServer(http.server.ThreadingHTTPServer):
    """Holds the codec and the access settings the handler threads read."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        codec: PayloadCodec,
        *,
        cors_origins: Sequence[str] = (DEFAULT_CORS_ORIGIN,),
        token: str | None = None,
    ) -> None:
        super().__init__(address, _Handler)
        self.codec = codec
        self.cors_origins = [o.rstrip("/") for o in cors_origins]
        self.token = token or None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def serve_in_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="codec-server", daemon=True)
        thread.start()
        return thread


class _Handler(http.server.BaseHTTPRequestHandler):
    server: CodecServer
    protocol_version = "HTTP/1.1"  # keep-alive: the UI sends one request per history page

    def log_message(self, format: str, *args: Any) -> None:
        # Default logging goes to stderr per request; keep it but without payload content.
        sys.stderr.write(f"codec-server {self.address_string()} {format % args}\n")

    def _cors_headers(self) -> None:
        origin = (self.headers.get("Origin") or "").rstrip("/")
        if "*" in self.server.cors_origins:
            self.send_header("Access-Control-Allow-Origin", origin or "*")
        elif origin in self.server.cors_origins:
            self.send_header("Access-Control-Allow-Origin", origin)
        else:  # a browser on another origin is refused by its own CORS check
            self.send_header("Access-Control-Allow-Origin", self.server.cors_origins[0])
        self.send_header("Access-Control-Allow-Credentials", "true")
        self.send_header("Vary", "Origin")

    def _reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self._cors_headers()
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        self._reply(status, message.encode() + b"\n", "text/plain; charset=utf-8")

    def do_OPTIONS(self) -> None:
        # Browsers send the preflight without credentials, so it is answered before auth.
        self.send_response(200)
        self._cors_headers()
        self.send_header("Access-Control-Allow-Methods", "POST, OPTIONS")
        self.send_header("Access-Control-Allow-Headers", ALLOWED_HEADERS)
        self.send_header("Access-Control-Max-Age", "600")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self._error(405, "use POST /encode or POST /decode")

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        action = path.rsplit("/", 1)[-1]
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            self.close_connection = True
            self._error(413, f"send a Content-Length of at most {MAX_BODY_BYTES} bytes")
            return
        body = self.rfile.read(length)  # read it even when refusing, to keep the connection
        if not self._authorized():
            self._error(401, "missing or wrong `Authorization: Bearer <token>`")
            return
        if action not in ("encode", "decode"):
            self._error(404, "use POST /encode or POST /decode")
            return
        try:
            payloads = json_format.ParseDict(
                json.loads(body or b"{}"), Payloads(), ignore_unknown_fields=True
            )
        except (json_format.ParseError, ValueError, AttributeError) as error:
            self._error(400, f"body is not {{'payloads': [...]}}: {error}")
            return
        codec = self.server.codec
        try:
            if action == "encode":
                out = asyncio.run(codec.encode(payloads.payloads))
            else:
                out = asyncio.run(codec.decode(payloads.payloads))
        except Exception as error:  # e.g. an unknown key id: say so, the UI shows it
            self._error(400, f"{action} failed: {error}")
            return
        answer = json_format.MessageToDict(Payloads(payloads=out))
        answer.setdefault("payloads", [])
        self._reply(200, json.dumps(answer).encode())

    def _authorized(self) -> bool:
        token = self.server.token
        if token is None:
            return True
        given = self.headers.get("Authorization") or ""
        scheme, _, value = given.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            value.strip().encode(), token.encode()
        )


def make_server(
    codec: PayloadCodec,
    *,
    host: str = "127.0.0.1",
    port: int = 8081,
    cors_origins: Sequence[str] = (DEFAULT_CORS_ORIGIN,),
    token: str | None = None,
) -> CodecServer:
    """Binds the server (port 0 picks a free one); call `serve_forever` or `serve_in_thread`."""
    return CodecServer((host, port), codec, cors_origins=cors_origins, token=token)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m durable_agent.temporal.codec_server",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument(
        "--cors-origin",
        action="append",
        dest="cors_origins",
        metavar="ORIGIN",
        help=f"Web UI origin allowed to call it (repeatable, `*` for any; "
        f"default {DEFAULT_CORS_ORIGIN})",
    )
    parser.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV_VAR),
        help=f"require `Authorization: Bearer TOKEN` (default from {TOKEN_ENV_VAR})",
    )
    args = parser.parse_args(argv)

    from .encryption import EncryptionCodec, EncryptionError

    try:
        codec = EncryptionCodec.from_env()
    except EncryptionError as error:
        parser.error(str(error))
    if not args.token and not _is_loopback(args.host):
        print(
            f"warning: serving decryption on {args.host} without a token; anyone who can "
            f"reach it can read every run (set --token or {TOKEN_ENV_VAR})",
            file=sys.stderr,
        )
    server = make_server(
        codec,
        host=args.host,
        port=args.port,
        cors_origins=args.cors_origins or [DEFAULT_CORS_ORIGIN],
        token=args.token,
    )
    print(
        f"codec server on {server.url} (keys {', '.join(codec.key_ids)}, active "
        f"{codec.active}; CORS {', '.join(server.cors_origins)}; "
        f"token {'required' if server.token else 'off'})",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
