"""``scripts/refresh-gitlab-schema``: a GitLab's schema, by introspection, as SDL the checks accept."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import respx
from graphql import get_introspection_query, graphql_sync, print_schema
from graphql.utilities import lexicographic_sort_schema

from tests.conftest import REPO
from tests.gitlab.refresh_schema import fetch_sdl, main
from tests.unit.gitlab.fake_gitlab import gitlab_schema


def introspection() -> dict[str, object]:
    result = graphql_sync(gitlab_schema(), get_introspection_query(descriptions=True))
    assert result.errors is None
    return {"data": result.data}


def test_writes_your_gitlabs_schema_as_sdl_type_for_type(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITLAB_URL", "https://gitlab.example.com/gitlab/api/v4")
    monkeypatch.setenv("GITLAB_TOKEN", "glpat-secret")
    out = tmp_path / "mine.graphql"
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post("https://gitlab.example.com/gitlab/api/graphql").respond(json=introspection())
        assert main(["--output", str(out)]) == 0
    assert route.calls.last.request.headers["Authorization"] == "Bearer glpat-secret"
    # GitLab's schema, type for type: what the in-repository copy holds, in the same order, so
    # the gateway's documents validate against the written file exactly as against the copy.
    assert out.read_text(encoding="utf-8") == print_schema(lexicographic_sort_schema(gitlab_schema())) + "\n"


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (httpx.Response(401, json={"message": "401 Unauthorized"}), "check GITLAB_TOKEN"),
        (httpx.Response(200, json={"errors": [{"message": "introspection is disabled"}]}), "introspection"),
        (httpx.ConnectError("refused"), "not reachable"),
    ],
)
def test_a_failure_says_what_to_check(answer: httpx.Response | Exception, says: str) -> None:
    with respx.mock() as mock:
        mock.post("https://gitlab.example.com/api/graphql").mock(side_effect=[answer])
        with pytest.raises(SystemExit) as raised:
            fetch_sdl("https://gitlab.example.com", "glpat-secret")
    assert says in str(raised.value.code)
    assert "glpat-secret" not in str(raised.value.code)


def test_the_script_is_executable() -> None:
    assert (REPO / "scripts" / "refresh-gitlab-schema").stat().st_mode & 0o111
