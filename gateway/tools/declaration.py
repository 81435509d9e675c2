"""The parts of a tool's declaration besides the :class:`~gateway.tools.registry.Tool` itself:
the bases of its input and output models and its MCP annotations (re-exported by
``gateway.tools.registry``, where tool modules import them from).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator

NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,128}$"


class ToolInput(BaseModel):
    """Base of every tool's input model: unknown arguments are refused.

    ``argument_aliases`` maps another name of an argument to the one listed in ``inputSchema``
    (``{"id": "project_id"}``): a call written with the other name (for GitLab's built-in MCP
    server, or an older release of this gateway) is read as if it used the listed one. Aliases are
    never listed, so an agent reading ``tools/list`` sees one name per thing; the tool's docs page
    names them.
    """

    model_config = ConfigDict(extra="forbid")

    argument_aliases: ClassVar[Mapping[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _read_aliases(cls, data: Any) -> Any:
        if not cls.argument_aliases or not isinstance(data, dict):
            return data
        data = dict(data)
        for alias, name in cls.argument_aliases.items():
            if alias not in data:
                continue
            value = data.pop(alias)
            if value is None:  # null: not given (as for any optional argument)
                continue
            if data.get(name) is not None and data[name] != value:
                raise ValueError(
                    f"`{alias}` and `{name}` are two names of one argument and were given different "
                    f"values; give `{name}` only"
                )
            data[name] = value
        return data


class ToolOutput(BaseModel):
    """Base of output models: ``outputSchema`` is derived from one, and every result is checked
    against it. A handler returns an instance (only the fields it set are sent) or a dict."""

    model_config = ConfigDict(extra="allow")


class ResultSchemaError(RuntimeError):
    """A handler's result does not match its tool's output model: a bug in the gateway, reported as
    an internal error rather than sent to an agent that was promised the ``outputSchema``."""


@dataclass(frozen=True)
class Annotations:
    """MCP ``ToolAnnotations`` (hints; MCP 2025-11-25 server/tools#tool-annotations)."""

    read_only: bool
    destructive: bool = False
    idempotent: bool = False
    open_world: bool = True
    title: str | None = None

    def to_mcp(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "readOnlyHint": self.read_only,
            "destructiveHint": self.destructive,
            "idempotentHint": self.idempotent,
            "openWorldHint": self.open_world,
        }
        if self.title:
            out["title"] = self.title
        return out


#: A GitLab read.
READ_ONLY = Annotations(read_only=True, destructive=False, idempotent=True, open_world=True)
