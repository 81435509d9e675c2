"""Start, step two: the commands that do one thing and exit instead of serving:
``--print-config``, ``--migrate`` (``database upgrade``), ``broker ...`` and ``database ...``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
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
    if not args.migrate and args.command not in ("broker", "database"):
        return None
    from gateway.observability.logging import configure_logging, secrets_of

    configure_logging(settings.logging, secrets=secrets_of(settings))
    if args.migrate or args.command == "database":
        from gateway.cli import database as database_cli

        if args.migrate:
            args.database_command = "upgrade"
        return database_cli.run(args, settings)
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
