"""Write your GitLab's GraphQL schema as SDL, by introspection (``scripts/refresh-gitlab-schema``).

The repository carries gitlab.com's published schema (``tests/gitlab/gitlab_schema.graphql``). A
team on a self-managed GitLab of another version writes its own with this command and checks the
gateway's GraphQL documents against it::

    GITLAB_URL=https://gitlab.example.com GITLAB_TOKEN=glpat-... scripts/refresh-gitlab-schema
    GITLAB_SCHEMA_FILE=gitlab_schema.gitlab.example.com.graphql \\
        scripts/test tests/unit/test_graphql_operations.py

Steps (graphql-core): ``get_introspection_query`` → POST ``<GITLAB_URL>/api/graphql`` →
``build_client_schema`` → ``lexicographic_sort_schema`` (a stable order, so two versions diff
cleanly) → ``print_schema``. The token (needed only when the instance hides its API from anonymous
callers; ``read_api`` is enough) is sent as ``Authorization: Bearer`` and never printed. Proxies
and ``SSL_CERT_FILE`` are taken from the environment.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from graphql import build_client_schema, get_introspection_query, print_schema
from graphql.utilities import lexicographic_sort_schema

from gateway.gitlab.urls import normalize_base_url


def fetch_sdl(gitlab_url: str, token: str | None, *, timeout: float = 60.0) -> str:
    """The SDL of the GitLab at ``gitlab_url``.

    Raises:
        SystemExit: GitLab was not reachable, refused the token, or answered without a schema.
    """
    endpoint = normalize_base_url(gitlab_url).graphql_url
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.post(
            endpoint,
            json={"query": get_introspection_query(descriptions=True)},
            headers=headers,
            timeout=timeout,
        )
    except httpx.HTTPError as exc:
        raise SystemExit(
            f"{endpoint}: not reachable ({type(exc).__name__}: {exc}); check GITLAB_URL"
        ) from None
    if response.status_code in (401, 403):
        raise SystemExit(f"{endpoint}: HTTP {response.status_code}; check GITLAB_TOKEN (scope read_api)")
    if response.status_code != 200:
        raise SystemExit(f"{endpoint}: HTTP {response.status_code}, expected 200 with the schema")
    body = response.json()
    if not isinstance(body.get("data"), dict) or "__schema" not in body["data"]:
        errors = "; ".join(str(e.get("message")) for e in body.get("errors") or []) or "no data"
        raise SystemExit(f"{endpoint}: no schema in the answer ({errors}); is introspection enabled?")
    schema = lexicographic_sort_schema(build_client_schema(body["data"]))
    return print_schema(schema) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="scripts/refresh-gitlab-schema",
        description="Write the GraphQL schema (SDL) of the GitLab at $GITLAB_URL, by introspection.",
    )
    ap.add_argument(
        "--output",
        "-o",
        type=Path,
        help="file to write (default: gitlab_schema.<host>.graphql in the current folder)",
    )
    args = ap.parse_args(argv)
    gitlab_url = os.environ.get("GITLAB_URL")
    if not gitlab_url:
        ap.error("set GITLAB_URL to your GitLab, e.g. GITLAB_URL=https://gitlab.example.com")
    output = args.output or Path(f"gitlab_schema.{urlsplit(gitlab_url).hostname}.graphql")
    sdl = fetch_sdl(gitlab_url, os.environ.get("GITLAB_TOKEN") or None)
    output.write_text(sdl, encoding="utf-8")
    print(
        f"wrote {output} ({sdl.count(chr(10))} lines); check the gateway's documents against it:\n"
        f"  GITLAB_SCHEMA_FILE={output.resolve()} scripts/test tests/unit/test_graphql_operations.py"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
