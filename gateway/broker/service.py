"""Placeholder until the broker lands: no broker service."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.config import Settings
    from gateway.observability.metrics import Metrics


class BrokerService:
    """Placeholder."""


@asynccontextmanager
async def open_broker(settings: Settings, metrics: Metrics) -> AsyncIterator[BrokerService | None]:
    """Yield the broker service (None while the broker is not written)."""
    yield None
