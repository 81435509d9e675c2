"""Typed errors of the GitLab layer: failures talking to GitLab (:class:`GitLabError`) and
references that cannot name anything on it (:class:`InvalidReference`).

The tool edge (``gateway.tools.failures``) is the one place they become tool results.

GitLab's own MCP server maps HTTP status to reasons as 401/403 → unauthorized, 404 → not_found,
429 → rate limited, other 4xx → bad_request (https://docs.gitlab.com/api/rest/troubleshooting/);
the gateway adds ``conflict`` for 409 and ``upstream_error`` for 5xx, 408, timeouts, connection failures,
redirects and answers that are not GitLab's JSON (HTML login pages).
"""

from __future__ import annotations

from typing import Any

from gateway.errors import Reason


class GitLabError(Exception):
    """Base of every failure talking to GitLab.

    Attributes:
        reason: the tool-error reason this maps to.
        status: the HTTP status GitLab answered, or None when no answer came.
        request_id: the gateway request id sent as ``X-Request-Id`` (for support tickets).
    """

    reason: Reason = "upstream_error"

    def __init__(self, message: str, *, status: int | None = None, request_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.request_id = request_id

    def details(self) -> dict[str, Any]:
        """Extra fields for ``structuredContent.error``."""
        out: dict[str, Any] = {}
        if self.status is not None:
            out["status"] = self.status
        if self.request_id:
            out["request_id"] = self.request_id
        return out


class GitLabUnauthorized(GitLabError):
    """401 or 403: the token is missing, expired, or lacks a scope (``api`` / ``read_api``)."""

    reason: Reason = "unauthorized"


class GitLabNotFound(GitLabError):
    """404, or GraphQL returned null for the resource: missing or not visible to the caller."""

    reason: Reason = "not_found"


class GitLabBadRequest(GitLabError):
    """Another 4xx, GraphQL errors, or a mutation payload's ``errors``: GitLab refused the input."""

    reason: Reason = "bad_request"


class GitLabCursorRefused(GitLabBadRequest):
    """A read's GraphQL ``errors`` say GitLab could not decode a pagination cursor the request
    carried (GitLab's keyset connections: "Please provide a valid cursor"; graphql-ruby's own:
    "Invalid cursor: ..."). Raised for reads only: a mutation keeps its own outcome rules.

    Attributes:
        said: GitLab's own words (its ``errors`` messages).
    """

    def __init__(self, said: str, *, request_id: str | None = None) -> None:
        super().__init__(f"GitLab rejected the request: {said}", request_id=request_id)
        self.said = said


class GitLabSchemaMismatch(GitLabBadRequest):
    """GitLab refused a GraphQL document as not valid for its schema (a field, argument or type
    it does not have: graphql-ruby's ``undefinedField``, ``argumentNotAccepted``,
    ``undefinedType``). GitLab validates before it runs anything, so nothing ran, a mutation
    included. Never shown as is: :class:`~gateway.gitlab.operation.Operation` reads GitLab's
    version again and sends the right document, or answers :class:`GitLabUnsupported`.

    Attributes:
        missing: the schema coordinates GitLab named (``CiJob.exitCode``, ``pipeline(id:)``).
    """

    def __init__(self, missing: tuple[str, ...], *, request_id: str | None = None) -> None:
        super().__init__(f"GitLab does not have {', '.join(missing)}", request_id=request_id)
        self.missing = missing


class GitLabUnsupported(GitLabError):
    """What was asked needs a GitLab version or edition the configured GitLab is not.

    Attributes:
        needed: ``GitLab EE 18.4 or later``, or None when GitLab lacks a field it should have (a
            feature flag turned off).
        instance: the instance's version and edition (``GitLab 17.11.2 (EE)``).
        unnamed: the message after its subject when the subject is the tool, which only the
            registry knows (it puts the tool's name first).
    """

    reason: Reason = "unsupported_by_gitlab"

    def __init__(
        self,
        message: str,
        *,
        needed: str | None,
        instance: str,
        missing: tuple[str, ...] = (),
        unnamed: str | None = None,
    ) -> None:
        super().__init__(message)
        self.unnamed = unnamed
        self.needed = needed
        self.instance = instance
        self.missing = missing

    def details(self) -> dict[str, Any]:
        out = super().details()
        out["gitlab"] = self.instance
        if self.needed:
            out["needs"] = self.needed
        if self.missing:
            out["missing"] = list(self.missing)
        return out


class GitLabConflict(GitLabError):
    """409: GitLab refused because of the resource's current state (e.g. "Resource lock")."""

    reason: Reason = "conflict"


class GitLabRateLimited(GitLabError):
    """429 past the retry budget.

    Mirrors GitLab's own ``Response.rate_limited_error``: ``structuredContent.error`` carries
    ``retry_after_seconds`` and ``limit`` (https://docs.gitlab.com/security/rate_limits/).

    Attributes:
        retry_after_seconds: whole seconds to wait, from ``Retry-After`` or ``RateLimit-Reset``
            (rounded up; a default period when GitLab named none).
        limit_name: GitLab's ``RateLimit-Name`` header, when sent.
    """

    reason: Reason = "rate_limited"

    def __init__(
        self,
        message: str,
        *,
        retry_after_seconds: int,
        limit_name: str | None = None,
        status: int | None = 429,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message, status=status, request_id=request_id)
        self.retry_after_seconds = retry_after_seconds
        self.limit_name = limit_name

    def details(self) -> dict[str, Any]:
        out = super().details()
        out["retry_after_seconds"] = self.retry_after_seconds
        if self.limit_name:
            out["limit"] = self.limit_name
        return out


class GitLabUpstreamError(GitLabError):
    """5xx, a timeout, a connection failure, or an answer that is not GitLab's JSON."""

    reason: Reason = "upstream_error"


class GitLabMaybeSent(GitLabUpstreamError):
    """A mutation failed after it may have reached GitLab; it is never retried.

    The message tells the caller the change may or may not have happened and how to check.
    """


class InvalidReference(ValueError):
    """A URL, project path or id that cannot name anything on the configured GitLab.

    Raised before any request is made, with a message that says what was wrong with the value
    and what a valid one looks like (it names the value, not the tool argument it came from).
    A ``ValueError``, so a pydantic validator that calls a parser reports it as that argument's
    error.
    """

    reason: Reason = "bad_request"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
