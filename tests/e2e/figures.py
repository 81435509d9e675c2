"""Figures the end-to-end proofs measure beside their assertions, printed as one line per module
in pytest's output (``[figure] ...``), so a run states them and not only that they held."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest


def figure_fixture(summary: Callable[[], str | None]) -> Callable[..., Iterator[None]]:
    """A module-scoped autouse fixture that prints ``summary()`` once the module's tests ran."""

    @pytest.fixture(scope="module", autouse=True)
    def _figure(request: pytest.FixtureRequest) -> Iterator[None]:
        yield
        line = summary()
        plugins = request.config.pluginmanager
        reporter = plugins.get_plugin("terminalreporter")
        capture = plugins.get_plugin("capturemanager")
        if not line or reporter is None:
            return
        # Past output capture, as capsys.disabled() does, so the line shows in a normal run.
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            reporter.ensure_newline()
            reporter.write_line(f"[figure] {line}")

    return _figure
