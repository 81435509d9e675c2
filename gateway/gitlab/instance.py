"""Which GitLab the gateway talks to: its version and edition, learnt from GitLab and kept per
client (one configured GitLab per gateway).

GitLab says both in one small query (``metadata { version enterprise }``,
https://docs.gitlab.com/api/graphql/reference/#metadata; ``enterprise`` since GitLab 15.6), and in
``GET /api/v4/version`` (https://docs.gitlab.com/api/version/), whose ``-ee`` suffix names EE: the
fallback. Both need an authenticated caller, so the start-up check tells it when the gateway has
a token, and otherwise (passthrough mode) the first call that has one does.

The operations a tool sends are chosen from it (:mod:`gateway.gitlab.needs`), so it is read again:

- at most every :data:`REFRESH_SECONDS` (an instance is upgraded under a running gateway), by the
  next call after that, inline, before its own request;
- when GitLab refuses a document as not valid for its schema (``GitLabSchemaMismatch``), at most
  once per :data:`RECHECK_SECONDS`;
- while unknown (no caller with a token yet), at most once per :data:`RECHECK_SECONDS`, so an
  anonymous caller does not cost a request per call.

The request path pays two attribute reads and a comparison (:attr:`GitLabInstance.due`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from gateway.gitlab.errors import GitLabError

log = logging.getLogger("gateway.gitlab")


class GitLabSession(Protocol):
    """What a read needs of ``gateway.gitlab.client.GitLabSession`` (which imports this module)."""

    async def graphql(
        self, operation: str, variables: Mapping[str, Any], *, mutation: bool = False
    ) -> dict[str, Any]: ...

    async def rest(self, method: str, route: str, **kwargs: Any) -> Any: ...


#: Seconds a learnt version is trusted before the next call reads it again.
REFRESH_SECONDS = 3600.0
#: Seconds between two reads forced by a refusal, or tried while the version is unknown.
RECHECK_SECONDS = 30.0
#: Seconds a tool call waits for a due read of the version before it goes on with what is known
#: (the read goes on for the next call). A GitLab slow to answer ``metadata`` must not spend the
#: call's own deadline: without this, a call's version read and its own request each had one.
READ_WAIT_SECONDS = 0.5

#: ``(major, minor)``: what decides which fields GitLab has (patch releases add none, bar backports).
Release = tuple[int, int]

_VERSION = re.compile(r"^\s*v?(\d+)\.(\d+)")


class Edition(StrEnum):
    """GitLab's edition: Community (CE) or Enterprise (EE), or not known yet."""

    UNKNOWN = "unknown"
    CE = "ce"
    EE = "ee"


def parse_release(version: str | None) -> Release | None:
    """``"17.11.2-ee"`` → ``(17, 11)``; None for anything that is not a GitLab version."""
    match = _VERSION.match(version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def release_text(release: Release) -> str:
    return f"{release[0]}.{release[1]}"


@dataclass(frozen=True)
class InstanceInfo:
    """What is known of the GitLab: a new object each time it is learnt, so the choices cached on
    it (:attr:`choices`) never outlive the version they were made for.

    Attributes:
        version: GitLab's version without the ``-ee`` suffix (``17.11.2``; a ``-pre`` stays: it
            says a pre-release), or None while unknown. The edition is :attr:`edition`.
        release: ``(major, minor)`` of ``version``.
        edition: CE, EE, or UNKNOWN.
        choices: per operation, what :mod:`gateway.gitlab.needs` chose for this instance (filled on
            first use: the request path's choice is one dict lookup).
    """

    version: str | None = None
    release: Release | None = None
    edition: Edition = Edition.UNKNOWN
    choices: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def known(self) -> bool:
        return self.release is not None

    @property
    def label(self) -> str:
        """``GitLab 17.11.2 (EE)``, ``GitLab (version not known yet)``."""
        if self.version is None:
            return "GitLab (version not known yet)"
        edition = f" ({self.edition.value.upper()})" if self.edition is not Edition.UNKNOWN else ""
        return f"GitLab {self.version}{edition}"

    @classmethod
    def of(cls, version: str | None, enterprise: bool | None) -> InstanceInfo:
        """From ``metadata { version enterprise }`` (``enterprise`` None: from the ``-ee`` suffix)."""
        release = parse_release(version)
        if release is None:
            return cls()
        if enterprise is None:
            enterprise = str(version).strip().lower().endswith("-ee")
        plain = re.sub(r"-ee$", "", str(version).strip(), flags=re.IGNORECASE)
        return cls(plain, release, Edition.EE if enterprise else Edition.CE)


class GitLabInstance:
    """The configured GitLab's :class:`InstanceInfo`, learnt and refreshed as the module says.

    Args:
        on_learnt: called with each newly learnt info (the ``gateway_gitlab_info`` metric).
        clock: ``time.monotonic`` (tests pass their own).
    """

    def __init__(self, on_learnt: Any = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.info = InstanceInfo()
        self._next_read = 0.0
        self._last_forced = -RECHECK_SECONDS
        self._reading: asyncio.Future[InstanceInfo] | None = None
        self._on_learnt = on_learnt
        self._clock = clock

    def learnt(self, info: InstanceInfo) -> InstanceInfo:
        """Record ``info`` (from the start-up check, or a read); an unknown one changes nothing
        learnt before, and is tried again after :data:`RECHECK_SECONDS`."""
        now = self._clock()
        if not info.known:
            self._next_read = now + RECHECK_SECONDS
            return self.info
        self._next_read = now + REFRESH_SECONDS
        if info != self.info:
            if self.info.known and info.version != self.info.version:
                log.info(
                    "GitLab version changed from %s to %s",
                    self.info.version,
                    info.version,
                    extra={"gitlab_version": info.version, "edition": info.edition.value},
                )
            self.info = info
            if self._on_learnt is not None:
                self._on_learnt(info)
        return self.info

    @property
    def due(self) -> bool:
        """A read of the version is due: :meth:`current` makes it; otherwise :attr:`info` is
        what it would return (the request path reads it without a coroutine)."""
        return self._clock() >= self._next_read

    async def current(self, session: GitLabSession) -> InstanceInfo:
        """The info to choose documents by: read from GitLab first when due (never raises: a read
        that fails keeps what was known, and while nothing is, the newest documents are sent)."""
        if not self.due:
            return self.info
        try:
            return await asyncio.wait_for(self._read(session), READ_WAIT_SECONDS)
        except TimeoutError:
            # The read is shielded: it goes on, and a refusal's recheck waits for it in full.
            return self.info

    async def recheck(self, session: GitLabSession) -> InstanceInfo:
        """Read again now (GitLab refused a document), unless read for that reason within
        :data:`RECHECK_SECONDS`."""
        now = self._clock()
        if now - self._last_forced < RECHECK_SECONDS:
            return self.info
        self._last_forced = now
        return await self._read(session)

    async def _read(self, session: GitLabSession) -> InstanceInfo:
        if self._reading is None:
            self._reading = asyncio.ensure_future(self._ask(session))
            self._reading.add_done_callback(self._read_done)
        return await asyncio.shield(self._reading)

    def _read_done(self, _: asyncio.Future[InstanceInfo]) -> None:
        self._reading = None

    async def _ask(self, session: GitLabSession) -> InstanceInfo:
        return self.learnt(await read_instance(session))


async def read_instance(session: GitLabSession) -> InstanceInfo:
    """Ask GitLab its version and edition: GraphQL's ``metadata``, else REST ``/version``.

    Returns:
        the info; unknown when GitLab told neither (an anonymous caller is told nothing).
    """
    try:
        data = await session.graphql("instance_metadata", {})
        metadata = data.get("metadata") or {}
        info = InstanceInfo.of(metadata.get("version"), metadata.get("enterprise"))
        if info.known:
            return info
    except GitLabError:
        pass
    try:
        answer = await session.rest("GET", "/version")
    except GitLabError:
        return InstanceInfo()
    return InstanceInfo.of(answer.get("version") if isinstance(answer, dict) else None, None)
