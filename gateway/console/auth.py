"""Who may use the console: tokens, the session cookie, CSRF and Origin checks.

- Two roles, each with a token of its own (``console.operator_token``, ``console.viewer_token``),
  never a client token (``gateway.config`` refuses one that is). A token is compared in constant
  time (:func:`hmac.compare_digest`).
- Signing in sets a session cookie (``HttpOnly``, ``SameSite=Strict``, ``Secure`` when the
  request came over TLS, or through a proxy saying so with ``X-Forwarded-Proto: https``; path
  ``/broker``). The cookie is signed, not stored: its key is derived
  from the role's token, so every replica with the same configuration accepts it, a viewer's
  cookie can never claim the operator's role, and changing a token ends its sessions.
- A person who signed in with GitLab (``external``) gets the same cookie, marked so and signed with
  a key derived from the sign-in's secret and the ``console.operators``/``viewers`` lists: changing
  either ends those sessions. Its name is ``<username>@gitlab``, a name no token sign-in may take.
- Every action (POST) carries a CSRF token derived from the session (a hidden form field), and
  its ``Origin`` and ``Host`` pass the same DNS-rebinding checks as ``/mcp``
  (``gateway.mcp.http.security``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Literal

from aiohttp import web

from gateway.broker.operator import operator_name
from gateway.config import ConsoleSettings, ServerSettings
from gateway.mcp.http.security import OriginHostGuard

Role = Literal["operator", "viewer"]
COOKIE = "gateway_console"
COOKIE_PATH = "/broker"
CSRF_FIELD = "csrf"


@dataclass(frozen=True)
class Session:
    """A signed-in person."""

    role: Role
    name: str
    nonce: str
    expires: float
    #: The service the person signed in with ("gitlab"), None for a console token.
    via: str | None = None

    @property
    def can_act(self) -> bool:
        """Operators act; viewers watch."""
        return self.role == "operator"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class ConsoleAuth:
    """Checks tokens, issues and reads session cookies, checks CSRF tokens and origins.

    Args:
        console: the ``console`` settings (tokens, session length).
        server: the ``server`` settings (the Origin/Host rules of ``/mcp``).
        also_hosts: further names the gateway answers to (``sign_in.public_url``'s host).
    """

    def __init__(
        self,
        console: ConsoleSettings,
        server: ServerSettings,
        external: tuple[str, bytes] | None = None,
        also_hosts: tuple[str, ...] = (),
    ) -> None:
        self._tokens: dict[Role, bytes] = {}
        self._via, self._external = (external[0].lower(), external[1]) if external else ("", b"")
        self._lists = json.dumps([console.operators, console.viewers]).encode()
        if console.operator_token is not None:
            self._tokens["operator"] = console.operator_token.get_secret_value().encode()
        if console.viewer_token is not None:
            self._tokens["viewer"] = console.viewer_token.get_secret_value().encode()
        self._seconds = console.session_hours * 3600
        self._guard = OriginHostGuard(server, also_hosts)
        self._origins = {o.strip().lower().rstrip("/") for o in server.allowed_origins}

    def _key(self, role: Role, via: str | None = None) -> bytes:
        if via is not None:
            label = b"gateway-console-session-v1:%s:%s:" % (via.encode(), role.encode())
            return hmac.new(self._external, label + self._lists, hashlib.sha256).digest()
        return hmac.new(self._tokens[role], b"gateway-console-session-v1", hashlib.sha256).digest()

    def role_of(self, token: str) -> Role | None:
        """The role ``token`` signs in as, or None. Every configured token is compared, in
        constant time, whichever matches."""
        given = token.strip().encode()
        found: Role | None = None
        for role, expected in self._tokens.items():
            if hmac.compare_digest(given, expected):
                found = role
        return found

    def new_session(self, role: Role, name: str | None) -> tuple[Session, str]:
        """A session of a console token and its cookie value."""
        chosen = operator_name(name, default=role)
        if self._via and chosen.lower().endswith(f"@{self._via}"):
            chosen = role  # a name only people signed in through that service carry
        return self._issue(Session(role, chosen, secrets.token_urlsafe(18), time.time() + self._seconds))

    def new_external_session(self, role: Role, username: str) -> tuple[Session, str]:
        """A session of a person who signed in with the external service, and its cookie value."""
        assert self._via, "no external sign-in is configured"
        name = operator_name(f"{username}@{self._via}", default=f"{role}@{self._via}")
        return self._issue(
            Session(role, name, secrets.token_urlsafe(18), time.time() + self._seconds, via=self._via)
        )

    def _issue(self, session: Session) -> tuple[Session, str]:
        data: dict[str, object] = {
            "r": session.role,
            "n": session.name,
            "s": session.nonce,
            "e": int(session.expires),
        }
        if session.via is not None:
            data["v"] = session.via
        payload = _b64(json.dumps(data).encode())
        sig = _b64(hmac.new(self._key(session.role, session.via), payload.encode(), hashlib.sha256).digest())
        return session, f"{payload}.{sig}"

    def session(self, request: web.Request) -> Session | None:
        """The request's valid session, or None (no cookie, a bad signature, expired, a role no
        longer configured)."""
        value = request.cookies.get(COOKIE)
        if not value or value.count(".") != 1:
            return None
        payload, sig = value.split(".")
        try:
            data = json.loads(_unb64(payload))
            role, via = data["r"], data.get("v")
            if via is not None:
                if not self._via or via != self._via or role not in ("operator", "viewer"):
                    return None
            elif role not in self._tokens:
                return None
            expected = _b64(hmac.new(self._key(role, via), payload.encode(), hashlib.sha256).digest())
            if not hmac.compare_digest(sig.encode(), expected.encode()):
                return None
            session = Session(
                role=role, name=str(data["n"]), nonce=str(data["s"]), expires=float(data["e"]), via=via
            )
        except (ValueError, KeyError, TypeError):
            return None
        return session if session.expires > time.time() else None

    def csrf_token(self, session: Session) -> str:
        """The CSRF token of ``session`` (the same for its whole life)."""
        return _b64(
            hmac.new(
                self._key(session.role, session.via), f"csrf:{session.nonce}".encode(), hashlib.sha256
            ).digest()
        )

    def csrf_ok(self, session: Session, token: str | None) -> bool:
        """Whether ``token`` is ``session``'s CSRF token (constant time)."""
        return token is not None and hmac.compare_digest(token.encode(), self.csrf_token(session).encode())

    def origin_problem(self, request: web.Request) -> str | None:
        """Why the request's ``Origin``/``Host`` are refused (as on ``/mcp``), or None."""
        error = self._guard.check(request.headers.get("Host"), request.headers.get("Origin"))
        if error is not None:
            return error.message
        origin = request.headers.get("Origin")
        if request.method == "POST" and origin is not None:
            # A form of this page posts to its own origin; another origin is a cross-site post,
            # whatever the loopback rules of /mcp allow. The scheme is not compared: a proxy
            # that terminates TLS passes the request on over plain HTTP.
            _, _, host = origin.strip().lower().rstrip("/").partition("://")
            own = {request.host.lower(), request.headers.get("X-Forwarded-Host", "").lower()}
            if host not in own and origin.strip().lower().rstrip("/") not in self._origins:
                return f"Origin {origin[:100]!r} is not this console's origin ({request.host})"
        return None

    @staticmethod
    def over_tls(request: web.Request) -> bool:
        """The browser reached the console over HTTPS (directly, or through a proxy that says so)."""
        forwarded = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
        return request.secure or forwarded == "https"

    def set_cookie(self, response: web.StreamResponse, request: web.Request, value: str) -> None:
        """The session cookie: HttpOnly, SameSite=Strict, Secure over TLS, for ``/broker`` only."""
        response.set_cookie(
            COOKIE,
            value,
            max_age=int(self._seconds),
            path=COOKIE_PATH,
            httponly=True,
            samesite="Strict",
            secure=self.over_tls(request),
        )

    def clear_cookie(self, response: web.StreamResponse, request: web.Request) -> None:
        """End the session in the browser."""
        response.del_cookie(
            COOKIE, path=COOKIE_PATH, secure=self.over_tls(request), httponly=True, samesite="Strict"
        )
