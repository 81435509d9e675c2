"""``gitlab-mcp-gateway broker status | history | log AGENT | instruct TEXT | auto-advance on|off |
cancel-advance | stop | reset | confirmations | approve TICKET | refuse TICKET``.

The operator's command line, against the configured state store: the SQLite file in the state
folder (``GATEWAY_STATE_DIR``) or PostgreSQL (``broker.database_url``). Human-readable output, or
``--json``. The actions are the console's (``gateway.broker.operator``): the same changes, with
the same audit line naming the operator (``--as``, by default the login name).

Where it can act:
- PostgreSQL: always. The command commits like another replica would, and its notifications
  wake the running gateways' waits and consoles.
- SQLite: reading always (the file is in WAL mode). Acting: with no gateway on the state folder,
  on the file itself; while a gateway runs on it (it holds the folder's lock), through that
  gateway's operator socket (``operator.sock`` in the state folder, this user only:
  ``gateway.cli.remote``), so the gateway makes the change and wakes the agents' waits itself.
  Nobody has to stop the gateway, nor set a console token in advance.

Schema: never migrated here (``gateway.cli.schema``). A database at another revision than this
install's is read as it is after a note on stderr; a read that fails on it, and every action taken
on the database itself, is refused with what to do (the gateway's own install, or ``database
upgrade``). Acting through a running gateway's socket is that gateway's own write.

Exit status: 0 done; 1 the broker refused (a wrong state, say) or cannot be opened; 2 a bad
command line or configuration. With ``--json``, an error is a JSON object on stdout too:
``{"error": {"reason", "message"}}``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import json
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import sqlalchemy as sa

from gateway.broker import store as store_module
from gateway.broker.activity_log import ActivityLogs
from gateway.broker.errors import BrokerError
from gateway.broker.formats import seconds_since
from gateway.broker.operator import ACTIONS as OPERATOR_ACTIONS
from gateway.broker.operator import operator_name
from gateway.broker.replicas import not_running
from gateway.broker.state_dir import DB_FILE, StateDirInUse, lock_state_dir
from gateway.broker.store import Store, StoreError
from gateway.cli import remote, schema
from gateway.cli.broker_text import confirmations_text, count, history_text, instructed, status_text

if TYPE_CHECKING:
    from gateway.broker.service import BrokerService
    from gateway.config import Settings

#: The commands that change the broker.
ACTIONS = ("instruct", "auto-advance", "cancel-advance", "stop", "reset", "approve", "refuse")
COMMANDS = ("status", "history", "log", "confirmations", *ACTIONS)


class CliError(Exception):
    """Why the command cannot run; printed as one line, exit status 1."""


class ThroughGateway(Exception):
    """A gateway holds the SQLite state folder and answers on its operator socket: act through it."""

    def __init__(self, socket: Path) -> None:
        super().__init__(str(socket))
        self.socket = socket


def claim_state_dir(settings: Settings, *, act: bool) -> int | None:
    """SQLite: check the state folder holds a database and, to ``act``, hold its lock (returned:
    close it when done); PostgreSQL: nothing to do (None).

    Raises:
        CliError: no database in the folder, or a gateway holds it and the command would act.
    """
    if settings.broker.database_url is not None:
        return None
    state_dir = Path(settings.state_dir).resolve()
    if not (state_dir / DB_FILE).exists():
        raise CliError(
            f"no broker database in {state_dir} ({DB_FILE}): give the state folder of the gateway "
            "(GATEWAY_STATE_DIR, or state_dir in --config), or broker.database_url"
        )
    if not act:
        return None
    try:
        return lock_state_dir(state_dir)
    except StateDirInUse:
        socket = remote.socket_of(state_dir)
        if remote.answers(socket):
            raise ThroughGateway(socket) from None
        # Name only the ways that gateway offers: its console when one is configured.
        console = "act from its console (/broker on its port), or " if settings.console.enabled else ""
        raise CliError(
            f"a gateway is running on the state folder {state_dir} and does not answer on its operator "
            f"socket ({socket}: it is older than this command, runs as another user, or its state "
            f"folder's path is too long for a socket): {console}run this command as the gateway's user, "
            "or stop the gateway first; reading (status, history, log) works beside it"
        ) from None


@asynccontextmanager
async def open_broker_for(settings: Settings, *, act: bool) -> AsyncIterator[BrokerService]:
    """The broker on the configured store, without serving: no timer, no listener, no start-up
    line, and never a migration. Call :func:`claim_state_dir` first. A database at another schema
    revision than this install's is read as it is, after a note on stderr, and a read that fails
    on it says what to do; acting (``act``) on it is refused.

    Raises:
        StoreError: the database cannot be used.
        CliError: the schema does not allow what the command does.
    """
    from gateway.broker.service import BrokerService
    from gateway.observability.metrics import Metrics

    state_dir = Path(settings.state_dir)
    store = await Store.open(settings.broker, state_dir, migrate=False, role="cli")
    try:
        refusal = schema.acting_refusal(store) if act else None
        notice = None if act else schema.reading_notice(store)
    except StoreError:
        await store.close()
        raise
    if refusal is not None:
        await store.close()
        raise CliError(refusal)
    if notice is not None:
        print(notice, file=sys.stderr)
    logs = ActivityLogs(
        state_dir / "logs",
        settings.broker.agents,
        max_bytes=settings.broker.log_max_bytes,
        backups=settings.broker.log_backups,
        files=settings.broker.database_url is None and act,
    )
    service = BrokerService(settings, Metrics(), store, logs)
    # On another revision a read may fail on what that schema lacks: the CliError below says
    # so and what to do, so the store's own warning line would only be noise on the terminal.
    quiet = logging.getLogger(store_module.__name__)
    level = quiet.level
    if notice is not None:
        quiet.setLevel(logging.ERROR)
    try:
        async with store.read() as q:
            service.changes.state = (await q.pipeline()).state
            service.roster.restore(await q.last_seen())
        yield service
        await service.changes.drain()
    except (StoreError, sa.exc.DBAPIError) as err:
        if notice is None:
            raise
        raise CliError(schema.unreadable(store)) from err
    finally:
        quiet.setLevel(level)
        logs.close()
        await store.close()


def _confirm(question: str, args: argparse.Namespace, stdin: TextIO) -> None:
    if args.yes:
        return
    if not stdin.isatty():
        raise CliError(f"{question} Add --yes to confirm (no terminal to ask on).")
    print(f"{question} [y/N] ", end="", flush=True)
    if stdin.readline().strip().lower() not in ("y", "yes"):
        raise CliError("cancelled; nothing was changed")


Text = Callable[[dict[str, Any]], str]


def _action(args: argparse.Namespace, name: str) -> tuple[str, dict[str, Any], Text]:
    """The operator action of an acting command: its name, its arguments and its text."""
    command: str = args.broker_command
    if command == "instruct":
        return (
            command,
            {"text": args.text},
            lambda r: f"Sent {r['messageId']} to {r['to']} as operator:{name}. {instructed(r.get('state'))}",
        )
    if command == "auto-advance":
        return (
            command,
            {"enabled": args.switch == "on"},
            lambda r: f"Auto-advance is {'on' if r.get('autoAdvance') else 'off'} (by operator:{name}).",
        )
    if command == "cancel-advance":
        return (
            command,
            {},
            lambda r: (
                f"The advance was cancelled: the pipeline is {r.get('state', 'PAUSED')} until the PM "
                f"resumes (by operator:{name})."
            ),
        )
    if command == "stop":
        return command, {}, lambda r: f"The pipeline is {r['state']} (by operator:{name})."
    if command in ("approve", "refuse"):
        return (
            command,
            {"ticket": args.ticket, "note": args.note},
            lambda r: (
                f"Confirmation {r['ticket']} {r['status']} (by {r['decidedBy']}): {r['tool']} asked by "
                f"{r['agent']}."
            ),
        )
    return (
        command,
        {},
        lambda r: (
            f"Started over: pipeline {r['archived']['generation']} archived "
            f"({count(r['archived']['messages'], 'message')}, "
            f"{count(r['archived']['logLines'], 'log line')}); "
            f"pipeline {r['generation']} is {r['state']}; its history: broker history --pipeline "
            f"{r['archived']['generation']}."
        ),
    )


async def _run(
    args: argparse.Namespace, settings: Settings, out: TextIO, stdin: TextIO, socket: Path | None = None
) -> int:
    command: str = args.broker_command
    name = operator_name(args.operator or _login_name())
    act = command in ACTIONS
    if command == "stop":
        _confirm(
            "Stop the pipeline? Every agent is told, and nothing changes until someone starts over.",
            args,
            stdin,
        )
    if command == "reset":
        _confirm("Start over? The stopped pipeline is archived and a new one starts in IDLE.", args, stdin)
    result: dict[str, Any]
    text: Callable[[dict[str, Any]], str]
    if act:
        action, arguments, text = _action(args, name)
        if arguments.get("enabled") is True:
            async with open_broker_for(settings, act=False) as broker:
                if not (await broker.plan.get_phase_plan())["planId"]:
                    raise CliError(
                        "there is no phase plan, so auto-advance has nothing to advance through: the PM "
                        "sets one (set_phase_plan); nothing was changed"
                    )
        if socket is not None:
            result = await remote.act(socket, action, name, arguments)
        else:
            async with open_broker_for(settings, act=True) as broker:
                result = await OPERATOR_ACTIONS[action](broker.operator, name, arguments)
        print(json.dumps(result, indent=2) if args.json else text(result), file=out)
        return 0
    async with open_broker_for(settings, act=False) as broker:
        if command == "status":
            status = await broker.monitoring.status(replicas=True)
            for key in ("uptime", "uptimeSeconds"):  # this command's, not the gateway's
                status.pop(key, None)
            running = schema.gateway_running(settings)
            now = time.time()
            for agent in status["agents"].values():
                agent["secondsAgo"] = seconds_since(agent["lastSeen"], now)
                if running is False:
                    # lastSeen is saved by the gateway; with none running, no agent is connected.
                    agent["connected"] = False
            if running is False:
                not_running(status.get("replicas", []))
            result = {
                "status": status,
                "plan": await broker.plan.get_phase_plan(),
                **await broker.operator.generations(),
                "gatewayRunning": running,
                # Only an operator's sign-in can answer from the console; without one, the CLI.
                "consoleAnswers": settings.console.operator_token is not None,
                # A replica holding an agent's wait saves it as seen this often (Roster.unsaved).
                "waitSeenEverySeconds": settings.broker.connected_window_seconds / 4,
                "connectedWindowSeconds": settings.broker.connected_window_seconds,
            }
            if settings.confirm_by == "operator":
                # A database older than the approvals (another schema) has none to count.
                with contextlib.suppress(StoreError, sa.exc.DBAPIError):
                    result["confirmationsPending"] = await broker.confirmations.pending_count()
            text = status_text
        elif command == "confirmations":
            result = await broker.operator.pending_confirmations()
            text = confirmations_text
        elif command == "history":
            if not 1 <= args.limit <= 1000:
                raise CliError("--limit: give a number from 1 to 1000")
            result = await broker.history.message_history(
                args.issue, args.limit, args.before, generation=args.pipeline
            )
            if args.pipeline is not None:
                result["pipeline"] = args.pipeline
            text = history_text
        else:
            result = await broker.monitoring.activity_log(args.agent, max(1, args.lines))
            text = lambda r: "\n".join(r["lines"]) or f"(the {r['agent']} log is empty)"  # noqa: E731
    print(json.dumps(result, indent=2) if args.json else text(result), file=out)
    return 0


def _login_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "operator"


def run(
    args: argparse.Namespace,
    settings: Settings,
    *,
    prog: str,
    out: TextIO | None = None,
    stdin: TextIO | None = None,
) -> int:
    """Run one ``broker`` command; its exit status."""
    lock_fd: int | None = None
    out = out or sys.stdout

    def fail(reason: str, message: str, *, prefix: str = "", **details: Any) -> int:
        print(f"{prog} broker {args.broker_command}: {prefix}{message}", file=sys.stderr)
        if getattr(args, "json", False):
            error = {"error": {"reason": reason, "message": message, **details}}
            print(json.dumps(error, indent=2), file=out)
        return 1

    try:
        socket: Path | None = None
        try:
            lock_fd = claim_state_dir(settings, act=args.broker_command in ACTIONS)
        except ThroughGateway as through:
            socket = through.socket
        return asyncio.run(_run(args, settings, out, stdin or sys.stdin, socket))
    except CliError as err:
        return fail("cli_error", str(err))
    except BrokerError as err:
        return fail(err.reason, str(err), prefix=f"{err.reason}: ", **err.details)
    except remote.GatewayUnreachable as err:
        return fail("unavailable", f"cannot act through the running gateway: {err}")
    except StoreError as err:
        return fail("unavailable", f"cannot use the broker database: {err}")
    except BrokenPipeError:
        # Read by a command that stopped early (`| head -1`): end quietly, as any shell tool does;
        # stdout goes to /dev/null so that flushing it at exit raises nothing more.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    finally:
        if lock_fd is not None:
            os.close(lock_fd)
