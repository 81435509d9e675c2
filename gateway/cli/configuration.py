"""Start, step one: the configuration read from the command line, the TOML file and the
environment, and every mistake in it printed as one line naming the option (exit status 2).

What is checked here is what no later step could say as clearly: the settings' own checks
(``gateway.config``), tool names no toolset declares, a ``gitlab.url`` the GitLab client would
refuse, and ``GATEWAY_*`` variables that name no option (refused when they look like a typo of
one that matters, else warned about by the command or the start-up log).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import ValidationError

from gateway import PROG
from gateway.cli.arguments import flags, overrides

if TYPE_CHECKING:
    from gateway.config import Settings

#: The example configuration, shipped inside the package so that every installation has it.
EXAMPLE_CONFIG = "config_example.toml"


def example_config() -> str:
    """The text of the example configuration file (``--example-config``)."""
    from importlib.resources import files

    return files("gateway").joinpath(EXAMPLE_CONFIG).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Configuration:
    """The effective configuration, checked.

    Attributes:
        settings: every option.
        gitlab_url: ``gitlab.url`` in its normal form (what the start-up line shows).
        warnings: one line per ``GATEWAY_*`` variable that names no option and was not refused.
    """

    settings: Settings
    gitlab_url: str
    warnings: list[str] = field(default_factory=list)


def _error(line: str) -> None:
    print(f"{PROG}: configuration error: {line}", file=sys.stderr)


def read_configuration(args: argparse.Namespace) -> Configuration | int:
    """The configuration ``args`` and the environment give, or the exit status once it is done:
    0 after ``--example-config`` (printed before anything is read: the configuration may be what is
    broken), 2 after printing what is wrong."""
    from gateway.cli.config_errors import (
        config_error_lines,
        environment_source,
        refused_environment,
        unknown_environment,
        unknown_environment_line,
        value_error_line,
    )
    from gateway.config import load_settings

    if args.example_config:
        sys.stdout.write(example_config())
        return 0
    given = flags(args)
    try:
        settings = load_settings(args.config, **overrides(args))
    except ValidationError as err:
        for line in config_error_lines(err, flags=given):
            _error(line)
        return 2
    except FileNotFoundError as err:
        _error(str(err))
        return 2
    except ValueError as err:  # TOML syntax (tomllib.TOMLDecodeError), environment JSON (SettingsError)
        _error(value_error_line(err, args.config))
        return 2
    from gateway.tools import undeclared_tool_names

    tools_source = environment_source(("tools",))
    undeclared = undeclared_tool_names(
        settings, given.get("tools") or (tools_source[0] if tools_source else "tools")
    )
    for line in undeclared:
        _error(line)
    if undeclared:
        return 2
    from gateway.gitlab.urls import normalize_base_url

    try:
        gitlab_url = normalize_base_url(settings.gitlab.url).url
    except ValueError as err:  # credentials, a query, a fragment or a bad port in the URL
        source = environment_source(("gitlab", "url"))
        _error(f"{f'{source[0]} (gitlab.url)' if source else 'gitlab.url'}: {err}")
        return 2
    unknown = unknown_environment()
    refused = [name for name in unknown if refused_environment(name)]
    for name in refused:
        _error(unknown_environment_line(name, refused=True))
    if refused:
        return 2
    return Configuration(settings, gitlab_url, [unknown_environment_line(name) for name in unknown])
