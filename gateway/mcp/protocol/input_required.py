"""Input-required results (MCP 2026-07-28, SEP-2322 multi round-trip requests), in the core.

https://modelcontextprotocol.io/specification/draft/basic/utilities/mrtr. A handler that asks
(``ToolContext.ask``) and has no answer yet ends its call with::

    {"resultType": "input_required", "inputRequests": {key: {method, params}}, "requestState": "..."}

and the client sends the same request again, with a new id, ``inputResponses`` (by key) and the
``requestState`` echoed. The handler then runs again from the start and gets its answers.

``requestState`` comes back from the client, so it is sealed (:class:`StateSealer`): AES-256-GCM
under a key derived (HKDF-SHA256, its own label) from the session key, as session ids are; the
caller (:attr:`Caller.owner`) and a digest of the request (method, name, arguments) are its
associated data, so a state altered, issued to another caller or for another request does not
open; it expires after :data:`STATE_TTL_SECONDS`. Such a state is -32602. Inside: the answers of
earlier rounds (a multi-round exchange: the client sends only the latest ones), the keys asked in
the last round and a random id (``Answers.once``) an action keys its "only once" on.

Answers that count (:class:`RoundAsker`): those in the sealed state, and the ``inputResponses``
for keys the state's round asked. Without a state only answers to questions that are not
``bound`` count. Other keys are ignored; a missing answer is asked again. A client is asked only
what it declared it can answer; asking more is :class:`CannotAsk` for the handler.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from gateway.mcp.protocol.wire import invalid_params
from gateway.tools.input_requests import Answers, CannotAsk, InputRequest, InputRequired

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

#: How long a client has to answer: a person reads the question and decides.
STATE_TTL_SECONDS: Final = 900.0
#: HKDF label of the request-state key (never used for anything else).
_LABEL: Final = b"gitlab-mcp-gateway request state v1"
_PREFIX: Final = "rs1."
_NONCE_BYTES: Final = 12
#: Longest state worth decrypting (answers of earlier rounds ride in it).
_MAX_STATE_CHARS: Final = 256 * 1024


def request_digest(method: str, name: str, arguments: Mapping[str, Any] | None) -> bytes:
    """What binds a request state to its request: SHA-256 of its method, name and arguments."""
    canonical = json.dumps(
        {"m": method, "n": name, "a": arguments or {}}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).digest()


@dataclass(frozen=True)
class OpenedState:
    """What a valid ``requestState`` holds.

    Attributes:
        once: the state's random id (``Answers.once``).
        answers: the answers of earlier rounds, by key.
        asked: the keys its round asked (only these answers are taken from ``inputResponses``).
    """

    once: str
    answers: dict[str, Any]
    asked: frozenset[str]


class StateSealer:
    """Seals and opens ``requestState``.

    Args:
        key: the session key (32 bytes); the state key is derived from it.
        previous_key: an older session key still accepted (rotation).
        ttl_seconds: how long a state stays valid.
        clock: Unix seconds.
    """

    def __init__(
        self,
        key: bytes,
        previous_key: bytes | None = None,
        *,
        ttl_seconds: float = STATE_TTL_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._keys = [k for k in (key, previous_key) if k is not None]
        self._ttl = ttl_seconds
        self._clock = clock

    @functools.cached_property
    def _ciphers(self) -> list[AESGCM]:
        # Made at the first input-required round: OpenSSL's ciphers (about 8 MiB) load then.
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        return [AESGCM(_derive(k)) for k in self._keys]

    def seal(self, owner: str, digest: bytes, answers: Mapping[str, Any], asked: frozenset[str]) -> str:
        claims = {
            "e": int(self._clock() + self._ttl),
            "n": base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("="),
            "a": dict(answers),
            "k": sorted(asked),
        }
        nonce = os.urandom(_NONCE_BYTES)
        plain = json.dumps(claims, separators=(",", ":")).encode()
        sealed = self._ciphers[0].encrypt(nonce, plain, _aad(owner, digest))
        return _PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")

    def open(self, state: str, owner: str, digest: bytes) -> OpenedState:
        """The state's content.

        Raises:
            RpcError: -32602 when it is not a state this gateway issued to this caller for this
                request (altered, foreign, another request's), or it expired.
        """
        plain = self._decrypt(state, _aad(owner, digest))
        if plain is None:
            raise invalid_params(
                "Invalid params: requestState is not one this gateway issued for this request of this "
                "caller (altered, or for another call or credential). Send the request again without "
                "requestState and inputResponses to start over."
            )
        claims = json.loads(plain)
        if claims["e"] <= self._clock():
            raise invalid_params(
                "Invalid params: requestState expired (the client has "
                f"{int(self._ttl)} s to answer). Send the request again without requestState and "
                "inputResponses to be asked again."
            )
        return OpenedState(claims["n"], dict(claims["a"]), frozenset(claims["k"]))

    def _decrypt(self, state: str, aad: bytes) -> bytes | None:
        if not state.startswith(_PREFIX) or len(state) > _MAX_STATE_CHARS:
            return None
        raw = state[len(_PREFIX) :]
        try:
            blob = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
        except (binascii.Error, ValueError):
            return None
        if base64.urlsafe_b64encode(blob).decode().rstrip("=") != raw:
            return None  # not how it was written: a changed character that decodes the same
        from cryptography.exceptions import InvalidTag

        for cipher in self._ciphers:
            try:
                return cipher.decrypt(blob[:_NONCE_BYTES], blob[_NONCE_BYTES:], aad)
            except (InvalidTag, ValueError):
                continue
        return None


def _derive(key: bytes) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_LABEL).derive(key)


def _aad(owner: str, digest: bytes) -> bytes:
    return _LABEL + b"\x00" + hashlib.sha256(owner.encode()).digest() + digest


class RoundAsker:
    """``CallInfo.ask`` of one round of a 2026-07-28 request (see the module docs).

    Args:
        capabilities: the capabilities the client declared in this request.
        responses: the request's ``inputResponses`` (validated by the revision's schema).
        state: its opened ``requestState``, or None.
    """

    def __init__(
        self,
        capabilities: frozenset[str],
        responses: Mapping[str, Any],
        state: OpenedState | None,
    ) -> None:
        self._capabilities = capabilities
        self._state = state
        self._loose = dict(responses)
        self._known: dict[str, Any] = {}
        if state is not None:
            self._known.update(state.answers)
            self._known.update({k: v for k, v in responses.items() if k in state.asked})
        #: Every answer this run used so far (carried to the next round).
        self.used: dict[str, Any] = {}

    async def __call__(self, requests: Mapping[str, InputRequest]) -> Answers:
        for request in requests.values():
            if request.capability not in self._capabilities:
                raise CannotAsk(request.capability)
        answers = Answers()
        missing: dict[str, InputRequest] = {}
        for key, request in requests.items():
            if key in self._known:
                answers[key] = self._known[key]
            elif not request.bound and key in self._loose:
                answers[key] = self._loose[key]
            else:
                missing[key] = request
        self.used.update(answers)
        if missing:
            raise InputRequired(missing, self.used)
        if self._state is not None:
            answers.once = self._state.once
        return answers


@dataclass
class InputRound:
    """One round of a request that may end input-required: its asker and what to seal next."""

    asker: RoundAsker
    owner: str
    #: The request's method, name and arguments, digested only when a state is opened or sealed
    #: (most calls ask nothing).
    request: tuple[str, str, Mapping[str, Any] | None]

    @property
    def digest(self) -> bytes:
        return request_digest(*self.request)

    def result(self, sealer: StateSealer, asked: InputRequired, version: str, method: str) -> dict[str, Any]:
        """The ``InputRequiredResult`` asking ``asked.requests``, shaped by revision ``version``."""
        from mcp_types import methods as wire_methods  # loaded at the first request (server._parse)

        state = sealer.seal(self.owner, self.digest, asked.answered, frozenset(asked.requests))
        return wire_methods.serialize_server_result(
            method,
            version,
            {
                "resultType": "input_required",
                "inputRequests": {key: request.to_mcp() for key, request in asked.requests.items()},
                "requestState": state,
            },
        )


def start_round(
    sealer: StateSealer,
    *,
    method: str,
    params: Mapping[str, Any],
    owner: str,
    capabilities: Mapping[str, Any],
) -> InputRound:
    """The round a 2026-07-28 request's params open (its ``inputResponses``, ``requestState``).

    Raises:
        RpcError: -32602 for a ``requestState`` that does not open (:meth:`StateSealer.open`)
            or a malformed ``inputResponses``.
    """
    name = params.get("name")
    arguments = params.get("arguments")
    request = (
        method,
        name if isinstance(name, str) else "",
        arguments if isinstance(arguments, dict) else None,
    )
    responses = params.get("inputResponses") or {}
    if not isinstance(responses, dict):
        raise invalid_params("Invalid params: inputResponses must be an object of answers by key.")
    raw_state = params.get("requestState")
    state: OpenedState | None = None
    if raw_state is not None:
        if not isinstance(raw_state, str):
            raise invalid_params("Invalid params: requestState must be the string the server returned.")
        state = sealer.open(raw_state, owner, request_digest(*request))
    return InputRound(RoundAsker(frozenset(capabilities), responses, state), owner, request)


__all__ = [
    "STATE_TTL_SECONDS",
    "InputRound",
    "OpenedState",
    "RoundAsker",
    "StateSealer",
    "request_digest",
    "start_round",
]
