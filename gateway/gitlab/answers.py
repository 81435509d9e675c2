"""What GitLab answered, turned into data or a typed error: HTTP statuses, bodies that are not
GitLab's JSON, and GraphQL ``errors``.

A :class:`~gateway.gitlab.call.Transient` is raised for what is worth another try (the request
loop retries reads, and mutations only when GitLab's rate limiter refused them before anything
ran); everything else is a :class:`~gateway.gitlab.errors.GitLabError`.

GraphQL ``errors`` are classified by what they say: GitLab's wording for a missing or hidden
object is ``not_found``; its internal errors and timeouts ("Internal server error", "Request
timed out", graphql-ruby's "Timeout on Type.field") are GitLab failing, not the caller's input,
so they are upstream errors (retried for reads; for a mutation, which reached GitLab, outcome
unknown); a read's cursor GitLab cannot decode is ``bad_request`` of its own type (the tool edge
names the cursor argument); the rest is ``bad_request``.
"""

from __future__ import annotations

import email.utils
import json
import math
import re
import time
from datetime import UTC
from typing import Any
from urllib.parse import urlsplit

from gateway.gitlab.call import GitLabCall, Headers, HttpReply, Transient
from gateway.gitlab.errors import (
    GitLabBadRequest,
    GitLabConflict,
    GitLabCursorRefused,
    GitLabNotFound,
    GitLabRateLimited,
    GitLabSchemaMismatch,
    GitLabUnauthorized,
    GitLabUpstreamError,
)
from gateway.gitlab.json_budget import AnswerTooComplex

#: Statuses worth another try for a read.
RETRY_STATUSES = frozenset({429, 502, 503, 504})
#: ``retry_after_seconds`` told to a caller when GitLab's 429 named no wait (GitLab's throttles
#: count requests per 60-second period; GitLab docs "Rate limits").
DEFAULT_RATE_LIMIT_WAIT = 60
#: GitLab's wording when a GraphQL resource is missing or not visible to the caller.
_GRAPHQL_NOT_FOUND = ("does not exist or you don't have permission", "not found")
#: GitLab failing while it ran the query: its GraphQL controller's "Internal server error" and
#: "Request timed out" (a cancelled database statement), graphql-ruby's "Timeout on Type.field".
_GRAPHQL_UPSTREAM = re.compile(
    r"internal server error|\btimed out\b|\btimeout on\b|statement timeout|service unavailable"
    r"|try again later",
    re.IGNORECASE,
)
#: GitLab refusing a connection's ``after``/``before``: its keyset connections say "Please provide
#: a valid cursor", graphql-ruby's array and offset connections "Invalid cursor: \"...\"".
_GRAPHQL_CURSOR = re.compile(r"please provide a valid cursor|\binvalid cursor\b", re.IGNORECASE)


def _refused(call: GitLabCall, what: str) -> str:
    """Whose token GitLab refused, and who can fix it: the caller (passthrough) or the operator."""
    checks = (
        "valid and not expired, has the `api` or `read_api` scope, and belongs to a user who can "
        "see the project"
    )
    if call.credential.source == "passthrough":
        return f"GitLab refused your token {what}. Check that the token you send is {checks}."
    if not call.credential.token:
        return (
            f"GitLab refused a request without a token {what}: this gateway has no GITLAB_TOKEN, so "
            "it reads public projects only. Its operator can set GITLAB_TOKEN (scope `api`, or "
            "`read_api` for a read-only gateway)."
        )
    return f"GitLab refused the gateway's GITLAB_TOKEN {what}. Its operator should check that it is {checks}."


def check_status(call: GitLabCall, response: HttpReply, *, where: str, max_retry_after: float) -> HttpReply:
    """``response`` when it is a success with GitLab's JSON; else the typed error or transient.

    Args:
        where: the configured GitLab's base URL (named in messages).
        max_retry_after: the longest ``Retry-After`` waited for; a longer one is
            ``rate_limited`` at once.
    """
    status = response.status_code
    html = _looks_like_html(response)
    if status < 300 and not html:
        return response
    rid = call.request_id
    if 300 <= status < 400:
        location = response.headers.get("location", "")
        target = location.split("?", 1)[0] or "an unnamed location"
        raise GitLabUpstreamError(
            f"GitLab at {where} answered {call.operation} with a redirect ({status}) to {target}. "
            "GitLab's API does not redirect: set GITLAB_URL to GitLab's final address (scheme, host "
            "and sub-path), or, if this is a login or SSO page, let the gateway reach GitLab without it.",
            status=status,
            request_id=rid,
        )
    if status < 300:  # an HTML page with a success status
        raise GitLabUpstreamError(
            f"GitLab at {where} answered {call.operation} with an HTML page instead of JSON (status "
            f"{status}): a proxy, SSO or login page probably sits in front of it. Check GITLAB_URL and "
            "the proxy settings (HTTPS_PROXY, NO_PROXY).",
            status=status,
            request_id=rid,
        )
    message = "" if html else _error_message(response)
    detail = f": {message}" if message else ""
    html_note = (
        " (an HTML page, not GitLab's JSON: a proxy or SSO page may sit in front of GitLab)" if html else ""
    )
    if status == 429:
        retry_after = retry_after_seconds(response.headers)
        limit = response.headers.get("RateLimit-Name")
        # Without a hint from GitLab, advertise its usual throttle period rather than guess low.
        advertised = max(1, math.ceil(retry_after)) if retry_after is not None else DEFAULT_RATE_LIMIT_WAIT
        limited = GitLabRateLimited(
            f"Rate limited by GitLab{f' ({limit})' if limit else ''}. Retry after {advertised} "
            f"second{'s' if advertised != 1 else ''}.",
            retry_after_seconds=advertised,
            limit_name=limit,
            request_id=rid,
        )
        if retry_after is not None and retry_after > max_retry_after:
            raise limited
        # GitLab's rate limiter refuses before anything runs, so even a mutation was not applied.
        raise Transient(limited, retry_after=retry_after)
    if status in (401, 403):
        raise GitLabUnauthorized(
            _refused(call, f"({status}{detail}){html_note}"), status=status, request_id=rid
        )
    if status == 404 and (call.graphql or html):
        # GraphQL reports a missing resource as null data, never 404: the endpoint itself is missing.
        raise GitLabUpstreamError(
            f"GitLab at {where} has no {'GraphQL endpoint' if call.graphql else 'such API route'} "
            f"({urlsplit(call.url).path} answered 404){html_note}. Check GITLAB_URL, including any "
            "sub-path such as https://host/gitlab.",
            status=status,
            request_id=rid,
        )
    if status == 404:
        raise GitLabNotFound(message or "GitLab answered 404 Not Found.", status=status, request_id=rid)
    if status in RETRY_STATUSES or status >= 500 or status == 408:
        final = GitLabUpstreamError(
            f"GitLab failed with status {status}{detail}{html_note}; try again later.",
            status=status,
            request_id=rid,
        )
        if not call.idempotent:
            raise call.maybe_sent(f"status {status}")
        retry_after = retry_after_seconds(response.headers)
        if status in RETRY_STATUSES and (retry_after is None or retry_after <= max_retry_after):
            raise Transient(final, retry_after=retry_after)
        raise final
    if status == 409:
        raise GitLabConflict(
            f"GitLab refused the request because of a conflict (409){detail}.", status=status, request_id=rid
        )
    raise GitLabBadRequest(
        f"GitLab rejected the request ({status}){detail}{html_note}.", status=status, request_id=rid
    )


def decode_json(call: GitLabCall, response: HttpReply) -> Any:
    """The JSON body of a success ``response``.

    Raises:
        GitLabMaybeSent: a mutation's body is not JSON (its success status says it may have run).
        GitLabUpstreamError: a read's body is not JSON.
    """
    try:
        return response.json()
    except AnswerTooComplex as err:
        if not call.idempotent:
            raise call.maybe_sent(f"status {response.status_code} with {err}") from None
        raise GitLabUpstreamError(
            f"GitLab answered {call.operation} with {err}, so the gateway used none of it. GitLab's own "
            "answers to this tool are far smaller: check GITLAB_URL and any proxy between the gateway "
            "and GitLab.",
            status=response.status_code,
            request_id=call.request_id,
        ) from None
    except ValueError:
        if not call.idempotent:  # a success status: the change may well have been made
            raise call.maybe_sent(f"status {response.status_code} with a body that is not JSON") from None
        raise GitLabUpstreamError(
            f"GitLab answered {call.operation} with status {response.status_code} and a body that is "
            f"not JSON (Content-Type {response.headers.get('content-type', 'missing')!r}). Check "
            "GITLAB_URL and any proxy between the gateway and GitLab.",
            status=response.status_code,
            request_id=call.request_id,
        ) from None


def graphql_data(call: GitLabCall, payload: Any) -> dict[str, Any]:
    """The ``data`` of a GraphQL answer, or the error its ``errors`` say.

    Raises:
        Transient: a read GitLab failed to run (internal error, timeout): worth another try.
        GitLabMaybeSent: a mutation answered with errors while it ran (non-null ``data``, or
            GitLab's internal error or timeout), or with something other than a JSON object.
        GitLabUpstreamError: a read answered with something other than a JSON object.
        GitLabNotFound: the resource does not exist or is not visible, or no data came.
        GitLabCursorRefused: a read carried a cursor GitLab could not decode.
        GitLabBadRequest: other ``errors`` (for a mutation: with null ``data``, so GitLab
            refused it before running it).
    """
    rid = call.request_id
    mutation = not call.idempotent
    if not isinstance(payload, dict):
        if mutation:
            raise call.maybe_sent("GitLab answered something other than a JSON object")
        raise GitLabUpstreamError(
            "GitLab's GraphQL endpoint answered something other than a JSON object.", request_id=rid
        )
    errors = payload.get("errors") or []
    data = payload.get("data")
    if errors:
        if not isinstance(errors, list):
            errors = [errors]
        messages = "; ".join(map(_graphql_message, errors))
        lowered = messages.lower()
        if any(marker in lowered for marker in _GRAPHQL_NOT_FOUND):
            # GitLab authorizes (and finds) the object before a mutation changes anything.
            raise GitLabNotFound(f"GitLab: {messages}", request_id=rid)
        if _GRAPHQL_UPSTREAM.search(messages):
            if mutation:
                raise call.maybe_sent(f"GitLab failed while running it: {messages}")
            raise Transient(
                GitLabUpstreamError(
                    f"GitLab failed while answering {call.operation} ({messages}); this is GitLab's "
                    "error, not the request's: try again later.",
                    request_id=rid,
                )
            )
        if not mutation and _GRAPHQL_CURSOR.search(messages):
            raise GitLabCursorRefused(messages, request_id=rid)
        if mutation and data is not None:
            # Data means execution started (GraphQL spec, "Response Format": no data when the
            # request failed before execution; GitLab's mutation fields are nullable): an
            # error raised while the mutation ran may come after part of the change was made.
            raise call.maybe_sent(f"GitLab answered with errors: {messages}")
        missing = schema_mismatch(errors)
        if missing and data is None:
            raise GitLabSchemaMismatch(missing, request_id=rid)
        raise GitLabBadRequest(f"GitLab rejected the request: {messages}", request_id=rid)
    if not isinstance(data, dict):
        raise GitLabNotFound("GitLab returned no data for this request.", request_id=rid)
    return data


#: graphql-ruby's validation messages for what a schema lacks, and the coordinate each names.
_MISSING = (
    (re.compile(r"Field '(\w+)' doesn't exist on type '(\w+)'"), "{1}.{0}"),
    (re.compile(r"Field '(\w+)' doesn't accept argument '(\w+)'"), "{0}({1}:)"),
    (re.compile(r"InputObject '(\w+)' doesn't accept argument '(\w+)'"), "{0}.{1}"),
    (re.compile(r"No such type (\w+), so it can't be a fragment condition"), "{0}"),
    (re.compile(r"(\w+) isn't a defined input type \(on \$\w+\)"), "{0}"),
    (
        re.compile(
            r"Variable \$\w+ of type \S+ was provided invalid value for (\w+) "
            r"\(Field is not defined on (\w+)\)"
        ),
        "{1}.{0}",
    ),
)


def schema_mismatch(errors: list[Any]) -> tuple[str, ...]:
    """The coordinates GitLab's ``errors`` say its schema lacks, when every error says that
    (else empty: another refusal, told as GitLab said it)."""
    found: list[str] = []
    for error in errors:
        message = _graphql_message(error)
        for pattern, coordinate in _MISSING:
            match = pattern.fullmatch(message.strip())
            if match:
                found.append(coordinate.format(*match.groups()))
                break
        else:
            return ()
    return tuple(dict.fromkeys(found))


def _graphql_message(error: Any) -> str:
    """An ``errors`` entry's ``message`` (GraphQL spec, "Errors"), or the entry as JSON when it
    has none (never Python's ``None`` or a dict's repr)."""
    message = error.get("message") if isinstance(error, dict) else error
    return message if isinstance(message, str) and message else json.dumps(error, default=str)


def _looks_like_html(response: HttpReply) -> bool:
    content_type = response.headers.get("content-type", "").lower()
    if "html" in content_type:
        return True
    if content_type:
        return False
    return response.content[:64].lstrip().lower().startswith((b"<!doctype html", b"<html"))


def retry_after_seconds(headers: Headers) -> float | None:
    """Seconds GitLab asks to wait: ``Retry-After`` (delta-seconds or an HTTP date, RFC 9110
    §10.2.3), else ``RateLimit-Reset`` (unix time; GitLab docs "Rate limits"), else None."""
    value = (headers.get("Retry-After") or "").strip()
    if value:
        try:
            seconds = float(value)
        except ValueError:
            seconds = None
        if seconds is not None:
            return max(0.0, seconds) if math.isfinite(seconds) else None
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            when = None
        if when is not None:
            if when.tzinfo is None:  # "-0000": RFC 9110 dates are always GMT
                when = when.replace(tzinfo=UTC)
            return max(0.0, when.timestamp() - time.time())
    reset = (headers.get("RateLimit-Reset") or "").strip()
    if reset.isdigit():
        return max(0.0, float(reset) - time.time())
    return None


def _error_message(response: HttpReply) -> str:
    """GitLab's own words from an error body (``message`` or ``error``), briefly."""
    try:
        body = response.json()
    except ValueError:
        return ""
    if isinstance(body, dict):
        msg = body.get("message") or body.get("error") or body.get("error_description") or ""
        if isinstance(msg, dict):
            return "; ".join(
                f"{k} {', '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in msg.items()
            )
        if isinstance(msg, list):
            return "; ".join(map(str, msg))[:500]
        return str(msg)[:500]
    return ""
