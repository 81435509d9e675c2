"""GitLab as an OAuth 2 provider (Doorkeeper): applications, codes, tokens and their rules.

What a gateway that signs people in through GitLab meets (https://docs.gitlab.com/api/oauth2/):

- ``/oauth/authorize`` (authorization code, PKCE): GitLab shows its approval page; the stand-in
  approves at once as its *current user* (set through the control API). ``redirect_uri`` must
  equal the application's registered one exactly (a loopback IP literal may use any port, as
  Doorkeeper allows per RFC 8252 §7.3); a sent ``code_challenge`` must use ``S256``.
- ``/oauth/token``: a code is single-use, bound to its client, redirect URI and PKCE challenge,
  and lives 10 minutes. A confidential application authenticates with ``client_secret_post`` or
  HTTP Basic. A refresh rotates *both* tokens and the old pair stops working at once; reusing an
  old refresh token is ``invalid_grant`` (so two concurrent refreshes lock the loser out).
- Access tokens live 2 hours (configurable here, not in GitLab); every API request with one acts
  as its user; an expired or revoked one is a 401 ``invalid_token``; a ``read_api`` token on a
  write is a 403 ``insufficient_scope``.

The state survives :meth:`tests.standin.server.StandinState.reset` (as GitLab's applications and
users outlive any one test's data); :meth:`OAuthState.clear` forgets it all.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tests.standin.models import User, World

#: How long an authorization code lives (Doorkeeper's ``authorization_code_expires_in``).
CODE_SECONDS = 600
#: GitLab's access token lifetime (``access_token_expires_in``; fixed on GitLab, settable here).
ACCESS_TOKEN_SECONDS = 7200

INVALID_GRANT = (
    "The provided authorization grant is invalid, expired, revoked, does not match the redirection "
    "URI used in the authorization request, or was issued to another client."
)
INVALID_CLIENT = (
    "Client authentication failed due to unknown client, no client authentication included, "
    "or unsupported authentication method."
)
INVALID_SCOPE = "The requested scope is invalid, unknown, or malformed."
INVALID_REDIRECT = "The redirect URI included is not valid."
TOKEN_EXPIRED = "Token is expired. You can either do re-authorization or token refresh."
TOKEN_REVOKED = "Token was revoked. You have to re-authorize from the user."
INSUFFICIENT_SCOPE = "The request requires higher privileges than provided by the access token."
#: Scopes that let a token write through the API (REST non-GET, GraphQL mutations).
WRITE_SCOPES = frozenset({"api"})


class OAuthError(Exception):
    """An OAuth error answer: ``error`` code, description and HTTP status (RFC 6749 §5.2)."""

    def __init__(self, error: str, description: str, status: int = 400) -> None:
        super().__init__(description)
        self.error = error
        self.description = description
        self.status = status

    def body(self) -> dict[str, str]:
        return {"error": self.error, "error_description": self.description}


@dataclass
class Application:
    """An OAuth application registered on GitLab (confidential unless ``secret`` is None)."""

    uid: str
    secret: str | None
    redirect_uris: tuple[str, ...]
    scopes: tuple[str, ...]


@dataclass
class Code:
    client_id: str
    user_id: int
    redirect_uri: str
    scopes: tuple[str, ...]
    challenge: str | None
    expires_at: float
    used: bool = False


@dataclass
class Token:
    """One access token with its refresh token (Doorkeeper's ``oauth_access_tokens`` row)."""

    access: str
    refresh: str
    client_id: str
    user_id: int
    scopes: tuple[str, ...]
    created_at: float
    expires_in: int
    revoked: bool = False

    def expired(self, now: float) -> bool:
        return now >= self.created_at + self.expires_in


@dataclass
class Person:
    """A user the control API added for sign-in, with the groups they belong to."""

    id: int
    username: str
    name: str
    groups: tuple[str, ...]


@dataclass
class OAuthState:
    """Applications, people, codes and tokens, with the counters tests read."""

    applications: dict[str, Application] = field(default_factory=dict)
    people: dict[str, Person] = field(default_factory=dict)
    current_user: str | None = None
    codes: dict[str, Code] = field(default_factory=dict)
    tokens: list[Token] = field(default_factory=list)
    access_token_seconds: int = ACCESS_TOKEN_SECONDS
    refreshes: Counter[str] = field(default_factory=Counter)
    invalid_grants: int = 0
    token_requests: int = 0

    def clear(self) -> None:
        """Forget every application, person, code and token, and zero the counters."""
        self.__init__()  # type: ignore[misc]

    # -- control ------------------------------------------------------------------------------

    def add_application(self, uid: str, secret: str | None, redirect_uri: str, scopes: Any) -> Application:
        uris = tuple(u for u in str(redirect_uri).split() if u)  # GitLab: one URI per line
        wanted = tuple(scopes.split() if isinstance(scopes, str) else scopes or ("api",))
        if not uid or not uris:
            raise ValueError("an application needs a uid and at least one redirect_uri")
        app = Application(uid, secret, uris, wanted)
        self.applications[uid] = app
        return app

    def add_person(self, world: World, person: Person) -> None:
        self.people[person.username] = person
        self.apply(world)

    def apply(self, world: World) -> None:
        """Put the added people into ``world`` (again, after a reset rebuilt it)."""
        for person in self.people.values():
            user = world.user_named(person.username)
            if user is None:
                if person.id in world.users:
                    raise ValueError(f"user id {person.id} is taken by {world.users[person.id].username}")
                world.users[person.id] = User(person.id, person.username, person.name, ())
            elif user.id != person.id:
                person.id = user.id
            world.user_groups[person.username] = person.groups

    def expire(self, world: World, username: str | None) -> int:
        """Make access tokens (of ``username``, or everyone's) expired now; returns how many."""
        now = time.time()
        n = 0
        for token in self._live(world, username):
            token.created_at = min(token.created_at, now - token.expires_in - 1)
            n += 1
        return n

    def revoke_user(self, world: World, username: str) -> int:
        """Revoke every grant of ``username`` (tokens, refresh tokens and unused codes)."""
        user = world.user_named(username)
        if user is None:
            raise LookupError(f"user {username}")
        n = 0
        for token in self.tokens:
            if token.user_id == user.id and not token.revoked:
                token.revoked = True
                n += 1
        for code in self.codes.values():
            if code.user_id == user.id:
                code.used = True
        return n

    def _live(self, world: World, username: str | None) -> list[Token]:
        user = world.user_named(username) if username else None
        if username and user is None:
            raise LookupError(f"user {username}")
        return [t for t in self.tokens if not t.revoked and (user is None or t.user_id == user.id)]

    def issued(self, world: World) -> list[dict[str, Any]]:
        """Every token issued, values included: for tests that check a token never leaks."""
        now = time.time()
        return [
            {
                "access_token": t.access,
                "refresh_token": t.refresh,
                "client_id": t.client_id,
                "username": world.users[t.user_id].username if t.user_id in world.users else None,
                "scopes": list(t.scopes),
                "revoked": t.revoked,
                "expired": t.expired(now),
            }
            for t in self.tokens
        ]

    def counts(self, world: World) -> dict[str, Any]:
        return {
            "refreshes": dict(self.refreshes),
            "invalid_grants": self.invalid_grants,
            "token_requests": self.token_requests,
            "active_tokens": sum(1 for t in self.tokens if not t.revoked and not t.expired(time.time())),
        }

    # -- /oauth/authorize ---------------------------------------------------------------------

    def authorize(self, world: World, query: dict[str, str]) -> tuple[str, dict[str, str]]:
        """Approve an authorization request as the current user.

        Returns ``(redirect_uri, params)`` for the 302 (a code, or an ``error`` GitLab sends back
        to a valid redirect URI). Raises :class:`OAuthError` for what GitLab shows as an error
        page instead (unknown client, a redirect URI that does not match).
        """
        app = self.applications.get(query.get("client_id", ""))
        if app is None:
            raise OAuthError("invalid_client", INVALID_CLIENT, 401)
        redirect_uri = query.get("redirect_uri", "")
        if not any(redirect_matches(r, redirect_uri) for r in app.redirect_uris):
            raise OAuthError("invalid_redirect_uri", INVALID_REDIRECT, 400)
        state = {"state": query["state"]} if "state" in query else {}
        if query.get("response_type") != "code":
            desc = "The authorization server does not support this response type."
            return redirect_uri, {"error": "unsupported_response_type", "error_description": desc, **state}
        scopes = tuple(query.get("scope", "").split()) or app.scopes[:1]
        if not set(scopes) <= set(app.scopes):
            return redirect_uri, {"error": "invalid_scope", "error_description": INVALID_SCOPE, **state}
        challenge = query.get("code_challenge")
        if challenge is not None and query.get("code_challenge_method", "plain") != "S256":
            desc = "Code challenge method must be S256."
            return redirect_uri, {"error": "invalid_request", "error_description": desc, **state}
        user = world.user_named(self.current_user) if self.current_user else None
        if user is None:
            raise OAuthError("login_required", "No user is signed in to GitLab (control: current_user).", 401)
        code = secrets.token_hex(32)
        self.codes[code] = Code(app.uid, user.id, redirect_uri, scopes, challenge, time.time() + CODE_SECONDS)
        return redirect_uri, {"code": code, **state}

    # -- /oauth/token -------------------------------------------------------------------------

    def client(self, form: dict[str, str], basic: tuple[str, str] | None) -> Application:
        """The authenticated client (``client_secret_basic`` or ``client_secret_post``)."""
        client_id, secret = basic if basic else (form.get("client_id", ""), form.get("client_secret"))
        app = self.applications.get(client_id)
        if app is None:
            raise OAuthError("invalid_client", INVALID_CLIENT, 401)
        if app.secret is not None and not (secret and hmac.compare_digest(secret, app.secret)):
            raise OAuthError("invalid_client", INVALID_CLIENT, 401)
        return app

    def token(self, world: World, form: dict[str, str], basic: tuple[str, str] | None) -> dict[str, Any]:
        self.token_requests += 1
        try:
            app = self.client(form, basic)
            grant = form.get("grant_type")
            if grant == "authorization_code":
                return self._exchange_code(app, form)
            if grant == "refresh_token":
                return self._refresh(world, app, form)
            desc = "The authorization grant type is not supported by the authorization server."
            raise OAuthError("unsupported_grant_type", desc)
        except OAuthError as exc:
            if exc.error == "invalid_grant":
                self.invalid_grants += 1
            raise

    def _exchange_code(self, app: Application, form: dict[str, str]) -> dict[str, Any]:
        code = self.codes.get(form.get("code", ""))
        if code is None or code.used or code.client_id != app.uid or time.time() > code.expires_at:
            raise OAuthError("invalid_grant", INVALID_GRANT)
        code.used = True  # single use, whatever follows
        if code.redirect_uri != form.get("redirect_uri"):
            raise OAuthError("invalid_grant", INVALID_GRANT)
        if code.challenge is not None:
            verifier = form.get("code_verifier", "")
            digest = (
                base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
            )
            if not verifier or not hmac.compare_digest(digest, code.challenge):
                raise OAuthError("invalid_grant", INVALID_GRANT)
        return self._issue(app.uid, code.user_id, code.scopes)

    def _refresh(self, world: World, app: Application, form: dict[str, str]) -> dict[str, Any]:
        wanted = form.get("refresh_token", "")
        old = next((t for t in self.tokens if hmac.compare_digest(t.refresh, wanted)), None)
        if old is None or old.revoked or old.client_id != app.uid:
            raise OAuthError("invalid_grant", INVALID_GRANT)
        old.revoked = True  # the old pair stops working at once
        user = world.users.get(old.user_id)
        self.refreshes[user.username if user else str(old.user_id)] += 1
        return self._issue(app.uid, old.user_id, old.scopes)

    def _issue(self, client_id: str, user_id: int, scopes: tuple[str, ...]) -> dict[str, Any]:
        now = time.time()
        token = Token(
            access=secrets.token_hex(32),
            refresh=secrets.token_hex(32),
            client_id=client_id,
            user_id=user_id,
            scopes=scopes,
            created_at=now,
            expires_in=self.access_token_seconds,
        )
        self.tokens.append(token)
        return {
            "access_token": token.access,
            "token_type": "Bearer",
            "expires_in": token.expires_in,
            "refresh_token": token.refresh,
            "scope": " ".join(scopes),
            "created_at": int(now),
        }

    # -- /oauth/revoke, /oauth/token/info, API requests -----------------------------------------

    def revoke(self, form: dict[str, str], basic: tuple[str, str] | None) -> None:
        """RFC 7009: revoke the token (access or refresh) if the client owns it; unknown is fine."""
        try:
            app = self.client(form, basic)
        except OAuthError:
            raise OAuthError(
                "unauthorized_client", "You are not authorized to revoke this token", 403
            ) from None
        wanted = form.get("token", "")
        for token in self.tokens:
            if token.client_id == app.uid and wanted in (token.access, token.refresh):
                token.revoked = True

    def find(self, access: str) -> Token | None:
        """The token record of an access token (live or not), or None if GitLab never issued it."""
        return next((t for t in self.tokens if hmac.compare_digest(t.access, access)), None)

    def check(self, token: Token) -> OAuthError | None:
        """Why an API request with ``token`` is refused (401), or None when it may proceed."""
        if token.revoked:
            return OAuthError("invalid_token", TOKEN_REVOKED, 401)
        if token.expired(time.time()):
            return OAuthError("invalid_token", TOKEN_EXPIRED, 401)
        return None

    def info(self, token: Token) -> dict[str, Any]:
        left = max(0, int(token.created_at + token.expires_in - time.time()))
        return {
            "resource_owner_id": token.user_id,
            "scope": list(token.scopes),
            "expires_in": left,
            "expires_in_seconds": left,
            "application": {"uid": token.client_id},
            "created_at": int(token.created_at),
        }


def insufficient_scope(token: Token, *, write: bool) -> OAuthError | None:
    """GitLab's 403 for a token whose scopes do not cover the request (a write needs ``api``)."""
    if write and not WRITE_SCOPES & set(token.scopes):
        return OAuthError("insufficient_scope", INSUFFICIENT_SCOPE, 403)
    return None


def redirect_matches(registered: str, presented: str) -> bool:
    """Doorkeeper's rule: exact match, except a loopback IP literal's port (RFC 8252 §7.3)."""
    if registered == presented:
        return True
    a, b = urlsplit(registered), urlsplit(presented)
    try:
        loopback = a.hostname is not None and ipaddress.ip_address(a.hostname).is_loopback
    except ValueError:
        loopback = False
    return (
        loopback
        and a.scheme == b.scheme == "http"
        and a.hostname == b.hostname
        and (a.path, a.query) == (b.path, b.query)
    )
