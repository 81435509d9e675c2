"""A log capture that installs the gateway's own handler (the one ``__main__`` installs), and the
in-process app fixtures of ``tests/unit/mcp``."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from gateway.config import LoggingSettings
from gateway.observability.logging import configure_logging, unconfigure_logging
from gateway.observability.redaction import Redactor
from tests.unit.mcp.conftest import mcp_factory, probe  # noqa: F401 (fixtures: in-process apps)


@dataclass
class LogCapture:
    """What the gateway's handler wrote, as lines (and parsed JSON objects for ``json``)."""

    stream: io.StringIO = field(default_factory=io.StringIO)
    redactor: Redactor | None = None

    @property
    def text(self) -> str:
        return self.stream.getvalue()

    @property
    def lines(self) -> list[str]:
        return [line for line in self.text.splitlines() if line.strip()]

    def records(self) -> list[dict[str, Any]]:
        """Every line parsed as JSON (fails the test if a line is not one JSON object)."""
        return [json.loads(line) for line in self.lines]


@pytest.fixture
def capture_logs() -> Iterator[Callable[..., LogCapture]]:
    """``capture_logs(format="json", level="INFO", secrets=[...])`` → :class:`LogCapture`."""

    def install(format: str = "json", level: str = "INFO", secrets: list[str] | None = None) -> LogCapture:
        capture = LogCapture()
        capture.redactor = configure_logging(
            LoggingSettings(format=format, level=level),
            secrets=secrets or [],
            stream=capture.stream,
        )
        return capture

    yield install
    unconfigure_logging()
