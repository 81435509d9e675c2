"""The stand-in's HTTP server (aiohttp): GitLab's API, authentication, faults, request log, control API.

``python -m tests.standin --port N [--prefix /gitlab]`` runs it (see :mod:`tests.standin.__main__`).

- ``POST <prefix>/api/graphql``: :class:`tests.standin.graphql_api.GraphQLEndpoint`.
- ``<prefix>/api/v4/...``: :mod:`tests.standin.rest_api`, matched on the raw path.
- ``/_standin/...`` (never under the prefix, never logged, never faulted): the control API that
  :class:`tests.standin.control.StandinControl` drives; JSON in and out.

Authentication is GitLab's: a token in ``PRIVATE-TOKEN`` or ``Authorization: Bearer``; no token is
an anonymous caller (public projects only; ``/version`` and ``/user`` need a user); an unknown or
revoked token is a 401 (GraphQL: ``{"errors":[{"message":"Invalid token"}]}``, REST:
``{"message":"401 Unauthorized"}``).

Every request to the API is recorded (method, path, route, status, GraphQL operation names, top
level fields, resolved field paths and variables, which auth header was present, the user, any
injected fault), never the token itself. Requests GitLab would refuse as malformed (an invalid
GraphQL document or variables, a doubly-encoded path segment) are also kept in the *invalid*
list, which the pytest fixtures turn into a test failure.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from graphql import OperationDefinitionNode
from graphql.language import FieldNode

from tests.gitlab.band_schema import SCHEMA_FILE
from tests.gitlab.versions import NEWEST, Edition, has_route, parse_version, version_string
from tests.standin import dataset, oauth_http
from tests.standin.graphql_api import Ctx, GraphQLEndpoint, load_band_schema
from tests.standin.models import STATUS_GROUPS, Access, Blob, DuoMessage, DuoWorkflow, Job, Tag, User, World
from tests.standin.oauth import OAuthState, Token
from tests.standin.rest_api import RestOutcome, RestRequest, dispatch, split_raw_path
from tests.standin.shaping import SHAPING_KINDS, reset_connection, shape

log = logging.getLogger("standin")

#: Most recent requests kept in the log (benchmarks send many; the total is still counted).
LOG_LIMIT = 20_000

LOGIN_PAGE = """<!DOCTYPE html>
<html class="gl-light" lang="en">
<head><meta charset="utf-8"><title>Sign in · GitLab</title></head>
<body class="login-page">
<main><h1>GitLab</h1>
<form id="new_user" action="/users/sign_in" method="post">
<label for="user_login">Username or primary email</label><input id="user_login" name="user[login]">
<label for="user_password">Password</label><input id="user_password" type="password" name="user[password]">
<button type="submit">Sign in</button></form></main>
</body>
</html>
"""

FAULT_KINDS = (
    "rate_limit",
    "status",
    "html",
    "delay",
    "drop",
    "reset",
    "graphql_error",
    "graphql_partial",
    "trickle",
)


@dataclass
class Fault:
    """An injected failure for the next ``count`` matching API requests (None: until cleared).

    Kinds: ``rate_limit`` (429, ``Retry-After`` and ``RateLimit-*`` headers, body ``Retry later``),
    ``status`` (any status, GitLab-like JSON body unless ``body``/``content_type`` are given),
    ``html`` (a GitLab sign-in page, status 200 unless given: a proxy or SSO in front of GitLab),
    ``delay`` (wait ``seconds``, then answer normally), ``drop`` (close the connection without an
    answer), ``reset`` (abort the connection with a TCP RST), ``graphql_error`` (200 with
    ``{"errors":[{"message": body}]}``); and two that shape the real answer (see
    :mod:`tests.standin.shaping`): ``graphql_partial`` (the data GitLab computed, plus ``errors``)
    and ``trickle`` (the real body ``chunk`` bytes every ``seconds``).

    ``phase``: ``before`` (default) fails the request before GitLab does anything; ``after``
    processes it first (a mutation *is* applied) and then fails the answer, for "may have been
    sent" tests. ``match`` narrows which requests it applies to: ``method``, ``path`` (a prefix of
    the path below the sub-path, e.g. ``/api/graphql`` or ``/api/v4/projects``), ``field`` (a
    GraphQL top-level field such as ``pipelineCreate``), ``operation`` (a GraphQL operation name).
    """

    id: int
    kind: str
    count: int | None = 1
    status: int | None = None
    retry_after: float | None = 1
    seconds: float = 0.0
    body: str | None = None
    content_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    phase: str = "before"
    match: dict[str, str] = field(default_factory=dict)
    chunk: int = 1
    hits: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            k: getattr(self, k)
            for k in (
                "id",
                "kind",
                "count",
                "status",
                "retry_after",
                "seconds",
                "body",
                "content_type",
                "headers",
                "phase",
                "match",
                "chunk",
                "hits",
            )
        }

    def applies(self, method: str, path: str, fields: list[str], operations: list[str]) -> bool:
        m = self.match
        return (
            (self.count is None or self.count > 0)
            and ("method" not in m or m["method"].upper() == method)
            and ("path" not in m or path.startswith(m["path"]))
            and ("field" not in m or m["field"] in fields)
            and ("operation" not in m or m["operation"] in operations)
        )


STATE: web.AppKey[StandinState] = web.AppKey("standin_state")


class BadControlRequest(Exception):
    """A control API call with bad input (answered 400 with the message)."""


@dataclass
class Identity:
    user: User | None
    auth: str | None
    refused: bool
    oauth: Token | None = None
    """The OAuth access token the request carried (its user is ``user``), checked by the API guard."""


class StandinState:
    """Everything the server holds: the data, the GraphQL endpoint, the log, faults, invalids."""

    def __init__(
        self,
        endpoint: GraphQLEndpoint,
        prefix: str = "",
        *,
        gitlab: tuple[str, Edition] = (NEWEST, "ee"),
        schema_path: Path = SCHEMA_FILE,
    ) -> None:
        self.endpoint = endpoint
        self.prefix = prefix.rstrip("/")
        self.gitlab = gitlab
        """The GitLab version and edition served (its schema is the endpoint's); kept across resets."""
        self.schema_path = schema_path
        self.world: World = dataset.build_world()
        self._apply_gitlab()
        self.log: deque[dict[str, Any]] = deque(maxlen=LOG_LIMIT)
        self.total = 0
        self.seq = itertools.count(1)
        self.invalid: list[dict[str, Any]] = []
        self.faults: list[Fault] = []
        self.fault_ids = itertools.count(1)
        self.timers: list[asyncio.TimerHandle] = []
        self.oauth = OAuthState()
        """GitLab's OAuth applications, people and tokens (kept across resets)."""

    def _apply_gitlab(self) -> None:
        version, edition = self.gitlab
        settings = self.world.settings
        settings.version = version_string(version, edition)
        settings.edition = edition
        settings.artifacts_tree = has_route("GET /projects/:id/jobs/:job_id/artifacts/tree", version)

    def serve_gitlab(self, version: str, edition: Edition) -> None:
        """Answer as GitLab ``version`` and ``edition`` from now on (schema, ``metadata``, REST routes)."""
        if (version, edition) != self.gitlab:
            self.endpoint.use_schema(load_band_schema(version, edition, self.schema_path))
            self.gitlab = (version, edition)
        self._apply_gitlab()

    def reset(self) -> None:
        """Fresh data, empty log, no faults. The invalid list is kept (see :meth:`clear_invalid`), and
        so is the OAuth state (applications, people, tokens: see :mod:`tests.standin.oauth`)."""
        self.world = dataset.build_world()
        self._apply_gitlab()
        self.oauth.apply(self.world)
        self.log.clear()
        self.total = 0
        self.faults.clear()
        for timer in self.timers:
            timer.cancel()
        self.timers.clear()

    def record_invalid(self, record: dict[str, Any], reason: str) -> None:
        entry = {"seq": record["seq"], "method": record["method"], "path": record["path"], "reason": reason}
        if record.get("graphql"):
            entry["operation_name"] = record["graphql"][0].get("operation_name")
        self.invalid.append(entry)
        log.warning("INVALID request #%s %s %s: %s", record["seq"], record["method"], record["path"], reason)

    def identify(self, request: web.Request) -> Identity:
        """The caller, as GitLab authenticates API requests (token value never stored)."""
        token = request.headers.get("PRIVATE-TOKEN")
        auth = "private-token" if token is not None else None
        if token is None and (header := request.headers.get("Authorization")) is not None:
            scheme, _, value = header.partition(" ")
            if scheme.lower() != "bearer":
                return Identity(None, f"authorization-{scheme.lower() or 'empty'}", True)
            token, auth = value.strip(), "bearer"
        if token is None:
            return Identity(None, None, False)
        if token == "":
            return Identity(None, f"{auth}-empty", False)
        user = self.world.user_for_token(token)
        if user is None and auth == "bearer" and (grant := self.oauth.find(token)) is not None:
            return Identity(self.world.users.get(grant.user_id), auth, False, grant)
        return Identity(user, auth, user is None)


# -- the API --------------------------------------------------------------------------------------


async def api_handler(request: web.Request) -> web.StreamResponse:
    """Every request that is not for the control API."""
    state = request.app[STATE]
    raw = request.raw_path
    path = raw.partition("?")[0]
    started = time.perf_counter()
    record: dict[str, Any] = {
        "seq": next(state.seq),
        "time": time.time(),
        "method": request.method,
        "path": path,
        "query": _query_dict(request),
        "route": None,
        "status": None,
        "auth": None,
        "user": None,
        "fault": None,
        "graphql": [],
        "unserved": False,
        "invalid": [],
        # The W3C trace context the request carried (the gateway's tracing), else None.
        "traceparent": request.headers.get("traceparent"),
    }
    state.total += 1
    state.log.append(record)
    body = await request.read()
    identity = state.identify(request)
    record["auth"] = identity.auth
    record["user"] = identity.user.username if identity.user else None
    record["oauth"] = identity.oauth is not None  # an OAuth access token, not a personal one

    rel = _below_prefix(path, state.prefix)
    graphql_body: Any = None
    fields: list[str] = []
    operations: list[str] = []
    if rel == "/api/graphql" and request.method == "POST":
        try:
            graphql_body = json.loads(body) if body else None
        except ValueError:
            graphql_body = ValueError
        if isinstance(graphql_body, dict | list):
            fields, operations = _peek_graphql(state.endpoint, graphql_body)
            # Kept when a fault answers before execution, so the log still says what was asked.
            record["graphql"] = [
                {
                    "operation_name": operations[0] if operations else None,
                    "operation_type": None,
                    "fields": fields,
                    "valid": None,
                    "errors": [],
                    "paths": [],
                    "unserved": [],
                    "variables": graphql_body.get("variables") if isinstance(graphql_body, dict) else None,
                }
            ]

    fault = _take_fault(state, request.method, rel or path, fields, operations)
    if fault is not None:
        record["fault"] = fault.kind
        if fault.phase == "before" and fault.kind not in SHAPING_KINDS:
            if fault.kind == "delay":
                await asyncio.sleep(fault.seconds)
            else:
                response = _fault_response(request, fault)
                record["status"] = response.status if response is not None else None
                record["duration_ms"] = round((time.perf_counter() - started) * 1000, 3)
                return response if response is not None else _dropped()

    response = await _serve(state, request, record, identity, rel, graphql_body)
    if fault is not None and fault.kind in SHAPING_KINDS:
        record["status"] = response.status
        record["duration_ms"] = round((time.perf_counter() - started) * 1000, 3)
        return await shape(
            request, response, fault.kind, message=fault.body, seconds=fault.seconds, chunk=fault.chunk
        )
    if fault is not None and fault.phase == "after":
        if fault.kind == "delay":
            await asyncio.sleep(fault.seconds)
        else:
            faulted = _fault_response(request, fault)
            record["status"] = faulted.status if faulted is not None else None
            record["duration_ms"] = round((time.perf_counter() - started) * 1000, 3)
            return faulted if faulted is not None else _dropped()
    record["status"] = response.status
    record["duration_ms"] = round((time.perf_counter() - started) * 1000, 3)
    return response


def _below_prefix(path: str, prefix: str) -> str | None:
    """The path below GitLab's sub-path (``/gitlab``), or None for a request outside it."""
    if not prefix:
        return path
    if path == prefix or path.startswith(prefix + "/"):
        return path[len(prefix) :]
    return None


def _dropped() -> web.Response:
    # The transport is already aborted; aiohttp needs a response object but sends nothing.
    return web.Response(status=499)


def _query_dict(request: web.Request) -> dict[str, str | list[str]]:
    """The query string as a dict; a repeated key (``scope[]``) keeps all its values in a list."""
    out: dict[str, str | list[str]] = {}
    for key in dict.fromkeys(request.query.keys()):
        values = request.query.getall(key)
        out[key] = values[0] if len(values) == 1 else list(values)
    return out


def _peek_graphql(endpoint: GraphQLEndpoint, body: Any) -> tuple[list[str], list[str]]:
    """Top-level field and operation names of a GraphQL body, for fault matching and the log.

    Uses the endpoint's document cache, so the parse is shared with the execution that follows.
    """
    fields: list[str] = []
    operations: list[str] = []
    for item in body if isinstance(body, list) else [body]:
        if not isinstance(item, dict) or not isinstance(item.get("query"), str):
            continue
        document, _errors = endpoint.document(item["query"])
        if document is None:
            continue
        for d in document.definitions:
            if isinstance(d, OperationDefinitionNode):
                if d.name:
                    operations.append(d.name.value)
                fields.extend(s.name.value for s in d.selection_set.selections if isinstance(s, FieldNode))
        if isinstance(item.get("operationName"), str):
            operations.append(item["operationName"])
    return fields, operations


def _take_fault(
    state: StandinState, method: str, path: str, fields: list[str], operations: list[str]
) -> Fault | None:
    for fault in state.faults:
        if fault.applies(method, path, fields, operations):
            fault.hits += 1
            if fault.count is not None:
                fault.count -= 1
            return fault
    return None


def _fault_response(request: web.Request, fault: Fault) -> web.Response | None:
    headers = dict(fault.headers)
    if fault.kind == "drop":
        if request.transport is not None:
            request.transport.abort()
        return None
    if fault.kind == "reset":
        reset_connection(request)
        return None
    if fault.kind == "rate_limit":
        status = fault.status or 429
        reset = int(time.time() + (fault.retry_after or 60))
        base = {
            "RateLimit-Name": "throttle_authenticated_api",
            "RateLimit-Limit": "60",
            "RateLimit-Observed": "61",
            "RateLimit-Remaining": "0",
            "RateLimit-Reset": str(reset),
            "RateLimit-ResetTime": formatdate(reset, usegmt=True),
        }
        if fault.retry_after is not None:
            base["Retry-After"] = f"{fault.retry_after:g}"
        return web.Response(
            status=status,
            text=fault.body if fault.body is not None else "Retry later\n",
            content_type="text/plain",
            headers={**base, **headers},
        )
    if fault.kind == "html":
        return web.Response(
            status=fault.status or 200,
            text=fault.body or LOGIN_PAGE,
            content_type="text/html",
            charset="utf-8",
            headers=headers,
        )
    if fault.kind == "graphql_error":
        payload = {"errors": [{"message": fault.body or "Internal server error"}]}
        return web.json_response(payload, status=fault.status or 200, headers=headers)
    status = fault.status or 503
    if fault.body is not None or fault.content_type is not None:
        ctype = fault.content_type or "text/plain"
        return web.Response(
            status=status, body=(fault.body or "").encode(), headers={"Content-Type": ctype, **headers}
        )
    reason = web.Response(status=status).reason
    return web.json_response({"message": f"{status} {reason}"}, status=status, headers=headers)


async def _serve(
    state: StandinState,
    request: web.Request,
    record: dict[str, Any],
    identity: Identity,
    rel: str | None,
    graphql_body: Any,
) -> web.Response:
    """GitLab's answer to an API request that no fault pre-empted."""
    if rel is not None and rel.startswith("/oauth/"):
        answer = await oauth_http.serve(state.oauth, state.world, request, rel)
        if answer is not None:
            record["route"] = f"{request.method} {rel}"
            return answer
    if rel is None or not rel.startswith("/api/"):
        record["unserved"] = True
        where = state.prefix or "/"
        return web.json_response(
            {"message": f"404 Not Found (the stand-in serves GitLab's API under {where.rstrip('/')}/api)"},
            status=404,
        )
    web_root = f"{request.scheme}://{request.host}{state.prefix}"
    if identity.oauth is not None:
        refusal = oauth_http.guard(state.oauth, identity.oauth, request, rel, graphql_body, state.endpoint)
        if refusal is not None:
            record["user"] = None
            return refusal
    if rel == "/api/graphql":
        if request.method != "POST":
            record["unserved"] = True
            return web.json_response({"errors": [{"message": "Use POST for GraphQL requests"}]}, status=405)
        if identity.refused:
            return web.json_response({"errors": [{"message": "Invalid token"}]}, status=401)
        return _serve_graphql(state, record, identity, graphql_body, web_root)
    if rel.startswith("/api/v4/") or rel == "/api/v4":
        if identity.refused:
            return web.json_response({"message": "401 Unauthorized"}, status=401)
        body = await request.read()  # already read (and kept) by api_handler
        return _serve_rest(state, request, record, identity, rel[len("/api/v4") :], web_root, body)
    record["unserved"] = True
    return web.json_response({"error": "404 Not Found"}, status=404)


def _serve_graphql(
    state: StandinState, record: dict[str, Any], identity: Identity, body: Any, web_root: str
) -> web.Response:
    if body is ValueError or body is None:
        reason = "request body is not JSON" if body is ValueError else "request body is empty"
        record["graphql"] = [
            {
                "operation_name": None,
                "operation_type": None,
                "fields": [],
                "variables": {},
                "valid": False,
                "errors": [reason],
            }
        ]
        record["invalid"].append(reason)
        state.record_invalid(record, reason)
        return web.json_response({"errors": [{"message": f"Invalid request: {reason}"}]}, status=400)
    world = state.world

    def make_ctx() -> Ctx:
        return Ctx(world=world, user=identity.user, web_root=web_root, rel_root=state.prefix)

    outcome = state.endpoint.run(body, make_ctx)
    record["graphql"] = [r.as_dict() for r in outcome.records]
    for reason in outcome.invalid:
        record["invalid"].append(reason)
        state.record_invalid(record, reason)
    for wid in dict.fromkeys(outcome.workflows_read):
        wf = world.workflows.get(wid)
        if wf is not None and wf.script:
            apply_workflow_update(world, wf, wf.script.pop(0))
    text = json.dumps(outcome.payload, ensure_ascii=False)
    return web.Response(body=text.encode("utf-8"), content_type="application/json", charset="utf-8")


async def _async_chunks(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    """A lazily made body, sent as it is made (never held whole)."""
    for chunk in chunks:
        yield chunk
        await asyncio.sleep(0)  # let other requests run between chunks


def _serve_rest(
    state: StandinState,
    request: web.Request,
    record: dict[str, Any],
    identity: Identity,
    rel: str,
    web_root: str,
    body: bytes,
) -> web.Response:
    segments, doubled = split_raw_path(rel)
    for segment in doubled:
        reason = f"path segment {segment!r} is still percent-encoded after one decoding: it was encoded twice"
        record["invalid"].append(reason)
        state.record_invalid(record, reason)
    query_lists = {k: request.query.getall(k) for k in request.query}
    req = RestRequest(
        world=state.world,
        user=identity.user,
        authenticated=identity.user is not None,
        method=request.method,
        segments=segments,
        query={k: v[-1] for k, v in query_lists.items()},
        query_lists=query_lists,
        web_root=web_root,
        api_root=f"{web_root}/api/v4",
        headers=request.headers,
        body=body,
    )
    outcome: RestOutcome = dispatch(req)
    record["route"] = outcome.route
    if outcome.route is None:
        record["unserved"] = True
    if outcome.stream is not None:
        return web.Response(
            status=outcome.status,
            body=_async_chunks(outcome.stream),
            headers={"Content-Type": outcome.content_type, **outcome.headers},
        )
    if outcome.raw is not None:
        record["range"] = request.headers.get("Range")
        record["body_bytes"] = len(outcome.raw)
        return web.Response(
            status=outcome.status,
            body=outcome.raw,
            headers={"Content-Type": outcome.content_type, **outcome.headers},
        )
    return web.Response(
        status=outcome.status,
        body=json.dumps(outcome.body, ensure_ascii=False).encode(),
        headers={"Content-Type": "application/json", **outcome.headers},
    )


# -- control API ----------------------------------------------------------------------------------


def _json_ok(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda o: json.dumps(o, ensure_ascii=False))


@web.middleware
async def control_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Bad control input → 400 with the reason; unknown ids → 404 (never a stack trace)."""
    try:
        return await handler(request)
    except BadControlRequest as exc:
        return _json_ok({"error": str(exc)}, status=400)
    except LookupError as exc:
        return _json_ok({"error": f"not found: {exc}"}, status=404)


async def _body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        data = await request.json()
    except ValueError:
        raise BadControlRequest("the body must be JSON") from None
    if not isinstance(data, dict):
        raise BadControlRequest("the body must be a JSON object")
    return data


def _state(request: web.Request) -> StandinState:
    return request.app[STATE]


async def c_health(request: web.Request) -> web.Response:
    s = _state(request)
    return _json_ok({"ok": True, "prefix": s.prefix, "requests": s.total, "invalid": len(s.invalid)})


async def c_reset(request: web.Request) -> web.Response:
    _state(request).reset()
    return _json_ok({"ok": True})


async def c_requests(request: web.Request) -> web.Response:
    s = _state(request)
    since = int(request.query.get("since", "0"))
    items = [r for r in s.log if r["seq"] > since]
    return _json_ok({"requests": items, "total": s.total})


async def c_clear_requests(request: web.Request) -> web.Response:
    s = _state(request)
    s.log.clear()
    s.total = 0
    return _json_ok({"ok": True})


async def c_invalid(request: web.Request) -> web.Response:
    return _json_ok({"invalid": _state(request).invalid})


async def c_clear_invalid(request: web.Request) -> web.Response:
    s = _state(request)
    cleared = list(s.invalid)
    s.invalid.clear()
    return _json_ok({"cleared": cleared})


async def c_faults(request: web.Request) -> web.Response:
    return _json_ok({"faults": [f.as_dict() for f in _state(request).faults]})


async def c_add_fault(request: web.Request) -> web.Response:
    s = _state(request)
    data = await _body(request)
    kind = data.get("kind")
    if kind not in FAULT_KINDS:
        raise BadControlRequest(f"kind must be one of {', '.join(FAULT_KINDS)}; got {kind!r}")
    if data.get("phase", "before") not in ("before", "after"):
        raise BadControlRequest("phase must be 'before' or 'after'")
    count = data.get("count", 1)
    if count is not None and (not isinstance(count, int) or count < 1):
        raise BadControlRequest("count must be a positive integer, or null for every request until cleared")
    if not isinstance(data.get("chunk", 1), int) or data.get("chunk", 1) < 1:
        raise BadControlRequest("chunk must be a positive integer (bytes per write of a trickle)")
    unknown = set(data.get("match") or {}) - {"method", "path", "field", "operation"}
    if unknown:
        raise BadControlRequest(f"unknown match keys {sorted(unknown)}; use method, path, field, operation")
    fault = Fault(
        id=next(s.fault_ids),
        kind=kind,
        count=count,
        status=data.get("status"),
        retry_after=data.get("retry_after", 1),
        seconds=float(data.get("seconds", 0)),
        body=data.get("body"),
        content_type=data.get("content_type"),
        headers=dict(data.get("headers") or {}),
        phase=data.get("phase", "before"),
        match=dict(data.get("match") or {}),
        chunk=int(data.get("chunk", 1)),
    )
    s.faults.append(fault)
    return _json_ok(fault.as_dict(), status=201)


async def c_clear_faults(request: web.Request) -> web.Response:
    _state(request).faults.clear()
    return _json_ok({"ok": True})


async def c_dataset(request: web.Request) -> web.Response:
    names = [n for n in dir(dataset) if n.isupper()]
    out = {}
    for name in names:
        value = getattr(dataset, name)
        if isinstance(value, str | int | float | list | dict | tuple | bool):
            out[name] = value
    return _json_ok(out)


def pipeline_state(world: World, pid: int) -> dict[str, Any]:
    p = world.pipelines[pid]
    return {
        "id": p.id,
        "iid": p.iid,
        "project_id": p.project_id,
        "ref": p.ref,
        "sha": p.sha,
        "status": p.status,
        "source": p.source,
        "name": p.name,
        "variables": p.variables,
        "inputs": p.inputs,
        "user": p.user,
        "jobs": [
            {
                "id": j.id,
                "name": j.name,
                "stage": j.stage,
                "status": j.status,
                "kind": j.kind,
                "retried": j.retried,
                "allow_failure": j.allow_failure,
            }
            for j in p.jobs
        ],
    }


async def c_pipelines(request: web.Request) -> web.Response:
    world = _state(request).world
    ids = (
        world.created_pipeline_ids
        if request.query.get("created") in ("1", "true")
        else sorted(world.pipelines)
    )
    return _json_ok({"pipelines": [pipeline_state(world, i) for i in ids]})


async def c_pipeline(request: web.Request) -> web.Response:
    world = _state(request).world
    pid = int(request.match_info["id"])
    if pid not in world.pipelines:
        raise LookupError(f"pipeline {pid}")
    return _json_ok(pipeline_state(world, pid))


async def c_patch_pipeline(request: web.Request) -> web.Response:
    world = _state(request).world
    pid = int(request.match_info["id"])
    pipeline = world.pipelines.get(pid)
    if pipeline is None:
        raise LookupError(f"pipeline {pid}")
    data = await _body(request)
    delay = data.pop("after_seconds", None)
    # Validated now, so a bad scheduled update fails the control call rather than the timer.
    status = _ci_status(data["status"]) if "status" in data else None
    jobs: list[tuple[Job, str]] = []
    for job_id, job_status in (data.get("jobs") or {}).items():
        job = next((j for j in pipeline.jobs if j.id == int(job_id)), None)
        if job is None:
            raise LookupError(f"job {job_id} in pipeline {pid}")
        jobs.append((job, _ci_status(job_status)))

    def apply() -> None:
        if status is not None:
            pipeline.status = status
        if "name" in data:
            pipeline.name = data["name"]
        for job, job_status in jobs:
            job.status = job_status

    if delay:
        s = _state(request)

        def later() -> None:
            if s.world is world:  # not reset meanwhile
                apply()

        s.timers.append(asyncio.get_running_loop().call_later(float(delay), later))
        return _json_ok({**pipeline_state(world, pid), "scheduled_in_seconds": float(delay)})
    apply()
    return _json_ok(pipeline_state(world, pid))


def _ci_status(value: Any) -> str:
    status = str(value).upper()
    allowed = (
        "CANCELED",
        "CANCELING",
        "CREATED",
        "FAILED",
        "MANUAL",
        "PENDING",
        "PREPARING",
        "RUNNING",
        "SCHEDULED",
        "SKIPPED",
        "SUCCESS",
        "WAITING_FOR_CALLBACK",
        "WAITING_FOR_RESOURCE",
    )
    if status not in allowed:
        raise BadControlRequest(f"status must be one of {', '.join(allowed)} (any case); got {value!r}")
    return status


def workflow_state(world: World, wid: int) -> dict[str, Any]:
    w = world.workflows[wid]
    return {
        "id": w.id,
        "project_id": w.project_id,
        "user": w.user,
        "status": w.status,
        "status_name": w.status_name,
        "status_group": w.status_group,
        "goal": w.goal,
        "pending_script_steps": len(w.script),
        "messages": [
            {
                "content": m.content,
                "message_type": m.message_type,
                "role": m.role,
                "status": m.status,
                "tool_info": m.tool_info,
            }
            for m in w.messages
        ],
    }


def _message(raw: Any) -> DuoMessage:
    if isinstance(raw, str):
        return DuoMessage(content=raw, message_type="agent")
    if not isinstance(raw, dict) or not isinstance(raw.get("content"), str):
        raise BadControlRequest(
            "a message is a string (an agent message) or an object with `content`, "
            "`message_type` (user, agent, tool, request) and optional `role`"
        )
    return DuoMessage(
        content=raw["content"],
        message_type=str(raw.get("message_type", raw.get("type", "agent"))),
        role=raw.get("role"),
        status=raw.get("status", "success"),
        tool_info=raw.get("tool_info"),
        message_sub_type=raw.get("message_sub_type"),
        timestamp=raw.get("timestamp", "2026-01-15T10:10:00Z"),
    )


def apply_workflow_update(world: World, wf: DuoWorkflow, update: dict[str, Any]) -> None:
    """Apply ``{status?, messages?, append_messages?, goal?, errors?}`` to a workflow.

    Raises:
        BadControlRequest: an unknown status or a malformed message.
    """
    if "status" in update:
        status = str(update["status"]).upper()
        if status not in STATUS_GROUPS:
            raise BadControlRequest(
                f"status must be one of {', '.join(STATUS_GROUPS)} (any case); got {update['status']!r}"
            )
        wf.status = status
    if "messages" in update:
        wf.messages = [_message(m) for m in update["messages"] or []]
    for m in update.get("append_messages") or []:
        wf.messages.append(_message(m))
    if "goal" in update:
        wf.goal = str(update["goal"])
    if "errors" in update:
        wf.checkpoint_errors = [str(e) for e in update["errors"] or []]
    wf.updated_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _workflow(request: web.Request) -> DuoWorkflow:
    world = _state(request).world
    wid = int(request.match_info["id"])
    if wid not in world.workflows:
        raise LookupError(f"workflow {wid}")
    return world.workflows[wid]


async def c_workflow(request: web.Request) -> web.Response:
    wf = _workflow(request)
    return _json_ok(workflow_state(_state(request).world, wf.id))


async def c_patch_workflow(request: web.Request) -> web.Response:
    s = _state(request)
    wf = _workflow(request)
    data = await _body(request)
    delay = data.pop("after_seconds", None)
    # Validate now, so a bad scheduled update fails the control call rather than the timer.
    probe = DuoWorkflow(0, wf.project_id, wf.user, wf.status, wf.goal)
    apply_workflow_update(s.world, probe, data)
    if delay:
        world = s.world

        def later() -> None:
            if s.world is world:  # not reset meanwhile
                apply_workflow_update(world, wf, data)

        s.timers.append(asyncio.get_running_loop().call_later(float(delay), later))
        return _json_ok({**workflow_state(s.world, wf.id), "scheduled_in_seconds": float(delay)})
    apply_workflow_update(s.world, wf, data)
    return _json_ok(workflow_state(s.world, wf.id))


async def c_workflow_script(request: web.Request) -> web.Response:
    s = _state(request)
    wf = _workflow(request)
    data = await _body(request)
    steps = data.get("steps")
    if not isinstance(steps, list) or not steps or not all(isinstance(x, dict) for x in steps):
        raise BadControlRequest("steps must be a non-empty list of updates ({status, messages, ...})")
    probe = DuoWorkflow(0, wf.project_id, wf.user, wf.status, wf.goal)
    for step in steps:
        apply_workflow_update(s.world, probe, step)
    apply_workflow_update(s.world, wf, steps[0])
    wf.script = list(steps[1:])
    return _json_ok(workflow_state(s.world, wf.id))


def _project(request: web.Request) -> Any:
    world = _state(request).world
    project = world.project_by_ref(request.match_info["id"])
    if project is None:
        raise LookupError(f"project {request.match_info['id']}")
    return project


async def c_patch_project(request: web.Request) -> web.Response:
    project = _project(request)
    data = await _body(request)
    if "visibility" in data:
        if data["visibility"] not in ("private", "internal", "public"):
            raise BadControlRequest("visibility must be private, internal or public")
        project.visibility = data["visibility"]
    if "exclusion_rules" in data:
        rules = data["exclusion_rules"]
        if rules is not None and not (isinstance(rules, list) and all(isinstance(r, str) for r in rules)):
            raise BadControlRequest("exclusion_rules must be a list of strings or null")
        project.exclusion_rules = rules
    if "duo_features_enabled" in data:
        project.duo_features_enabled = bool(data["duo_features_enabled"])
    for username, level in (data.get("members") or {}).items():
        if level is None:
            project.members.pop(username, None)
        else:
            try:
                project.members[username] = Access[str(level).upper()]
            except KeyError:
                raise BadControlRequest(
                    f"access level must be one of {[a.name.lower() for a in Access]}"
                ) from None
    return _json_ok(
        {
            "id": project.id,
            "full_path": project.full_path,
            "visibility": project.visibility,
            "exclusion_rules": project.exclusion_rules,
            "members": {k: v.name.lower() for k, v in project.members.items()},
        }
    )


async def c_commit_file(request: web.Request) -> web.Response:
    project = _project(request)
    data = await _body(request)
    branch = data.get("branch", project.repository.default_branch)
    if branch not in project.repository.branches:
        raise LookupError(f"branch {branch}")
    path = data.get("path")
    if not isinstance(path, str) or not path:
        raise BadControlRequest("path is required")
    blob: Blob | None
    if data.get("delete"):
        blob = None
    elif "base64" in data:
        blob = Blob.of(base64.b64decode(data["base64"]))
    elif isinstance(data.get("text"), str):
        blob = Blob.of(data["text"])
    else:
        raise BadControlRequest("give `text`, `base64` or `delete: true`")
    commit = project.repository.commit_file(branch, path, blob, data.get("message") or f"Update {path}")
    return _json_ok({"sha": commit.sha, "branch": branch}, status=201)


async def c_create_ref(request: web.Request) -> web.Response:
    project = _project(request)
    data = await _body(request)
    kind = request.match_info["kind"]
    name, ref = data.get("name"), data.get("ref", project.repository.default_branch)
    if not isinstance(name, str) or not name:
        raise BadControlRequest("name is required")
    commit = project.repository.resolve(ref)
    if commit is None:
        raise LookupError(f"ref {ref}")
    if kind == "branches":
        project.repository.branches[name] = commit.sha
    else:
        project.repository.tags[name] = Tag(name, commit.sha, data.get("message", ""))
    return _json_ok({"name": name, "sha": commit.sha}, status=201)


async def c_delete_ref(request: web.Request) -> web.Response:
    project = _project(request)
    kind, name = request.match_info["kind"], request.match_info["name"]
    refs = project.repository.branches if kind == "branches" else project.repository.tags
    if name not in refs:
        raise LookupError(f"{kind[:-1]} {name}")
    del refs[name]
    return _json_ok({"ok": True})


async def c_patch_user(request: web.Request) -> web.Response:
    world = _state(request).world
    user = world.user_named(request.match_info["username"])
    if user is None:
        raise LookupError(f"user {request.match_info['username']}")
    data = await _body(request)
    if "tokens" in data:
        tokens = data["tokens"]
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise BadControlRequest("tokens must be a list of strings")
        user.tokens = tuple(tokens)
    if "admin" in data:
        user.admin = bool(data["admin"])
    return _json_ok({"username": user.username, "tokens": len(user.tokens), "admin": user.admin})


async def c_patch_settings(request: web.Request) -> web.Response:
    state = _state(request)
    settings = state.world.settings
    data = await _body(request)
    if "duo_not_found" in data:
        if data["duo_not_found"] not in ("error", "empty"):
            raise BadControlRequest("duo_not_found must be 'error' or 'empty'")
        settings.duo_not_found = data["duo_not_found"]
    if "gitlab_version" in data or "gitlab_edition" in data:
        version = str(data.get("gitlab_version") or state.gitlab[0])
        edition = data.get("gitlab_edition") or state.gitlab[1]
        if edition not in ("ee", "ce"):
            raise BadControlRequest("gitlab_edition must be 'ee' or 'ce'")
        try:
            parse_version(version)
        except ValueError as exc:
            raise BadControlRequest(str(exc)) from None
        state.serve_gitlab(version, edition)
    if "version" in data:
        settings.version = str(data["version"])
    if "artifacts_tree" in data:
        settings.artifacts_tree = bool(data["artifacts_tree"])
    if "artifacts_tree_recursive" in data:
        if data["artifacts_tree_recursive"] not in ("all", "children"):
            raise BadControlRequest("artifacts_tree_recursive must be 'all' or 'children'")
        settings.artifacts_tree_recursive = data["artifacts_tree_recursive"]
    if "artifacts_download" in data:
        if data["artifacts_download"] not in ("range", "whole", "redirect"):
            raise BadControlRequest("artifacts_download must be 'range', 'whole' or 'redirect'")
        settings.artifacts_download = data["artifacts_download"]
    return _json_ok(
        {
            "duo_not_found": settings.duo_not_found,
            "version": settings.version,
            "edition": settings.edition,
            "gitlab_version": state.gitlab[0],
            "gitlab_edition": state.gitlab[1],
            "artifacts_tree": settings.artifacts_tree,
            "artifacts_tree_recursive": settings.artifacts_tree_recursive,
            "artifacts_download": settings.artifacts_download,
        }
    )


def create_app(
    endpoint: GraphQLEndpoint,
    *,
    prefix: str = "",
    gitlab: tuple[str, Edition] = (NEWEST, "ee"),
    schema_path: Path = SCHEMA_FILE,
) -> web.Application:
    """The stand-in's aiohttp application (GitLab's API under ``prefix``, control API at ``/_standin``).

    ``gitlab`` is the version and edition it answers as; ``endpoint`` must hold that version's
    schema (:func:`tests.standin.graphql_api.load_band_schema`).
    """
    if prefix and not prefix.startswith("/"):
        raise ValueError(f"prefix must start with '/': {prefix!r}")
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[STATE] = StandinState(endpoint, prefix, gitlab=gitlab, schema_path=schema_path)

    control = web.Application(middlewares=[control_errors])
    control[STATE] = app[STATE]
    control.router.add_get("/health", c_health)
    control.router.add_post("/reset", c_reset)
    control.router.add_get("/requests", c_requests)
    control.router.add_delete("/requests", c_clear_requests)
    control.router.add_get("/invalid", c_invalid)
    control.router.add_delete("/invalid", c_clear_invalid)
    control.router.add_get("/faults", c_faults)
    control.router.add_post("/faults", c_add_fault)
    control.router.add_delete("/faults", c_clear_faults)
    control.router.add_get("/dataset", c_dataset)
    control.router.add_get("/pipelines", c_pipelines)
    control.router.add_get(r"/pipelines/{id:\d+}", c_pipeline)
    control.router.add_patch(r"/pipelines/{id:\d+}", c_patch_pipeline)
    control.router.add_get(r"/workflows/{id:\d+}", c_workflow)
    control.router.add_patch(r"/workflows/{id:\d+}", c_patch_workflow)
    control.router.add_post(r"/workflows/{id:\d+}/script", c_workflow_script)
    control.router.add_patch("/projects/{id}", c_patch_project)
    control.router.add_put("/projects/{id}/files", c_commit_file)
    control.router.add_post("/projects/{id}/{kind:branches|tags}", c_create_ref)
    control.router.add_delete("/projects/{id}/{kind:branches|tags}/{name}", c_delete_ref)
    control.router.add_patch("/users/{username}", c_patch_user)
    control.router.add_patch("/settings", c_patch_settings)
    oauth_http.control_routes(control, app[STATE].oauth, lambda: app[STATE].world)
    app.add_subapp("/_standin", control)
    app.router.add_route("*", "/{tail:.*}", api_handler)
    return app
