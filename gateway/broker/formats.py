"""How the broker writes what it shows: times, durations, message ids, priorities, messages, its own name.

The forms are the broker's documented ones (``docs/broker.md``):
times in ISO 8601 UTC with seconds (``2026-04-11T01:10:00Z``), ``uptime`` as ``"2h 15m"``,
priorities ``high``, ``normal`` and ``low``.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.broker.queries import MessageRow

#: Sender of the broker's own notices.
BROKER = "broker"
#: Priority name → stored rank; a lower rank is delivered first.
PRIORITIES: dict[str, int] = {"high": 0, "normal": 1, "low": 2}
PRIORITY_NAMES = {v: k for k, v in PRIORITIES.items()}


def iso(ts: float) -> str:
    """Unix time → ISO 8601 UTC with seconds, as the broker writes it (``2026-04-11T01:10:00Z``)."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def unix(text: str) -> float | None:
    """The broker's ISO 8601 UTC form → Unix time; None for anything else."""
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def human_duration(seconds: float) -> str:
    """``8100`` → ``"2h 15m"`` (the broker's ``uptime`` form); ``95`` → ``"1m 35s"``."""
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d {h}h {m}m"
    if h:
        return f"{h}h {m}m"
    if m:
        return f"{m}m {s}s"
    return f"{s}s"


def seconds_since(at: str | None, now: float) -> float | None:
    """Seconds from ``at`` (ISO 8601 UTC, the broker's times) to ``now`` (Unix time), at least 0;
    None when ``at`` is None or not such a time."""
    if at is None:
        return None
    try:
        then = datetime.strptime(at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None
    return max(0.0, round(now - then, 1))


def answer_state(answered: dict[str, Any]) -> str:
    """Where a person's answer to HUMAN_NEEDED is: queued for the PM, or read by it."""
    if answered.get("read"):
        return "the PM has read it; the pipeline goes on once it calls resume"
    return "queued for the PM, which gets it at its next wait_for_message and then calls resume"


def new_message_id() -> str:
    """``msg-`` and 32 hex digits; unique, stable across redeliveries."""
    return f"msg-{uuid.uuid4().hex}"


def message_json(m: MessageRow) -> dict[str, Any]:
    """A message as tools show it.

    ``{messageId, from, to, subject, body, priority, replyTo, threadId, createdAt,
    deliveryAttempt, delivered}``; ``deliveryAttempt`` > 1 means an earlier answer carrying
    this message may have reached the receiver (at-least-once delivery).
    """
    return {
        "messageId": m.id,
        "from": m.sender,
        "to": m.recipient,
        "subject": m.subject,
        "body": m.body,
        "priority": PRIORITY_NAMES.get(m.priority, "normal"),
        "replyTo": m.reply_to,
        "threadId": m.thread_id,
        "createdAt": m.created_at,
        "deliveryAttempt": m.delivery_attempts,
        "delivered": m.delivered_at is not None,
    }
