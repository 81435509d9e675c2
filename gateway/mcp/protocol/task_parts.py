"""The parts of the MCP tasks extension (``gateway.mcp.protocol.tasks``) that hold no state: its
names and bounds, the ``Task`` it answers, who owns a task, the askers of a task's work, and the
check of ``tasks/update`` answers against the questions they answer.

Source: https://github.com/modelcontextprotocol/ext-tasks (``specification/draft/tasks.md``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model

from gateway.broker.tasks import COMPLETED, FAILED, INPUT_REQUIRED, TaskRow
from gateway.errors import ToolError
from gateway.mcp.protocol.wire import MISSING_REQUIRED_CLIENT_CAPABILITY, RpcError, invalid_params
from gateway.tools.caller import Caller
from gateway.tools.input_requests import Answers, AskFn, CannotAsk, InputRequest, InputRequired
from gateway.tools.registry import Tool, parse_arguments

#: The extension's identifier, in ``capabilities.extensions`` both ways.
TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
#: The methods it adds, served in the stateless era.
TASK_METHODS: Final = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})
#: A call that may wait this long or longer becomes a task (for a client of the extension).
TASK_FROM_SECONDS: Final = 1.0
#: A wait argument left out and without a default (``wait_for_message``'s ``timeout_sec``).
LONGEST_WAIT_SECONDS: Final = 3600.0
#: How long a task stays readable after its wait could have ended (its TTL is this plus the wait).
KEEP_SECONDS: Final = 3600.0
#: ``pollIntervalMs`` bounds: a tenth of the wait, within these.
POLL_MIN_MS: Final = 500
POLL_MAX_MS: Final = 5000

NOT_FOUND: Final = "Failed to retrieve task: Task not found. Pass the taskId of a task you created."


def iso_ms(ts: float) -> str:
    """Unix time → ISO 8601 UTC with milliseconds (``2026-07-28T10:30:00.123Z``)."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def declares_tasks(capabilities: Mapping[str, Any]) -> bool:
    """Whether a request's client capabilities name the extension."""
    extensions = capabilities.get("extensions")
    return isinstance(extensions, Mapping) and TASKS_EXTENSION in extensions


def task_owner(caller: Caller) -> str:
    """What binds a task to its caller: ``Caller.owner`` (the client token, or the GitLab
    credential's digest in passthrough) and the agent id (which ``X-Agent-Id`` gives where no
    client token is configured)."""
    return f"{caller.owner}|agent:{caller.agent_id or '-'}"


def requested_wait(tool: Tool, arguments: Mapping[str, Any] | None) -> float:
    """The seconds a call of ``tool`` may wait: its wait argument as validated (its default when
    left out); 0 for a tool that does not wait and for arguments the call refuses at once."""
    name = tool.wait_argument
    if name is None:
        return 0.0
    try:
        parsed = parse_arguments(tool, dict(arguments or {}))
    except ToolError:
        return 0.0
    value = getattr(parsed, name, None)
    return LONGEST_WAIT_SECONDS if value is None else float(value)


def missing_tasks_capability(what: str) -> RpcError:
    """-32021 naming the extension in ``requiredCapabilities``."""
    return RpcError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"Missing required client capability: {what} needs the {TASKS_EXTENSION} extension; declare it "
        "in _meta clientCapabilities.extensions.",
        data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
    )


def detailed(task_id: str, row: TaskRow) -> dict[str, Any]:
    """The extension's ``Task`` of ``row``, with its status's payload (``result``, ``error``)."""
    out: dict[str, Any] = {
        "taskId": task_id,
        "status": row.status,
        "createdAt": iso_ms(row.created),
        "lastUpdatedAt": iso_ms(row.updated),
        "ttlMs": round((row.expires - row.created) * 1000),
        "pollIntervalMs": row.poll_ms,
    }
    if row.status_message:
        out["statusMessage"] = row.status_message
    if row.status == COMPLETED and row.outcome is not None:
        out["result"] = json.loads(row.outcome)
    elif row.status == FAILED and row.outcome is not None:
        out["error"] = json.loads(row.outcome)
    elif row.status == INPUT_REQUIRED:
        out["inputRequests"] = json.loads(row.input_requests or "{}")
    return out


def error_object(error: RpcError) -> dict[str, Any]:
    """A JSON-RPC error object (a failed task's ``error``)."""
    out: dict[str, Any] = {"code": error.code, "message": error.message}
    if error.data is not None:
        out["data"] = error.data
    return out


class StartTask(InputRequired):
    """Raised by the ``ask`` of the ``tools/call`` of a tool that asks before its task
    (``Tool.asks_before_task``) once every question it asked is answered: the call becomes a
    task that starts with ``answered``."""

    def __init__(self, answered: Mapping[str, Any]) -> None:
        super().__init__({}, answered)


def asking_before_task(asker: AskFn, used: Mapping[str, Any]) -> AskFn:
    """The ``ask`` of such a ``tools/call``: ``asker`` (the round's, which ends the call
    input-required while an answer is missing), then :class:`StartTask` with ``used`` (every
    answer the round used)."""

    async def ask(requests: Mapping[str, InputRequest]) -> Answers:
        await asker(requests)
        raise StartTask(used)

    return ask


class TaskAsker:
    """``CallInfo.ask`` of a task's work: the stored answers by key; a question without one
    ends the run with :class:`InputRequired` (the task then waits on it). The answers' ``once``
    is the task's: its work, run again after a take-over, does not act twice on one answer."""

    def __init__(self, capabilities: Iterable[str], answers: Mapping[str, Any], once: str) -> None:
        self._capabilities = frozenset(capabilities)
        self._answers = dict(answers)
        self._once = once

    async def __call__(self, requests: Mapping[str, InputRequest]) -> Answers:
        for request in requests.values():
            if request.capability not in self._capabilities:
                raise CannotAsk(request.capability)
        known = {key: self._answers[key] for key in requests if key in self._answers}
        missing = {key: request for key, request in requests.items() if key not in self._answers}
        if missing:
            raise InputRequired(missing, known)
        answers = Answers(known)
        answers.once = f"task:{self._once}"
        return answers


# -- answers checked against their questions ---------------------------------------------------------

_TYPES: Final[dict[str, Any]] = {"string": str, "number": float, "integer": int, "boolean": bool}


def _content_model(schema: Mapping[str, Any]) -> type[BaseModel]:
    """A strict model of an elicitation's ``requestedSchema`` (MCP's flat object of primitives:
    https://modelcontextprotocol.io/specification/2025-11-25/client/elicitation#requested-schema)."""
    properties = schema.get("properties")
    required = schema.get("required")
    fields: dict[str, Any] = {}
    for name, spec in (properties if isinstance(properties, Mapping) else {}).items():
        spec = spec if isinstance(spec, Mapping) else {}
        enum = spec.get("enum")
        kind: Any = _TYPES.get(str(spec.get("type")), Any)
        if isinstance(enum, list) and enum:
            kind = Literal[tuple(enum)]
        if isinstance(required, list) and name in required:
            fields[str(name)] = (kind, ...)
        else:
            fields[str(name)] = (kind | None, None)
    config = ConfigDict(strict=True, extra="allow")
    model: type[BaseModel] = create_model("ElicitContent", __config__=config, **fields)
    return model


@functools.cache
def _result_shape(method: str) -> TypeAdapter[Any]:
    from mcp_types.methods import MONOLITH_RESULTS

    shape: Any = MONOLITH_RESULTS[method]
    return TypeAdapter(shape)


def check_responses(questions: Mapping[str, Any], responses: Mapping[str, Any]) -> None:
    """Check the answers to outstanding questions as a request's ``inputResponses`` are: each is
    the result its question's method defines (an ``ElicitResult`` for ``elicitation/create``),
    and an accepted elicitation's ``content`` matches the question's ``requestedSchema``.
    Answers to other keys are not looked at (they are ignored).

    Raises:
        RpcError: -32602 naming the key and what was wrong.
    """
    # Both revisions' models load at the first request that needs them, not at start.
    from mcp_types.methods import MONOLITH_RESULTS

    for key, answer in responses.items():
        question = questions.get(key)
        if not isinstance(question, Mapping):
            continue
        method = question.get("method")
        try:
            if isinstance(method, str) and method in MONOLITH_RESULTS:
                _result_shape(method).validate_python(answer)
            params = question.get("params")
            schema = params.get("requestedSchema") if isinstance(params, Mapping) else None
            accepted = isinstance(answer, Mapping) and answer.get("action") == "accept"
            if method == "elicitation/create" and isinstance(schema, Mapping) and accepted:
                _content_model(schema).model_validate(answer.get("content") or {})
        except ValidationError as err:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'the answer'}: {e['msg']}" for e in err.errors()[:3]
            )
            raise invalid_params(
                f"Invalid params: inputResponses.{key} does not answer the task's question ({method}): "
                f"{problems}. Send the result its inputRequests entry asks for"
                + (
                    ', e.g. {"action": "accept", "content": {...}} with content matching its requestedSchema.'
                    if method == "elicitation/create"
                    else "."
                )
            ) from None
