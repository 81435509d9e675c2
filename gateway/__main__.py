"""Command line: ``gitlab-mcp-gateway`` / ``python -m gateway``.

Flags: ``--host`` (default 127.0.0.1), ``--port`` (8080), ``--config FILE`` (TOML),
``--read-only``, ``--conformance-fixtures`` (test mode, loopback only), ``--print-config`` (the
effective configuration as JSON, secrets masked, then exit), ``--example-config`` (the example
configuration file, every option commented, then exit), ``--migrate`` (bring the broker
database's schema up to date, then exit: ``database upgrade``), ``--version``; the ``broker``
subcommands (``gateway.cli.broker``: status, history, log, instruct, stop, reset) and the
``database`` subcommands (``gateway.cli.database``: status, upgrade, downgrade, backup,
restore). Precedence: defaults < TOML file < environment < flags (``gateway.config``).

Exit status: 0 after a clean stop (SIGTERM or SIGINT: stop accepting, let in-flight calls finish
within ``server.shutdown_timeout_seconds``, wake broker waiters, close the database); 2 for a
configuration error, printed as one line per bad option naming it (``server.port: ...``, or the
variable or flag it came from, then the option: ``GATEWAY_SERVER__PORT (server.port): ...``)
with no stack trace (a
``broker.database_url`` whose database refuses the credentials, does not exist, has a newer
schema or stays unreachable for ``broker.connect_timeout_seconds`` included); 1
when the gateway cannot start (the listening address cannot be bound, the state folder is in use
by another gateway...), with one line saying why.
"""

from __future__ import annotations

import gc
import sys

from gateway.cli.arguments import parse_args

__all__ = ["main", "parse_args"]


def main(argv: list[str] | None = None) -> int:
    """Run the gateway until SIGINT/SIGTERM, or the command given; the exit status (see the module
    docstring). Three steps, each imported only when reached: the configuration
    (``gateway.cli.configuration``), a command that exits (``gateway.cli.commands``), serving
    (``gateway.server.serve``)."""
    args = parse_args(argv)  # --help, --version and a bad flag end here, before any layer loads
    # Importing the layers makes some 200,000 objects that live as long as the process: the
    # collector's passes over them while they are made were an eighth of a start's CPU. They run
    # again once the gateway serves (gateway.server.serve.freeze_startup_heap), or on return.
    collecting = gc.isenabled()
    gc.disable()
    try:
        from gateway.cli.configuration import read_configuration

        configuration = read_configuration(args)
        if isinstance(configuration, int):  # --example-config, or a configuration error (printed)
            return configuration
        from gateway.cli.commands import run_command

        status = run_command(args, configuration)
        if status is not None:
            return status
        from gateway.server.serve import serve

        settings = configuration.settings
        return serve(settings, gitlab_url=configuration.gitlab_url, warnings=configuration.warnings)
    finally:
        if collecting:
            gc.enable()


if __name__ == "__main__":
    sys.exit(main())
