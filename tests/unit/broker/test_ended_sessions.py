"""The record of MCP sessions ended by DELETE: kept until the session would have expired, then
pruned; on both backends."""

from __future__ import annotations

import pytest

from tests.unit.broker.conftest import EnvFactory


async def test_ended_sessions_are_kept_until_they_expire_then_pruned(make_env: EnvFactory) -> None:
    env = await make_env()
    ended = env.broker.ended_sessions
    now = [1000.0]
    ended._clock = lambda: now[0]
    await ended.end("soon", 1010.0)
    await ended.end("later", 2000.0)
    await ended.end("later", 2000.0)  # a second DELETE of it (another replica, a retry)
    assert ended.is_ended("soon") and ended.is_ended("later")
    assert not ended.is_ended("never")
    assert await ended.prune() == 0
    assert env.metrics.registry.get_sample_value("gateway_mcp_sessions_ended") == 2
    now[0] = 1010.0  # "soon" has expired: its id is refused as expired from now on
    assert await ended.prune() == 1
    assert not ended.is_ended("soon") and ended.is_ended("later")
    assert env.metrics.registry.get_sample_value("gateway_mcp_sessions_ended") == 1


async def test_a_replica_serves_from_its_copy_within_the_lag_then_refuses_until_a_reload(
    make_env: EnvFactory,
) -> None:
    from gateway.broker.ended_sessions import ENDED, LAG_SECONDS, id_hash
    from gateway.broker.store import DatabaseUnavailable

    env = await make_env()
    ended = env.broker.ended_sessions
    now = [1000.0]
    ended._clock = lambda: now[0]
    await ended.load()  # as at start
    # Another replica's DELETE, heard as its notification: ended here without a query.
    assert ended.heard(f"{ENDED} {id_hash('elsewhere')} 2000.0")
    assert not ended.heard("dev")  # a broker signal is not for the record
    assert ended.is_ended("elsewhere") and not ended.is_ended("live")
    ended.listening(False)  # notifications may be missed from now on
    now[0] += LAG_SECONDS
    assert not ended.is_ended("live")  # still within the bound
    now[0] += 0.5
    with pytest.raises(DatabaseUnavailable):
        ended.is_ended("live")
    ended.listening(True)
    await ended.load()  # the reload after the connection came back
    assert not ended.is_ended("live") and ended.is_ended("elsewhere")
