"""One logical GitLab request (all its attempts share it), and the failure worth another try."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.gitlab.credentials import Credential
from gateway.gitlab.errors import GitLabError, GitLabMaybeSent
from gateway.gitlab.json_budget import AnswerTooComplex, check_json_budget


@dataclass(slots=True, kw_only=True)
class GitLabCall:
    """What to send, and how it may be retried.

    Attributes:
        operation: the GraphQL operation's file stem, or ``METHOD /route/{template}`` (the
            metrics and log label; never a raw path).
        idempotent: False for a mutation: never resent once it may have reached GitLab.
        graphql: True for ``/api/graphql`` (a 404 then means a wrong ``GITLAB_URL``).
    """

    method: str
    url: str
    operation: str
    idempotent: bool
    credential: Credential
    request_id: str | None
    graphql: bool = False
    params: Mapping[str, Any] | None = None
    json: Any = None
    content: bytes | None = None
    #: Request headers of this call's own (``Range`` on a ranged read), beside the client's.
    headers: Mapping[str, str] | None = None
    #: The most body bytes read from the answer, decoded (None: the transport's own bound,
    #: ``MAX_ANSWER_BYTES``); a route whose honest answers are small says so.
    max_bytes: int | None = None
    #: Attempts sent so far (counted only while tracing, for ``http.request.resend_count``).
    attempts: int = 0

    def maybe_sent(self, what: str) -> GitLabMaybeSent:
        """The error for a mutation that failed after it may have reached GitLab."""
        return GitLabMaybeSent(
            f"The request {self.operation} failed ({what}) after it may have reached GitLab, so it was not "
            "sent again: the change may or may not have been made. Check the resource itself (for a "
            "pipeline, the project's pipelines list) before trying again.",
            request_id=self.request_id,
        )


#: Response headers, looked up case-insensitively (``httpx.Headers``, aiohttp's ``CIMultiDictProxy``).
Headers = Mapping[str, str]


@dataclass(slots=True)
class HttpReply:
    """What one attempt got back: the status, headers and whole body."""

    status_code: int
    headers: Headers
    content: bytes

    def json(self) -> Any:
        """The body decoded as JSON.

        Raises:
            AnswerTooComplex: it holds more values, or deeper nesting, than the gateway decodes
                (:mod:`gateway.gitlab.json_budget`).
            ValueError: it is not JSON.
        """
        check_json_budget(self.content)
        try:
            return orjson.loads(self.content)  # a third of ``json``'s time on a 10 KB answer
        except orjson.JSONDecodeError:
            # What orjson refuses but ``json`` reads (a byte order mark, NaN), or not JSON at all.
            try:
                return json.loads(self.content)
            except RecursionError:
                raise AnswerTooComplex("JSON nested deeper than the decoder reads") from None


class Transient(Exception):
    """A failure worth another try, with what to raise when tries run out.

    ``retry_after`` is GitLab's requested wait in seconds (None: use the backoff).
    ``unreached`` builds the final error of an attempt that never reached GitLab (no connection),
    given the attempts made and the seconds they took: such failures get their own short retry
    policy (:mod:`gateway.gitlab.retries`), and the caller is told how many attempts failed.
    ``retry`` is False for a failure that another try would meet again (a certificate GitLab's
    TLS does not verify with): it is raised at once.
    """

    def __init__(
        self,
        final: GitLabError,
        *,
        retry_after: float | None = None,
        unreached: Callable[[int, float], GitLabError] | None = None,
        retry: bool = True,
    ) -> None:
        super().__init__(final.message)
        self.final = final
        self.retry_after = retry_after
        self.unreached = unreached
        self.retry = retry
