"""The event loop the gateway runs on (``server.event_loop``).

uvloop (libuv's event loop behind asyncio's interface) spends less CPU per call than asyncio's
own loop, most when few calls run at once and each wakes the loop on its own
(``bench/bench_event_loop.py`` measures both in one run). It is a dependency wherever it builds
(Linux, macOS; CPython): ``auto``, the default, runs on it there and on asyncio's loop elsewhere.
``asyncio`` turns it off, e.g. to rule it out while chasing a problem; ``uvloop`` insists on it
(the configuration is refused where it cannot be imported).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Literal

EventLoopChoice = Literal["auto", "uvloop", "asyncio"]

log = logging.getLogger("gateway")

#: Where the package's dependencies install uvloop (the marker in pyproject.toml): there ``auto``
#: without uvloop means a broken install, worth a warning; elsewhere it is expected.
UVLOOP_EXPECTED = sys.platform not in ("win32", "cygwin") and sys.implementation.name == "cpython"


def uvloop_import_error() -> str | None:
    """Why uvloop cannot be imported here (None: it can)."""
    try:
        import uvloop  # noqa: F401
    except ImportError as err:
        return str(err)
    return None


def new_event_loop(choice: EventLoopChoice) -> tuple[asyncio.AbstractEventLoop, str]:
    """A new event loop for ``choice`` and the name of what runs (``uvloop`` or ``asyncio``).

    ``auto`` without an importable uvloop falls back to asyncio's loop, with one warning where
    uvloop should have been installed. ``uvloop`` was checked when the configuration was loaded.
    """
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError as err:
            if UVLOOP_EXPECTED:
                log.warning(
                    "uvloop cannot be imported (%s): running on asyncio's event loop, which costs "
                    "more CPU per call; reinstall the gateway's dependencies, or set "
                    'server.event_loop = "asyncio" (GATEWAY_SERVER__EVENT_LOOP=asyncio) to run on '
                    "it without this warning",
                    err,
                )
        else:
            return uvloop.new_event_loop(), "uvloop"
    return asyncio.new_event_loop(), "asyncio"
