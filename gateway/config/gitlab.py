"""``[gitlab]`` and ``[cache]``: where GitLab is, how the gateway talks to it, what it keeps."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator

from gateway.config.base import _Section

#: The placeholder of ``deploy/compose/gateway.env.example``.
_GITLAB_TOKEN_EXAMPLE = "glpat-REPLACE-ME"  # noqa: S105 (a placeholder, no secret)


class GitLabSettings(_Section):
    """Where GitLab is and how the gateway talks to it."""

    url: str = "https://gitlab.com"
    token: SecretStr | None = None
    #: ``service``: send ``token``. ``passthrough``: forward the caller's own GitLab token.
    credential_mode: Literal["service", "passthrough"] = "service"
    #: PEM bundle of extra CA certificates (a private CA); TLS verification is never off.
    ca_bundle: Path | None = None
    #: One whole GitLab request, the answer's body included; also each socket read.
    timeout_seconds: float = Field(30.0, gt=0)
    #: Connecting, or waiting for a free pooled connection (nothing sent yet).
    connect_timeout_seconds: float = Field(5.0, gt=0)
    #: Reads only: attempts in all (1 = no retry), and the deadline across all of them.
    retry_attempts: int = Field(4, ge=1, le=10)
    retry_deadline_seconds: float = Field(30.0, gt=0)
    #: Longest ``Retry-After`` the gateway waits for on the caller's behalf; longer → rate_limited.
    max_retry_after_seconds: float = Field(10.0, ge=0)
    #: At start, one request to GitLab and one log line: reachable? token accepted? Never fatal.
    #: Then the same request every 15 s (``gateway_gitlab_reachable``, a line on each change).
    startup_check: bool = True

    @field_validator("url")
    @classmethod
    def _url_is_http(cls, value: str) -> str:
        value = value.strip()
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://, for example https://gitlab.example.com")
        return value

    @field_validator("token")
    @classmethod
    def _not_a_placeholder(cls, value: SecretStr | None) -> SecretStr | None:
        # Narrow on purpose: a real token never says REPLACE, and any other text is GitLab's to judge.
        secret = "" if value is None else value.get_secret_value()
        if "REPLACE" in secret.upper() or secret.strip() == _GITLAB_TOKEN_EXAMPLE:
            raise ValueError(
                "is still the example's placeholder: create a personal or project access token with scope "
                "api (read_api with --read-only; "
                "https://docs.gitlab.com/user/profile/personal_access_tokens/) and set GITLAB_TOKEN to "
                "it, or unset GITLAB_TOKEN to read public projects anonymously"
            )
        return value

    @field_validator("ca_bundle")
    @classmethod
    def _ca_bundle_loads(cls, value: Path | None) -> Path | None:
        if value is None:
            return None
        if not value.is_file():
            raise ValueError(f"{value} is not a file: give the path of a PEM file of CA certificates")
        try:
            ssl.create_default_context().load_verify_locations(cafile=str(value))
        except (ssl.SSLError, OSError, ValueError) as err:
            raise ValueError(f"{value} holds no usable PEM CA certificate ({err})") from None
        return value


class CacheSettings(_Section):
    """What GitLab data is kept, for how long. Keys always include a keyed hash of the credential."""

    enabled: bool = True
    #: Entries per cache at most (least recently used out first).
    max_entries: int = Field(2048, ge=1)
    #: Approximate bytes per cache at most (file contents can be up to 10 MiB each).
    max_bytes: int = Field(67_108_864, ge=1024)
    #: File content at an immutable commit SHA, seconds.
    blob_ttl_seconds: float = Field(600.0, ge=0)
    #: A project's branch and tag names (for blob URLs whose branch contains ``/``), seconds.
    refs_ttl_seconds: float = Field(30.0, ge=0)
    #: A project's Duo context exclusion rules, seconds.
    exclusions_ttl_seconds: float = Field(60.0, ge=0)
    #: Cached file content is served only while GitLab confirmed, this many seconds ago at most,
    #: that the caller's credential still reads the project's code (else one small request first).
    access_check_seconds: float = Field(30.0, gt=0)
