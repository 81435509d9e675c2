"""The sign-in parts of one app, built once its broker database and GitLab client are open."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from gateway.broker.store import Store
from gateway.config import Settings, decode_encryption_key
from gateway.observability.metrics import Metrics
from gateway.signin.agent_tokens import AgentTokens
from gateway.signin.bounds import StartBounds
from gateway.signin.clients import Clients, MetadataDocuments, RedirectRule
from gateway.signin.gitlab_oauth import GitLabOAuth
from gateway.signin.grants import Grants
from gateway.signin.sealing import Sealer
from gateway.signin.storage import SignInStorage

#: How long a sign-in may stay on the consent page and at GitLab.
TRANSACTION_SECONDS = 600.0
#: How long an authorization code may wait for its exchange.
CODE_SECONDS = 60.0


@dataclass
class SignIn:
    """Everything the sign-in routes and ``/mcp`` share."""

    settings: Settings
    storage: SignInStorage
    sealer: Sealer
    gitlab: GitLabOAuth
    clients: Clients
    grants: Grants
    clock: Callable[[], float]
    #: Signs the consent form's CSRF tokens (derived from ``sign_in.encryption_key``).
    csrf_key: bytes
    #: Counts a sign-in event (``gateway_sign_in_events_total``).
    count: Callable[[str], None]
    #: Named agent tokens (the account page's).
    agents: AgentTokens
    #: Budgets and caps of new clients and sign-ins.
    bounds: StartBounds

    @classmethod
    def build(
        cls,
        settings: Settings,
        store: Store,
        http: httpx.AsyncClient,
        gitlab_url: str,
        *,
        documents: MetadataDocuments | None,
        redirect_matches: RedirectRule,
        metrics: Metrics,
        clock: Callable[[], float] = time.time,
    ) -> SignIn:
        config = settings.sign_in
        assert config.encryption_key is not None and config.gitlab_client_secret is not None
        assert config.gitlab_client_id is not None
        storage = SignInStorage(store, clock)
        events = metrics.sign_in_events

        def count(event: str) -> None:
            events.labels(event=event).inc()

        key = decode_encryption_key(config.encryption_key.get_secret_value())
        sealer = Sealer(key)
        gitlab = GitLabOAuth(
            http,
            base_url=gitlab_url,
            client_id=config.gitlab_client_id,
            client_secret=config.gitlab_client_secret.get_secret_value(),
            redirect_uri=f"{config.issuer}/oauth/gitlab/callback",
            scope="read_api" if settings.read_only else "api",
            clock=clock,
        )
        return cls(
            settings=settings,
            storage=storage,
            sealer=sealer,
            gitlab=gitlab,
            clients=Clients(config, storage, documents, redirect_matches),
            grants=Grants(storage, sealer, gitlab, clock, count=count),
            clock=clock,
            csrf_key=hashlib.sha256(b"sign-in csrf:" + key).digest(),
            count=count,
            agents=AgentTokens(store, clock),
            bounds=StartBounds(config, storage),
        )
