"""Start, step two: the commands that do one thing and exit instead of serving:
``--print-config``, ``--migrate`` and ``broker ...``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway import PROG

if TYPE_CHECKING:
    from gateway.cli.configuration import Configuration
    from gateway.config import Settings

log = logging.getLogger("gateway")


def run_command(args: argparse.Namespace, configuration: Configuration) -> int | None:
    """Run the command ``args`` name; its exit status, or None when there is none (serve)."""
    settings = configuration.settings
    if args.print_config:
        for line in configuration.warnings:
            print(f"{PROG}: warning: {line}", file=sys.stderr)
        print(json.dumps(masked_config(settings), indent=2))
        return 0
    if not args.migrate and args.command != "broker":
        return None
    from gateway.observability.logging import configure_logging, secrets_of

    configure_logging(settings.logging, secrets=secrets_of(settings))
    if args.migrate:
        return migrate_database(settings)
    from gateway.cli import broker as broker_cli

    return broker_cli.run(args, settings, prog=PROG)


def masked_config(settings: Settings) -> dict[str, Any]:
    """The effective configuration as JSON-ready data with every secret masked.

    Tokens (``SecretStr``) print as ``**********`` (None when unset); passwords in URLs and any
    configured secret found elsewhere are redacted as in the logs.
    """
    from gateway.observability.logging import secrets_of
    from gateway.observability.redaction import Redactor

    redactor = Redactor(secrets_of(settings))
    data: dict[str, Any] = redactor.redact_strings(settings.model_dump(mode="json"))
    if settings.broker.database_url is not None:
        from gateway.broker.database import shown_url

        data["broker"]["database_url"] = shown_url(settings.broker.database_url.get_secret_value())
    return data


def migrate_database(settings: Settings) -> int:
    """``--migrate``: what the gateway does to the broker database at start, and nothing else.

    The same locks (the state folder's lock file for SQLite, so not beside a running gateway;
    the advisory lock on PostgreSQL), retries of a server not up yet, and refusals.
    """
    import asyncio
    import os

    from gateway.broker.migrations import HEAD
    from gateway.broker.state_dir import StateDirInUse, lock_state_dir
    from gateway.broker.store import DatabaseUnusable, Store, StoreError

    async def migrate() -> str:
        state_dir = Path(settings.state_dir)
        lock_fd = None
        if settings.broker.database_url is None:
            try:
                lock_fd = lock_state_dir(state_dir)
            except StateDirInUse:
                raise StoreError(
                    f"a gateway is running on the state folder {state_dir} (it holds its lock file): it "
                    "migrated the broker database when it started, so there is nothing to do; to run "
                    "--migrate anyway, stop that gateway first"
                ) from None
        try:
            store = await Store.open(settings.broker, state_dir)
            await store.close()
            return store.where
        finally:
            if lock_fd is not None:
                os.close(lock_fd)

    try:
        where = asyncio.run(migrate())
    except DatabaseUnusable as err:
        print(f"{PROG}: configuration error: {err}", file=sys.stderr)
        return 2
    except StoreError as err:
        print(f"{PROG}: cannot migrate: {err}", file=sys.stderr)
        return 1
    log.info("broker database %s is at schema revision %s", where, HEAD)
    return 0
