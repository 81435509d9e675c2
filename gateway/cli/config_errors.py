"""What an operator reads about a bad configuration: one line per problem, naming the option (or
the environment variable or flag the bad value came from) and, for a misspelt name, the option it
most likely meant.

``gateway.cli.configuration`` prints these lines (exit status 2); the options themselves are in
``gateway.config``.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import typing
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from gateway.config import CONTRACT_ENVIRONMENT, Settings

#: Where every option is listed, for people who installed the gateway with pip or run its
#: container as much as for a checkout: the example configuration ships inside the package.
LISTED = "--example-config lists every option"

#: How alike a misspelt name and an option's name must be (difflib's ratio) to be suggested:
#: ``prot`` → ``port`` and ``hots`` → ``host`` (0.75) are, ``fail`` → ``fail_limit`` is not.
_CLOSE = 0.7


def _model_of(annotation: object) -> type[BaseModel] | None:
    """The model a field holds, directly or as the items of a tuple (``client_tokens``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        if (model := _model_of(arg)) is not None:
            return model
    return None


def _folded(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


def _closest(name: str, candidates: dict[str, str]) -> list[str]:
    """Values of ``candidates`` (keyed by the name compared) whose name is ``name`` but for case
    and underscores, else the closest one."""
    folded = {key: _folded(key) for key in candidates}
    same = [candidates[key] for key, value in folded.items() if value == _folded(name)]
    if same:
        return same
    close = difflib.get_close_matches(_folded(name), list(folded.values()), n=1, cutoff=_CLOSE)
    return [candidates[key] for key, value in folded.items() if close and value == close[0]]


def _section_options(name: str) -> list[str]:
    """Where an option named like ``name`` is, when it belongs to a section:
    ``server.port (under [server])`` for ``port``."""
    owners: dict[str, list[str]] = {}
    for section, field in Settings.model_fields.items():
        table = field.annotation
        if isinstance(table, type) and issubclass(table, BaseModel):
            for option in table.model_fields:
                owners.setdefault(option, []).append(f"{section}.{option} (under [{section}])")
    close = _closest(name, {option: option for option in owners})
    return owners[close[0]] if close else []


def unknown_option_message(loc: tuple[str | int, ...]) -> str:
    """What to say of the unknown option at ``loc``: the option of the same table it most likely
    meant (``server.prot`` → ``server.port``) or, for a top-level key, the section an option of
    that name belongs to (``port`` → ``server.port``, under ``[server]``)."""
    model: type[BaseModel] | None = Settings
    for part in loc[:-1]:
        if isinstance(part, str) and model is not None:
            field = model.model_fields.get(part)
            model = None if field is None else _model_of(field.annotation)
    if model is None:
        return f"unknown option; {LISTED}"
    name = str(loc[-1])
    prefix = "".join(f"{part}." for part in loc[:-1])
    close = _closest(name, {option: f"{prefix}{option}" for option in model.model_fields})
    if close:
        return f"unknown option (did you mean {close[0]}?); {LISTED}"
    if model is Settings and (owners := _section_options(name)):
        return f"unknown top-level option; did you mean {' or '.join(owners)}? {LISTED}"
    return f"unknown option; {LISTED}"


def environment_source(
    loc: tuple[str | int, ...], environ: Mapping[str, str] | None = None
) -> tuple[str, tuple[str | int, ...]] | None:
    """The environment variable the value at ``loc`` came from, as it was spelt, and where in
    that variable's value it is: ``("GATEWAY_CLIENT_TOKENS", (0, "token"))`` for
    ``client_tokens.0.token``, ``("GITLAB_URL", ())`` for ``gitlab.url``; None when no variable
    sets it (the value came from the file or a default). The environment outranks the file, so
    a variable that is set is where the value came from."""
    env = os.environ if environ is None else environ
    parts = [str(part) for part in loc]
    candidates: list[tuple[str, int]] = []
    for name, (top, option) in CONTRACT_ENVIRONMENT.items():
        depth = 1 if option is None else 2
        if parts[:depth] == [top, option][:depth] and env.get(name):  # empty counts as unset
            candidates.append((name, depth))
    field = Settings.model_fields.get(parts[0]) if parts else None
    if field is not None:
        section = field.annotation
        if len(parts) > 1 and isinstance(section, type) and issubclass(section, BaseModel):
            candidates.append((f"GATEWAY_{parts[0]}__{parts[1]}".upper(), 2))
        candidates.append((f"GATEWAY_{parts[0]}".upper(), 1))
    spelt = {name.upper(): name for name in env}  # pydantic-settings ignores the case
    for name, depth in candidates:
        if name in spelt:
            return spelt[name], loc[depth:]
    return None


def _json_kind(value: object, *, toml: bool = False) -> str:
    """What ``value`` is in JSON's words (TOML's with ``toml``)."""
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "a table" if toml else "an object"
    return "null"


def _model_at(loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The model of the value at ``loc``: a section's, or a list's items' (``client_tokens.0``)."""
    model: type[BaseModel] | None = Settings
    for part in loc:
        if isinstance(part, str) and model is not None:
            field = model.model_fields.get(part)
            model = None if field is None else _model_of(field.annotation)
    return model


def _example(variable: str) -> str | None:
    """The JSON of a list or table option's example, e.g. ``["pm", "dev", "reviewer"]``."""
    example = _JSON_EXAMPLES.get(variable.upper())
    return None if example is None else example.split("=", 1)[1].strip("'")


def _shape_message(e: ErrorDetails, variable: str | None) -> str:
    """A value that is not the list or the object its option needs, said in JSON terms for a
    variable and in TOML terms for the file, with the shape expected."""
    loc, given = e["loc"], _json_kind(e.get("input"), toml=variable is None)
    model = _model_at(loc)
    # The keys an entry must have; optional ones (a client token's toolsets, limits...) are in
    # the example configuration.
    keys = [] if model is None else [name for name, f in model.model_fields.items() if f.is_required()]
    example = None if variable is None else _example(variable)
    if e["type"] in ("model_type", "dict_type"):
        if not loc or not isinstance(loc[-1], int):  # a whole section, e.g. GATEWAY_SERVER='5'
            if variable is not None:
                return (
                    f"must be a JSON object, not {given}; or set one option at a time: {variable}__<OPTION>"
                )
            return f"must be a table, not {given}: write its options under a [{loc[0] if loc else ''}] header"
        if variable is not None:
            shape = " and ".join(f'"{key}"' for key in keys)
            message = f"each entry must be a JSON object with {shape}, not {given}"
            return message + (f", e.g. {variable}='{example}'" if example else "")
        return (
            f"each entry must be a table with {' and '.join(keys)}, not {given}: write each under its "
            f"own [[{loc[0]}]] header ({LISTED})"
        )
    if variable is not None:
        return f"must be a JSON list, not {given}" + (f", e.g. {variable}='{example}'" if example else "")
    if model is not None:  # a list of tables (client_tokens)
        return (
            f"must be a list of tables, not {given}: write each entry under its own [[{loc[0]}]] "
            f"header, with two brackets ({LISTED})"
        )
    name = str(loc[-1])
    listed = _example(f"GATEWAY_{'__'.join(str(part) for part in loc)}")
    return f"must be a list, not {given}" + (f", e.g. {name} = {listed}" if listed else "")


#: Errors of a value's shape: a list or an object of the wrong kind.
_SHAPE_ERRORS = frozenset({"model_type", "dict_type", "tuple_type", "list_type"})


def config_error_lines(
    err: ValidationError, *, flags: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None
) -> list[str]:
    """One line per invalid option: ``<option>: <what is wrong> (got <value>)``.

    The line names where the bad value was given: the command-line flag (``flags`` maps an
    option such as ``server.port`` to the flag that set it), else the environment variable that
    sets it (``GATEWAY_SERVER__PORT``; ``GATEWAY_CLIENT_TOKENS[0].token`` inside a JSON value),
    else the option of the file; a flag or a variable is followed by the option as the docs name
    it (``GATEWAY_SERVER__PORT (server.port)``). The value is shown only for options that are not secrets
    (nothing under a ``token`` key). A check of a whole section names its options itself
    (``server.metrics_port ... is also server.port``), so its line is not prefixed with the
    section again.
    """
    lines = []
    for e in err.errors():
        loc = [str(p) for p in e["loc"]]
        option = ".".join(loc)
        flag = (flags or {}).get(option)
        source = None if flag is not None or not loc else environment_source(e["loc"], environ)
        variable = None if source is None else source[0]
        shown = e.get("input")
        empty = variable is not None and shown == ""
        message = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden" and source is not None and not source[1]:
            lines.append(unknown_environment_line(source[0], refused=True))
            continue
        if e["type"] == "extra_forbidden":
            message = unknown_option_message(e["loc"])
        elif e["type"] == "missing":
            message = "required option is missing"
        elif e["type"] in _SHAPE_ERRORS:
            message = _shape_message(e, variable)
        elif empty:
            message = "is set but empty: give it a value, or unset it to keep the default"
        secret = any("token" in part for part in loc)
        scalar = isinstance(shown, str | int | float | bool)
        if scalar and not secret and not empty and e["type"] != "value_error":  # value errors already say it
            message += f" (got {shown!r})"
        if source is not None:
            name, inside = source
            named = ".".join(loc[: len(loc) - len(inside)])
            option = name + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in inside)
            option += _as_documented(name.upper().removeprefix("GATEWAY_"), named)
        elif flag is not None:
            option = flag + _as_documented(flag.removeprefix("--").replace("-", "_").upper(), option)
        if not loc or message.startswith(f"{'.'.join(loc)}."):
            lines.append(message)
        else:
            lines.append(f"{option}: {message}")
    return lines


def _as_documented(spelt: str, option: str) -> str:
    """`` (server.port)``: the option as the documentation and the example configuration name
    it, beside the variable or flag that set it, unless that says the same (``GATEWAY_READ_ONLY``,
    ``--read-only``)."""
    return "" if spelt == option.upper() else f" ({option})"


#: What each option that is a list or a table looks like in the environment, as JSON.
_JSON_EXAMPLES = {
    "GATEWAY_CLIENT_TOKENS": """GATEWAY_CLIENT_TOKENS='[{"token": "<random secret>", "agent_id": "pm"}]'""",
    "GATEWAY_SERVER__ALLOWED_HOSTS": """GATEWAY_SERVER__ALLOWED_HOSTS='["gateway.example.com"]'""",
    "GATEWAY_SERVER__ALLOWED_ORIGINS": """GATEWAY_SERVER__ALLOWED_ORIGINS='["https://app.example.com"]'""",
    "GATEWAY_BROKER__AGENTS": """GATEWAY_BROKER__AGENTS='["pm", "dev", "reviewer"]'""",
}


def _not_json(value: str) -> bool:
    try:
        json.loads(value)
    except ValueError:
        return True
    return False


def value_error_line(err: ValueError, config: Path | None) -> str:
    """A TOML syntax error with its file, or an environment variable that is not the JSON its
    option needs, named with an example of that option written as JSON."""
    field = re.search(r'error parsing value for field "(\w+)" from source "EnvSettingsSource"', str(err))
    if field is None:
        return f"{config}: {err}" if config is not None else str(err)
    prefix = f"GATEWAY_{field.group(1).upper()}"
    given = {name.upper(): value for name, value in os.environ.items()}
    # pydantic-settings names only the top-level field (GATEWAY_BROKER for a bad
    # GATEWAY_BROKER__AGENTS): the variable at hand is the one of that field that does not parse.
    ours = [name for name in _JSON_EXAMPLES if name == prefix or name.startswith(f"{prefix}__")]
    bad = [name for name in ours if name in given and _not_json(given[name])]
    example = _JSON_EXAMPLES[(bad or ours or ["GATEWAY_BROKER__AGENTS"])[0]]
    named = bad[0] if bad else f"{prefix} or a {prefix}__* variable"
    return (
        f"{named} is not valid JSON: options that take a list or a table are written as JSON in the "
        f"environment, e.g. {example}"
    )


def _known_environment() -> set[str]:
    """``GATEWAY_STATE_DIR``, ``GATEWAY_<OPTION>`` for top-level options and
    ``GATEWAY_<SECTION>__<OPTION>`` for the options of a section."""
    known = {"GATEWAY_STATE_DIR"}
    for name, field in Settings.model_fields.items():
        known.add(f"GATEWAY_{name.upper()}")
        section = field.annotation
        if isinstance(section, type) and issubclass(section, BaseModel):
            known.update(f"GATEWAY_{name.upper()}__{option.upper()}" for option in section.model_fields)
    return known


#: How alike a variable's name and ``GITLAB_URL`` or ``GITLAB_TOKEN`` must be (difflib's ratio)
#: to be taken for a misspelling of it: ``GITLAB_TOKNE`` (0.92) and ``GITLB_URL`` (0.95) are;
#: ``GITLAB_API_URL`` (0.83, another GitLab client's) and ``GITLAB_CI`` (0.74, GitLab CI's) are not.
_CONTRACT_CLOSE = 0.85
#: The contract's names that are not ``GATEWAY_*`` (whose misspellings are caught as any option's).
_GITLAB_NAMES = sorted(name for name in CONTRACT_ENVIRONMENT if not name.startswith("GATEWAY_"))


def _misspelt_contract_name(name: str, env: Mapping[str, str]) -> bool:
    """``name`` looks like ``GITLAB_URL`` or ``GITLAB_TOKEN`` but is not it (``GITLAB_URl``,
    ``GITLAB_TOKNE``), and the name it looks like is not set: when it is, the look-alike is
    another program's variable, not a typo."""
    if name in CONTRACT_ENVIRONMENT or name.upper().startswith("GATEWAY_"):
        return False
    close = difflib.get_close_matches(name.upper(), _GITLAB_NAMES, n=1, cutoff=_CONTRACT_CLOSE)
    return bool(close) and not env.get(close[0])


#: Other GitLab MCP servers' variables (e.g. ``@zereight/mcp-gitlab``) → this gateway's name for
#: the same thing: an operator moving over keeps theirs, which this gateway would ignore silently.
OTHER_SERVERS_ENVIRONMENT = {
    "GITLAB_API_URL": "GITLAB_URL",
    "GITLAB_PERSONAL_ACCESS_TOKEN": "GITLAB_TOKEN",
    "GITLAB_READ_ONLY_MODE": "GATEWAY_READ_ONLY",
}


def _other_servers_name(name: str, env: Mapping[str, str]) -> bool:
    """``name`` is another GitLab MCP server's variable and ours for the same thing is not set."""
    ours = OTHER_SERVERS_ENVIRONMENT.get(name)
    return ours is not None and not env.get(ours)


def unknown_environment(environ: Mapping[str, str] | None = None) -> list[str]:
    """``GATEWAY_*`` variables that name no option, misspellings of ``GITLAB_URL`` and
    ``GITLAB_TOKEN``, and other GitLab MCP servers' names for them (each otherwise silently ignored)."""
    env = os.environ if environ is None else environ
    known = _known_environment()
    return sorted(
        k
        for k in env
        if (k.upper().startswith("GATEWAY_") and k.upper() not in known)
        or _misspelt_contract_name(k, env)
        or _other_servers_name(k, env)
    )


def refused_environment(name: str) -> bool:
    """An unknown variable that stops the gateway rather than being warned about:
    ``GATEWAY_<SECTION>__<OPTION>`` is the gateway's own whatever it says, as a typo of an
    option's name inside a section is. Any other may be another program's (CGI's
    ``GATEWAY_INTERFACE``, a client's token variable, a look-alike of ``GITLAB_URL``)."""
    return name.upper().startswith("GATEWAY_") and "__" in name


def unknown_environment_line(name: str, *, refused: bool = False) -> str:
    """What to say of unknown variable ``name``: that it is ignored (or ``refused``), and the
    option it most likely meant (``GATEWAY_READONLY`` → ``GATEWAY_READ_ONLY``, ``GITLAB_TOKNE``
    → ``GITLAB_TOKEN``)."""
    ours = OTHER_SERVERS_ENVIRONMENT.get(name)
    if ours is not None:
        section, option = CONTRACT_ENVIRONMENT.get(ours, (None, None))
        documented = f", {section}.{option} in the --config file" if option else ""
        return (
            f"environment variable {name} is another GitLab MCP server's name and is "
            f"{'refused' if refused else 'ignored'} here: this gateway reads {ours}{documented} ({LISTED})"
        )
    candidates = sorted(_known_environment() | set(_GITLAB_NAMES))
    close = difflib.get_close_matches(name.upper(), candidates, n=1, cutoff=0.8)
    hint = f"did you mean {close[0]}? " if close else ""
    what = "" if refused else " and is ignored"
    return f"environment variable {name} names no option{what} ({hint}{LISTED})"
