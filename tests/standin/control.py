"""A small client for the stand-in's control API (``/_standin/...``), for tests and benchmarks.

Synchronous (``StandinControl``) for ordinary test code; :class:`AsyncStandinControl` runs the
same methods in a worker thread for code that must not block its event loop (for example, a test
that changes a Duo workflow while an MCP call is waiting on it)::

    standin.control.reset()
    standin.control.rate_limit(retry_after=1, count=1)
    standin.control.update_workflow(501, status="finished", messages=["Done."])
    assert standin.control.graphql_requests(field="project") == 1
    await standin.acontrol.update_workflow(501, status="finished")

Every method raises :class:`StandinControlError` when the stand-in refuses the call (bad input,
unknown id), with the stand-in's explanation.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, cast
from urllib.parse import quote

import httpx


class StandinControlError(RuntimeError):
    """The control API refused a call (4xx) or the stand-in is unreachable."""


def _items(answer: dict[str, Any], key: str) -> list[dict[str, Any]]:
    return cast(list[dict[str, Any]], answer[key])


def _project_segment(project: int | str) -> str:
    return str(project) if isinstance(project, int) else quote(str(project), safe="")


class StandinControl:
    """Drive one stand-in process.

    Args:
        base_url: the stand-in's root (``http://127.0.0.1:N``; the control API is never under the
            GitLab sub-path).
        timeout: seconds per control call.
    """

    def __init__(self, base_url: str, *, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=f"{self.base_url}/_standin", timeout=timeout, trust_env=False)

    def close(self) -> None:
        """Close the underlying HTTP client."""
        self._http.close()

    def call(
        self, method: str, path: str, json: Any = None, params: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """One control request; returns the decoded JSON answer.

        Raises:
            StandinControlError: the stand-in answered 4xx/5xx or could not be reached.
        """
        try:
            response = self._http.request(method, path, json=json, params=params)
        except httpx.HTTPError as exc:
            raise StandinControlError(
                f"stand-in control API unreachable at {self.base_url}: {exc!r}"
            ) from exc
        if response.status_code >= 400:
            try:
                detail = response.json().get("error", response.text)
            except ValueError:
                detail = response.text
            raise StandinControlError(f"{method} /_standin{path} → {response.status_code}: {detail}")
        return cast(dict[str, Any], response.json())

    # -- state ------------------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """``{"ok", "prefix", "requests", "invalid"}``."""
        return self.call("GET", "/health")

    def reset(self) -> None:
        """Fresh seed data, an empty request log, no faults (the invalid list is kept)."""
        self.call("POST", "/reset")

    def dataset(self) -> dict[str, Any]:
        """The constants of :mod:`tests.standin.dataset` as the stand-in sees them."""
        return self.call("GET", "/dataset")

    # -- request log ------------------------------------------------------------------------------

    def requests(self, since: int = 0) -> list[dict[str, Any]]:
        """Logged API requests, oldest first (``seq`` > ``since``).

        Each is ``{seq, time, method, path, query, route, status, auth, user, fault, graphql,
        unserved, invalid, traceparent, duration_ms}``; ``auth`` is ``private-token``, ``bearer`` or
        None (never the token); ``graphql`` lists ``{operation_name, operation_type, fields, variables, valid,
        errors, paths, unserved}`` per operation.
        """
        return _items(self.call("GET", "/requests", params={"since": since}), "requests")

    def clear_requests(self) -> None:
        """Empty the request log."""
        self.call("DELETE", "/requests")

    def request_count(self) -> int:
        """How many API requests arrived since the last reset or clear."""
        return int(self.call("GET", "/requests", params={"since": 1 << 62})["total"])

    def graphql_requests(self, *, field: str | None = None, operation: str | None = None) -> int:
        """How many GraphQL HTTP requests were logged (optionally only those selecting a top-level
        ``field`` such as ``project``/``pipelineCreate``, or a named ``operation``)."""
        return len(self.graphql_log(field=field, operation=operation))

    def graphql_log(self, *, field: str | None = None, operation: str | None = None) -> list[dict[str, Any]]:
        """The GraphQL requests of the log, filtered as :meth:`graphql_requests`."""
        out = []
        for r in self.requests():
            ops = r.get("graphql") or []
            if not ops and not r["path"].endswith("/api/graphql"):
                continue
            if field is not None and not any(field in op.get("fields", []) for op in ops):
                continue
            if operation is not None and not any(op.get("operation_name") == operation for op in ops):
                continue
            out.append(r)
        return out

    def rest_requests(self, route: str | None = None) -> list[dict[str, Any]]:
        """The REST requests of the log, optionally only one route (``GET /projects/:id/repository/tags``)."""
        return [
            r for r in self.requests() if "/api/v4/" in r["path"] and (route is None or r["route"] == route)
        ]

    # -- invalid requests -------------------------------------------------------------------------

    def invalid(self) -> list[dict[str, Any]]:
        """Requests GitLab would refuse as malformed: ``{seq, method, path, reason, operation_name?}``."""
        return _items(self.call("GET", "/invalid"), "invalid")

    def clear_invalid(self) -> list[dict[str, Any]]:
        """Forget the invalid requests (a test that sends them on purpose); returns them."""
        return _items(self.call("DELETE", "/invalid"), "cleared")

    # -- faults -----------------------------------------------------------------------------------

    def add_fault(
        self, kind: str, *, count: int | None = 1, match: dict[str, str] | None = None, **options: Any
    ) -> dict[str, Any]:
        """Inject a fault into the next ``count`` matching API requests (None: until cleared).

        ``kind``: ``rate_limit``, ``status``, ``html``, ``delay``, ``drop``, ``reset``,
        ``graphql_error``, ``graphql_partial``, ``trickle``; ``options``: ``status``, ``retry_after``,
        ``seconds``, ``body``, ``content_type``, ``headers``, ``phase`` (``before``/``after``), ``chunk``;
        ``match``: ``method``, ``path``, ``field``, ``operation``.
        See :class:`tests.standin.server.Fault`.
        """
        return self.call(
            "POST",
            "/faults",
            json={"kind": kind, "count": count, "match": match or {}, **options},
        )

    def rate_limit(
        self, retry_after: float | None = 1, *, count: int | None = 1, match: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """429 with ``Retry-After: <retry_after>`` (None: no such header) on the next ``count`` requests."""
        return self.add_fault("rate_limit", count=count, match=match, retry_after=retry_after)

    def fail(
        self, status: int = 503, *, count: int | None = 1, match: dict[str, str] | None = None, **options: Any
    ) -> dict[str, Any]:
        """Answer ``status`` (GitLab-like JSON body) to the next ``count`` requests."""
        return self.add_fault("status", count=count, match=match, status=status, **options)

    def html_page(
        self, *, status: int = 200, count: int | None = 1, match: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """Answer a GitLab sign-in HTML page (as a proxy or SSO in front of GitLab would)."""
        return self.add_fault("html", count=count, match=match, status=status)

    def delay(
        self,
        seconds: float,
        *,
        count: int | None = 1,
        match: dict[str, str] | None = None,
        phase: str = "before",
    ) -> dict[str, Any]:
        """Hold the next ``count`` requests ``seconds`` before answering (``phase="after"``: after
        processing them, so a mutation is applied before the caller's timeout fires)."""
        return self.add_fault("delay", count=count, match=match, seconds=seconds, phase=phase)

    def drop(
        self, *, count: int | None = 1, match: dict[str, str] | None = None, phase: str = "before"
    ) -> dict[str, Any]:
        """Close the connection of the next ``count`` requests without answering."""
        return self.add_fault("drop", count=count, match=match, phase=phase)

    def reset_connection(
        self, *, count: int | None = 1, match: dict[str, str] | None = None, phase: str = "before"
    ) -> dict[str, Any]:
        """Abort the connection of the next ``count`` requests with a TCP RST."""
        return self.add_fault("reset", count=count, match=match, phase=phase)

    def graphql_partial(
        self,
        message: str = "Internal server error",
        *,
        count: int | None = 1,
        match: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Process the next ``count`` GraphQL requests and answer their data plus ``errors``."""
        return self.add_fault("graphql_partial", count=count, match=match, body=message)

    def trickle(
        self,
        seconds: float = 1.0,
        *,
        chunk: int = 1,
        count: int | None = 1,
        match: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Send the real answer of the next ``count`` requests ``chunk`` bytes every ``seconds``."""
        return self.add_fault("trickle", count=count, match=match, seconds=seconds, chunk=chunk)

    def faults(self) -> list[dict[str, Any]]:
        """Injected faults with their remaining ``count`` and ``hits``."""
        return _items(self.call("GET", "/faults"), "faults")

    def clear_faults(self) -> None:
        """Remove every injected fault."""
        self.call("DELETE", "/faults")

    # -- pipelines --------------------------------------------------------------------------------

    def pipeline(self, pipeline_id: int) -> dict[str, Any]:
        """A pipeline's state: status, jobs, and the ``variables``/``inputs`` it was created with."""
        return self.call("GET", f"/pipelines/{pipeline_id}")

    def pipelines(self, *, created: bool = False) -> list[dict[str, Any]]:
        """All pipelines, or (``created``) only those ``pipelineCreate`` made since the last reset."""
        return _items(
            self.call("GET", "/pipelines", params={"created": "1"} if created else None), "pipelines"
        )

    def update_pipeline(
        self,
        pipeline_id: int,
        *,
        status: str | None = None,
        jobs: dict[int, str] | None = None,
        name: str | None = None,
        after_seconds: float | None = None,
    ) -> dict[str, Any]:
        """Set a pipeline's status and/or some jobs' statuses (``{job_id: "success"}``);
        ``after_seconds`` schedules the change instead of applying it now (a pipeline that
        finishes while a caller waits on it)."""
        body: dict[str, Any] = {}
        if after_seconds is not None:
            body["after_seconds"] = after_seconds
        if status is not None:
            body["status"] = status
        if jobs is not None:
            body["jobs"] = {str(k): v for k, v in jobs.items()}
        if name is not None:
            body["name"] = name
        return self.call("PATCH", f"/pipelines/{pipeline_id}", json=body)

    # -- Duo workflows ----------------------------------------------------------------------------

    def workflow(self, workflow_id: int) -> dict[str, Any]:
        """A workflow's state (status, status group, messages, pending script steps)."""
        return self.call("GET", f"/workflows/{workflow_id}")

    def update_workflow(
        self,
        workflow_id: int,
        *,
        status: str | None = None,
        messages: Iterable[str | dict[str, Any]] | None = None,
        append_messages: Iterable[str | dict[str, Any]] | None = None,
        errors: Iterable[str] | None = None,
        after_seconds: float | None = None,
    ) -> dict[str, Any]:
        """Change a Duo workflow: ``status`` (``running``, ``tool_call_approval_required``, ...),
        replace ``messages`` or ``append_messages`` (a string is an agent message; a dict has
        ``content``, ``message_type`` of user/agent/tool/request, optional ``role`` and
        ``tool_info``). ``after_seconds`` schedules the change instead of applying it now."""
        body: dict[str, Any] = {}
        if status is not None:
            body["status"] = status
        if messages is not None:
            body["messages"] = list(messages)
        if append_messages is not None:
            body["append_messages"] = list(append_messages)
        if errors is not None:
            body["errors"] = list(errors)
        if after_seconds is not None:
            body["after_seconds"] = after_seconds
        return self.call("PATCH", f"/workflows/{workflow_id}", json=body)

    def script_workflow(self, workflow_id: int, steps: list[dict[str, Any]]) -> dict[str, Any]:
        """Walk a workflow through ``steps`` (each an update as :meth:`update_workflow` takes).

        The first step applies now; each GraphQL request that reads the workflow is answered with
        the current step and then moves it to the next, so read *k* sees step *k*; the last step
        stays.
        """
        return self.call(
            "POST",
            f"/workflows/{workflow_id}/script",
            json={"steps": steps},
        )

    # -- projects, repositories, users, settings ---------------------------------------------------

    def update_project(self, project: int | str, **fields: Any) -> dict[str, Any]:
        """Change ``visibility``, ``exclusion_rules`` (list or None), ``duo_features_enabled`` or
        ``members`` (``{"alice": "reporter", "dave": None}``) of a project (id or full path)."""
        return self.call("PATCH", f"/projects/{_project_segment(project)}", json=fields)

    def commit_file(
        self,
        project: int | str,
        path: str,
        text: str | None = None,
        *,
        base64: str | None = None,
        branch: str | None = None,
        delete: bool = False,
        message: str | None = None,
    ) -> str:
        """Commit a new version of ``path`` to ``branch`` (default branch by default); returns the
        new commit SHA (the branch moves, tags do not)."""
        body: dict[str, Any] = {"path": path, "delete": delete}
        if text is not None:
            body["text"] = text
        if base64 is not None:
            body["base64"] = base64
        if branch is not None:
            body["branch"] = branch
        if message is not None:
            body["message"] = message
        return str(self.call("PUT", f"/projects/{_project_segment(project)}/files", json=body)["sha"])

    def create_branch(self, project: int | str, name: str, ref: str = "main") -> str:
        """Create a branch at ``ref``; returns its commit SHA."""
        return str(
            self.call(
                "POST", f"/projects/{_project_segment(project)}/branches", json={"name": name, "ref": ref}
            )["sha"]
        )

    def delete_branch(self, project: int | str, name: str) -> None:
        """Delete a branch."""
        self.call("DELETE", f"/projects/{_project_segment(project)}/branches/{quote(name, safe='')}")

    def create_tag(self, project: int | str, name: str, ref: str = "main", message: str = "") -> str:
        """Create a tag at ``ref``; returns its commit SHA."""
        return str(
            self.call(
                "POST",
                f"/projects/{_project_segment(project)}/tags",
                json={"name": name, "ref": ref, "message": message},
            )["sha"]
        )

    def update_user(
        self, username: str, *, tokens: list[str] | None = None, admin: bool | None = None
    ) -> dict[str, Any]:
        """Replace a user's tokens (e.g. ``[]`` to revoke them all) or admin flag."""
        body: dict[str, Any] = {}
        if tokens is not None:
            body["tokens"] = tokens
        if admin is not None:
            body["admin"] = admin
        return self.call("PATCH", f"/users/{quote(username, safe='')}", json=body)

    def settings(
        self,
        *,
        duo_not_found: str | None = None,
        version: str | None = None,
        artifacts_tree: bool | None = None,
        artifacts_download: str | None = None,
        gitlab_version: str | None = None,
        gitlab_edition: str | None = None,
        artifacts_tree_recursive: str | None = None,
    ) -> dict[str, Any]:
        """``duo_not_found``: ``error`` (default) or ``empty`` for unreadable workflows;
        ``version``: what ``/version`` and ``metadata`` report; ``artifacts_tree``: whether the
        artifacts tree API exists (GitLab 18.8+); ``artifacts_download``: ``range`` (default),
        ``whole`` or ``redirect`` (see :class:`tests.standin.models.Settings`);
        ``artifacts_tree_recursive``: ``all`` (default) or ``children`` (one level, as GitLab's
        code answers ``recursive=true``); ``gitlab_version``/``gitlab_edition`` (``ee``, ``ce``):
        answer as that GitLab from now on, across resets (its schema, built in a second or two;
        ``version``, ``enterprise`` and the REST routes it has; see :mod:`tests.gitlab.versions`)."""
        given = {
            "duo_not_found": duo_not_found,
            "version": version,
            "artifacts_tree": artifacts_tree,
            "artifacts_download": artifacts_download,
            "gitlab_version": gitlab_version,
            "gitlab_edition": gitlab_edition,
            "artifacts_tree_recursive": artifacts_tree_recursive,
        }
        body = {k: v for k, v in given.items() if v is not None}
        return self.call("PATCH", "/settings", json=body)

    # -- GitLab's OAuth provider (tests.standin.oauth) ---------------------------------------------

    def oauth_application(
        self, uid: str, secret: str | None, redirect_uri: str, scopes: Iterable[str] = ("api",)
    ) -> dict[str, Any]:
        """Register an OAuth application (confidential when ``secret`` is given); ``redirect_uri``
        holds one URI per line, as GitLab's form does."""
        body = {"uid": uid, "secret": secret, "redirect_uri": redirect_uri, "scopes": list(scopes)}
        return self.call("POST", "/oauth/applications", json=body)

    def oauth_user(
        self, user_id: int, username: str, name: str | None = None, groups: Iterable[str] = ()
    ) -> dict[str, Any]:
        """Add a GitLab user (or give an existing one, such as ``alice``, its ``groups``: full
        paths it belongs to, listed by ``GET /api/v4/groups``). Kept across resets."""
        body = {"id": user_id, "username": username, "name": name or username, "groups": list(groups)}
        return self.call("POST", "/oauth/users", json=body)

    def oauth_current_user(self, username: str | None) -> None:
        """Who is signed in to GitLab's web UI: ``/oauth/authorize`` approves as them at once
        (None: nobody, so it redirects to the sign-in page)."""
        self.call("POST", "/oauth/current_user", json={"username": username})

    def oauth_expire(self, username: str | None = None) -> int:
        """Expire access tokens now (``username``'s, or everyone's); returns how many."""
        return int(self.call("POST", "/oauth/expire", json={"username": username})["expired"])

    def oauth_revoke(self, username: str) -> int:
        """Revoke ``username``'s grants (all their OAuth tokens), as they would in their
        profile's Applications page; returns how many tokens."""
        return int(self.call("POST", "/oauth/revoke", json={"username": username})["revoked"])

    def oauth_settings(self, *, access_token_seconds: int | None = None) -> dict[str, Any]:
        """How long new access tokens live (GitLab: 7200 s, fixed)."""
        body = {} if access_token_seconds is None else {"access_token_seconds": access_token_seconds}
        return self.call("POST", "/oauth/settings", json=body)

    def oauth_counts(self) -> dict[str, Any]:
        """``{"refreshes": {username: n}, "invalid_grants": n, "token_requests": n, "active_tokens": n}``."""
        return self.call("GET", "/oauth/counts")

    def oauth_tokens(self) -> list[dict[str, Any]]:
        """Every OAuth token issued: ``{access_token, refresh_token, client_id, username, scopes,
        revoked, expired}`` (values included, so a test can check none leaked)."""
        return _items(self.call("GET", "/oauth/tokens"), "tokens")

    def oauth_clear(self) -> None:
        """Forget every OAuth application, added user and token, and zero the counts."""
        self.call("DELETE", "/oauth")


class AsyncStandinControl:
    """:class:`StandinControl`'s methods as coroutines (each runs in a worker thread)."""

    def __init__(self, sync: StandinControl) -> None:
        self._sync = sync

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        target = getattr(self._sync, name)
        if not callable(target):
            raise AttributeError(name)

        @functools.wraps(target)
        async def run(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(target, *args, **kwargs)

        return run
