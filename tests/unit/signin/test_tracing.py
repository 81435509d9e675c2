"""A signed-in person's calls are traced as theirs: the span names the GitLab user, never a token."""

from __future__ import annotations

from tests.otlp_receiver import OtlpReceiver
from tests.unit.mcp.helpers import response_message
from tests.unit.observability.test_tracing import by_name, exported, receiver
from tests.unit.signin.conftest import MakeGateway, sign_in, whoami

__all__ = ["receiver"]  # the OTLP receiver fixture


async def test_the_span_of_a_signed_in_call_names_the_gitlab_user(
    receiver: OtlpReceiver, make_gateway: MakeGateway
) -> None:
    gw = await make_gateway(sign_in={"roles": {"alice": "dev"}})
    tokens = await sign_in(gw, role="dev")
    answer = await response_message(await whoami(gw, tokens.access_token))
    assert "result" in answer, answer
    spans = await exported(receiver, 1)
    call = by_name(spans, "tools/call whoami")
    assert call.attributes["enduser.id"] == "alice"
    assert call.attributes["gen_ai.agent.id"] == "dev"
    text = repr(spans)
    assert tokens.access_token not in text
    assert not any(token in text for token in gw.gitlab.access)
