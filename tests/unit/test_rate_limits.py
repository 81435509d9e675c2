"""Per-agent token buckets, on a fake clock."""

from __future__ import annotations

import pytest

from gateway.config import Settings
from gateway.errors import ToolError
from gateway.gitlab.credentials import Credential
from gateway.tools.caller import Caller
from gateway.tools.rate_limits import MAX_BUCKETS, AgentLimiter, Limit, TokenBucket, build_limiter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def caller(agent: str | None, token: str = "", remote: str = "192.0.2.1") -> Caller:
    return Caller(agent, Credential("PRIVATE-TOKEN", token, "passthrough" if token else "service"), remote)


def test_bucket_allows_a_burst_then_the_rate() -> None:
    bucket = TokenBucket(Limit(2.0, 3), now=0.0)
    assert [bucket.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(0.0) == pytest.approx(0.5)
    assert bucket.take(0.5) == 0.0  # refilled one token in half a second
    assert bucket.take(10.0) == 0.0 and bucket.take(10.0) == 0.0 and bucket.take(10.0) == 0.0
    assert bucket.take(10.0) > 0  # never more than the burst, however long it was idle


def test_limiter_refuses_with_the_shape_of_gitlabs_429_and_counts_by_agent() -> None:
    clock, limited = Clock(), list[str]()
    limiter = AgentLimiter(Limit(1.0, 2), {}, passthrough=False, on_limited=limited.append, clock=clock)
    limiter.check(caller("dev"))
    limiter.check(caller("dev"))
    with pytest.raises(ToolError) as err:
        limiter.check(caller("dev"))
    assert err.value.reason == "rate_limited"
    assert err.value.details == {"retry_after_seconds": 1, "limit": "gateway_agent_calls"}
    assert err.value.message == (
        "Rate limited by this gateway: at most 1 GitLab tool call per second (bursts of 2) for agent "
        "'dev'. Retry after 1 second."
    )
    limiter.check(caller("pm"))  # another agent has its own bucket
    clock.now += 1.0
    limiter.check(caller("dev"))
    assert limited == ["dev"]


def test_passthrough_buckets_are_per_credential_and_labelled_passthrough() -> None:
    clock, limited = Clock(), list[str]()
    limiter = AgentLimiter(Limit(1.0, 1), {}, passthrough=True, on_limited=limited.append, clock=clock)
    limiter.check(caller(None, "glpat-one-aaaaaaaaaaaa", "192.0.2.1"))
    limiter.check(caller(None, "glpat-two-bbbbbbbbbbbb", "192.0.2.2"))
    with pytest.raises(ToolError):
        limiter.check(caller(None, "glpat-one-aaaaaaaaaaaa", "192.0.2.3"))
    assert limited == ["passthrough"]
    assert not any("glpat" in key for key in limiter._buckets)  # keyed on a hash, never the token


def test_rotating_passthrough_tokens_from_one_source_meets_the_sources_limit() -> None:
    clock, limited = Clock(), list[str]()
    limiter = AgentLimiter(Limit(1.0, 3), {}, passthrough=True, on_limited=limited.append, clock=clock)
    for n in range(3):
        limiter.check(caller(None, f"glpat-bogus-{n:012d}", "192.0.2.7"))
    with pytest.raises(ToolError) as err:  # a fresh token, the same address
        limiter.check(caller(None, "glpat-bogus-999999999999", "192.0.2.7"))
    assert err.value.reason == "rate_limited"
    limiter.check(caller(None, "glpat-other-000000000000", "192.0.2.8"))  # another address: its own
    # An agent (client token) is its source wherever it calls from.
    for n in range(3):
        limiter.check(caller("dev", f"glpat-dev-{n:014d}", f"198.51.100.{n}"))
    with pytest.raises(ToolError):
        limiter.check(caller("dev", "glpat-dev-99999999999999", "198.51.100.99"))


def test_bucket_count_is_bounded() -> None:
    limiter = AgentLimiter(Limit(1.0, 1), {}, passthrough=True, on_limited=lambda _: None, clock=Clock())
    for i in range(MAX_BUCKETS + 5):
        limiter.check(caller(None, f"token-{i}", f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"))
    assert len(limiter._buckets) == MAX_BUCKETS


def test_build_limiter_is_off_by_default_and_a_token_may_set_its_own() -> None:
    assert build_limiter(Settings(), lambda _: None) is None
    settings = Settings(
        limits={"calls_per_second": 5.0},
        client_tokens=[
            {"token": "pm-secret-0123456789", "agent_id": "pm", "calls_per_second": 0.5},
            {"token": "dev-secret-0123456789", "agent_id": "dev", "burst": 2},
        ],
    )
    limiter = build_limiter(settings, lambda _: None)
    assert limiter is not None
    assert limiter._default == Limit(5.0, 5)
    assert limiter._per_agent == {"pm": Limit(0.5, 1), "dev": Limit(5.0, 2)}
    with pytest.raises(ValueError, match="sets burst but no calls_per_second"):
        Settings(client_tokens=[{"token": "dev-secret-0123456789", "agent_id": "dev", "burst": 2}])
