"""Asking the client for input during a call: the tool side.

A handler asks with ``answers = await ctx.ask({"key": elicit(...)})``; it gets every answer by
key, or never returns from that line. How the question travels is the protocol core's business
(``gateway.mcp.protocol.input_required``), per era:

- MCP 2026-07-28 (SEP-2322, multi round-trip requests): the call ends with an
  ``InputRequiredResult``; the client answers by sending the same request again with
  ``inputResponses`` and the sealed ``requestState``, and the handler runs again from the start,
  this time getting its answers. So whatever a handler does before it asks is done once per round:
  ask before any change (a GitLab mutation), never after.
- MCP 2025-11-25: the question is a request the server sends on the call's stream
  (``elicitation/create``, ``sampling/createMessage``, ``roots/list``); the handler waits for the
  client's response.

A client answers only what it declared it can (``elicitation``, ``sampling``, ``roots`` in its
capabilities): :meth:`ToolContext.can_ask` says whether it can, and asking one that cannot raises
:class:`CannotAsk`, which a handler turns into a tool error that says how to proceed.

The same API serves any other runner of handlers (a durable task answered by ``tasks/update``):
:class:`InputRequired` is what a handler ends with when its answers are not there yet.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

#: The client capability each input request method needs (MCP client capabilities).
CAPABILITY_OF: Final = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}


@dataclass(frozen=True)
class InputRequest:
    """One question for the client: a request the client would answer (``method``, ``params``).

    Attributes:
        method: ``elicitation/create``, ``sampling/createMessage`` or ``roots/list``.
        params: the request's params, as MCP defines them for that method.
        bound: the answer counts only when it comes back with the request state the gateway
            issued for this very question (2026-07-28), so it answers this call of this caller,
            once. False accepts an answer the client sent before being asked (the conformance
            suite's fixtures); never for a confirmation.
    """

    method: str
    params: dict[str, Any] = field(default_factory=dict)
    bound: bool = True

    @property
    def capability(self) -> str:
        return CAPABILITY_OF[self.method]

    def to_mcp(self) -> dict[str, Any]:
        """The wire ``InputRequest`` (2026-07-28) / the request's method and params (2025-11-25)."""
        return {"method": self.method, "params": dict(self.params)}


def elicit(message: str, schema: Mapping[str, Any], *, bound: bool = True) -> InputRequest:
    """An ``elicitation/create`` (form mode): ``message`` for a person, ``schema`` of the answer."""
    return InputRequest(
        "elicitation/create", {"message": message, "requestedSchema": dict(schema)}, bound=bound
    )


def sample(text: str, max_tokens: int, *, bound: bool = True) -> InputRequest:
    """A ``sampling/createMessage`` of one user message."""
    return InputRequest(
        "sampling/createMessage",
        {"messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": max_tokens},
        bound=bound,
    )


def list_roots(*, bound: bool = True) -> InputRequest:
    """A ``roots/list``."""
    return InputRequest("roots/list", {}, bound=bound)


class Answers(dict[str, Any]):
    """The client's answers by key (each an ``ElicitResult``, ``CreateMessageResult`` or
    ``ListRootsResult`` as JSON).

    Attributes:
        once: what identifies this round of answers (a retry of the same answered request, on
            any replica, carries the same ``once``): an action that must happen once per answer
            records it (``gateway.tools.confirmations``). None where the answers cannot be
            replayed (a response on the call's own stream).
    """

    once: str | None = None


class CannotAsk(Exception):
    """The client cannot answer this question: it did not declare the capability, or it went
    without an answer (2025-11-25: no response in time).

    Attributes:
        capability: the capability the question needed.
        reason: ``undeclared`` or ``no_answer``.
    """

    def __init__(self, capability: str, reason: str = "undeclared") -> None:
        super().__init__(f"the client cannot answer {capability} requests ({reason})")
        self.capability = capability
        self.reason = reason


class InputRequired(Exception):
    """A handler's call ends here until the client answers ``requests``.

    Raised by the ``ask`` of a runner that answers between calls (the 2026-07-28 era); the
    runner turns it into its "input required" answer and runs the handler again with the
    answers. ``answered`` are the answers this run already had, which the next run must get
    again (a multi-round exchange carries them in its sealed request state).
    """

    def __init__(self, requests: Mapping[str, InputRequest], answered: Mapping[str, Any]) -> None:
        super().__init__(f"input required: {', '.join(requests)}")
        self.requests = dict(requests)
        self.answered = dict(answered)


#: ``await ask({key: request})``: every answer by key (see the module docs).
AskFn = Callable[[Mapping[str, InputRequest]], Awaitable[Answers]]


async def cannot_ask(requests: Mapping[str, InputRequest]) -> Answers:
    """The ``ask`` of a call whose client can be asked nothing (a batch item, a test)."""
    first = next(iter(requests.values()))
    raise CannotAsk(first.capability)
