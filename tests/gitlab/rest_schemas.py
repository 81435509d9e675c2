"""JSON Schemas (draft 2020-12) of the GitLab REST answers the gateway reads, written for this project.

Each schema states what GitLab's REST API documentation says an answer holds: the field names,
their JSON types, which may be null, and which keys GitLab always sends (``required``); keys the
documentation lists only for some answers (a failed job's ``failure_reason``, a job's
``artifacts_file``) are declared but optional. Every object is closed
(``additionalProperties: false``): a key the documentation does not list is an error, so the
stand-in cannot drift into fields a real GitLab never sends.

Sources (GitLab's public API documentation):

- jobs: https://docs.gitlab.com/api/jobs/
- pipelines: https://docs.gitlab.com/api/pipelines/
- commits: https://docs.gitlab.com/api/commits/
- branches: https://docs.gitlab.com/api/branches/
- version and metadata: https://docs.gitlab.com/api/version/, https://docs.gitlab.com/api/metadata/
- job artifacts: https://docs.gitlab.com/api/job_artifacts/
- repository files: https://docs.gitlab.com/api/repository_files/
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

DIALECT = "https://json-schema.org/draft/2020-12/schema"

STRING: Schema = {"type": "string"}
INTEGER: Schema = {"type": "integer"}
NUMBER: Schema = {"type": "number"}
BOOLEAN: Schema = {"type": "boolean"}
TIME: Schema = {
    "type": "string",
    "format": "date-time",
    "pattern": r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$",
}
"""An ISO 8601 timestamp, as GitLab writes every ``*_at`` and ``*_date`` field (the pattern checks
it: ``format`` alone is only an annotation in draft 2020-12)."""


def maybe(schema: Schema) -> Schema:
    """``schema`` or null."""
    return {"anyOf": [{"type": "null"}, schema]}


def record(always: dict[str, Schema], sometimes: dict[str, Schema] | None = None) -> Schema:
    """A closed object: ``always`` are keys GitLab sends in every answer, ``sometimes`` in some."""
    return {
        "type": "object",
        "properties": {**always, **(sometimes or {})},
        "required": sorted(always),
        "additionalProperties": False,
    }


def many(schema: Schema) -> Schema:
    """A JSON array of ``schema``."""
    return {"type": "array", "items": schema}


USER = record(
    {
        "id": INTEGER,
        "username": STRING,
        "name": STRING,
        "state": STRING,
        "locked": BOOLEAN,
        "avatar_url": maybe(STRING),
        "web_url": STRING,
    },
    {"public_email": maybe(STRING)},
)

COMMIT = record(
    {
        "id": STRING,
        "short_id": STRING,
        "title": STRING,
        "message": STRING,
        "created_at": TIME,
        "parent_ids": many(STRING),
        "author_name": STRING,
        "author_email": STRING,
        "authored_date": TIME,
        "committer_name": STRING,
        "committer_email": STRING,
        "committed_date": TIME,
        "web_url": STRING,
    },
    {"trailers": {"type": "object"}, "extended_trailers": {"type": "object"}},
)
"""A commit as lists, branches and jobs embed it."""

_PIPELINE_FIELDS: dict[str, Schema] = {
    "id": INTEGER,
    "iid": INTEGER,
    "project_id": INTEGER,
    "sha": STRING,
    "ref": STRING,
    "status": STRING,
    "source": STRING,
    "created_at": TIME,
    "updated_at": TIME,
    "web_url": STRING,
}

PIPELINE_SUMMARY = record(_PIPELINE_FIELDS, {"name": maybe(STRING)})
"""A pipeline as pipeline lists and jobs show it."""

DETAILED_STATUS = record(
    {
        "icon": STRING,
        "text": STRING,
        "label": STRING,
        "group": STRING,
        "tooltip": STRING,
        "has_details": BOOLEAN,
        "details_path": STRING,
        "illustration": maybe(
            record({"image": STRING}, {"size": STRING, "title": STRING, "content": STRING})
        ),
        "favicon": STRING,
    },
    {
        "action": record(
            {"icon": STRING, "title": STRING, "path": STRING, "method": STRING},
            {"button_title": STRING, "confirmation_message": maybe(STRING)},
        )
    },
)

PIPELINE = record(
    {
        **_PIPELINE_FIELDS,
        "before_sha": maybe(STRING),
        "tag": BOOLEAN,
        "yaml_errors": maybe(STRING),
        "user": maybe(USER),
        "started_at": maybe(TIME),
        "finished_at": maybe(TIME),
        "committed_at": maybe(TIME),
        "duration": maybe(NUMBER),
        "queued_duration": maybe(NUMBER),
        "coverage": maybe(STRING),
        "detailed_status": DETAILED_STATUS,
    },
    {"name": maybe(STRING), "archived": BOOLEAN},
)
"""One pipeline (``GET .../pipelines/:pipeline_id``, ``POST .../pipeline``)."""

RUNNER = record(
    {
        "id": INTEGER,
        "description": maybe(STRING),
        "active": BOOLEAN,
        "paused": BOOLEAN,
        "is_shared": BOOLEAN,
        "runner_type": STRING,
        "online": maybe(BOOLEAN),
        "status": STRING,
    },
    {"name": maybe(STRING), "ip_address": maybe(STRING)},
)

RUNNER_MANAGER = record(
    {"id": INTEGER, "system_id": STRING, "status": STRING},
    {
        "version": maybe(STRING),
        "revision": maybe(STRING),
        "platform": maybe(STRING),
        "architecture": maybe(STRING),
        "created_at": TIME,
        "contacted_at": maybe(TIME),
        "ip_address": maybe(STRING),
    },
)

JOB = record(
    {
        "id": INTEGER,
        "name": STRING,
        "stage": STRING,
        "status": STRING,
        "ref": STRING,
        "tag": BOOLEAN,
        "allow_failure": BOOLEAN,
        "coverage": maybe(NUMBER),
        "created_at": TIME,
        "started_at": maybe(TIME),
        "finished_at": maybe(TIME),
        "erased_at": maybe(TIME),
        "duration": maybe(NUMBER),
        "queued_duration": maybe(NUMBER),
        "user": maybe(USER),
        "commit": maybe(COMMIT),
        "pipeline": PIPELINE_SUMMARY,
        "web_url": STRING,
        "project": record({"ci_job_token_scope_enabled": BOOLEAN}),
        "artifacts": many(
            record({"file_type": STRING, "size": INTEGER, "filename": STRING, "file_format": maybe(STRING)})
        ),
        "artifacts_expire_at": maybe(TIME),
        "tag_list": many(STRING),
        "runner": maybe(RUNNER),
        "archived": BOOLEAN,
    },
    {
        "failure_reason": STRING,
        "artifacts_file": maybe(record({"filename": STRING, "size": INTEGER})),
        "runner_manager": maybe(RUNNER_MANAGER),
    },
)
"""One job (``GET .../jobs/:job_id``; each item of ``GET .../pipelines/:pipeline_id/jobs``)."""

COMMIT_DETAIL = record(
    {
        **COMMIT["properties"],
        "stats": record({"additions": INTEGER, "deletions": INTEGER, "total": INTEGER}),
        "status": maybe(STRING),
        "project_id": INTEGER,
        "last_pipeline": maybe(PIPELINE_SUMMARY),
    }
)
"""``GET .../repository/commits/:sha`` (trailers included: the single-commit answer always has them)."""

BRANCH = record(
    {
        "name": STRING,
        "commit": COMMIT,
        "merged": BOOLEAN,
        "protected": BOOLEAN,
        "default": BOOLEAN,
        "developers_can_push": BOOLEAN,
        "developers_can_merge": BOOLEAN,
        "can_push": BOOLEAN,
        "web_url": STRING,
    }
)

_KAS = record(
    {"enabled": BOOLEAN, "externalUrl": maybe(STRING), "version": maybe(STRING)},
    {"externalK8sProxyUrl": maybe(STRING)},
)

METADATA = record({"version": STRING, "revision": STRING, "kas": _KAS, "enterprise": BOOLEAN})
"""``GET /metadata``."""

VERSION = record({"version": STRING, "revision": STRING}, {"kas": _KAS, "enterprise": BOOLEAN})
"""``GET /version``: its documentation promises the version and revision; GitLab answers it as
``/metadata`` does."""

REPOSITORY_FILE = record(
    {
        "file_name": STRING,
        "file_path": STRING,
        "size": INTEGER,
        "encoding": STRING,
        "content": STRING,
        "content_sha256": STRING,
        "ref": STRING,
        "blob_id": STRING,
        "commit_id": STRING,
        "last_commit_id": STRING,
        "execute_filemode": BOOLEAN,
    }
)
"""``GET .../repository/files/:file_path``."""

SCHEMAS: dict[str, Schema] = {
    name: {"$schema": DIALECT, "$id": f"urn:gitlab-mcp-gateway:rest:{name}", **schema}
    for name, schema in {
        "job": JOB,
        "pipeline": PIPELINE,
        "commit": COMMIT_DETAIL,
        "branch": BRANCH,
        "metadata": METADATA,
        "version": VERSION,
        "repository_file": REPOSITORY_FILE,
    }.items()
}
"""The answers' schemas by name."""
