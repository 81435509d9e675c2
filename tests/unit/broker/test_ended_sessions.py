"""The record of MCP sessions ended by DELETE: kept until the session would have expired, then
pruned; on both backends."""

from __future__ import annotations

from tests.unit.broker.conftest import EnvFactory


async def test_ended_sessions_are_kept_until_they_expire_then_pruned(make_env: EnvFactory) -> None:
    env = await make_env()
    ended = env.broker.ended_sessions
    now = [1000.0]
    ended._clock = lambda: now[0]
    await ended.end("soon", 1010.0)
    await ended.end("later", 2000.0)
    await ended.end("later", 2000.0)  # a second DELETE of it (another replica, a retry)
    assert await ended.is_ended("soon") and await ended.is_ended("later")
    assert not await ended.is_ended("never")
    assert await ended.prune() == 0
    assert env.metrics.registry.get_sample_value("gateway_mcp_sessions_ended") == 2
    now[0] = 1010.0  # "soon" has expired: its id is refused as expired from now on
    assert await ended.prune() == 1
    assert not await ended.is_ended("soon") and await ended.is_ended("later")
    assert env.metrics.registry.get_sample_value("gateway_mcp_sessions_ended") == 1
