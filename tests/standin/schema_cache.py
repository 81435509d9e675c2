"""GitLab's 1 MB SDL built into a schema once per machine, not once per process.

Building the schema from the SDL costs about 2.5 s of CPU; from its introspection result, half
that. The suite starts the stand-in and the unit fakes dozens of times, so the first build writes
the introspection result to the temporary folder, keyed by the SDL's SHA-256 and graphql-core's
version, and later builds read it. The file is written under another name and renamed, so a
reader never sees half of one; two processes that miss at once both build it, and either result
is the same.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from graphql import (
    GraphQLSchema,
    build_ast_schema,
    build_client_schema,
    introspection_from_schema,
    parse,
    version,
)


def _cache_file(sdl: bytes) -> Path:
    key = hashlib.sha256(sdl).hexdigest()[:24]
    return Path(tempfile.gettempdir()) / f"gitlab-mcp-gateway-tests-schema-{key}-graphql-{version}.json"


def gitlab_introspection(path: Path) -> dict[str, Any]:
    """The introspection result of the SDL at ``path`` (``{"__schema": ...}``), cached as above.

    Raises what parsing the SDL raises (``GraphQLError``).
    """
    sdl = path.read_bytes()
    cached = _cache_file(sdl)
    try:
        data = json.loads(cached.read_bytes())
        if isinstance(data, dict) and "__schema" in data:
            return data
    except (OSError, ValueError):
        pass  # absent, or unreadable: build it from the SDL below
    schema = build_ast_schema(parse(sdl.decode("utf-8"), no_location=True), assume_valid_sdl=True)
    data = dict(introspection_from_schema(schema))
    partial = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
    try:
        partial.write_text(json.dumps(data), encoding="utf-8")
        os.replace(partial, cached)
    except OSError:
        partial.unlink(missing_ok=True)  # a read-only temporary folder: no cache, same schema
    return data


def build_gitlab_schema(path: Path) -> GraphQLSchema:
    """The schema of the SDL at ``path``; may raise what parsing it raises (``GraphQLError``)."""
    return build_client_schema(gitlab_introspection(path))  # type: ignore[arg-type]
