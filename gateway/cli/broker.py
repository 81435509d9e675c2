"""``gitlab-mcp-gateway broker status | history | log AGENT | instruct TEXT | stop | reset``.

The operator's command line, against the configured state store: the SQLite file in the state
folder (``GATEWAY_STATE_DIR``) or PostgreSQL (``broker.database_url``). Human-readable output, or
``--json``. The actions are the console's (``gateway.broker.operator``): the same changes, with
the same audit line naming the operator (``--as``, by default the login name).

Where it can act:
- PostgreSQL: always. The command commits like another replica would, and its notifications
  wake the running gateways' waits and consoles.
- SQLite: reading always (the file is in WAL mode); acting only while no gateway runs on the
  state folder, since a running gateway keeps the folder's lock and would not see the change.
  Act from that gateway's console (``/broker``) instead, or stop it first.

Exit status: 0 done; 1 the broker refused (a wrong state, say) or cannot be opened; 2 a bad
command line or configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from gateway.broker.activity_log import PIPELINE_LOG, ActivityLogs
from gateway.broker.errors import BrokerError
from gateway.broker.operator import operator_name
from gateway.broker.state_dir import DB_FILE, StateDirInUse, lock_state_dir
from gateway.broker.store import Store, StoreError

if TYPE_CHECKING:
    from gateway.broker.service import BrokerService
    from gateway.config import Settings

COMMANDS = ("status", "history", "log", "instruct", "stop", "reset")
#: The commands that change the broker.
ACTIONS = ("instruct", "stop", "reset")


class CliError(Exception):
    """Why the command cannot run; printed as one line, exit status 1."""


def add_parser(subparsers: Any, prog: str) -> None:
    """Add ``broker`` and its subcommands to the main parser's subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON instead of text")
    common.add_argument(
        "--as",
        dest="operator",
        metavar="NAME",
        help="your name in the activity log (default: your login name)",
    )
    common.add_argument(
        "--config", type=Path, default=argparse.SUPPRESS, help="TOML configuration file (as before 'broker')"
    )
    broker = subparsers.add_parser(
        "broker",
        help="watch and steer the phase broker from the command line",
        description="Watch and steer the phase broker, against the configured state store (the SQLite "
        "file in GATEWAY_STATE_DIR, or broker.database_url). The same actions as the console at /broker.",
        epilog=f"Example: {prog} broker status; {prog} broker instruct 'Keep v1; add v2 beside it.'",
    )
    commands = broker.add_subparsers(dest="broker_command", metavar="COMMAND", required=True)
    commands.add_parser("status", parents=[common], help="the pipeline's state, issues, agents, plan")
    history = commands.add_parser("history", parents=[common], help="the message history, newest page first")
    history.add_argument("--limit", type=int, default=50, help="messages per page (1-1000, default 50)")
    history.add_argument("--issue", help="only messages whose body.issue is this")
    history.add_argument("--before", metavar="CURSOR", help="an older page: the end_cursor a page gave")
    log = commands.add_parser("log", parents=[common], help="an activity log's last lines")
    log.add_argument("agent", metavar="AGENT", help=f"an agent id, or {PIPELINE_LOG!r} for the broker's own")
    log.add_argument("--lines", type=int, default=40, help="how many lines (default 40)")
    instruct = commands.add_parser(
        "instruct", parents=[common], help="send the PM an instruction (it then calls resume)"
    )
    instruct.add_argument("text", metavar="TEXT", help="what the PM should do")
    for name, text in (
        ("stop", "stop the pipeline (every agent is told; until someone starts over)"),
        ("reset", "start over after a stop: archive the stopped pipeline, a new one starts in IDLE"),
    ):
        sub = commands.add_parser(name, parents=[common], help=text)
        sub.add_argument("--yes", action="store_true", help="do not ask for confirmation")


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
        raise CliError(
            f"a gateway is running on the state folder {state_dir}: act from its console (/broker on "
            "its port), or stop it first; reading (status, history, log) works beside it"
        ) from None


@asynccontextmanager
async def open_broker_for(settings: Settings, *, act: bool) -> AsyncIterator[BrokerService]:
    """The broker on the configured store, without serving: no timer, no listener, no start-up
    line. Call :func:`claim_state_dir` first.

    Raises:
        StoreError: the database cannot be used.
    """
    from gateway.broker.service import BrokerService
    from gateway.observability.metrics import Metrics

    state_dir = Path(settings.state_dir)
    store = await Store.open(settings.broker, state_dir)
    logs = ActivityLogs(
        state_dir / "logs",
        settings.broker.agents,
        max_bytes=settings.broker.log_max_bytes,
        backups=settings.broker.log_backups,
        files=settings.broker.database_url is None and act,
    )
    service = BrokerService(settings, Metrics(), store, logs)
    try:
        async with store.read() as q:
            service.changes.state = (await q.pipeline()).state
            service.roster.restore(await q.last_seen())
        yield service
        await service.changes.drain()
    finally:
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


async def _run(args: argparse.Namespace, settings: Settings, out: TextIO, stdin: TextIO) -> int:
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
    async with open_broker_for(settings, act=act) as broker:
        result: dict[str, Any]
        text: Callable[[dict[str, Any]], str]
        if command == "status":
            status = await broker.monitoring.status()
            for key in ("uptime", "uptimeSeconds"):  # this command's, not the gateway's
                status.pop(key, None)
            result = {
                "status": status,
                "plan": await broker.plan.get_phase_plan(),
                **await broker.operator.generations(),
            }
            text = _status_text
        elif command == "history":
            if not 1 <= args.limit <= 1000:
                raise CliError("--limit: give a number from 1 to 1000")
            result = await broker.history.message_history(args.issue, args.limit, args.before)
            text = _history_text
        elif command == "log":
            result = await broker.monitoring.activity_log(args.agent, max(1, args.lines))
            text = lambda r: "\n".join(r["lines"]) or f"(the {r['agent']} log is empty)"  # noqa: E731
        elif command == "instruct":
            result = await broker.operator.instruct(name, args.text)
            text = lambda r: f"Sent {r['messageId']} to {r['to']} as operator:{name}; the PM calls resume."  # noqa: E731
        elif command == "stop":
            result = await broker.operator.stop(name)
            text = lambda r: f"The pipeline is {r['state']} (by operator:{name})."  # noqa: E731
        else:
            result = await broker.operator.start_over(name)
            text = lambda r: (  # noqa: E731
                f"Started over: pipeline {r['archived']['generation']} archived "
                f"({_count(r['archived']['messages'], 'message')}, "
                f"{_count(r['archived']['logLines'], 'log line')}); "
                f"pipeline {r['generation']} is {r['state']}."
            )
    print(json.dumps(result, indent=2) if args.json else text(result), file=out)
    return 0


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _login_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "operator"


def _status_text(r: dict[str, Any]) -> str:
    s, plan = r["status"], r["plan"]
    lines = [
        f"Pipeline {r['generation']}: {s['state']}"
        + (f", phase {s['phase']}" if s["phase"] is not None else "")
        + (f" (plan {plan['planId']}" if plan["planId"] else " (no plan")
        + f", auto-advance {'on' if plan['autoAdvance'] else 'off'})"
    ]
    if "humanNeeded" in s:
        h = s["humanNeeded"]
        lines.append(f"NEEDS A PERSON: {h['reason']} (asked by {h['requestedBy']} at {h['at']})")
        lines.append(
            "  Answer from the console (/broker on the gateway's port), or with: broker instruct "
            "'what the PM should do' (on SQLite only while no gateway runs on this state folder); "
            "the PM then calls resume"
        )
    if "stopped" in s:
        lines.append(
            f"STOPPED by {s['stopped']['by']} at {s['stopped']['at']}; start over with: broker reset"
        )
    if s["issues"]:
        issues = ", ".join(f"{k} {v['status']} (fails {v['failCount']})" for k, v in s["issues"].items())
        lines.append(f"Issues: {issues}; fix count {s['fixCount']}/{s['limits']['fixLimit']}")
    aa = s["autoAdvance"]
    if aa.get("active"):
        lines.append(f"Auto-advance: {aa['stage']}, phase {aa['nextPhase']} in {aa['secondsLeft']:.0f} s")
    lines.append("Agents:")
    for agent, a in s["agents"].items():
        seen = a["lastSeen"] or "never"
        lines.append(
            f"  {agent:<10} {'connected' if a['connected'] else 'away':<10} last seen {seen:<21} "
            f"queued {s['queues'][agent]}"
        )
    for a in r["archives"]:
        lines.append(
            f"Archived: pipeline {a['generation']} ({a['finalState']}), "
            f"by {a['archivedBy']} at {a['archivedAt']}"
        )
    return "\n".join(lines)


def _history_text(r: dict[str, Any]) -> str:
    lines = []
    for m in r["messages"]:
        body = json.dumps(m["body"], ensure_ascii=False) if not m.get("bodyTruncated") else m["bodyPreview"]
        body = body if len(body) <= 200 else body[:200] + "…"
        reply = f" reply to {m['replyTo']}" if m["replyTo"] else ""
        lines.append(
            f"{m['createdAt']} {m['messageId']} {m['from']} -> {m['to']} [{m['subject']}] {m['priority']}"
            f"{'' if m['delivered'] else ' (queued)'}{reply}: {body}"
        )
    if not lines:
        lines.append("(no messages)")
    if r["page_info"]["has_next_page"]:
        lines.append(f"Older messages: broker history --before {r['page_info']['end_cursor']}")
    return "\n".join(lines)


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
    try:
        lock_fd = claim_state_dir(settings, act=args.broker_command in ACTIONS)
        return asyncio.run(_run(args, settings, out or sys.stdout, stdin or sys.stdin))
    except CliError as err:
        print(f"{prog} broker {args.broker_command}: {err}", file=sys.stderr)
        return 1
    except BrokerError as err:
        print(f"{prog} broker {args.broker_command}: {err.reason}: {err}", file=sys.stderr)
        return 1
    except StoreError as err:
        print(f"{prog} broker {args.broker_command}: cannot use the broker database: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # Read by a command that stopped early (`| head -1`): end quietly, as any shell tool does;
        # stdout goes to /dev/null so that flushing it at exit raises nothing more.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    finally:
        if lock_fd is not None:
            os.close(lock_fd)
