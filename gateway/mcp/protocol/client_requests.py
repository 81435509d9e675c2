"""Asking the client in a handshake session (MCP 2025-11-25): requests from server to client.

https://modelcontextprotocol.io/specification/2025-11-25/client/elicitation (and ``sampling``,
``roots``). A handler's ``ToolContext.ask`` becomes, per question, a JSON-RPC request the gateway
writes on the call's SSE stream (it relates to that call); the client POSTs its JSON-RPC response
in the same session, and :class:`PendingRequests` hands it to the waiting handler. Questions are
asked one after the other, as a person answers them.

Only a client that declared the capability (at ``initialize``) is asked; one that does not
answer within :data:`ANSWER_SECONDS`, answers with an error, or whose stream broke, has given no
answer: the handler gets :class:`CannotAsk` (``no_answer``) and must act as if told no.

The response must reach the replica that holds the call's stream: behind a load balancer that
spreads one session's requests, route a session to one replica (``Mcp-Session-Id`` affinity) for
clients that are asked questions; a response that lands elsewhere finds nothing waiting and is
dropped, and the question ends without an answer.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from typing import Any, Final

from mcp_types import JSONRPCRequest

from gateway.mcp.protocol.context import Events
from gateway.mcp.protocol.wire import encode
from gateway.tools.input_requests import Answers, CannotAsk, InputRequest

#: How long a question waits for its answer (a person reads it and decides).
ANSWER_SECONDS: Final = 600.0

_Key = tuple[str, str]


class PendingRequests:
    """Requests sent to clients and not answered yet, by session and JSON-RPC id. One per app."""

    def __init__(self) -> None:
        self._waiting: dict[_Key, asyncio.Future[tuple[bool, Any]]] = {}
        self._ids = itertools.count(1)

    def add(self, session: str) -> tuple[str, asyncio.Future[tuple[bool, Any]]]:
        """A new request id in ``session`` and the future its response resolves."""
        rpc_id = f"gateway-{next(self._ids)}"
        future: asyncio.Future[tuple[bool, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[(session, rpc_id)] = future
        return rpc_id, future

    def discard(self, session: str, rpc_id: str) -> None:
        self._waiting.pop((session, rpc_id), None)

    def resolve(self, session: str, rpc_id: object, ok: bool, value: Any) -> bool:
        """Hand a client's response (``ok``: a result, else an error) to its waiting request.
        False when nothing waits for it (unknown, answered, or asked on another replica)."""
        if not isinstance(rpc_id, str):
            return False
        future = self._waiting.pop((session, rpc_id), None)
        if future is None or future.done():
            return False
        future.set_result((ok, value))
        return True


class StreamAsker:
    """``CallInfo.ask`` of a call in a handshake session, answered on its stream."""

    def __init__(
        self,
        events: Events,
        session: str,
        pending: PendingRequests,
        capabilities: frozenset[str],
        *,
        answer_seconds: float = ANSWER_SECONDS,
    ) -> None:
        self._events = events
        self._session = session
        self._pending = pending
        self._capabilities = capabilities
        self._answer_seconds = answer_seconds

    async def __call__(self, requests: Mapping[str, InputRequest]) -> Answers:
        for request in requests.values():
            if request.capability not in self._capabilities:
                raise CannotAsk(request.capability)
        answers = Answers()
        for key, request in requests.items():
            answers[key] = await self._ask(request)
        return answers

    async def _ask(self, request: InputRequest) -> Any:
        rpc_id, future = self._pending.add(self._session)
        try:
            message = encode(
                JSONRPCRequest(jsonrpc="2.0", id=rpc_id, method=request.method, params=request.params)
            )
            if not await self._events.send(message):
                raise CannotAsk(request.capability, "no_answer")
            try:
                async with asyncio.timeout(self._answer_seconds):
                    ok, value = await future
            except TimeoutError:
                raise CannotAsk(request.capability, "no_answer") from None
        finally:
            self._pending.discard(self._session, rpc_id)
        if not ok:
            raise CannotAsk(request.capability, "no_answer")
        return value
