"""The whole configuration (every section, the checks across sections) and how it is loaded."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from gateway.config.base import is_loopback
from gateway.config.broker import BrokerSettings
from gateway.config.clients import (
    AgentAccess,
    ClientToken,
    LimitsSettings,
    _known_toolsets,
    _name_list,
    _tool_names,
)
from gateway.config.console import ConsoleSettings
from gateway.config.environment import _ContractEnvSource
from gateway.config.gitlab import CacheSettings, GitLabSettings
from gateway.config.observability import LoggingSettings
from gateway.config.server import ServerSettings
from gateway.config.sign_in import SignInSettings


class Settings(BaseSettings):
    """The gateway's whole configuration. Build it with :func:`load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix="GATEWAY_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    server: ServerSettings = ServerSettings()
    gitlab: GitLabSettings = GitLabSettings()
    cache: CacheSettings = CacheSettings()
    broker: BrokerSettings = BrokerSettings()
    console: ConsoleSettings = ConsoleSettings()
    logging: LoggingSettings = LoggingSettings()
    limits: LimitsSettings = LimitsSettings()
    sign_in: SignInSettings = SignInSettings()
    #: Broker database, activity logs and ``.stop-pipeline``.
    state_dir: Path = Path(".pipeline")
    #: Hide and refuse every tool that is not read-only.
    read_only: bool = False
    #: Only these toolsets are served (``ci``, ``repository``, ``duo_agent_platform``, ``broker``,
    #: ``superseded``, or the keywords ``default`` and ``all``); empty means the default toolsets
    #: (all but ``superseded``). The environment takes a JSON list or a comma-separated list.
    toolsets: Annotated[tuple[str, ...], NoDecode] = ()
    #: Tools served besides ``toolsets`` (names as in ``tools/list``); with ``toolsets`` empty,
    #: only these. The environment takes a JSON list or a comma-separated list.
    tools: Annotated[tuple[str, ...], NoDecode] = ()
    #: Ask a person (MCP elicitation) before a destructive action: a pipeline cancel, the broker's
    #: stop_pipeline. Off by default.
    confirm_destructive: bool = False
    #: Who answers a confirmation: ``client`` (the agent's MCP client asks its person) or
    #: ``operator`` (an operator approves in the console or the ``broker`` command line; every
    #: destructive action is then confirmed). ``gateway.tools.confirmations``.
    confirm_by: Literal["client", "operator"] = "client"
    #: ``confirm_by = "operator"``: how long a call waits for the decision, seconds.
    confirm_wait_seconds: float = Field(300.0, gt=0, le=3600)
    #: The text block of a result that has ``structuredContent``: ``json`` (default) repeats the
    #: structured data as JSON text, as MCP advises for clients that do not read
    #: ``structuredContent``; ``summary`` sends a short text instead (the tool's own text, else one
    #: line naming the top-level keys), about halving a large answer for clients that do read it.
    #: Error results keep their message either way. A client token may set its own.
    structured_text: Literal["json", "summary"] = "json"
    #: Bearer secrets of callers, each mapped to a broker agent id. Empty: ``X-Agent-Id`` on loopback.
    client_tokens: tuple[ClientToken, ...] = ()

    @field_validator("toolsets", mode="before")
    @classmethod
    def _toolsets(cls, value: Any) -> Any:
        try:
            return _known_toolsets(_name_list(value))
        except ValueError as err:
            raise ValueError(f"{err} (empty serves the default toolsets)") from None

    @field_validator("tools", mode="before")
    @classmethod
    def _tools(cls, value: Any) -> Any:
        return _tool_names(_name_list(value))

    @model_validator(mode="after")
    def _check(self) -> Settings:
        secrets = [client.token.get_secret_value() for client in self.client_tokens]
        if len(set(secrets)) != len(secrets):
            raise ValueError(
                "client_tokens: two entries have the same token; give each principal its own secret"
            )
        console = [
            (name, token.get_secret_value())
            for name, token in (
                ("console.operator_token", self.console.operator_token),
                ("console.viewer_token", self.console.viewer_token),
            )
            if token is not None
        ]
        if len(console) == 2 and console[0][1] == console[1][1]:
            raise ValueError(
                "console.operator_token and console.viewer_token are the same: a viewer could act; "
                "give each its own secret"
            )
        others = set(secrets)
        if self.gitlab.token is not None:
            others.add(self.gitlab.token.get_secret_value())
        for name, token in console:
            if token in others:
                raise ValueError(
                    f"{name} is also a client token or the GitLab token: the console needs a secret of its "
                    "own (an agent's token must not open the operator's controls)"
                )
        for client in self.client_tokens:
            self._check_rate(client, f"client_tokens: the entry of agent {client.agent_id!r}")
            if client.agent_id not in self.broker.agents:
                raise ValueError(
                    f"client_tokens: agent_id {client.agent_id!r} is not one of broker.agents "
                    f"{list(self.broker.agents)}"
                )
        if self.sign_in.enabled:
            self._check_sign_in()
        elif self.console.signs_in_people:
            raise ValueError(
                "console.operators and console.viewers sign people in to the console with GitLab, and "
                "sign-in is off: set sign_in.enabled (docs/operations.md, 'Signing in with GitLab'), or "
                "use console.operator_token and console.viewer_token"
            )
        if (
            not self.sign_in.enabled
            and not is_loopback(self.server.host)
            and self.gitlab.credential_mode == "service"
            and self.gitlab.token is not None
            and not self.client_tokens
        ):
            raise ValueError(
                f"server.host {self.server.host!r} is not a loopback address, a service GitLab token is set "
                "and no client_tokens are configured: anyone who reaches the port could act with that "
                "token. Configure client_tokens, use gitlab.credential_mode = 'passthrough', or bind "
                "to 127.0.0.1."
            )
        return self

    def _check_rate(self, access: AgentAccess, entry: str) -> None:
        if (
            access.burst is not None
            and access.calls_per_second is None
            and self.limits.calls_per_second is None
        ):
            raise ValueError(
                f"{entry} sets burst but no calls_per_second, and limits.calls_per_second is not set "
                "either: give the rate too"
            )

    def _check_sign_in(self) -> None:
        if self.gitlab.credential_mode == "passthrough":
            raise ValueError(
                "sign_in.enabled and gitlab.credential_mode = 'passthrough' do not go together: with "
                "sign-in every person calls GitLab with their own signed-in token. Set "
                "gitlab.credential_mode = 'service' (static client_tokens then use gitlab.token)"
            )
        for who, roles in self.sign_in.roles.items():
            unknown = [role for role in roles if role not in self.broker.agents]
            if unknown:
                raise ValueError(
                    f"sign_in.roles: {who!r} names {', '.join(map(repr, unknown))}, not one of "
                    f"broker.agents {list(self.broker.agents)}"
                )
        for role, access in self.sign_in.role_access.items():
            if role not in self.broker.agents:
                raise ValueError(
                    f"sign_in.role_access: {role!r} is not one of broker.agents {list(self.broker.agents)}"
                )
            self._check_rate(access, f"sign_in.role_access.{role}")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            init_settings,
            _ContractEnvSource(settings_cls),
            env_settings,
            TomlConfigSettingsSource(settings_cls),
        )


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Build :class:`Settings` from ``config_file`` (TOML), the environment and ``overrides``.

    Args:
        config_file: a TOML file; its tables are the sections of :class:`Settings`.
        **overrides: highest-precedence values, as nested dicts (``server={"port": 9000}``);
            they are merged into the file's and the environment's values, not swapped for them.

    Raises:
        pydantic.ValidationError: an option is invalid; each error's ``loc`` names the option.
        FileNotFoundError: ``config_file`` does not exist.
    """
    if config_file is None:
        return Settings(**overrides)
    if not config_file.is_file():
        # Relative to the folder the gateway runs in, which may not be the one it was started from.
        shown = config_file if config_file.is_absolute() else f"{config_file} ({config_file.resolve()})"
        raise FileNotFoundError(f"configuration file {shown} does not exist")

    class _FromFile(Settings):
        model_config = SettingsConfigDict(toml_file=config_file)

    loaded = _FromFile(**overrides)
    return Settings.model_construct(**{name: getattr(loaded, name) for name in Settings.model_fields})
