"""One successful call of every GitLab tool against the stand-in's seed data, shared by the tests
that run what ships through a real client (both eras, the Inspector CLI, the container image).

A GitLab tool declared without a call here fails
``test_every_gitlab_tool_has_a_happy_call`` (tests/unit/test_packaging.py), so a new tool is run
end to end, from the wheel and from the image, from the day it is declared.
"""

from __future__ import annotations

from typing import Any

from tests.standin import dataset as ds
from tests.standin import job_logs

P = ds.PROJECT_PATH
PIPELINE = {"project_id": P, "pipeline_id": ds.PIPELINE_ID}

#: Every GitLab tool: a happy path (reads only, one create and one job retry on the stand-in).
HAPPY: dict[str, dict[str, Any]] = {
    "get_pipeline": {**PIPELINE, "include": ["jobs"]},
    "list_pipelines": {"project_id": P},
    "get_pipeline_jobs": PIPELINE,
    "get_pipeline_failing_jobs": PIPELINE,
    "get_downstream_pipelines": PIPELINE,
    "get_failing_bridge_jobs": PIPELINE,
    "save_pipeline": {"project_id": P, "ref": "main"},
    "get_duo_session": {"workflow_id": ds.WORKFLOWS["finished"]},
    "get_repository_file": {"project_id": P, "file_path": ds.FILES["readme"], "ref": "main"},
    "get_job": {
        "project_id": P,
        "job_id": job_logs.FAILED_LOG_JOB_ID,
        "include": ["log", "artifacts"],
        "tail_lines": 20,
    },
    "get_artifact_file": {
        "project_id": P,
        "job_id": job_logs.ARTIFACTS_JOB_ID,
        "artifact_path": "coverage/index.html",
    },
    "list_repository_tree": {"project_id": P, "ref": "main", "recursive": True},
    # Last: a retry changes the stand-in (the job is retried once; each test resets it).
    "retry_job": {"project_id": P, "job_id": job_logs.FAILED_LOG_JOB_ID},
}
#: One tool error (``isError: true``), as an agent would see it.
ERROR = ("get_pipeline", {"id": P, "pipeline_id": -1})
