"""GitLab's REST pipeline create, ``POST /projects/:id/pipeline`` (GitLab before ``pipelineCreate``).

GitLab documents it at https://docs.gitlab.com/api/pipelines/#create-a-new-pipeline
(``lib/api/ci/pipelines.rb``): it takes ``ref``, ``variables`` (``[{key, value, variable_type}]``)
and ``inputs`` (a hash), answers 201 with the pipeline, or 400 ``{"message": {"base": [<why>]}}``
when no pipeline was made. A caller who may read the project but
not run pipelines gets 403; one who may not read it, 404. Pipelines made here are the same as
``pipelineCreate``'s (:func:`tests.standin.graphql_api.create_pipeline`), so a test sees one data
set whichever API a GitLab version made the gateway use.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any
from urllib.parse import parse_qsl

from tests.standin.graphql_api import create_pipeline
from tests.standin.rest_api import (
    RestOutcome,
    RestRequest,
    _project,
    not_found,
    pipeline_entity,
    route,
    unauthorized,
)


def _parameters(req: RestRequest) -> dict[str, Any]:
    """The POST's parameters: the query string, then a JSON or form body over it (as Grape merges)."""
    params: dict[str, Any] = dict(req.query)
    text = req.body.decode("utf-8", "replace").strip()
    if text.startswith("{"):
        with contextlib.suppress(ValueError):
            params.update(json.loads(text))
    elif text:
        params.update(parse_qsl(text))
    return params


def _forbidden() -> RestOutcome:
    return RestOutcome(403, {"message": "403 Forbidden"})


@route("POST", "/projects/:id/pipeline")
def _create_pipeline(req: RestRequest, params: dict[str, str]) -> RestOutcome:
    if req.user is None:
        return unauthorized()
    project = _project(req, params["id"])
    if project is None:
        return not_found("Project Not Found")
    if not project.can_update_pipeline(req.user):
        return _forbidden()
    body = _parameters(req)
    ref = body.get("ref")
    if not isinstance(ref, str) or not ref:
        return RestOutcome(400, {"error": "ref is missing"})
    variables = [
        {
            "key": v.get("key"),
            "value": v.get("value"),
            "variableType": str(v.get("variable_type") or "env_var").upper(),
        }
        for v in body.get("variables") or []
        if isinstance(v, dict)
    ]
    raw_inputs = body.get("inputs") or {}
    inputs = [{"name": k, "value": v} for k, v in raw_inputs.items()] if isinstance(raw_inputs, dict) else []
    created = create_pipeline(req.world, req.user, project, ref, variables, inputs)
    if isinstance(created, str):
        return RestOutcome(400, {"message": {"base": [created]}})
    return RestOutcome(201, pipeline_entity(req, created))
