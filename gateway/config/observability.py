"""``[logging]``: structured logs on stderr."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from gateway.config.base import _Section


class LoggingSettings(_Section):
    """Structured logs on stderr."""

    #: ``json``: one JSON object per line (containers, log shippers). ``plain``: for people.
    format: Literal["json", "plain"] = "plain"
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @field_validator("format", mode="before")
    @classmethod
    def _format_any_case(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("level", mode="before")
    @classmethod
    def _level_any_case(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value
