"""The approvals inbox as an ASGI app: Starlette, Jinja2 templates and htmx.

Pages are rendered on the server; htmx (vendored under `static/`, nothing is fetched at run
time) swaps one run's card after a decision and polls the list. Every decision goes
through `AgentClient`, i.e. through the workflow's own updates and their validators, so
history, status, search attributes and the stream stay the one truth; the inbox adds who
is deciding (`decided_by` is the logged-in identity, never a form field), whether they may
(the agent's approvers), and, with approval keys, a signature over both.

Requests without an identity get the login page (or 401 for fragments and with a trusted
header) and never data. Every POST needs the session's CSRF token.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from durable_agent.engine.pricing import dollars
from durable_agent.temporal.client import AgentClient, AgentRunError

from .auth import Identity, LoginThrottle, UserDirectory, identity_from_headers
from .decisions import Action, act, answer
from .views import Flash, RunCard, dom_id, load_run, load_runs, relative, version_of

__all__ = ["InboxSettings", "create_app"]

HERE = Path(__file__).resolve().parent
SESSION_COOKIE = "durable_agent_inbox"
SESSION_SECONDS = 12 * 3600
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
"""No inline script, no framing (clickjacking an Approve button), nothing cached."""


@dataclass(frozen=True)
class InboxSettings:
    """How the inbox knows its users; exactly one of `users` and `trusted_user_header`."""

    secret: str
    """Signs the session cookies (set DURABLE_AGENT_INBOX_SECRET to keep sessions across
    restarts and replicas)."""
    users: UserDirectory | None = None
    trusted_user_header: str | None = None
    trusted_groups_header: str | None = None
    poll_seconds: float = 2.0
    conversation_messages: int = 30
    max_runs: int = 50
    agents: tuple[str, ...] = ()
    """Only runs of these agents (all agents when empty)."""
    secure_cookies: bool = False
    """Send the session cookie over HTTPS only (behind TLS)."""
    workspace_store: str | None = None
    """Where the runs' workspaces are, to show a waiting run's changed files (None:
    `DURABLE_AGENT_WORKSPACE_STORE`, else a worker's default, `.durable-agent/workspaces`)."""

    def __post_init__(self) -> None:
        if (self.users is None) == (self.trusted_user_header is None):
            raise ValueError("give the inbox either users or a trusted user header, not both")
        if self.trusted_groups_header and not self.trusted_user_header:
            raise ValueError("a trusted groups header needs a trusted user header")
        if len(self.secret) < 32:
            raise ValueError("the session secret must be at least 32 characters")


def create_app(agents: AgentClient, settings: InboxSettings) -> Starlette:
    """The inbox for the agent runs `agents` reaches."""
    return _Inbox(agents, settings).app


class _Inbox:
    def __init__(self, agents: AgentClient, settings: InboxSettings) -> None:
        self.agents = agents
        self.settings = settings
        self.throttle = LoginThrottle()
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.globals.update(
            relative=relative, iso=_iso, dom_id=dom_id, dollars=dollars
        )
        routes = [
            Route("/", self.index),
            Route("/runs", self.runs_fragment),
            Route("/login", self.login_page, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            Route("/logout", self.logout, methods=["POST"]),
            Route(
                "/runs/{workflow_id:path}/calls/{call_id}/approve", self.approve, methods=["POST"]
            ),
            Route("/runs/{workflow_id:path}/calls/{call_id}/deny", self.deny, methods=["POST"]),
            Route(
                "/runs/{workflow_id:path}/calls/{call_id}/deferred", self.deferred, methods=["POST"]
            ),
            Route("/runs/{workflow_id:path}/resume", self.resume, methods=["POST"]),
            Route("/healthz", self.healthz),
            Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        ]
        self.app = Starlette(
            routes=routes,
            middleware=[
                Middleware(
                    SessionMiddleware,
                    secret_key=settings.secret,
                    session_cookie=SESSION_COOKIE,
                    max_age=SESSION_SECONDS,
                    same_site="lax",
                    https_only=settings.secure_cookies,
                ),
                Middleware(_SecurityHeaders),
            ],
        )

    # -- identity and CSRF -----------------------------------------------------------------

    @property
    def embedded(self) -> bool:
        return self.settings.users is not None

    def identity(self, request: Request) -> Identity | None:
        settings = self.settings
        if settings.trusted_user_header:
            return identity_from_headers(
                request.headers, settings.trusted_user_header, settings.trusted_groups_header
            )
        assert settings.users is not None
        name = request.session.get("user")
        return settings.users.identity(name) if isinstance(name, str) else None

    def unauthenticated(self, request: Request, *, page: bool = False) -> Response:
        """The login page for a person opening a `page`; 401 for fragments and actions, and
        in proxy mode. Never data."""
        if not self.embedded:
            header = self.settings.trusted_user_header
            return PlainTextResponse(
                f"401 Unauthorized: no identity in the {header} header; reach the inbox "
                "through its authenticating proxy",
                status_code=401,
            )
        if page and request.method == "GET" and "hx-request" not in request.headers:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/login?next={quote(target)}", status_code=303)
        response = PlainTextResponse("401 Unauthorized: log in to the inbox first", status_code=401)
        response.headers["HX-Redirect"] = "/login"
        return response

    def csrf_token(self, request: Request) -> str:
        token = request.session.get("csrf")
        if not isinstance(token, str) or not token:
            token = secrets.token_urlsafe(32)
            request.session["csrf"] = token
        return token

    @staticmethod
    def csrf_ok(request: Request, form: FormData) -> bool:
        expected = request.session.get("csrf")
        sent = form.get("csrf_token") or request.headers.get("x-csrf-token") or ""
        return (
            isinstance(expected, str)
            and bool(expected)
            and isinstance(sent, str)
            and secrets.compare_digest(expected.encode(), sent.encode())
        )

    def csrf_refused(self) -> Response:
        return PlainTextResponse(
            "403 Forbidden: this form is missing its CSRF token or it does not match your "
            "session (the page may be stale, or the form came from another site); reload the "
            "inbox and try again",
            status_code=403,
        )

    # -- pages -----------------------------------------------------------------------------

    def page(
        self,
        request: Request,
        name: str,
        context: dict[str, Any],
        status_code: int = 200,
    ) -> Response:
        base = {
            "csrf": self.csrf_token(request),
            "embedded": self.embedded,
            "poll_ms": int(self.settings.poll_seconds * 1000),
            "now": datetime.now(UTC),
        }
        return self.templates.TemplateResponse(
            request, name, {**base, **context}, status_code=status_code
        )

    async def healthz(self, request: Request) -> Response:
        return PlainTextResponse("ok")

    async def index(self, request: Request) -> Response:
        identity = self.identity(request)
        if identity is None:
            return self.unauthenticated(request, page=True)
        return await self.inbox_page(request, identity)

    async def inbox_page(
        self,
        request: Request,
        identity: Identity,
        flash: Flash | None = None,
        status_code: int = 200,
    ) -> Response:
        cards, problem = await self.cards(identity)
        return self.page(
            request,
            "inbox.html",
            {
                "identity": identity,
                "cards": cards,
                "version": version_of(cards, identity),
                "problem": problem,
                "flash": flash,
            },
            status_code,
        )

    async def cards(self, identity: Identity) -> tuple[list[RunCard], str | None]:
        try:
            cards = await load_runs(
                self.agents,
                identity,
                limit=self.settings.max_runs,
                conversation=self.settings.conversation_messages,
                agent_names=self.settings.agents,
                workspace_store=self.settings.workspace_store,
            )
        except AgentRunError as error:
            return [], error.message
        return cards, None

    async def runs_fragment(self, request: Request) -> Response:
        identity = self.identity(request)
        if identity is None:
            return self.unauthenticated(request)
        cards, problem = await self.cards(identity)
        version = version_of(cards, identity)
        if request.query_params.get("v") == version and problem is None:
            return Response(status_code=204)
        return self.page(
            request,
            "_runs.html",
            {"identity": identity, "cards": cards, "version": version, "problem": problem},
        )

    async def login_page(self, request: Request) -> Response:
        if not self.embedded:
            return RedirectResponse("/", status_code=303)
        if self.identity(request) is not None:
            return RedirectResponse(_safe_next(request.query_params.get("next")), 303)
        return self.page(
            request, "login.html", {"next": _safe_next(request.query_params.get("next"))}
        )

    async def login(self, request: Request) -> Response:
        if not self.embedded:
            return RedirectResponse("/", status_code=303)
        assert self.settings.users is not None
        form = await request.form()
        if not self.csrf_ok(request, form):
            return self.csrf_refused()
        name = str(form.get("username") or "").strip()
        password = str(form.get("password") or "")
        target = _safe_next(str(form.get("next") or ""))
        wait = self.throttle.blocked_for(name)
        if wait:
            return self.page(
                request,
                "login.html",
                {"next": target, "error": f"too many failed logins; try again in {wait:.0f} s"},
                429,
            )
        identity = self.settings.users.authenticate(name, password)
        if identity is None:
            self.throttle.failed(name)
            return self.page(
                request,
                "login.html",
                {"next": target, "error": "wrong user name or password", "username": name},
                401,
            )
        self.throttle.succeeded(name)
        request.session.clear()  # a new session at login: no fixation of the old one
        request.session["user"] = identity.user
        self.csrf_token(request)
        return RedirectResponse(target, status_code=303)

    async def logout(self, request: Request) -> Response:
        form = await request.form()
        if not self.csrf_ok(request, form):
            return self.csrf_refused()
        request.session.clear()
        return RedirectResponse("/login" if self.embedded else "/", status_code=303)

    # -- decisions (what each means: `decisions`) ------------------------------------------

    async def approve(self, request: Request) -> Response:
        return await self.decide(request, "approve")

    async def deny(self, request: Request) -> Response:
        return await self.decide(request, "deny")

    async def deferred(self, request: Request) -> Response:
        return await self.decide(request, "deferred")

    async def resume(self, request: Request) -> Response:
        return await self.decide(request, "resume")

    async def decide(self, request: Request, action: Action) -> Response:
        identity = self.identity(request)
        if identity is None:
            return self.unauthenticated(request)
        form = await request.form()
        if not self.csrf_ok(request, form):
            return self.csrf_refused()
        workflow_id = request.path_params["workflow_id"]
        call_id = request.path_params.get("call_id", "")
        holder = request.query_params.get("holder") or None
        text, status_code = await answer(
            act(self.agents, action, workflow_id, call_id, form, identity, holder)
        )
        flash = Flash(text, ok=status_code < 400)
        if "hx-request" in request.headers:
            card = await load_run(
                self.agents,
                workflow_id,
                identity,
                conversation=self.settings.conversation_messages,
                flash=flash,
                workspace_store=self.settings.workspace_store,
            )
            return self.page(
                request,
                "_card.html",
                {"identity": identity, "card": card, "flash": flash, "workflow_id": workflow_id},
                status_code,
            )
        return await self.inbox_page(request, identity, flash, status_code)


class _SecurityHeaders:
    """Adds `SECURITY_HEADERS` to every response."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                for name, value in SECURITY_HEADERS.items():
                    if name.lower().encode() not in present:
                        headers.append((name.lower().encode(), value.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


def _safe_next(target: str | None) -> str:
    """Only a path on this site: a login link must not send a person elsewhere."""
    if not target:
        return "/"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return "/"
    return target


def _iso(moment: datetime | None) -> str:
    return moment.astimezone(UTC).isoformat() if moment is not None else ""
