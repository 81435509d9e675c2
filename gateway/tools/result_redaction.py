"""Tool results redacted like the logs: no token reaches a caller, whoever echoed it.

GitLab, or a proxy in front of it, can echo a request's token in an error body ("invalid token
glpat-…", a debug page with the request headers), and the gateway quotes GitLab's words in its
tool errors. Every result passes :func:`redact_result` once, in ``Registry.call``:

- every string of every result loses the configured secrets (the service GitLab token, the client
  tokens) and the calling credential's token, verbatim, wherever they appear;
- error results (``isError``) also go through the log redactor's whole rule set: ``Bearer``
  credentials, ``PRIVATE-TOKEN: …`` pairs, ``private_token=`` parameters, passwords in URLs, GitLab
  tokens by prefix, and every caller token the process has met.

Successful results are not run through the pattern rules: they carry GitLab's data as the caller
asked for it (a ``.gitlab-ci.yml`` that says ``token: $CI_JOB_TOKEN``, a README quoting
``Authorization: Bearer <token>``), which must reach the agent byte for byte. A secret the
gateway holds is removed from them all the same.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gateway.observability.logging import redact, secrets_of
from gateway.observability.redaction import MIN_SECRET_LENGTH, REDACTED

if TYPE_CHECKING:
    from gateway.tools.context import ToolContext
    from gateway.tools.result import ToolResult


def result_secrets(ctx: ToolContext) -> tuple[str, ...]:
    """The secrets no result of this call may hold, longest first (no partial leftovers)."""
    services = ctx.services  # None in tests that exercise a registry alone
    found = set(secrets_of(services.settings)) if services is not None else set()
    credential = ctx.call.caller.credential
    if credential is not None and credential.token:
        found.add(credential.token)
    return tuple(sorted((s for s in found if len(s) >= MIN_SECRET_LENGTH), key=len, reverse=True))


def redact_result(result: ToolResult, secrets: Iterable[str]) -> ToolResult:
    """``result`` without ``secrets`` (and, for an error, without anything the log rules catch).

    Returns ``result`` itself when nothing had to change, so a clean answer costs one substring
    scan of its encoded JSON per secret, and no copy.
    """
    wanted = tuple(secrets)
    if not wanted and not result.is_error:
        return result  # anonymous access: no secret held, and data is never pattern-redacted
    if not result.is_error and result.content is None and all(map(_same_in_json, wanted)):
        # A secret JSON writes as is appears in the encoded result exactly when it appears in one
        # of its strings: one scan of the text a caller receives anyway, not a walk of the tree.
        shown_text = result.text or ""
        if not any(secret in result.structured_json or secret in shown_text for secret in wanted):
            return result

    def text(value: str) -> str:
        for secret in wanted:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return redact(value) if result.is_error else value

    structured = _walk(result.structured, text)
    shown = None if result.text is None else text(result.text)
    content = None if result.content is None else _walk(result.content, text)
    if structured is result.structured and shown is result.text and content is result.content:
        return result
    return replace(result, structured=structured, text=shown, content=content)


@functools.lru_cache(maxsize=64)
def _same_in_json(secret: str) -> bool:
    """``secret`` is written in a JSON string as is (nothing in it is escaped)."""
    return json.dumps(secret, ensure_ascii=False)[1:-1] == secret


def _walk(value: Any, text: Any) -> Any:
    """``value`` with ``text`` applied to every string (keys too); the same object when unchanged."""
    if isinstance(value, str):
        out = text(value)
        return value if out == value else out
    if isinstance(value, dict):
        changed = False
        items: dict[Any, Any] = {}
        for key, item in value.items():
            new_key = _walk(key, text) if isinstance(key, str) else key
            new_item = _walk(item, text)
            changed = changed or new_key is not key or new_item is not item
            items[new_key] = new_item
        return items if changed else value
    if isinstance(value, list | tuple):
        walked = [_walk(item, text) for item in value]
        if all(a is b for a, b in zip(walked, value, strict=True)):
            return value
        return walked
    return value
