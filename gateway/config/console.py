"""``[console]``: the live broker console at ``/broker``."""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator

from gateway.config.base import _Section

#: The shortest console token accepted: a guessable one would open the pipeline's controls.
MIN_CONSOLE_TOKEN_CHARS = 16


class ConsoleSettings(_Section):
    """``[console]``: the live broker console at ``/broker`` (off unless a token is set)."""

    #: Signs in with every right: watch, instruct the PM, switch auto-advance, stop, start over.
    operator_token: SecretStr | None = None
    #: Signs in to watch only (read-only viewers).
    viewer_token: SecretStr | None = None
    #: How long a console sign-in lasts.
    session_hours: float = Field(12.0, gt=0, le=24 * 30)
    #: Message bodies longer than this (as indented JSON) are shown collapsed.
    collapse_body_chars: int = Field(400, ge=40)
    #: Messages per page of the threads view.
    page_messages: int = Field(50, ge=5, le=500)
    #: Lines of each activity log shown.
    log_lines: int = Field(40, ge=5, le=1000)
    #: Failed sign-ins one client address may make before the console refuses it (HTTP 429 with
    #: ``Retry-After``) ...
    sign_in_failures: int = Field(10, ge=1)
    #: ... until this many seconds after its last failed one.
    sign_in_window_seconds: float = Field(300.0, gt=0)
    #: Failed sign-ins from all addresses together (within the same window) before only
    #: addresses that signed in lately may try: guesses from rotated addresses meet it.
    sign_in_failures_total: int = Field(50, ge=1)
    #: Live views (the page's event stream) one sign-in may hold open at once on a replica; one
    #: more is refused with HTTP 429.
    max_streams_per_session: int = Field(8, ge=1)
    #: With ``[sign_in]`` on: GitLab usernames, or full paths of GitLab groups (subgroups included),
    #: whose people sign in to the console with GitLab as operators ...
    operators: tuple[str, ...] = ()
    #: ... or as viewers (who only watch). Someone in both is an operator.
    viewers: tuple[str, ...] = ()

    @field_validator("operator_token", "viewer_token")
    @classmethod
    def _token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None
        if len(value.get_secret_value().strip()) < MIN_CONSOLE_TOKEN_CHARS:
            raise ValueError(
                f"is shorter than {MIN_CONSOLE_TOKEN_CHARS} characters: use a random secret, for example "
                "the output of `openssl rand -base64 32`"
            )
        return SecretStr(value.get_secret_value().strip())

    @field_validator("operators", "viewers")
    @classmethod
    def _people(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        people = tuple(who.strip().strip("/") for who in value)
        if any(not who for who in people):
            raise ValueError("holds an empty name: write GitLab usernames or group full paths")
        return people

    @property
    def enabled(self) -> bool:
        """The console is served only when a token is configured, or people who sign in with GitLab."""
        return self.operator_token is not None or self.viewer_token is not None or self.signs_in_people

    @property
    def signs_in_people(self) -> bool:
        """People sign in with GitLab (``operators`` or ``viewers`` set; ``[sign_in]`` must be on)."""
        return bool(self.operators or self.viewers)
