"""What every settings section shares: frozen, no unknown options; and what "loopback" means."""

from __future__ import annotations

import ipaddress

from pydantic import BaseModel, ConfigDict


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def is_loopback(host: str) -> bool:
    """True when ``host`` (a name or an address) only listens on the loopback interface."""
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
