"""Signing in to the console through another service (GitLab, when the gateway's sign-in is on):
what the console needs of it, and who gets which role.

The console does not know how the other service signs a person in; the server layer gives it an
:class:`ExternalSignIn` (built from ``gateway.signin``). The console's own pages send the person
there (``start``) and take them back (``finish``); the role comes from ``console.operators`` and
``console.viewers`` (usernames, or full paths of groups whose members, subgroups included, get it);
the session is the console's own cookie (``auth``).
"""

from __future__ import annotations

from typing import Protocol

from aiohttp import web

from gateway.config import ConsoleSettings
from gateway.console.auth import Role


class Person(Protocol):
    """Who signed in at the other service."""

    @property
    def username(self) -> str: ...

    @property
    def groups(self) -> tuple[str, ...]:
        """Full paths of the person's groups."""
        ...


class SignInRefused(Exception):
    """The other service did not sign the person in; the message says why, for the person."""

    def __init__(self, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.status = status


class ExternalSignIn(Protocol):
    """A sign-in service the console offers beside its tokens."""

    #: Shown on the button ("Sign in with GitLab").
    name: str
    #: Secret bytes that sign the console sessions it starts (so only this gateway's
    #: configuration makes them, on every replica).
    secret: bytes

    async def start(self, request: web.Request, done_path: str) -> web.StreamResponse:
        """The redirect that sends the browser to sign in, to come back to ``done_path`` exactly."""
        ...

    async def finish(self, request: web.Request) -> Person:
        """Who came back to ``done_path`` (then ``forget`` the flow on the answer).

        Raises:
            SignInRefused: the sign-in failed, was not this browser's, expired, or was refused.
        """
        ...

    def forget(self, response: web.StreamResponse, done_path: str) -> None:
        """Clear the finished flow's cookie on ``response``."""
        ...


def _names(who: str, person: Person) -> bool:
    return who == person.username or any(g == who or g.startswith(who + "/") for g in person.groups)


def role_of(console: ConsoleSettings, person: Person) -> Role | None:
    """``person``'s console role: operator before viewer, None when in neither list."""
    if any(_names(who, person) for who in console.operators):
        return "operator"
    if any(_names(who, person) for who in console.viewers):
        return "viewer"
    return None
