"""``/healthz`` (the process answers) and ``/readyz`` (ready to serve; GitLab's state reported).

``/readyz`` sends the start-up check's request to GitLab (``gateway.gitlab.startup_check``), at
most once every 30 s, and reports what it found. Only an answer that is not GitLab's, while this
process has never seen GitLab answer, holds readiness back: that is a wrong ``GITLAB_URL``, which
no wait or restart fixes, and holding readiness back stops a rollout of it from replacing
working pods. GitLab being down, slow or refusing the token never does: agents may use the
broker with GitLab down, every pod shares the same GitLab and token (failing them all at once
restarts nothing into health), and once GitLab has answered, the URL is known to be right.
The broker's database is asked ``SELECT 1`` at each probe, beside GitLab: one that fails is
reported (``state_store: "unreachable"`` and why) and, for the same reasons, leaves the pod ready.

A running gateway also asks on its own (:func:`watch_gitlab`, every :data:`GITLAB_PROBE_SECONDS`),
so ``gateway_gitlab_reachable`` and ``gateway_ready`` stay fresh with no agent calling and no
probe of Kubernetes: an alert on them needs no traffic. Each change of GitLab's state (reachable
to unreachable and back) is one WARNING line, and each change of ``/readyz``'s status too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from aiohttp import web

from gateway.broker.formats import iso
from gateway.gitlab.startup_check import GitLabCheck, check_gitlab
from gateway.observability.logging import redact
from gateway.server.services import SERVICES, Services

log = logging.getLogger("gateway")

#: Seconds a GitLab check is reused: probes every few seconds send GitLab one request per period.
GITLAB_CHECK_TTL = 30.0
#: Seconds the check may take: within the readiness probe's own timeout (5 s in ``deploy/``).
GITLAB_CHECK_TIMEOUT = 3.0
#: Seconds between the gateway's own checks (:func:`watch_gitlab`): one small GraphQL query per
#: period and replica, so that an outage shows on ``gateway_gitlab_reachable`` within this time
#: plus a scrape, and the shipped alert fires within two minutes (``deploy/prometheus``).
GITLAB_PROBE_SECONDS = 15.0


@dataclass
class _Readiness:
    """The last GitLab check, shared by the main listener and the metrics listener."""

    found: GitLabCheck | None = None
    checked_at: float = 0.0  # time.time(), shown
    checked_mono: float = 0.0  # time.monotonic(), for the TTL
    #: GitLab once answered as GitLab (even refusing the token): the URL is right.
    seen_gitlab: bool = False
    #: ``/readyz``'s last status (``ready`` / ``not_ready``), None before its first answer.
    status: str | None = None


_READINESS = web.AppKey("readiness", _Readiness)


async def healthz(request: web.Request) -> web.Response:
    """200 ``{"status": "ok"}`` while the process serves requests."""
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """200 when ready, else 503 with a ``reason`` that says what to check.

    Body: ``{"status": "ready"|"not_ready", "state_store": "open"|"unreachable"|"closed",
    "state_store_reason"?: str, "reason"?: str,
    "gitlab": {"url", "reachable", "state", "version"?, "edition"?, "reason"?, "checked_at"}}``;
    ``version`` and ``edition`` (``ce``, ``ee``) once GitLab told them; ``state`` is ``ok``,
    ``unreachable``, ``not_gitlab`` or ``token_refused``, ``checked_at`` ISO 8601 UTC.
    """
    services = request.app.get(SERVICES)
    if services is None:
        reason = "the gateway is starting or stopping: its services are not up"
        return web.json_response(
            {"status": "not_ready", "state_store": "closed", "reason": reason}, status=503
        )
    body = await _readiness(request.app[_READINESS], services)
    return web.json_response(body, status=200 if body["status"] == "ready" else 503)


async def _readiness(readiness: _Readiness, services: Services, *, fresh: bool = False) -> dict[str, object]:
    """``/readyz``'s body; its status is also set on ``gateway_ready`` and a change is logged."""
    broker_open = services.broker is not None and services.broker.is_open()
    store_failure: str | None = None
    if broker_open:
        assert services.broker is not None
        found, store_failure = await asyncio.gather(
            _check(readiness, services, fresh=fresh), services.broker.database_failure(GITLAB_CHECK_TIMEOUT)
        )
    else:
        found = await _check(readiness, services, fresh=fresh)
    gitlab = _gitlab_object(found, readiness.checked_at, services)
    body: dict[str, object] = {"status": "ready", "state_store": "open"}
    if store_failure is not None:
        # As GitLab down: every replica shares the database and a restart does not bring it
        # back, while the GitLab tools still work; said here, with the database's own words.
        body.update(state_store="unreachable", state_store_reason=store_failure)
    if not broker_open:
        body.update(
            status="not_ready",
            state_store="closed",
            reason="the broker's database is closed: the gateway is stopping, or lost it (see the log)",
        )
    elif found.state == "not_gitlab" and not readiness.seen_gitlab:
        body.update(status="not_ready", reason=found.line)
    body["gitlab"] = gitlab
    services.metrics.ready.set(1 if body["status"] == "ready" else 0)
    _say_status(readiness, body)
    return body


def _gitlab_object(found: GitLabCheck, checked_at: float, services: Services) -> dict[str, object]:
    """``/readyz``'s ``gitlab`` object."""
    gitlab: dict[str, object] = {
        "url": redact(services.gitlab.base.url),
        "reachable": found.reachable,
        "state": found.state,
    }
    info = services.gitlab.instance.info
    if info.known:
        gitlab["version"], gitlab["edition"] = info.version, info.edition.value
    if found.state != "ok":
        gitlab["reason"] = found.line
    gitlab["checked_at"] = iso(checked_at)
    return gitlab


def gitlab_health(app: web.Application) -> dict[str, object] | None:
    """What the last check of GitLab found, as ``/readyz``'s ``gitlab`` object; None before the
    first check or while the services are down. Sends nothing (the console shows it)."""
    readiness, services = app.get(_READINESS), app.get(SERVICES)
    if readiness is None or readiness.found is None or services is None:
        return None
    return _gitlab_object(readiness.found, readiness.checked_at, services)


def _say_status(readiness: _Readiness, body: dict[str, object]) -> None:
    """One line when ``/readyz`` turns (ready to not ready, or back): what the orchestrator
    acts on is in the log, with why."""
    status = str(body["status"])
    before, readiness.status = readiness.status, status
    if before is None or before == status:
        return
    if status == "ready":
        log.warning("readiness: ready again (/readyz answers 200)")
    else:
        log.warning("readiness: not ready (/readyz answers 503): %s", body.get("reason"))


def setup(app: web.Application, *, share_with: web.Application | None = None) -> None:
    """Add ``/healthz`` and ``/readyz`` to ``app``.

    Args:
        share_with: an app whose GitLab check ``app`` reuses (the metrics listener passes the
            main app), so both listeners answer alike and GitLab is asked once per period.
    """
    app[_READINESS] = share_with[_READINESS] if share_with is not None else _Readiness()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)


def watch_gitlab(app: web.Application, seconds: float | None = None) -> None:
    """Check GitLab every ``seconds`` while ``app`` runs (``/readyz`` then reuses the last check).
    The first check is the start-up check's (:func:`note_check`); this one follows ``seconds``
    later.

    ``gateway.__main__`` adds it with the start-up check (``gitlab.startup_check``); in-process
    tests leave it out, so no request reaches their GitLab at a moment they do not control.
    """

    every = GITLAB_PROBE_SECONDS if seconds is None else seconds

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        readiness = app[_READINESS]

        async def run() -> None:
            while True:
                await asyncio.sleep(every)
                await _readiness(readiness, app[SERVICES], fresh=True)

        task = asyncio.create_task(run(), name="gitlab-watch")
        yield
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    app.cleanup_ctx.append(ctx)


def note_check(app: web.Application, found: GitLabCheck) -> None:
    """Keep what the start-up check found as the last check (its line is the start-up line's to
    say): the gauges are right from the start, and ``/readyz`` reuses it."""
    services = app.get(SERVICES)
    if services is not None:
        _record(app[_READINESS], services, found)


async def _check(readiness: _Readiness, services: Services, *, fresh: bool = False) -> GitLabCheck:
    if (
        not fresh
        and readiness.found is not None
        and time.monotonic() - readiness.checked_mono < GITLAB_CHECK_TTL
    ):
        return readiness.found
    settings = services.settings.gitlab
    token = settings.token.get_secret_value() if settings.token else None
    found = await check_gitlab(
        services.gitlab,
        token,
        passthrough=settings.credential_mode == "passthrough",
        seconds=GITLAB_CHECK_TIMEOUT,
    )
    _record(readiness, services, found)
    return found


def _record(readiness: _Readiness, services: Services, found: GitLabCheck) -> None:
    """Keep ``found`` as the last check: the gauges, GitLab's version and edition when it told
    them, and one WARNING line when GitLab's reachability changed."""
    before = readiness.found
    if found.instance.known:
        services.gitlab.instance.learnt(found.instance)
    readiness.found, readiness.checked_at, readiness.checked_mono = found, time.time(), time.monotonic()
    readiness.seen_gitlab = readiness.seen_gitlab or found.reachable
    services.metrics.gitlab_reachable.set(1 if found.reachable else 0)
    services.metrics.gitlab_checked.set(readiness.checked_at)
    # The first check is the start-up line's to tell; a change after it is said here, once.
    if before is not None and before.reachable != found.reachable:
        if found.reachable:
            log.warning("GitLab is reachable again: %s", found.line)
        else:
            log.warning("GitLab became unreachable: %s", found.line)
