"""The outside contract's environment names (``GITLAB_URL``, ``GITLAB_TOKEN``,
``GATEWAY_STATE_DIR``) as a settings source."""

from __future__ import annotations

import os
from typing import Any

from pydantic_settings import PydanticBaseSettingsSource

#: The outside contract's environment names and their options (an empty value counts as unset).
CONTRACT_ENVIRONMENT: dict[str, tuple[str, str | None]] = {
    "GITLAB_URL": ("gitlab", "url"),
    "GITLAB_TOKEN": ("gitlab", "token"),
    "GATEWAY_STATE_DIR": ("state_dir", None),
}


class _ContractEnvSource(PydanticBaseSettingsSource):
    """Maps the outside contract's environment names onto their options."""

    _NAMES = CONTRACT_ENVIRONMENT

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for env_name, (section, option) in self._NAMES.items():
            value = os.environ.get(env_name)
            if value is None or value == "":
                continue
            if option is None:
                out[section] = value
            else:
                out.setdefault(section, {})[option] = value
        return out
