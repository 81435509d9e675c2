"""A signed-in person's role takes its ``sign_in.role_access`` entry's tools and limits, as a
client token's agent takes its ``client_tokens`` entry's."""

from __future__ import annotations

from typing import Any

from tests.unit.mcp.helpers import response_message
from tests.unit.signin.conftest import MakeGateway, sign_in
from tests.unit.signin.test_gitlab_refusals import TOOLS, call

ROLES = {"alice": ["dev", "reviewer"]}


async def test_a_role_gets_the_tools_and_rate_of_its_entry(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(
        extra_tools=TOOLS,
        sign_in={
            "roles": ROLES,
            "role_access": {"reviewer": {"read_only": True, "calls_per_second": 0.01, "burst": 1}},
        },
    )
    reviewer = await sign_in(gw, role="reviewer")
    before = len(gw.gitlab.api_requests)
    refused: dict[str, Any] = await response_message(await call(gw, reviewer.access_token, "change"))
    assert "sign_in.role_access.reviewer" in refused["error"]["message"], refused
    assert len(gw.gitlab.api_requests) == before
    first = await response_message(await call(gw, reviewer.access_token, "me"))
    assert first["result"]["structuredContent"] == {"username": "alice"}, first
    limited = await response_message(await call(gw, reviewer.access_token, "me"))
    assert limited["result"]["isError"] is True, limited
    assert "rate_limited" in str(limited["result"]), limited

    # The same person as another role, without an entry: the deployment's tools, no rate limit.
    dev = await sign_in(gw, role="dev")
    for _ in range(3):
        answer = await response_message(await call(gw, dev.access_token, "me"))
        assert answer["result"]["structuredContent"] == {"username": "alice"}, answer
    await response_message(await call(gw, dev.access_token, "change"))
    assert gw.gitlab.api_requests[-1].url.path == "/api/v4/user/status"  # it reached GitLab
