"""GitLab's OAuth endpoints over HTTP, the API guard for OAuth bearers, and their control API.

- ``GET /oauth/authorize``, ``POST /oauth/token``, ``POST /oauth/revoke``, ``GET /oauth/token/info``
  under GitLab's sub-path, with the rules of :mod:`tests.standin.oauth`;
- ``GET /api/v4/groups`` (the caller's groups, from the people the control API added);
- :func:`guard`: an API request with an OAuth access token acts as its user; expired or revoked →
  401 ``invalid_token``, a ``read_api`` token on a write → 403 ``insufficient_scope``, each with
  GitLab's JSON body and ``WWW-Authenticate`` header (``lib/api/api_guard.rb``);
- control routes under ``/_standin/oauth/...`` (see :class:`tests.standin.control.StandinControl`).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any
from urllib.parse import unquote, urlencode

from aiohttp import web
from graphql import OperationDefinitionNode, OperationType

from tests.standin.graphql_api import GraphQLEndpoint
from tests.standin.models import World
from tests.standin.oauth import OAuthError, OAuthState, Person, Token, insufficient_scope
from tests.standin.rest_api import RestOutcome, RestRequest, route, unauthorized

OAUTH: web.AppKey[OAuthState] = web.AppKey("standin_oauth")

ERROR_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>An error has occurred · GitLab</title></head>
<body><main><h1>An error has occurred</h1><p>{description}</p></main></body></html>
"""


def _error(exc: OAuthError) -> web.Response:
    headers = {"Cache-Control": "no-store"}
    if exc.status == 401 and exc.error == "invalid_client":
        headers["WWW-Authenticate"] = 'Basic realm="Doorkeeper"'
    return web.json_response(exc.body(), status=exc.status, headers=headers)


def _basic(request: web.Request) -> tuple[str, str] | None:
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, _, secret = base64.b64decode(value.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return unquote(user), unquote(secret)


async def _form(request: web.Request) -> dict[str, str]:
    return {k: str(v) for k, v in (await request.post()).items()}


async def serve(state: OAuthState, world: World, request: web.Request, rel: str) -> web.Response | None:
    """GitLab's answer to a request for ``/oauth/...`` (``rel`` below the sub-path), else None."""
    try:
        if rel == "/oauth/authorize" and request.method in ("GET", "POST"):
            return _authorize(state, world, request)
        if rel == "/oauth/token" and request.method == "POST":
            return web.json_response(
                state.token(world, await _form(request), _basic(request)),
                headers={"Cache-Control": "no-store", "Pragma": "no-cache"},
            )
        if rel == "/oauth/revoke" and request.method == "POST":
            state.revoke(await _form(request), _basic(request))
            return web.json_response({})
        if rel == "/oauth/token/info" and request.method == "GET":
            token = _bearer_token(state, request)
            if token is None or state.check(token) is not None:
                body = {
                    "error": "invalid_token",
                    "error_description": "The access token is invalid",
                    "state": "unauthorized",
                }
                return web.json_response(body, status=401)
            return web.json_response(state.info(token))
    except OAuthError as exc:
        return _error(exc)
    return None


def _authorize(state: OAuthState, world: World, request: web.Request) -> web.Response:
    query = {k: request.query[k] for k in request.query}
    try:
        target, params = state.authorize(world, query)
    except OAuthError as exc:
        if exc.error == "login_required":
            return web.Response(status=302, headers={"Location": "/users/sign_in"})
        page = ERROR_PAGE.format(description=exc.description)
        return web.Response(status=exc.status, text=page, content_type="text/html")
    sep = "&" if "?" in target else "?"
    return web.Response(status=302, headers={"Location": f"{target}{sep}{urlencode(params)}"})


def _bearer_token(state: OAuthState, request: web.Request) -> Token | None:
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    return state.find(value.strip()) if scheme.lower() == "bearer" and value.strip() else None


def guard(
    state: OAuthState,
    token: Token,
    request: web.Request,
    rel: str,
    graphql_body: Any,
    endpoint: GraphQLEndpoint,
) -> web.Response | None:
    """GitLab's refusal of an API request made with OAuth ``token``, or None to serve it."""
    problem = state.check(token)
    if problem is None:
        write = (
            _has_mutation(endpoint, graphql_body)
            if rel == "/api/graphql"
            else request.method not in ("GET", "HEAD", "OPTIONS")
        )
        problem = insufficient_scope(token, write=write)
    if problem is None:
        return None
    body: dict[str, str] = problem.body()
    challenge = (
        f'Bearer realm="Protected by OAuth 2.0", error="{problem.error}", '
        f'error_description="{problem.description}"'
    )
    if problem.error == "insufficient_scope":
        body["scope"] = "api"
        challenge += ', scope="api"'
    return web.json_response(body, status=problem.status, headers={"WWW-Authenticate": challenge})


def _has_mutation(endpoint: GraphQLEndpoint, body: Any) -> bool:
    for item in body if isinstance(body, list) else [body]:
        if not isinstance(item, dict) or not isinstance(item.get("query"), str):
            continue
        document, _errors = endpoint.document(item["query"])
        if document is not None and any(
            isinstance(d, OperationDefinitionNode) and d.operation is OperationType.MUTATION
            for d in document.definitions
        ):
            return True
    return False


# -- /api/v4/groups ------------------------------------------------------------------------------


@route("GET", "/groups")
def _groups(req: RestRequest, _: dict[str, str]) -> RestOutcome:
    """The caller's groups (each one they belong to, as a Developer): enough for an allow-list."""
    if req.user is None:
        return unauthorized()
    paths = req.world.user_groups.get(req.user.username, ())
    out = []
    for n, path in enumerate(paths):
        group = req.world.group_by_path(path)
        gid = group.id if group else 1000 + n
        out.append(
            {
                "id": gid,
                "name": path.rsplit("/", 1)[-1],
                "path": path.rsplit("/", 1)[-1],
                "full_path": path,
                "full_name": path.replace("/", " / "),
                "web_url": f"{req.web_root}/groups/{path}",
            }
        )
    return RestOutcome(200, out, headers={"X-Total": str(len(out)), "X-Page": "1", "X-Total-Pages": "1"})


# -- control API ---------------------------------------------------------------------------------


async def _json(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        data = json.loads(await request.read())
    except ValueError:
        raise web.HTTPBadRequest(
            text='{"error": "the body must be JSON"}', content_type="application/json"
        ) from None
    if not isinstance(data, dict):
        raise web.HTTPBadRequest(
            text='{"error": "the body must be a JSON object"}', content_type="application/json"
        )
    return data


def control_routes(app: web.Application, state: OAuthState, world: Any) -> None:
    """Add ``/oauth/...`` control routes to the control sub-app; ``world()`` is the current World."""

    async def applications(request: web.Request) -> web.Response:
        d = await _json(request)
        try:
            a = state.add_application(
                str(d.get("uid", "")), d.get("secret"), str(d.get("redirect_uri", "")), d.get("scopes")
            )
        except ValueError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response(
            {"uid": a.uid, "redirect_uris": list(a.redirect_uris), "scopes": list(a.scopes)}, status=201
        )

    async def users(request: web.Request) -> web.Response:
        d = await _json(request)
        if not isinstance(d.get("id"), int) or not d.get("username"):
            return web.json_response({"error": "a user needs an integer id and a username"}, status=400)
        groups = d.get("groups") or []
        if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
            return web.json_response({"error": "groups must be a list of group full paths"}, status=400)
        person = Person(d["id"], str(d["username"]), str(d.get("name") or d["username"]), tuple(groups))
        try:
            state.add_person(world(), person)
        except ValueError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response({"id": person.id, "username": person.username, "groups": groups}, status=201)

    async def current_user(request: web.Request) -> web.Response:
        d = await _json(request)
        name = d.get("username")
        if name is not None and world().user_named(str(name)) is None:
            return web.json_response({"error": f"no user {name!r}: add it first (oauth/users)"}, status=404)
        state.current_user = name
        return web.json_response({"username": name})

    async def expire(request: web.Request) -> web.Response:
        d = await _json(request)
        try:
            n = state.expire(world(), d.get("username"))
        except LookupError as exc:
            return web.json_response({"error": f"not found: {exc}"}, status=404)
        return web.json_response({"expired": n})

    async def revoke(request: web.Request) -> web.Response:
        d = await _json(request)
        try:
            n = state.revoke_user(world(), str(d.get("username", "")))
        except LookupError as exc:
            return web.json_response({"error": f"not found: {exc}"}, status=404)
        return web.json_response({"revoked": n})

    async def settings(request: web.Request) -> web.Response:
        d = await _json(request)
        if "access_token_seconds" in d:
            seconds = d["access_token_seconds"]
            if not isinstance(seconds, int) or seconds < 1:
                return web.json_response(
                    {"error": "access_token_seconds must be a positive integer"}, status=400
                )
            state.access_token_seconds = seconds
        return web.json_response({"access_token_seconds": state.access_token_seconds})

    async def counts(_: web.Request) -> web.Response:
        return web.json_response(state.counts(world()))

    async def tokens(_: web.Request) -> web.Response:
        return web.json_response({"tokens": state.issued(world())})

    async def clear(_: web.Request) -> web.Response:
        state.clear()
        return web.json_response({"ok": True})

    app.router.add_post("/oauth/applications", applications)
    app.router.add_post("/oauth/users", users)
    app.router.add_post("/oauth/current_user", current_user)
    app.router.add_post("/oauth/expire", expire)
    app.router.add_post("/oauth/revoke", revoke)
    app.router.add_post("/oauth/settings", settings)
    app.router.add_get("/oauth/counts", counts)
    app.router.add_get("/oauth/tokens", tokens)
    app.router.add_delete("/oauth", clear)
