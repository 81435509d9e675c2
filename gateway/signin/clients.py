"""Which clients may sign people in: the operator's (``sign_in.clients``), those registered
dynamically (RFC 7591, kept in the broker's database) and those whose client id is the HTTPS URL
of a Client ID Metadata Document (fetched by ``client_metadata``); and what a registration may
ask for.

Which redirect URIs a client may register, and how a presented one must match: ``redirects``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gateway.config import SignInSettings
from gateway.signin.client_metadata import ClientMetadata, ClientMetadataError
from gateway.signin.storage import SignInStorage

#: ``token_endpoint_auth_method`` values a client may register.
AUTH_METHODS = ("none", "client_secret_post", "client_secret_basic")
MAX_REDIRECT_URIS = 10


@dataclass(frozen=True)
class Client:
    """A client that may ask people to sign in."""

    client_id: str
    name: str | None
    redirect_uris: tuple[str, ...]
    auth_method: str = "none"
    secret_hash: str | None = None

    @property
    def shown_name(self) -> str:
        """What the consent page calls it."""
        return self.name or self.client_id


class MetadataDocuments(Protocol):
    """The part of ``client_metadata.ClientMetadataFetcher`` used here."""

    @staticmethod
    def is_metadata_client_id(client_id: str) -> bool: ...

    async def fetch(self, client_id: str) -> ClientMetadata: ...


#: ``redirects.redirect_uri_matches``: whether a presented redirect URI matches a registered one.
RedirectRule = Callable[[str, str], bool]


class ClientUnknown(Exception):
    """No such client (or its metadata document cannot be used); the message says why."""


class Clients:
    """Finds a client by its id, wherever it was registered."""

    def __init__(
        self,
        settings: SignInSettings,
        storage: SignInStorage,
        documents: MetadataDocuments | None,
        redirect_matches: RedirectRule,
    ) -> None:
        self._configured = {
            c.client_id: Client(client_id=c.client_id, name=c.name, redirect_uris=c.redirect_uris)
            for c in settings.clients
        }
        self._storage = storage
        self._documents = documents if settings.client_metadata_documents else None
        self._matches = redirect_matches

    async def find(self, client_id: str) -> Client:
        """The client of ``client_id``.

        Raises:
            ClientUnknown: no such client.
            StoreError: the database cannot answer.
        """
        if client_id in self._configured:
            return self._configured[client_id]
        if self._documents is not None and self._documents.is_metadata_client_id(client_id):
            try:
                found = await self._documents.fetch(client_id)
            except ClientMetadataError as err:
                raise ClientUnknown(f"the client's metadata document cannot be used: {err}") from None
            return Client(
                client_id=client_id,
                name=found.client_name,
                redirect_uris=tuple(found.redirect_uris),
                auth_method="none",
            )
        row = await self._storage.client(client_id) if len(client_id) <= 200 else None
        if row is None:
            raise ClientUnknown(
                "this client is not registered with the gateway (it may have been registered with another "
                "gateway or before a reset): register it again"
            )
        return Client(
            client_id=row.client_id,
            name=row.name,
            redirect_uris=row.redirect_uris,
            auth_method=row.auth_method,
            secret_hash=row.secret_hash,
        )

    def redirect_allowed(self, client: Client, presented: str) -> bool:
        """Whether ``presented`` is one of ``client``'s redirect URIs (``redirects``' rules)."""
        return any(self._matches(registered, presented) for registered in client.redirect_uris)
