"""What an operator reads about a bad configuration: one line per problem, naming the option and,
for a misspelt name, the option it most likely meant.

``gateway.__main__`` prints these lines (exit status 2); the options themselves are in
``gateway.config``.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import typing
from pathlib import Path

from pydantic import BaseModel, ValidationError

from gateway.config import Settings

LISTED = "config/gateway.example.toml lists every option"

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


def config_error_lines(err: ValidationError) -> list[str]:
    """One line per invalid option: ``<option>: <what is wrong> (got <value>)``.

    The value is shown only for options that are not secrets (nothing under a ``token`` key).
    A check of a whole section names its options itself (``server.metrics_port ... is also
    server.port``), so its line is not prefixed with the section again.
    """
    lines = []
    for e in err.errors():
        loc = [str(p) for p in e["loc"]]
        option = ".".join(loc)
        message = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            message = unknown_option_message(e["loc"])
        elif e["type"] == "missing":
            message = "required option is missing"
        shown = e.get("input")
        secret = any("token" in part for part in loc)
        scalar = isinstance(shown, str | int | float | bool)
        if scalar and not secret and e["type"] != "value_error":  # value errors already say it
            message += f" (got {shown!r})"
        if not option or message.startswith(f"{option}."):
            lines.append(message)
        else:
            lines.append(f"{option}: {message}")
    return lines


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


def unknown_environment(environ: dict[str, str] | None = None) -> list[str]:
    """``GATEWAY_*`` variables that name no option (a typo is otherwise silently ignored)."""
    env = os.environ if environ is None else environ
    known = _known_environment()
    return sorted(k for k in env if k.upper().startswith("GATEWAY_") and k.upper() not in known)


def unknown_environment_line(name: str, *, refused: bool = False) -> str:
    """What to say of unknown variable ``name``: that it is ignored (or ``refused``), and the
    option it most likely meant (``GATEWAY_READONLY`` → ``GATEWAY_READ_ONLY``)."""
    close = difflib.get_close_matches(name.upper(), sorted(_known_environment()), n=1, cutoff=0.8)
    hint = f"did you mean {close[0]}? " if close else ""
    what = "" if refused else " and is ignored"
    return f"environment variable {name} names no option{what} ({hint}{LISTED})"
