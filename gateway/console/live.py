"""The console's live streams: how many one sign-in may hold, and one reading of the broker and
one rendering per change shared by all of them.

Every open stream used to read the broker and render every section itself on every change and
every :data:`~gateway.console.routes.REFRESH_SECONDS`: 400 streams took more than a core and
slowed the agents' own calls a hundredfold. Now a stream asks :class:`SharedRendering` for the
sections of a moment (the change feed's version and the refresh period it falls in) and a view
(the threads page's cursor, whether the viewer may act); the first stream to ask reads and
renders, the others wait for and reuse that answer. The CSRF token, the one thing a section holds
that differs per sign-in, is rendered as :data:`CSRF_PLACEHOLDER` and put in per stream.

A sign-in may hold at most ``console.max_streams_per_session`` streams at once on this replica
(``gateway.tools.call_limits.Slots``); one more is refused with HTTP 429.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TypeAlias

#: Rendered where a section's forms carry the CSRF token (letters only: escaping leaves it whole).
CSRF_PLACEHOLDER = "CONSOLECSRFPLACEHOLDER"
#: Moments x views kept at once (the streams of one replica look at one or two moments).
KEPT = 16

#: A reading's outcome: the sections and the state, or the error a stream shows.
Outcome: TypeAlias = tuple[dict[str, str], str] | Exception
Key: TypeAlias = tuple[int, int, str | None, bool]


class SharedRendering:
    """One reading and rendering per moment and view, whatever the number of streams.

    Args:
        render: reads the broker and renders every section for a view (``before``, ``can_act``),
            the CSRF token as :data:`CSRF_PLACEHOLDER`; returns the sections and the state.
        period: seconds of one refresh period (streams refresh at least that often).
        clock: monotonic seconds.
    """

    def __init__(
        self,
        render: Callable[[str | None, bool], Awaitable[tuple[dict[str, str], str]]],
        period: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._render = render
        self._period = period
        self._clock = clock
        self._readings: OrderedDict[Key, asyncio.Future[Outcome]] = OrderedDict()
        #: Readings made (the metric of how much the streams cost).
        self.readings = 0

    async def sections(
        self, version: int, before: str | None, can_act: bool, csrf: str
    ) -> tuple[dict[str, str], str]:
        """The sections (with ``csrf`` in them) and the state at feed ``version`` now.

        Raises:
            Exception: what reading the broker raised (``BrokerError``, ``StoreError``).
        """
        key = (version, int(self._clock() // self._period), before, can_act)
        found = self._readings.get(key)
        if found is None:
            # A task of its own: a stream that goes away mid-reading leaves it to the others.
            found = asyncio.ensure_future(self._read(before, can_act))
            self._readings[key] = found
            if len(self._readings) > KEPT:
                self._readings.popitem(last=False)
            self.readings += 1
        outcome = await asyncio.shield(found)
        if isinstance(outcome, Exception):
            raise outcome
        sections, state = outcome
        return {k: v.replace(CSRF_PLACEHOLDER, csrf) for k, v in sections.items()}, state

    async def _read(self, before: str | None, can_act: bool) -> Outcome:
        try:
            return await self._render(before, can_act)
        except Exception as err:  # shown by each stream, as its own reading's was
            return err
